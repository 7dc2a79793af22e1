"""`Chunk`: the unit readers hand to backends: one run of a length column, or list offsets."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Chunk:
    """A slice of the length source.

    Attributes:
        data: 1-D integer array (numpy on the host; a device array for the cuda backend).
            Lengths themselves, or, when ``offsets`` is true, list offsets whose consecutive
            differences are the lengths (``len(data) == samples + 1``).
        valid: bool array with one entry per sample (False = null), or None when the chunk
            has no nulls.
        offsets: whether ``data`` holds list offsets.
        segments: ``(starts, counts)`` int64 arrays when the lengths are only the pieces
            ``data[starts[k]:starts[k] + counts[k]]`` of a host buffer, in order (record
            batches histogrammed where they were read, with no copy); then ``valid`` is
            None and ``offsets`` false. Readers make them only for backends that ask
            (`Backend.segmented`); :meth:`gathered` turns one into a plain chunk.
    """

    data: Any
    valid: Any | None = None
    offsets: bool = False
    segments: tuple[np.ndarray, np.ndarray] | None = None

    @property
    def samples(self) -> int:
        """Number of samples (lengths) in the chunk."""
        if self.segments is not None:
            return int(self.segments[1].sum())
        n = int(self.data.shape[0])
        return max(n - 1, 0) if self.offsets else n

    def gathered(self) -> Chunk:
        """The same lengths back to back in one array (this chunk if it has no segments)."""
        if self.segments is None:
            return self
        starts, counts = self.segments
        ends = np.cumsum(counts)
        n = int(ends[-1]) if ends.size else 0
        index = np.repeat(starts - (ends - counts), counts) + np.arange(n)
        return Chunk(self.data[index])
