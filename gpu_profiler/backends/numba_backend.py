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

    def __init__(self) -> None:
        import numba

        from gpu_profiler.kernels import cpu

        self._k = cpu
        self._numba = numba

    @staticmethod
    def _args(chunk: Chunk) -> tuple[np.ndarray, np.ndarray]:
        x = np.ascontiguousarray(chunk.data)
        if x.dtype == np.bool_ or x.dtype.kind not in "iu":
            raise TypeError(f"integer lengths expected, got {x.dtype}")
        if x.dtype.itemsize < 4:  # rare narrow types: widen rather than compile more variants
            x = x.astype(np.int32)
        valid = _NO_MASK if chunk.valid is None else np.ascontiguousarray(chunk.valid, bool)
        return x, valid

    def histogram_chunk(self, chunk: Chunk, cap: int) -> LengthHistogram:
        x, valid = self._args(chunk)
        counts, s = self._k.histogram(x, valid, np.int64(cap), self._numba.get_num_threads(),
                                      chunk.offsets)
        return LengthHistogram(counts, *(int(v) for v in s))

    def max_length(self, chunk: Chunk) -> int:
        x, valid = self._args(chunk)
        return int(self._k.max_length(x, valid, chunk.offsets))
