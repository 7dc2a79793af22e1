"""Count the length column of many small Arrow IPC streams in one call (numba ``njit``):
each file is read into a small buffer (it stays in the core's cache), its messages walked
and checked by the selective reader's parsers, and its lengths tallied by the CPU
histogram kernel's loop while still in cache. Gathering the streams into one buffer first
costs a copy through memory as large as the data, and a call per step: most of a small
shard's cost (bench/results/shards.md). A stream is counted only once all of it is known
good; any other is *left*, untouched, for its own reader.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from gpu_profiler.kernels.cpu import length_at, tally, tally_span
from gpu_profiler.kernels.ipc import check, walk
from gpu_profiler.kernels.ipc_format import (
    FULL,
    NEED_MORE,
    R_CHILD,
    R_CODEC,
    R_LEN,
    R_NULLS,
    R_TYPE,
    RECORD_BATCH,
)
from gpu_profiler.kernels.posix import read_file
from gpu_profiler.kernels.stats import COUNT_DONE, COUNT_FOLD, COUNT_WIDEN, NULLS


@njit(cache=True)
def _int32(f, lo):
    return f[lo:f.size - (f.size - lo) % 4].view(np.int32)


@njit(cache=True)
def _int64(f, lo):
    """The 8-byte integers of ``f`` from byte ``lo`` (uint64 reads as int64, as the backend
    reads it)."""
    return f[lo:f.size - (f.size - lo) % 8].view(np.int64)


@njit(cache=True)
def _valid(bits, j):
    return (bits[j >> 3] >> (j & 7)) & 1


@njit(cache=True)
def _longest(x, bits, rows, nulls, child, offsets):
    """The longest valid length among ``rows`` (-1 if none); -2 when list offsets leave the
    child array (of ``child`` values) or decrease (the stream's own reader then says so)."""
    if offsets and (x[0] < 0 or x[rows] > child):
        return -2
    most = np.int64(-1)
    for j in range(rows):
        v = length_at(x, np.uint64(j), offsets)
        if offsets and v < 0:
            return -2
        if (not nulls or _valid(bits, j)) and v > most:
            most = v
    return most


@njit(cache=True)
def _count(x, bits, rows, nulls, offsets, top, row, st):
    """Tally ``rows`` lengths into ``row`` and ``st`` as the CPU kernel does."""
    if not nulls:
        tally_span(x, 0, rows, offsets, top, row, st)
        return
    for j in range(rows):
        if _valid(bits, j):
            tally(length_at(x, np.uint64(j), offsets), top, row, st)
        else:
            st[NULLS] += 1


@njit(cache=True)
def _record(f, recs, ranges, k, offsets, w, grow, top, row, st, tally):
    """Record ``k``'s longest valid length (or -1 unless ``grow`` or list ``offsets``, which
    are checked), -2 when its buffer is not aligned to ``w`` or `_longest` says so; or,
    with ``tally``, its lengths tallied (returns -1)."""
    lo = ranges[k, 2]
    if lo % w:
        return -2
    rows, nulls = recs[k, R_LEN], recs[k, R_NULLS] > 0
    bits = f[ranges[k, 0]:]
    if tally:
        if w == 4:
            _count(_int32(f, lo), bits, rows, nulls, offsets, top, row, st)
        else:
            _count(_int64(f, lo), bits, rows, nulls, offsets, top, row, st)
        return -1
    if not (grow or offsets):
        return -1
    if w == 4:
        return _longest(_int32(f, lo), bits, rows, nulls, recs[k, R_CHILD], offsets)
    return _longest(_int64(f, lo), bits, rows, nulls, recs[k, R_CHILD], offsets)


@njit(cache=True)
def _stream(f, schema, recs, ranges, layout, offsets, w, grow, top, row, st, sub):
    """``(records, longest valid length (if ``grow``))`` of the stream ``f``, or ``(0, -2)``
    when it is to be left: it does not open with ``schema`` byte for byte, ends inside a
    message, has more messages than ``recs`` holds, a dictionary batch, compression,
    corrupt metadata, buffers outside their bodies (`check`) or bad list offsets."""
    n = schema.size
    if f.size < n:
        return 0, -2
    for j in range(n):
        if f[j] != schema[j]:
            return 0, -2
    try:
        got, nxt, status = walk(f, n, f.size, recs, layout, sub)
    except Exception:  # noqa: BLE001 (a Corrupt: the stream's own reader will say it)
        return 0, -2
    if status == FULL or (status == NEED_MORE and nxt != f.size):
        return 0, -2
    for k in range(got):
        if recs[k, R_TYPE] != RECORD_BATCH or recs[k, R_CODEC] >= 0:
            return 0, -2
    bad, _ = check(recs[:got], -1, offsets, w, w, ranges)
    if bad >= 0:
        return 0, -2
    most = np.int64(-1)
    for k in range(got):
        if recs[k, R_LEN] > 0:
            m = _record(f, recs, ranges, k, offsets, w, grow, top, row, st, False)
            if m == -2:
                return 0, -2
            most = max(most, m)
    return got, most


@njit(cache=True, nogil=True)
def count_streams(names, name_at, sizes, flags, buf, schema, recs, ranges, layout, offsets,
                  w, cap, grow, fold_after, row, st, left, state):
    """Read and count the streams ``state[0]`` up to ``sizes.size``: stream ``i`` is the
    file named at ``names[name_at[i]:]`` (NUL-terminated), of ``sizes[i]`` bytes, read
    into ``buf`` (at least the largest size plus one). Its length column (``w``-byte
    integers, or list offsets when ``offsets``) is tallied into ``row`` (bins ``0..cap``
    and a spare one, int32) and ``st`` (the CPU kernel's stats), or the stream is left
    (``left[i] = 1``): it could not be read whole at its size, or see `_stream`.

    ``grow``: bins must reach the longest length (``cap=None``), so a stream with a longer
    one stops the call before it is tallied, with ``state = (its index, that length)``:
    the caller widens ``row`` and calls again. The call also stops before a stream that
    could take a bin past ``fold_after`` (each holds at most ``size / w`` lengths; the caller
    passes int32's largest): the caller folds ``row`` and calls again. ``recs`` and
    ``ranges`` are scratch for one stream's records and buffer ranges; ``state[2:4]`` is
    `walk`'s.

    Returns:
        ``(COUNT_DONE, COUNT_WIDEN or COUNT_FOLD,)``.
    """
    top = np.uint64(cap + 1)
    sub = state[2:4]
    taken = 0
    while state[0] < sizes.size:
        i = state[0]
        size = sizes[i]
        if taken and taken + size // w > fold_after:
            return (COUNT_FOLD,)
        taken += size // w
        if not read_file(names, name_at[i], flags, buf, size):
            left[i] = 1
            state[0] += 1
            continue
        f = buf[:size]
        got, most = _stream(f, schema, recs, ranges, layout, offsets, w, grow, top, row, st,
                            sub)
        if most == -2:
            left[i] = 1
            state[0] += 1
            continue
        if grow and most > cap:
            state[1] = most
            return (COUNT_WIDEN,)
        for k in range(got):
            if recs[k, R_LEN] > 0:
                _record(f, recs, ranges, k, offsets, w, grow, top, row, st, True)
        state[0] += 1
    return (COUNT_DONE,)

