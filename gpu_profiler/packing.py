"""Packed batches: one epoch's bucketed samples in rows of ``max_seq_len`` tokens, exactly the
rows ``profile --policy packed`` counts.

`pack_epoch` sees the clipped lengths ``c = min(len, max_seq_len)`` of the samples inside
``[bounds[0], bounds[-1])`` (null, negative and other samples are dropped) and:

1. **Shuffles.** Samples are counting-sorted by clipped length into random piles, each pile
   shuffled (as `gpu_profiler.sampler` does): which sample of a length goes to which row is
   random, fixed by the key. O(samples).
2. **Packs** by best-fit-decreasing, sample by sample: lengths longest first, each item to
   the open row with the least room that still fits it, else to a new row. This is the
   packing `gpu_profiler.analysis.policies.pack_rows` counts on the histogram, so the rows
   are as many. A row chosen for length ``L`` takes every item of ``L`` it has room for in
   one step, and a two-level bitmap over the rows' free tokens finds it in a few word
   operations: the work grows with the (row, length) pairs, at most the samples.
   Zero-length samples need no room: they are dealt round-robin over the rows.
3. **Batches.** A row belongs to the bucket of its longest sample. Each bucket's rows are
   shuffled and cut into batches of ``batch_rows(max_seq_len)`` (`gpu_profiler.cost`)
   rows (1 if 0); the last may hold fewer, and ``drop_last`` drops it.

**Row order.** Within a batch, rows come in the order they were opened, and a row's samples
longest first. A row is opened only when no open row has room for its first (longest)
sample, so every row and the first sample of any later row overflow ``max_seq_len``:
cutting a batch's samples greedily (a new row when the next sample would overflow) gives
back its rows exactly. `gpu_profiler.collate.PackedCollator` relies on that.

The packing kernel allocates nothing (every work array comes from the caller), like the
kernels of `gpu_profiler.kernels.plan`; it runs through numba's JIT, so importing this
module imports numba.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from gpu_profiler.cost import batch_rows
from gpu_profiler.frozen import frozen
from gpu_profiler.params import BucketParams
from gpu_profiler.piles import shuffled_groups

#: Mixed into the key for the shuffle of the rows (the samples' shuffle takes the key).
_ROWS_KEY = 0x9ACC

_ONE = np.uint64(1)
_ALL = np.uint64(0xFFFFFFFFFFFFFFFF)


@frozen(eq=False)
class Packed:
    """One epoch's packed batches, grouped by bucket (what `gpu_profiler.sampler`'s
    ``_lay_out`` takes).

    Attributes:
        layout: sample indices (int64): each batch's samples together, and within a batch
            each row's (see the module docstring for their order).
        start, end: batch ``j`` is ``layout[start[j]:end[j]]`` (int64); the batches of bucket
            0 first, then bucket 1's, ...
        per_bucket: batches of each bucket (int64, one per bucket).
        row_offsets: row ``i`` of the layout is ``layout[row_offsets[i]:row_offsets[i + 1]]``
            (int64; the rows in batches, so without the rows ``drop_last`` dropped).
        rows: rows the packing made, those dropped included: `policies.pack_rows`'s count.
        rows_per_batch: rows in a full batch.
        tokens: clipped tokens of every packed sample (those dropped included).
        efficiency: ``tokens / (rows * max_seq_len)``, the profile's ``packing_efficiency``.
        dropped: samples in no batch (outside every bucket, or in a dropped batch).
    """

    layout: np.ndarray
    start: np.ndarray
    end: np.ndarray
    per_bucket: np.ndarray
    row_offsets: np.ndarray
    rows: int
    rows_per_batch: int
    tokens: int
    efficiency: float
    dropped: int

    def batch_rows(self, start: np.ndarray | None = None,
                   end: np.ndarray | None = None) -> np.ndarray:
        """Rows of each batch ``layout[start[j]:end[j]]``: by default these batches, else
        any reordering of them (a batch must begin and end on a row boundary)."""
        s = self.start if start is None else start
        e = self.end if end is None else end
        return np.searchsorted(self.row_offsets, e) - np.searchsorted(self.row_offsets, s)


def pack_epoch(x: np.ndarray, params: BucketParams, key: int, drop_last: bool) -> Packed:
    """Pack and batch one epoch (see the module docstring); ``x``: per-sample lengths
    (int32 or int64; other integers are converted), ``key``: the epoch's int64 shuffle key.
    Deterministic in ``(x, params, key)``."""
    x = np.asarray(x)
    if x.dtype not in (np.int32, np.int64):
        x = x.astype(np.int64)
    x = np.ascontiguousarray(x)
    p, cap = params, params.max_seq_len
    lo, hi = min(p.bounds[0], cap + 1), min(p.bounds[-1], cap + 1)
    by_length = np.full(cap + 2, -1, np.int64)  # one group per clipped length inside
    by_length[lo:hi] = np.arange(max(hi - lo, 0))
    samples, sizes, counts = shuffled_groups(x, cap, by_length, max(hi - lo, 0), key)

    present = np.flatnonzero(sizes)[::-1]  # longest first
    values = (lo + present).astype(np.int64)
    cnt = sizes[present]
    src = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64)[present]
    tokens = int(cnt @ values)

    room = int(cnt.sum()) + 1  # every row is opened by a sample
    head = np.empty(cap + 1, np.int64)
    nxt, first, items = (np.empty(room, np.int64) for _ in range(3))
    bits = np.empty(cap // 64 + 1, np.uint64)
    summary = np.empty(bits.size // 64 + 1, np.uint64)
    none = np.zeros(0, np.int64)
    work = (head, nxt, first, items, bits, summary)
    (rows,) = bfd(values, cnt, cap, src, samples, none, none, 0, *work)

    # Rows by the bucket of their longest sample, each bucket shuffled, then cut.
    edges = np.minimum(np.asarray(p.bounds), cap + 1)
    k = len(p.bounds) - 1
    by_bucket = np.full(cap + 2, -1, np.int64)
    by_bucket[lo:hi] = np.searchsorted(edges, np.arange(lo, hi), side="right") - 1
    order, per_rows, _ = shuffled_groups(first[:rows], cap, by_bucket, k, key ^ _ROWS_KEY)
    per_batch = batch_rows(cap, p) or 1
    kept, batch_first, batch_last = [], [], []
    per_bucket = np.zeros(k, np.int64)
    base = at = 0
    for b, n in enumerate(per_rows.tolist()):
        seg = order[at:at + n]
        at += n
        full = n // per_batch
        seg[:full * per_batch].reshape(full, per_batch).sort(axis=1)  # opening order
        seg[full * per_batch:].sort()
        m = full * per_batch if drop_last else n
        first_rows = base + np.arange(0, m, per_batch, dtype=np.int64)
        batch_first.append(first_rows)
        batch_last.append(np.minimum(first_rows + per_batch, base + m))
        kept.append(seg[:m])
        per_bucket[b] = first_rows.size
        base += m
    kept_rows = np.concatenate(kept) if kept else np.zeros(0, np.int64)
    row_offsets = np.concatenate(([0], np.cumsum(items[kept_rows]))).astype(np.int64)
    cursor = np.full(rows, -1, np.int64)
    cursor[kept_rows] = row_offsets[:-1]
    layout = np.empty(int(row_offsets[-1]), np.int64)
    bfd(values, cnt, cap, src, samples, cursor, layout, 1, *work)
    return Packed(
        layout=layout, start=row_offsets[np.concatenate(batch_first)],
        end=row_offsets[np.concatenate(batch_last)], per_bucket=per_bucket,
        row_offsets=row_offsets, rows=rows, rows_per_batch=per_batch, tokens=tokens,
        efficiency=tokens / (rows * cap) if rows else 0.0, dropped=int(x.size - layout.size))


# ---------------------------------------------------------------- the packing kernel
@njit(cache=True)
def _ctz(m):
    """Trailing zero bits of a nonzero uint64."""
    n = 0
    for shift in (32, 16, 8, 4, 2, 1):
        low = (_ONE << np.uint64(shift)) - _ONE
        if (m & low) == 0:
            n += shift
            m >>= np.uint64(shift)
    return n


@njit(cache=True)
def _mark(bits, summary, r, on):
    """Level ``r`` has rows (``on``) or none."""
    w = r >> 6
    bit = _ONE << np.uint64(r & 63)
    if on:
        if bits[w] == 0:
            summary[w >> 6] |= _ONE << np.uint64(w & 63)
        bits[w] |= bit
    else:
        bits[w] &= ~bit
        if bits[w] == 0:
            summary[w >> 6] &= ~(_ONE << np.uint64(w & 63))


@njit(cache=True)
def _least_at_least(bits, summary, r):
    """The least level ``>= r`` that has rows, or -1."""
    w = r >> 6
    if w >= bits.size:
        return -1
    m = bits[w] & (_ALL << np.uint64(r & 63))
    if m != 0:
        return (w << 6) + _ctz(m)
    w += 1
    s = w >> 6
    if s >= summary.size:
        return -1
    m = summary[s] & (_ALL << np.uint64(w & 63))
    while m == 0:
        s += 1
        if s >= summary.size:
            return -1
        m = summary[s]
    w = (s << 6) + _ctz(m)
    return (w << 6) + _ctz(bits[w])


@njit(cache=True, nogil=True)
def bfd(values, counts, cap, src, samples, cursor, out, scatter, head, nxt, first, items,
        bits, summary):
    """Best-fit-decreasing of ``counts[j]`` items of each length ``values[j]`` (descending,
    a 0 last) into rows of ``cap``; returns ``(rows,)``.

    Open rows with ``r`` tokens free are a linked list from ``head[r]`` (through ``nxt``),
    and ``bits`` (one bit per level, ``summary`` one per word of it) marks the levels that
    have rows. Without ``scatter`` it writes each row's first (longest) length to ``first``
    and its items to ``items``; with it (the same packing again), the items of ``values[j]``
    are ``samples[src[j]:src[j] + counts[j]]`` in order, and a row ``i`` with ``cursor[i]
    >= 0`` gets its items written to ``out[cursor[i]:]`` (``cursor`` advances). Zero-length
    items go to the rows round-robin (one row of them when there is no other)."""
    for r in range(head.size):
        head[r] = -1
    bits[:] = 0
    summary[:] = 0
    rows = 0
    for j in range(values.size):
        length, c, at = values[j], counts[j], src[j]
        if length == 0 and rows == 0:
            if not scatter:
                first[0], items[0] = 0, 0
            rows = 1
        t = 0
        while c > 0:
            if length == 0:
                row, take = t % rows, 1
                t += 1
            else:
                r = _least_at_least(bits, summary, length)
                if r < 0:  # no open row has room: a new one
                    row, r = rows, cap
                    rows += 1
                    if not scatter:
                        first[row], items[row] = length, 0
                else:
                    row = head[r]
                    head[r] = nxt[row]
                    if head[r] < 0:
                        _mark(bits, summary, r, False)
                take = min(r // length, c)
                free = r - take * length
                if free > 0:
                    if head[free] < 0:
                        _mark(bits, summary, free, True)
                    nxt[row] = head[free]
                    head[free] = row
            if scatter:
                if cursor[row] >= 0:
                    for i in range(take):
                        out[cursor[row] + i] = samples[at + i]
                    cursor[row] += take
            else:
                items[row] += take
            at += take
            c -= take
    return (rows,)
