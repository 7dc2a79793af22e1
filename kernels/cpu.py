"""CPU histogram kernel (numba ``njit``): one contiguous block of samples per call, called
by the numba backend from one thread per core, natively compiled (`gpu_profiler.native`).

Each thread fills a private int32 histogram row for its block (half the cache footprint of
int64: an 8k-context row fits in L1), so no atomics are needed; the backend keeps rows
from call to call and folds them into int64 before a bin could overflow. The hot loop does
not branch on the value: ``min(uint64(v), cap + 1)`` sends every length outside ``0..cap``
(negative ones wrap to huge) to a spare bin ``cap + 1``, and only those rare values take
the one well-predicted branch that updates the stats. The loops over lengths and over list
offsets are separate and index with unsigned integers, so no ``offsets`` test and no
negative-index wraparound is left per sample (what each choice saved is measured in
bench/results/ipc_read.md, "numba kernel alone"). Min/max are not tracked per element:
they follow from the bins plus the above-cap min/max.
"""

from __future__ import annotations

import numpy as np

from gpu_profiler.kernels.jit import kernel
from gpu_profiler.kernels.stats import (
    ABOVE_COUNT,
    ABOVE_MAX,
    ABOVE_MIN,
    ABOVE_TOKENS,
    INVALID,
    NULLS,
)


@kernel
def tally(v, top, row, st):
    """Count int64 ``v`` into ``row`` (``top = cap + 1`` is the spare bin). The one loop
    body every CPU counting kernel shares (`documents`, `parquet`, `streams`): their
    histograms equal this kernel's by construction."""
    k = min(np.uint64(v), top)
    row[k] += 1
    if k == top:
        if v < 0:
            st[INVALID] += 1
        else:
            st[ABOVE_COUNT] += 1
            st[ABOVE_TOKENS] += v
            if st[ABOVE_MIN] < 0 or v < st[ABOVE_MIN]:
                st[ABOVE_MIN] = v
            if v > st[ABOVE_MAX]:
                st[ABOVE_MAX] = v


@kernel
def length_at(x, i, offsets):
    """Length number ``i`` (an unsigned index: no negative-index wraparound to compute)."""
    if offsets:
        return np.int64(x[i + np.uint64(1)]) - np.int64(x[i])
    return np.int64(x[i])


@kernel
def tally_span(x, lo, hi, offsets, top, row, st):
    """Tally lengths ``lo..hi-1`` of ``x``, every one (no validity mask; one loop per kind:
    most of the kernel's time); the counting kernels call it on a file's values while they
    are still in cache."""
    if offsets:
        for i in range(np.uint64(lo), np.uint64(hi)):
            tally(length_at(x, i, True), top, row, st)
    else:
        for i in range(np.uint64(lo), np.uint64(hi)):
            tally(length_at(x, i, False), top, row, st)


@kernel
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


@kernel
def _piece(starts, counts, ends, s, j, hi):
    """The part of segment ``s`` from sample ``j`` (``j < ends[s]``) up to sample ``hi``:
    its end sample, and the shift from sample number to index in ``x``."""
    return min(hi, ends[s]), starts[s] - (ends[s] - counts[s])


@kernel(nogil=True)
def histogram_block(x, starts, counts, ends, valid, lo, hi, cap, offsets, row, st):
    """Tally samples ``lo..hi-1`` of the segments ``x[starts[k]:starts[k] + counts[k]]``
    (a plain chunk is one segment; ``ends`` is the cumulative sum of ``counts``, all
    checked by the caller to lie in ``x``) or, when ``offsets``, the lengths
    ``x[i+1] - x[i]`` for the ``i`` in them, into the int32 ``row`` (bins ``0..cap`` and a
    spare one) and ``st`` (above count, above tokens, above min, above max, nulls,
    invalid); ``valid`` is a bool mask over the samples, or empty (no nulls). Both are added
    to, call after call (the caller starts them at zero, above min and max at -1, and spaces
    the blocks' rows apart: no cache line is shared)."""
    top = np.uint64(cap + 1)
    has_mask = valid.size > 0
    j = lo
    s = _segment(ends, j)
    while j < hi:
        e, shift = _piece(starts, counts, ends, s, j, hi)
        if has_mask:
            for i in range(j, e):
                if valid[i]:
                    tally(length_at(x, np.uint64(i + shift), offsets), top, row, st)
                else:
                    st[NULLS] += 1
        else:
            tally_span(x, j + shift, e + shift, offsets, top, row, st)
        j = e
        s += 1
