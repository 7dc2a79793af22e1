"""`Chunk`: the unit readers hand to backends: one run of a length column, or list offsets."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


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
    """

    data: Any
    valid: Any | None = None
    offsets: bool = False

    @property
    def samples(self) -> int:
        """Number of samples (lengths) in the chunk."""
        n = int(self.data.shape[0])
        return max(n - 1, 0) if self.offsets else n
