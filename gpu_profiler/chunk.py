"""`Chunk`: the unit readers hand to backends: one run of a length column, list offsets, or
token ids that `Documents` splits into documents; and `Counting`, small files a CPU kernel
reads and counts in one call, as a reader describes them to a backend that counts."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

from gpu_profiler.frozen import frozen

#: Tokens the reverse search for a stream's last end-of-text token looks at first.
_TAIL = 1 << 16


@frozen
class Documents:
    """How a chunk of token ids (a flat token stream: nanoGPT's, llm.c's) splits into
    documents, so that every chunk is histogrammed on its own, in any order, on any backend.

    A document counts its tokens and its one end-of-text token (``eot``). Every EOT *cuts*
    the stream: after itself (``start`` false, nanoGPT: it closes the document before it)
    or before itself (``start`` true, llm.c: it opens the document after it). The
    documents are the non-empty pieces between consecutive cuts and the stream's ends.

    Attributes:
        eot: the end-of-text token id.
        start: each EOT opens the document after it (else it closes the one before it).
        carry: tokens of the document still open where the chunk starts (the stream
            before it has them, after its last cut).
        last: the stream ends with this chunk, so the document open at its end is one too.
    """

    eot: int
    start: bool = False
    carry: int = 0
    last: bool = True

    def lengths(self, x: np.ndarray) -> np.ndarray:
        """The lengths (int64) of the documents that end in the token chunk ``x``, in
        order: the reference every backend's kernel matches."""
        cuts = np.flatnonzero(x == self.eot) + (0 if self.start else 1)
        edges = np.concatenate([[-self.carry], cuts, [x.size] if self.last else []])
        lengths = np.diff(edges.astype(np.int64))
        return lengths[lengths > 0]

    def last_cut(self, x: np.ndarray) -> int:
        """Where in ``x`` its last cut is (-1: it has none), searched from its end, so that
        a chunk costs about a document's tokens, not its own."""
        hi, width = x.size, _TAIL
        while hi > 0:
            lo = max(0, hi - width)
            hits = np.flatnonzero(x[lo:hi] == self.eot)
            if hits.size:
                return lo + int(hits[-1]) + (0 if self.start else 1)
            hi, width = lo, width * 2
        return -1

    def split(self, x: np.ndarray, at: int) -> tuple[Documents, Documents]:
        """The documents of ``x[:at]`` and of ``x[at:]`` (pieces histogrammed apart)."""
        cut = self.last_cut(x[:at])
        carry = at - cut if cut >= 0 else self.carry + at
        return replace(self, last=False), replace(self, carry=carry)

    def following(self, x: np.ndarray) -> Documents:
        """The documents of the chunk that follows token chunk ``x`` in the stream."""
        return self.split(x, x.size)[1]


@frozen
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
        docs: when set, ``data`` holds token ids (host uint16 or uint32, no mask, no
            segments) and the samples are the documents `Documents` finds in them.
    """

    data: Any
    valid: Any | None = None
    offsets: bool = False
    segments: tuple[np.ndarray, np.ndarray] | None = None
    docs: Documents | None = None

    @property
    def samples(self) -> int:
        """Number of samples (lengths) in the chunk; 0 for token ids, whose documents are
        only known once a backend has found them."""
        if self.docs is not None:
            return 0
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


@frozen
class Counting:
    """Small files that one CPU kernel call reads one by one into a small buffer, decodes
    and counts while the lengths are in the core's cache (`Backend.count` runs it: readers
    describe the work, only a backend makes a histogram).

    Attributes:
        files: how many files.
        call: ``call(bins, grow, fold_after, row, stats, state) -> (outcome,)``: the
            reader's kernel call from file ``state[0]``, tallying into the int32 ``row`` of
            ``bins + 2`` bins and the ``stats`` of `gpu_profiler.kernels.stats`; it stops
            early to have its bins widened (``grow``: a length past them) or folded (after
            ``fold_after`` lengths), and is called again from there.
    """

    files: int
    call: Callable[[int, bool, int, np.ndarray, np.ndarray, np.ndarray], tuple[int, ...]]
