"""CPU backend: the numba kernel in ``gpu_profiler.kernels.cpu``, one block of samples per
core, each in its own thread (the kernel runs without the GIL), natively compiled
(`gpu_profiler.native`) so that a scan does not start numba."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterable, Iterator
from functools import cache
from typing import TYPE_CHECKING, Any

import numpy as np

from gpu_profiler import native
from gpu_profiler.backends.base import Backend
from gpu_profiler.chunk import Chunk, Counting
from gpu_profiler.errors import ProfilerError
from gpu_profiler.histogram import MAX_AUTO_CAP, LengthHistogram, auto_cap
from gpu_profiler.kernels import stats as col

if TYPE_CHECKING:  # (imported where a pool starts: ~3 ms a process that needs none)
    from concurrent.futures import ThreadPoolExecutor

_STRIDE = 16  # int64s between blocks' stats rows: 128 bytes, never one cache line
_MAX_BLOCK = 1 << 30  # samples per block and call at most
#: Lengths a block tallies into its int32 bins before they are folded into int64 (they could
#: overflow after this many).
FOLD_AFTER = (1 << 31) - 1
_MIN_BLOCK = 1 << 16  # fewer samples than this are not worth another thread
_NO_MASK = np.zeros(0, dtype=np.bool_)


def probe() -> str | None:
    """None when numba is installed (it compiles the kernels), else why not."""
    return None if importlib.util.find_spec("numba") else "numba is not installed"


def cores() -> int:
    """Cores this process may run on (``NUMBA_NUM_THREADS`` caps them, as for numba)."""
    n = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(n or 1, int(os.environ.get("NUMBA_NUM_THREADS", 0)) or n or 1))


@cache
def _pool() -> ThreadPoolExecutor:
    from concurrent.futures import ThreadPoolExecutor

    return ThreadPoolExecutor(max(1, cores() - 1), thread_name_prefix="gpu-profiler-cpu")


class NumbaBackend(Backend):
    """Private int32 histograms over contiguous blocks, one thread per core."""

    name = "numba"
    segmented = True
    counts = True
    chunk_rows = 1 << 20  # (4 Mi rows held 8 bytes a row, twice over, in JSONL's chunks)

    def __init__(self, threads: int | None = None) -> None:
        """``threads``: blocks per chunk (and threads), by default one per core."""
        if threads is not None and (isinstance(threads, bool) or not 1 <= threads <= 1024):
            raise ProfilerError(f"threads must be an integer from 1 to 1024, got {threads!r}")
        self._threads = threads or cores()
        self._chosen = threads is not None

    @classmethod
    def from_options(cls, options: Any) -> NumbaBackend:
        """From `CpuOptions` (None: one thread per core)."""
        return cls(threads=None if options is None else options.threads)

    def count(self, work: Counting, cap: int | None) -> LengthHistogram:
        """``work`` 's files counted, binned up to ``cap`` (None: up to the longest length,
        at most `MAX_AUTO_CAP`, the bins widened as longer ones come) as `histogram` bins
        them: its int32 bins folded into int64 after every call."""
        bins = cap or 0
        counts = np.zeros(bins + 1, np.int64)
        row = np.zeros(bins + 2, np.int32)
        st = np.zeros(6, np.int64)
        st[[col.ABOVE_MIN, col.ABOVE_MAX]] = -1
        state = np.zeros(4, np.int64)
        while state[0] < work.files:
            outcome, = work.call(bins, cap is None and bins < MAX_AUTO_CAP, FOLD_AFTER, row,
                                 st, state)
            counts += row[:bins + 1]  # (`col.COUNT_FOLD` asks for it, and so does the end)
            row[:] = 0
            if outcome == col.COUNT_WIDEN:
                bins = _roomy(int(state[1]))
                counts = np.concatenate([counts, np.zeros(bins + 1 - counts.size, np.int64)])
                row = np.zeros(bins + 2, np.int32)
        found = st[col.ABOVE_COUNT] > 0
        h = LengthHistogram(counts, int(st[col.ABOVE_COUNT]), int(st[col.ABOVE_TOKENS]),
                            int(st[col.ABOVE_MIN]) if found else -1,
                            int(st[col.ABOVE_MAX]) if found else -1, int(st[col.NULLS]),
                            int(st[col.INVALID]))
        return h if cap is not None else _trimmed(h)

    def beside_reader(self) -> Backend:
        """One block fewer than the cores (unless chosen): the read-ahead thread has one.
        On 2 cores each chunk is then histogrammed whole in the scan's thread, with no
        hand-off to another thread (faster there: bench/results/core.md)."""
        if self._chosen or self._threads == 1:
            return self
        return NumbaBackend(threads=self._threads - 1)

    def per_part(self) -> tuple[int, Backend]:
        """One worker per block thread, each histogramming its part in one block."""
        return self._threads, NumbaBackend(threads=1)

    def histogram_chunk(self, chunk: Chunk, cap: int) -> LengthHistogram:
        return _Tally.of(chunk, self._threads, cap)

    def histogram(self, chunks: Iterable[Chunk], cap: int | None) -> LengthHistogram:
        """As `Backend.histogram`, but the blocks' int32 rows are kept from chunk to chunk:
        a chunk costs its kernel calls, not a histogram's allocation and int64 sum."""
        tally = _Tally(self._threads, cap or 0)
        for c in chunks:
            if cap is None and not tally.cap:  # the first lengths: bins sized by them
                tally.grow(_roomy(_longest(c)))
            tally.add(c)
            if cap is None and tally.above_count() and auto_cap(tally.above_max()) > tally.cap:
                tally.widen(c, _roomy(tally.above_max()))
        h = tally.result()
        return h if cap is not None else _trimmed(h)


