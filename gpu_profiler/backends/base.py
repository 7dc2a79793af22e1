"""The backend interface: chunks in, one exact `LengthHistogram` out (the only place
histograms are made: of chunks, of a reader's `Counting`, of a task's `RunTally`)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from typing import Any

import numpy as np

from gpu_profiler.chunk import Chunk, Counting
from gpu_profiler.histogram import LengthHistogram, Sum, auto_cap, wrapped
from gpu_profiler.runs import RunTally


class Backend(ABC):
    """A histogram engine. Subclasses implement :meth:`histogram_chunk` (and may override
    :meth:`histogram` to pipeline many chunks, as the cuda backend does)."""

    name: str = ""
    #: Whether the backend histograms segmented chunks (`Chunk.segments`) in place; readers
    #: then hand record batches over where they were read instead of gathering them.
    segmented: bool = False
    #: Whether the backend runs a reader's `Counting` (`count`): many small shards are then
    #: counted as they are read, with the CPU kernels' own loop, instead of gathered.
    counts: bool = False
    #: Samples a chunk is gathered up to from smaller ones (`readers.arrow.coalesce`): a
    #: GPU's launches and copies want large chunks, a CPU kernel call costs ~50 us.
    chunk_rows: int = 1 << 22

    @classmethod
    def from_options(cls, options: Any) -> Backend:
        """The backend with its typed options (`gpu_profiler.backends.options`, checked by
        `get_backend`: a backend without an options type only ever gets None)."""
        return cls()

    @abstractmethod
    def histogram_chunk(self, chunk: Chunk, cap: int) -> LengthHistogram:
        """Exact histogram of one chunk with bins ``0..cap``."""

    def count(self, work: Counting, cap: int | None) -> LengthHistogram:
        """The histogram of ``work`` 's files, where `counts`."""
        raise NotImplementedError(f"the {self.name} backend does not count as it reads")

    def runs(self, tally: RunTally, cap: int | None) -> LengthHistogram:
        """The histogram of ``tally`` (lengths known without being read, and histograms
        counted as read) with bins ``0..cap``, exactly as chunks of those lengths would be
        counted (values read as int64: negative, or uint64 >= 2**63, are invalid);
        ``cap=None`` bins up to the largest value (see `auto_cap`)."""
        values = [v if v < 2**63 else v - 2**64 for v in tally.values]
        dense = np.flatnonzero(tally.dense)
        if cap is None:
            cap = auto_cap(max(max((v for v in values if v >= 0), default=0),
                               int(dense[-1]) if dense.size else 0))
        counts = np.zeros(cap + 1, np.int64)
        low = tally.dense[:cap + 1]
        counts[:low.size] += low
        high = dense[dense > cap]
        above = dict(zip(high.tolist(), tally.dense[high].tolist(), strict=True))
        invalid = 0
        for raw, v in zip(tally.values, values, strict=True):
            n = tally.values[raw]
            if v < 0:
                invalid += n
            elif v <= cap:
                counts[v] += n
            elif n:
                above[v] = above.get(v, 0) + n
        total = Sum(cap)
        total.add(LengthHistogram(counts, null_count=tally.nulls, invalid_count=invalid))
        if above:
            total.add(LengthHistogram(np.zeros(cap + 1, np.int64), sum(above.values()),
                                      sum(v * n for v, n in above.items()), min(above),
                                      max(above)))
        for hist in tally.counted:
            total.add(hist)
        return total.histogram()

    def beside_reader(self) -> Backend:
        """This backend for chunks read ahead in another thread, which keeps a core busy."""
        return self

    def per_part(self) -> tuple[int, Backend] | None:
        """``(workers, backend)`` to histogram many parts at once, one part per worker
        thread, each with ``backend``; None (the default) histograms parts one after
        another (a GPU pipelines its chunks itself)."""
        return None

    def histogram(self, chunks: Iterable[Chunk], cap: int | None) -> LengthHistogram:
        """Histogram of every chunk. ``cap=None`` bins up to the largest length seen: each
        chunk is binned up to the largest length so far, and again, wider, only when it
        holds a longer one (rare after the first chunks; no separate pass for the maximum)."""
        total = Sum(cap or 0)
        for c in chunks:
            h = self.histogram_chunk(c, total.cap if cap is None else cap)
            if cap is None and h.above_count and auto_cap(h.above_max) > h.cap:
                h = self.histogram_chunk(c, auto_cap(h.above_max))
            total.add(h)
        return wrapped(total.histogram())
