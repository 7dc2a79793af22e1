"""The reference backend: plain numpy, obviously correct. Every other backend must match it
bit for bit."""

from __future__ import annotations

import numpy as np

from gpu_profiler.backends.base import Backend
from gpu_profiler.chunk import Chunk
from gpu_profiler.histogram import LengthHistogram


def lengths_of(chunk: Chunk) -> tuple[np.ndarray, int]:
    """The chunk's non-null lengths as int64 (of its documents, for token ids), and its
    null count."""
    chunk = chunk.gathered()
    x = np.asarray(chunk.data)
    if chunk.docs is not None:
        return chunk.docs.lengths(x), 0
    v = x.astype(np.int64, copy=False)
    if chunk.offsets:
        v = np.diff(v)
    if chunk.valid is None:
        return v, 0
    valid = np.asarray(chunk.valid, dtype=bool)
    return v[valid], int(valid.size - np.count_nonzero(valid))


class NumpyBackend(Backend):
    """``np.bincount`` over the in-range lengths; the rest is counted explicitly."""

    name = "numpy"
    chunk_rows = 1 << 20

    def per_part(self) -> tuple[int, Backend]:
        """One worker per core: readers decode without the GIL while others bin."""
        from gpu_profiler.backends.numba_backend import cores

        return cores(), self

    def histogram_chunk(self, chunk: Chunk, cap: int) -> LengthHistogram:
        v, nulls = lengths_of(chunk)
        invalid = 0
        if v.size and v.min() < 0:
            invalid = int(np.count_nonzero(v < 0))
            v = v[v >= 0]
        above = v[v > cap] if v.size and v.max() > cap else v[:0]
        # Lengths above the cap land in one spare bin (cap + 1), dropped from the counts.
        counts = np.bincount(np.minimum(v, cap + 1) if above.size else v,
                             minlength=cap + 2)[:cap + 1]
        if above.size:
            return LengthHistogram(counts, above.size, int(above.sum(dtype=np.int64)),
                                   int(above.min()), int(above.max()), nulls, invalid)
        return LengthHistogram(counts, null_count=nulls, invalid_count=invalid)
