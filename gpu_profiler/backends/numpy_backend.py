"""The reference backend: plain numpy, obviously correct. Every other backend must match it
bit for bit."""

from __future__ import annotations

import numpy as np

from gpu_profiler.backends.base import Backend
from gpu_profiler.chunk import Chunk
from gpu_profiler.histogram import LengthHistogram


def lengths_of(chunk: Chunk) -> tuple[np.ndarray, int]:
    """The chunk's non-null lengths as int64, and its null count."""
    x = np.asarray(chunk.data)
    v = np.diff(x.astype(np.int64)) if chunk.offsets else x.astype(np.int64)
    if chunk.valid is None:
        return v, 0
    valid = np.asarray(chunk.valid, dtype=bool)
    return v[valid], int(valid.size - np.count_nonzero(valid))


class NumpyBackend(Backend):
    """``np.bincount`` over the in-range lengths; the rest is counted explicitly."""

    name = "numpy"

    def histogram_chunk(self, chunk: Chunk, cap: int) -> LengthHistogram:
        v, nulls = lengths_of(chunk)
        invalid = int(np.count_nonzero(v < 0))
        in_range = v[(v >= 0) & (v <= cap)]
        above = v[v > cap]
        counts = np.bincount(in_range, minlength=cap + 1)
        if above.size:
            return LengthHistogram(counts, above.size, int(above.sum(dtype=np.int64)),
                                   int(above.min()), int(above.max()), nulls, invalid)
        return LengthHistogram(counts, null_count=nulls, invalid_count=invalid)

    def max_length(self, chunk: Chunk) -> int:
        v, _ = lengths_of(chunk)
        return max(int(v.max()), -1) if v.size else -1
