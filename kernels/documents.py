"""CPU kernel (numba ``njit``) finding the documents of a flat token stream: one contiguous
block of token ids per call, called by the numba backend from one thread per core,
natively compiled (`gpu_profiler.native`).

A block tallies the documents between its own cuts (`gpu_profiler.chunk.Documents`) into a
private int32 histogram row, as `gpu_profiler.kernels.cpu.histogram_block` does, and returns
its first and last cut; the backend measures the documents that span blocks (and chunks)
from those. End-of-text tokens are rare (one per document), so the scan first tests 64
tokens at a time with a branch-free or, which vectorizes, and walks token by token only
the groups that hold one.
"""

from __future__ import annotations

import numpy as np

from gpu_profiler.kernels.cpu import tally
from gpu_profiler.kernels.jit import kernel

_GROUP = 64  # tokens tested at once for an end-of-text token


@kernel
def _walk(x, e, lo, hi, shift, top, row, st, first, prev):
    """Cuts among tokens ``lo..hi-1``: tally each document between two of them."""
    for i in range(np.uint64(lo), np.uint64(hi)):
        if x[i] == e:
            p = np.int64(i) + shift
            if prev >= 0:
                tally(np.int64(p - prev), top, row, st)
            else:
                first = p
            prev = p
    return first, prev


@kernel
def _skip(x, e, i, hi):
    """The first group of ``_GROUP`` tokens from ``i`` that may hold ``e`` (or where the
    last, shorter group starts): a loop of nothing but or-ed comparisons over a view
    indexed from 0 (no negative-index wraparound to compute), which vectorizes: 1e8 uint16
    tokens in 13 ms instead of 39 ms on one core."""
    y = x[i:hi]
    groups = y.size // _GROUP
    for g in range(groups):
        s = y[g * _GROUP:(g + 1) * _GROUP]
        hits = np.uint16(0)
        for j in range(_GROUP):
            hits |= np.uint16(s[j] == e)
        if hits:
            return i + g * _GROUP
    return i + groups * _GROUP


@kernel(nogil=True)
def documents_block(x, eot, lo, hi, start, cap, row, st):
    """Tally the documents whose both cuts lie in tokens ``lo..hi-1`` of ``x`` into the
    int32 ``row`` (bins ``0..cap`` and a spare one) and ``st`` (the stats row of
    `histogram_block`); return the block's first and last cut (-1, -1 when it has none).

    ``eot`` is a one-element array of ``x``'s dtype holding the end-of-text id (compared
    at the tokens' own width); a cut is at ``i + 1`` after an EOT at ``i``, or at ``i``
    when ``start`` (the EOT opens the next document). Both rows are added to."""
    e = eot[0]
    top = np.uint64(cap + 1)
    shift = 0 if start else 1
    first = np.int64(-1)
    prev = np.int64(-1)
    i = np.int64(lo)
    while i < hi:
        i = _skip(x, e, i, hi)
        end = min(i + _GROUP, hi)
        first, prev = _walk(x, e, i, end, shift, top, row, st, first, prev)
        i = end
    return first, prev


@kernel(nogil=True)
def running_sums(sizes, bounds, pos, total, out, pre):
    """The tokens before each of the non-decreasing sequence numbers ``bounds`` (each in
    ``pos + 1 .. pos + sizes.size``), given ``sizes``, the sizes of sequences ``pos..``, and
    ``total``, the tokens before sequence ``pos``: ``out[j]`` for ``bounds[j]``. Returns the
    tokens before sequence ``pos + sizes.size`` (a Megatron-LM document index's offsets, a
    window at a time). The sizes are summed a span at a time into ``pre`` (the caller's:
    ``pre.size - 1`` sizes a span, a few KiB that stay in L1), then the boundaries in the
    span read there: a sum per boundary ran a loop of 1-4 sizes whose exit the CPU
    mispredicted (3.3 ns a size; ~1 now). Nothing allocated."""
    acc = np.int64(total)
    span = pre.size - 1
    j = 0
    for lo in range(0, sizes.size, span):
        hi = min(lo + span, sizes.size)
        pre[0] = acc
        for k in range(lo, hi):
            acc += sizes[k]
            pre[k - lo + 1] = acc
        while j < bounds.size and bounds[j] - pos <= hi:
            out[j] = pre[bounds[j] - pos - lo]
            j += 1
    return (acc,)


@kernel(nogil=True)
def document_bounds(bounds, sequences):
    """``(outside, down)``: the first entry of a Megatron-LM document index window that lies
    outside ``0..sequences``, and the first that is less than the one before it (-1: none).
    A window is first tested whole by comparisons or-ed together, which vectorize (a
    valid window, the common one, costs that pass alone); a bad one is then searched entry
    by entry. Nothing allocated."""
    bad = np.int64(0)
    for j in range(bounds.size):
        bad |= np.int64(bounds[j] < 0) | np.int64(bounds[j] > sequences)
    for j in range(1, bounds.size):
        bad |= np.int64(bounds[j] < bounds[j - 1])
    if not bad:
        return -1, -1
    outside = -1
    down = -1
    for j in range(bounds.size):
        b = bounds[j]
        if outside < 0 and (b < 0 or b > sequences):
            outside = j
        if down < 0 and j and b < bounds[j - 1]:
            down = j
        if outside >= 0 and down >= 0:
            break
    return outside, down
