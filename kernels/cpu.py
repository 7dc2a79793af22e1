"""CPU histogram kernels (numba ``njit``, parallel over contiguous blocks).

Each thread fills a private int32 histogram row for its block (half the cache footprint of
int64: an 8k-context row fits in L1), so no atomics are needed; rows are summed into int64
at the end. The hot loop does not branch on the value: ``min(uint64(v), cap + 1)`` sends
every length outside ``0..cap`` (negative ones wrap to huge) to a spare bin ``cap + 1``,
and only those rare values take the one well-predicted branch that updates the stats. The
loops over lengths and over list offsets are separate and index with unsigned integers, so
no ``offsets`` test and no negative-index wraparound is left per sample. Together these
took 1e8 int32 lengths from 65 to 32 ms on 2 threads ("numba kernel alone" in
bench/results/ipc_read.md). Min/max are not tracked per element: they follow from the bins
plus the above-cap min/max.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

# stats columns per block
_ABOVE_COUNT, _ABOVE_TOKENS, _ABOVE_MIN, _ABOVE_MAX, _NULLS, _INVALID = range(6)
_NSTATS = 6


@njit(cache=True)
def _tally(v, top, row, st):
    """Count int64 ``v`` into ``row`` (``top = cap + 1`` is the spare bin)."""
    k = min(np.uint64(v), top)
    row[k] += 1
    if k == top:
        if v < 0:
            st[_INVALID] += 1
        else:
            st[_ABOVE_COUNT] += 1
            st[_ABOVE_TOKENS] += v
            if st[_ABOVE_MIN] < 0 or v < st[_ABOVE_MIN]:
                st[_ABOVE_MIN] = v
            if v > st[_ABOVE_MAX]:
                st[_ABOVE_MAX] = v


@njit(cache=True)
def _reduce(local, stats):
    counts = np.zeros(local.shape[1] - 1, np.int64)  # the spare bin is dropped
    for b in range(local.shape[0]):
        counts += local[b, :-1]
    out = np.zeros(_NSTATS, np.int64)
    out[_ABOVE_MIN] = -1
    out[_ABOVE_MAX] = -1
    for b in range(stats.shape[0]):
        s = stats[b]
        out[_ABOVE_COUNT] += s[_ABOVE_COUNT]
        out[_ABOVE_TOKENS] += s[_ABOVE_TOKENS]
        out[_NULLS] += s[_NULLS]
        out[_INVALID] += s[_INVALID]
        if s[_ABOVE_COUNT] > 0:
            if out[_ABOVE_MIN] < 0 or s[_ABOVE_MIN] < out[_ABOVE_MIN]:
                out[_ABOVE_MIN] = s[_ABOVE_MIN]
            if s[_ABOVE_MAX] > out[_ABOVE_MAX]:
                out[_ABOVE_MAX] = s[_ABOVE_MAX]
    return counts, out


#: Elements per block at most, so a block's int32 bin counts cannot overflow.
_MAX_BLOCK = 1 << 30


@njit(cache=True)
def _blocks(n, threads):
    nb = max(1, min(threads, (n + 65535) // 65536), (n + _MAX_BLOCK - 1) // _MAX_BLOCK)
    return nb, (n + nb - 1) // nb


@njit(cache=True)
def _length(x, i, offsets):
    """Length number ``i`` (an unsigned index: no negative-index wraparound to compute)."""
    if offsets:
        return np.int64(x[i + np.uint64(1)]) - np.int64(x[i])
    return np.int64(x[i])


@njit(cache=True)
def _span(x, lo, hi, offsets, top, row, st):
    """Tally lengths ``lo..hi-1`` of ``x`` (one loop per kind: most of the kernel's time)."""
    if offsets:
        for i in range(np.uint64(lo), np.uint64(hi)):
            _tally(_length(x, i, True), top, row, st)
    else:
        for i in range(np.uint64(lo), np.uint64(hi)):
            _tally(_length(x, i, False), top, row, st)


@njit(cache=True)
def _segment(ends, j):
    """The segment holding sample ``j``: the first with ``ends[s] > j`` (binary search)."""
    lo, hi = 0, ends.size
    while lo < hi:
        mid = (lo + hi) // 2
        if ends[mid] > j:
            hi = mid
        else:
            lo = mid + 1
    return lo


@njit(cache=True)
def _piece(starts, counts, ends, s, j, hi):
    """The part of segment ``s`` from sample ``j`` (``j < ends[s]``) up to sample ``hi``:
    its end sample, and the shift from sample number to index in ``x``."""
    return min(hi, ends[s]), starts[s] - (ends[s] - counts[s])


@njit(cache=True, parallel=True, nogil=True)
def histogram(x, starts, counts, valid, cap, threads, offsets):
    """Histogram of the lengths in the segments ``x[starts[k]:starts[k] + counts[k]]`` (a
    plain chunk is one segment) or, when ``offsets``, of ``x[i+1] - x[i]`` for the ``i`` in
    them, over ``threads`` blocks of samples; ``valid`` is a bool mask over the samples, or
    an empty array (no nulls).

    Returns ``(counts[0..cap], stats[6])`` with stats = above count, above tokens,
    above min, above max, nulls, invalid.
    """
    extra = 1 if offsets else 0
    ends = np.empty(starts.size, np.int64)  # exclusive end sample of each segment
    n = 0
    for k in range(starts.size):  # the loops below trust the segments
        if counts[k] < 0 or starts[k] < 0 or starts[k] > x.size - counts[k] - extra:
            raise ValueError("chunk segments outside its data")
        n += counts[k]
        ends[k] = n
    nb, step = _blocks(n, threads)
    local = np.zeros((nb, cap + 2), np.int32)
    top = np.uint64(cap + 1)
    stats = np.zeros((nb, _NSTATS), np.int64)
    has_mask = valid.size > 0
    for b in prange(nb):
        row = local[b]
        st = np.zeros(_NSTATS, np.int64)  # the block's own: no cache line shared with others
        st[_ABOVE_MIN] = -1
        st[_ABOVE_MAX] = -1
        j = b * step
        hi = min(n, j + step)
        s = _segment(ends, j)
        while j < hi:
            e, shift = _piece(starts, counts, ends, s, j, hi)
            if has_mask:
                for i in range(j, e):
                    if valid[i]:
                        _tally(_length(x, np.uint64(i + shift), offsets), top, row, st)
                    else:
                        st[_NULLS] += 1
            else:
                _span(x, j + shift, e + shift, offsets, top, row, st)
            j = e
            s += 1
        stats[b] = st
    return _reduce(local, stats)