def _roomy(longest: int) -> int:
    """`auto_cap` with a quarter more bins: a longer length met in a later chunk (or file)
    then rarely bins it again at a wider cap (`_trimmed` cuts the room off at the end)."""
    return auto_cap(longest + longest // 4)


def _trimmed(h: LengthHistogram) -> LengthHistogram:
    """``h`` (``cap=None``) binned up to its longest length, as `auto_cap` sizes bins: the
    bins above it are `_roomy` 's empty room. Itself when lengths lie above its cap (that is
    `MAX_AUTO_CAP`, then). The bins are a view of ``h``'s: a copy wrote as many fresh pages
    again (an eighth of a 1e7-sequence index's documents)."""
    if h.above_count:
        return h
    filled = h.counts[::-1] != 0  # (a byte a bin, where the non-zero bins' indices took 8)
    cap = h.cap - int(filled.argmax()) if filled.any() else 0
    return LengthHistogram(h.counts[:cap + 1], null_count=h.null_count,
                           invalid_count=h.invalid_count)


def _listed(chunk: Chunk) -> bool:
    """Whether numpy reads the lengths of ``chunk`` as the kernels do: every sample valid
    or negative (no nulls, segments or documents), values signed or of at most 32 bits."""
    x = chunk.data
    return (chunk.valid is None and chunk.segments is None and chunk.docs is None
            and isinstance(x, np.ndarray) and x.size > chunk.offsets
            and (x.dtype.kind == "i" or (x.dtype.kind == "u" and x.dtype.itemsize <= 4)))


def _lengths(chunk: Chunk) -> Iterator[np.ndarray]:
    """The lengths of a `_listed` chunk: its values, or its offsets' differences (in int64,
    as the kernels take them, 64 Ki at a time: 1 MiB of temporaries, where a million held
    16 MiB more at the peak)."""
    x = chunk.data
    if not chunk.offsets:
        yield x
        return
    step = 1 << 16
    for lo in range(0, x.size - 1, step):
        yield np.diff(x[lo:lo + step + 1].astype(np.int64))


def _longest(chunk: Chunk) -> int:
    """The longest length of a `_listed` chunk: a max, far cheaper than binning the chunk
    twice, at 0 and wider. 0 for any other chunk: its lengths widen the bins as they are
    binned."""
    if not _listed(chunk):
        return 0
    return max(0, *(int(x.max()) for x in _lengths(chunk)))


def _above(chunk: Chunk, cap: int) -> Chunk:
    """The lengths of ``chunk`` above ``cap``, where it is `_listed`, else itself: all
    `_Tally.widen` takes of the chunk's histogram at a wider cap, so only they are binned
    again (a million documents of a Megatron-LM index re-binned whole at 2 Mi bins took
    15 ms)."""
    if not _listed(chunk):
        return chunk
    return Chunk(np.concatenate([x[x > cap].astype(np.int64) for x in _lengths(chunk)]))


class _Tally:
    """Each block's int32 histogram row and int64 stats row, summed over chunks; rows are
    folded into int64 counts before a bin could overflow, when the cap grows and at the
    end."""

    @classmethod
    def of(cls, chunk: Chunk, blocks: int, cap: int) -> LengthHistogram:
        """The histogram of one chunk, binned ``0..cap`` in ``blocks`` blocks."""
        tally = cls(blocks, cap)
        tally.add(chunk)
        return tally.result()

    def __init__(self, blocks: int, cap: int) -> None:
        self.stats = np.zeros((blocks, _STRIDE), np.int64)
        self.stats[:, [col.ABOVE_MIN, col.ABOVE_MAX]] = -1
        self._bins(cap)

    def _bins(self, cap: int) -> None:
        """Zeroed bins ``0..cap``: int64 counts, and the blocks' int32 rows."""
        self.cap = cap
        self.counts = np.zeros(cap + 1, np.int64)
        self.rows = np.zeros((len(self.stats), cap + 2 + _STRIDE * 4), np.int32)  # spaced
        self.taken = 0  # the most samples any row has taken since the last fold

    def add(self, chunk: Chunk) -> None:
        """Tally one chunk: one block per thread (fewer for a small chunk)."""
        if chunk.docs is not None:
            self._add_documents(chunk)
            return
        x, starts, counts, ends, valid = _args(chunk)
        n = int(ends[-1]) if ends.size else 0
        kernel = native.kernel(f"histogram_{x.dtype}")
        reach = len(self.rows) * _MAX_BLOCK  # a round's blocks take at most this many
        for lo in range(0, n, reach):  # one round for any chunk short of 2**30 per block
            hi = min(n, lo + reach)
            nb = max(1, min(len(self.rows), -(-(hi - lo) // _MIN_BLOCK)))
            step = -(-(hi - lo) // nb)
            if self.taken + step > FOLD_AFTER:
                self._fold()
            self.taken += step

            def block(b: int, lo: int = lo, hi: int = hi, step: int = step) -> None:
                kernel(x, starts, counts, ends, valid, lo + b * step,
                       min(hi, lo + (b + 1) * step), self.cap, int(chunk.offsets),
                       self.rows[b, :self.cap + 2], self.stats[b, :6])

            futures = [_pool().submit(block, b) for b in range(1, nb)]
            block(0)
            for f in futures:
                f.result()

    def _add_documents(self, chunk: Chunk) -> None:
        """Tally the documents of a chunk of token ids: each block tallies those between
        its own cuts and returns its first and last; the documents that span blocks (and
        the chunk's ends) are measured from those and tallied as a chunk of lengths."""
        docs = chunk.docs
        assert docs is not None
        x = np.ascontiguousarray(chunk.data)
        if x.dtype == np.int32:
            x = x.view(np.uint32)  # the same ids, as an .npy of int32 holds them
        if x.dtype not in (np.uint16, np.uint32):
            raise TypeError(f"uint16 or uint32 token ids expected, got {x.dtype}")
        kernel = native.kernel(f"documents_{x.dtype}")
        eot = np.array([docs.eot], x.dtype)
        n = x.size
        nb = max(1, min(len(self.rows), -(-n // _MIN_BLOCK)))
        step = max(1, min(-(-n // nb), _MAX_BLOCK))
        cuts = []
        for lo in range(0, n, step * nb):  # one round unless a block would pass 2**30
            blocks = range(lo, min(n, lo + step * nb), step)
            if self.taken + step > FOLD_AFTER:  # a block tallies at most step documents
                self._fold()
            self.taken += step

            def block(b: int, lo: int = lo) -> tuple[int, ...]:
                return kernel(x, eot, lo, min(n, lo + step), int(docs.start), self.cap,
                              self.rows[b, :self.cap + 2], self.stats[b, :6])

            futures = [_pool().submit(block, b, s) for b, s in enumerate(blocks) if b]
            cuts.append(block(0, blocks[0]))
            cuts += [f.result() for f in futures]
        spans = [-docs.carry]  # each document's first cut, then its last: lengths between
        for first, last in cuts:
            if first >= 0:
                spans += [first, last]
        if docs.last:
            spans.append(n)
        edges = np.array(spans, np.int64)
        lengths = edges[1::2] - edges[0:-1:2] if edges.size > 1 else edges[:0]
        lengths = lengths[lengths > 0]
        if lengths.size:
            self.add(Chunk(lengths))

    def above_count(self) -> int:
        return int(self.stats[:, col.ABOVE_COUNT].sum())

    def above_max(self) -> int:
        return int(self.stats[:, col.ABOVE_MAX].max())

    def grow(self, cap: int) -> None:
        """Bins up to ``cap`` (if wider), the counts so far kept (the above-cap
        statistics too: before any length above the cap is tallied, or `widen` 's)."""
        if cap > self.cap:
            self._fold(reuse=False)
            old = self.counts
            self._bins(cap)
            self.counts[:old.size] = old

    def widen(self, chunk: Chunk, cap: int) -> None:
        """Bins up to ``cap`` for the lengths above the cap in ``chunk``, the chunk just
        tallied (``cap=None``: only it can hold lengths above the cap): `_above` lists them,
        and they are tallied again in the wider bins, their above-cap statistics dropped.
        A chunk they cannot be listed from is binned again whole at ``cap`` instead, and its
        bins above the old cap taken. (A histogram of the listed lengths at ``cap``, copied
        in, faulted in its own 2 Mi bins too: 25 ms of a Megatron-LM index of documents.)"""
        old = self.cap
        above = _above(chunk, old)
        h = _Tally.of(chunk, len(self.rows), cap) if above is chunk else None
        self.grow(cap)
        self.stats[:, [col.ABOVE_COUNT, col.ABOVE_TOKENS]] = 0
        self.stats[:, [col.ABOVE_MIN, col.ABOVE_MAX]] = -1
        if h is None:
            self.add(above)
            return
        self.counts[old + 1:] = h.counts[old + 1:]
        self.stats[0, [col.ABOVE_COUNT, col.ABOVE_TOKENS, col.ABOVE_MIN, col.ABOVE_MAX]] = (
            h.above_count, h.above_tokens, h.above_min, h.above_max)

    def _fold(self, reuse: bool = True) -> None:
        """Add the rows into the counts, a row at a time (a sum across them cast through a
        buffer), and zero them when they ``reuse`` on. Rows about to be dropped are not
        zeroed: that wrote every page of rows the kernel had barely touched, and took a
        2 Mi-bin widening 25 ms, not 8."""
        for row in self.rows:
            np.add(self.counts, row[:self.cap + 1], out=self.counts)
        if reuse:
            self.rows[:] = 0
            self.taken = 0

    def result(self) -> LengthHistogram:
        """The histogram tallied, once (it holds the counts, read-only)."""
        self._fold(reuse=False)
        s = self.stats[:, :6]
        found = s[:, col.ABOVE_COUNT] > 0
        return LengthHistogram(
            self.counts, s[:, col.ABOVE_COUNT].sum(), s[:, col.ABOVE_TOKENS].sum(),
            s[found, col.ABOVE_MIN].min() if found.any() else -1,
            s[found, col.ABOVE_MAX].max() if found.any() else -1, s[:, col.NULLS].sum(),
            s[:, col.INVALID].sum())


def _args(chunk: Chunk) -> tuple[np.ndarray, ...]:
    """Kernel arguments: values, segment starts, counts and ends, validity mask."""
    x = np.ascontiguousarray(chunk.data)
    if x.dtype == np.bool_ or x.dtype.kind not in "iu":
        raise TypeError(f"integer lengths expected, got {x.dtype}")
    # Kernels exist for int32 and int64 only (each costs build time): uint64 reads as
    # int64 (values of 2**63 and more are invalid either way), narrower types and
    # uint32 (rare) are widened.
    if x.dtype == np.uint64:
        x = x.view(np.int64)
    elif x.dtype.itemsize < 4:
        x = x.astype(np.int32)
    elif x.dtype == np.uint32:
        x = x.astype(np.int64)
    valid = _NO_MASK if chunk.valid is None else np.ascontiguousarray(chunk.valid, bool)
    if chunk.segments is None:
        starts, counts = np.zeros(1, np.int64), np.array([chunk.samples], np.int64)
    else:
        starts, counts = (np.ascontiguousarray(a, np.int64) for a in chunk.segments)
        if starts.shape != counts.shape or starts.ndim != 1:
            raise ValueError("chunk segments: starts and counts differ in length")
        extra = 1 if chunk.offsets else 0  # the kernel trusts the segments
        if ((counts < 0) | (starts < 0) | (starts > x.size - counts - extra)).any():
            raise ValueError("chunk segments outside its data")
    ends = np.cumsum(counts)
    if valid.size and valid.size < (ends[-1] if ends.size else 0):
        raise ValueError("chunk validity mask shorter than its samples")
    return x, starts, counts, ends, valid
