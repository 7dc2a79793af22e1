"""The backend interface: chunks in, one exact `LengthHistogram` out."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from gpu_profiler.chunk import Chunk
from gpu_profiler.errors import ProfilerError
from gpu_profiler.histogram import LengthHistogram, merge

if TYPE_CHECKING:
    from gpu_profiler.readers.arrow import LengthSpec

#: Largest cap sized automatically from the data (2**27 bins = 1 GiB of int64 counts).
MAX_AUTO_CAP = 1 << 27


class Backend(ABC):
    """A histogram engine. Subclasses implement :meth:`histogram_chunk` (and may override
    :meth:`histogram` to pipeline many chunks, as the cuda backend does)."""

    name: str = ""
    #: Whether the backend histograms segmented chunks (`Chunk.segments`) in place; readers
    #: then hand record batches over where they were read instead of gathering them.
    segmented: bool = False

    @abstractmethod
    def histogram_chunk(self, chunk: Chunk, cap: int) -> LengthHistogram:
        """Exact histogram of one chunk with bins ``0..cap``."""

    def part_chunks(self, part: Any, spec: LengthSpec, light: bool = False) -> Iterator[Chunk]:
        """The chunks of one part (shard); ``light`` as in `Part.chunks`. A backend may read
        some parts its own way (cuda decodes Parquet on the GPU when cudf is installed);
        parts in GPU memory need cuda."""
        if getattr(part, "on_device", False):
            raise ProfilerError(f"{part.label} is in GPU memory: use the cuda backend, "
                                f"not {self.name!r}")
        return part.chunks(spec, light, segmented=self.segmented)

    @abstractmethod
    def max_length(self, chunk: Chunk) -> int:
        """Largest valid (non-null) length in the chunk, -1 when none; sizes ``cap=None``."""

    def histogram(self, chunks: Iterable[Chunk], cap: int | None) -> LengthHistogram:
        """Histogram of every chunk. ``cap=None`` bins up to the largest length seen."""
        total = LengthHistogram.empty(cap or 0)
        for c in chunks:  # a running sum: memory stays O(cap) however many chunks
            total = merge([total, self.histogram_chunk(
                c, cap if cap is not None else self._auto_cap(c))])
        return total

    def _auto_cap(self, chunk: Chunk) -> int:
        m = max(self.max_length(chunk), 0)
        if m > MAX_AUTO_CAP:
            raise ProfilerError(
                f"a length of {m} was found; give an explicit cap (e.g. --max-seq-len) to "
                f"histogram lengths above {MAX_AUTO_CAP}")
        return m
