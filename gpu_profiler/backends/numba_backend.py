"""CPU backend: the numba kernels in ``gpu_profiler.kernels.cpu``, parallel over blocks."""

from __future__ import annotations

import numpy as np

from gpu_profiler.backends.base import Backend
from gpu_profiler.chunk import Chunk
from gpu_profiler.histogram import LengthHistogram

_NO_MASK = np.zeros(0, dtype=np.bool_)


class NumbaBackend(Backend):
    """Private per-thread histograms over contiguous blocks (``numba.prange``)."""

    name = "numba"
    segmented = True

    def __init__(self) -> None:
        import numba

        from gpu_profiler.kernels import cpu

        self._k = cpu
        self._numba = numba

    @staticmethod
    def _args(chunk: Chunk) -> tuple[np.ndarray, ...]:
        """Kernel arguments: values, segment starts and counts, validity mask."""
        x = np.ascontiguousarray(chunk.data)
        if x.dtype == np.bool_ or x.dtype.kind not in "iu":
            raise TypeError(f"integer lengths expected, got {x.dtype}")
        if x.dtype.itemsize < 4:  # rare narrow types: widen rather than compile more variants
            x = x.astype(np.int32)
        valid = _NO_MASK if chunk.valid is None else np.ascontiguousarray(chunk.valid, bool)
        if chunk.segments is None:
            return x, np.zeros(1, np.int64), np.array([chunk.samples], np.int64), valid
        starts, counts = (np.ascontiguousarray(a, np.int64) for a in chunk.segments)
        if starts.shape != counts.shape:
            raise ValueError("chunk segments: starts and counts differ in length")
        return x, starts, counts, valid

    def histogram_chunk(self, chunk: Chunk, cap: int) -> LengthHistogram:
        counts, s = self._k.histogram(*self._args(chunk), np.int64(cap),
                                      self._numba.get_num_threads(), chunk.offsets)
        return LengthHistogram(counts, *(int(v) for v in s))
