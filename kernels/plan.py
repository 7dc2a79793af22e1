"""Planning kernels (numba ``njit``, natively compiled like the histogram kernels): the
interleaving planner, and the counting sort, shuffle and batch cuts of the batch sampler.

They allocate nothing (the native library has no numba runtime): every work array comes
from the caller. Random numbers are splitmix64 on explicit uint64 state, so a seed gives the
same permutation on every machine, natively or through the JIT.
"""

from __future__ import annotations

import numpy as np

from gpu_profiler.kernels.jit import kernel

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


@kernel
def _mix(z):
    """splitmix64's output function."""
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


@kernel(nogil=True)
def interleave(m, cls, cap, kcap, budget, out, work):
    """Lay out ``m[b]`` batches of every bucket ``b`` into ``out`` (``sum(m)`` entries) with
    no run of one bucket longer than ``cap`` and no run of one class longer than ``kcap``
    (``cls[b]``: bucket ``b``'s class in ``0 .. len(m) - 1``, or -1 for none); returns
    ``(0,)``, or ``(-1,)`` when there is no such order or ``budget`` backtracks did not find
    one (``work``: ``3 * len(m) + 2 * sum(m)`` int64 of scratch).

    The epoch is built from its end backwards. Each step takes, among the buckets that may
    come next without making the rest infeasible, the one furthest behind its share
    (smallest ``taken / m``; ties to the lower index), then the result is reversed: every
    bucket starts (so, forwards, ends) together, and the shares stay even in between.
    The rest (``r`` batches per bucket, ``R`` in all, the last bucket on a run of ``run``)
    is feasible iff every bucket fits the gaps the others leave: ``r[x] <= cap * (R - r[x]
    + 1)``, less ``run`` for the bucket on the run. Only the largest other ``r`` can fail
    that, so a candidate is checked in O(1) and a step costs O(len(m)); without classes no
    step is ever stuck. Classes are held to the same rule with ``kcap``, which is necessary
    but not sufficient for both caps at once: a step with no candidate goes back to the
    step before and takes its next candidate (a depth-first search, exact within budget).
    """
    k, n = m.size, out.size
    left, taken, cleft = work[:k], work[k:2 * k], work[2 * k:3 * k]
    runs, cruns = work[3 * k:3 * k + n], work[3 * k + n:3 * k + 2 * n]
    for b in range(k):
        left[b] = m[b]
        taken[b] = 0
        cleft[b] = 0
    for b in range(k):
        if cls[b] >= 0:
            cleft[cls[b]] += m[b]
    t, rest, last, run, crun, prev, backtracks = 0, n, -1, 0, 0, -1, 0
    while t < n:
        top, v1, v2, ctop, c1, c2 = -1, 0, 0, -1, 0, 0
        for x in range(k):
            if left[x] > v1:
                top, v1, v2 = x, left[x], v1
            elif left[x] > v2:
                v2 = left[x]
            if cleft[x] > c1:
                ctop, c1, c2 = x, cleft[x], c1
            elif cleft[x] > c2:
                c2 = cleft[x]
        lc = cls[last] if last >= 0 else -1
        best, r1 = -1, rest - 1
        for b in range(k):
            if left[b] == 0:
                continue
            if prev >= 0 and (taken[b] * m[prev] < taken[prev] * m[b] or (
                    taken[b] * m[prev] == taken[prev] * m[b] and b <= prev)):
                continue  # tried already at this step (candidates go in order)
            nrun = run + 1 if b == last else 1
            rb = left[b] - 1
            if nrun > cap or (rb > 0 and rb > cap * (r1 - rb + 1) - nrun):
                continue
            other = v2 if b == top else v1
            if other > 0 and other > cap * (r1 - other + 1):
                continue
            c = cls[b]
            if c >= 0:
                ncrun = crun + 1 if c == lc else 1
                rc = cleft[c] - 1
                if ncrun > kcap or (rc > 0 and rc > kcap * (r1 - rc + 1) - ncrun):
                    continue
            cother = c2 if c == ctop and c >= 0 else c1
            if cother > 0 and cother > kcap * (r1 - cother + 1):
                continue
            if best < 0 or taken[b] * m[best] < taken[best] * m[b]:
                best = b
        if best < 0:  # stuck: undo the step before, and try its next candidate
            backtracks += 1
            if t == 0 or backtracks > budget:
                return (-1,)
            t -= 1
            prev = out[t]
            left[prev] += 1
            taken[prev] -= 1
            rest += 1
            if cls[prev] >= 0:
                cleft[cls[prev]] += 1
            last = out[t - 1] if t else -1
            run = runs[t - 1] if t else 0
            crun = cruns[t - 1] if t else 0
            continue
        out[t] = best
        taken[best] += 1
        left[best] -= 1
        rest -= 1
        run = run + 1 if best == last else 1
        c = cls[best]
        if c >= 0:
            cleft[c] -= 1
        crun = 0 if c < 0 else crun + 1 if c == lc else 1
        last, runs[t], cruns[t], prev = best, run, crun, -1
        t += 1
    for i in range(n // 2):
        out[i], out[n - 1 - i] = out[n - 1 - i], out[i]
    return (0,)


@kernel
def _uniform(key, i, span):
    """Draw ``i`` of stream ``key``, uniform in ``0..span-1`` (counter-based: the same
    draw every time it is asked for)."""
    u = np.float64(_mix(np.uint64(key) + np.uint64(i + 1) * _GOLDEN) >> np.uint64(11))
    return np.int64(u * (1.0 / 9007199254740992.0) * span)


@kernel(nogil=True)
def clip_counts(x, cap, counts):
    """``counts[c] += 1`` for each ``c = min(x[i], cap)`` (``counts[cap + 1]``: negative
    lengths)."""
    top = cap + 1
    for i in range(x.size):
        v = np.int64(x[i])
        counts[top if v < 0 else min(v, cap)] += 1


@kernel(nogil=True)
def pile_sort(x, cap, first, piles, key, cursor, out, scatter):
    """Counting sort of the sample indices into random piles: sample ``i`` of clipped
    length ``c = min(x[i], cap)`` (``cap + 1`` when negative) goes to pile ``first[c] +
    uniform(piles[c])``, or nowhere when ``first[c] < 0``. Without ``scatter`` it counts
    the piles' sizes into ``cursor``; with it, it writes ``i`` to ``out[cursor[p]]`` (the
    piles' starts) and advances ``cursor[p]``. The draws are counter-based, so both passes
    agree. With each pile then shuffled (`shuffle_segments`), every group of piles is a
    uniform random permutation of its samples (Rao and Sandelius), with every pile small
    enough to shuffle in cache."""
    top = cap + 1
    for i in range(x.size):
        v = np.int64(x[i])
        c = top if v < 0 else min(v, cap)
        f = first[c]
        if f < 0:
            continue
        p = f + (_uniform(key, i, piles[c]) if piles[c] > 1 else 0)
        if scatter:
            out[cursor[p]] = i
            cursor[p] += 1
        else:
            cursor[p] += 1


@kernel(nogil=True)
def shuffle_segments(a, bounds, key):
    """Fisher-Yates shuffle of each segment ``a[bounds[j]:bounds[j + 1]]``, each with its
    own stream (``key`` mixed with ``j``)."""
    for j in range(bounds.size - 1):
        lo, hi = bounds[j], bounds[j + 1]
        stream = np.int64(_mix(np.uint64(key) ^ (np.uint64(j + 1) * _M2)))
        for i in range(hi - 1, lo, -1):
            pick = lo + _uniform(stream, i, i - lo + 1)
            a[i], a[pick] = a[pick], a[i]


@kernel
def varlen_take(rows, sumsq, length, most, a, limit, mbs):
    """How many of ``most`` samples of ``length`` a batch of ``rows`` samples whose squared
    lengths sum to ``sumsq`` may still take under varlen attention: the most ``k`` with
    ``(rows + k) x length + a x (sumsq + k length^2) <= limit`` and ``rows + k <= mbs``
    (`gpu_profiler.cost.varlen_take` is the same, float operation for float operation)."""
    top = min(most, mbs - rows)
    if top <= 0:
        return 0
    lf = np.float64(length)
    if lf == 0:  # a sample of length 0 costs nothing (the batch's longest is 0 too)
        return top if a * sumsq <= limit else 0
    kf = (limit - rows * lf - a * sumsq) / (lf + a * lf * lf)
    k = top if kf >= top else (0 if kf <= 0 else int(kf))
    while k > 0 and (rows + k) * lf + a * (sumsq + k * lf * lf) > limit:
        k -= 1
    while k < top and (rows + k + 1) * lf + a * (sumsq + (k + 1) * lf * lf) <= limit:
        k += 1
    return k


@kernel(nogil=True)
def sorted_cuts(counts, fit, drop_last, values, varlen, mbs, out):
    """The ``sorted`` policy's batches over one bucket's present lengths ``values``
    (ascending), with ``counts``, as ``out[j] = (start, end)`` sample positions from the
    bucket's start: filled in order while the rows stay within ``fit[j]``, the rows a batch
    whose longest is length ``j`` may hold (`gpu_profiler.cost.batch_rows`: the budget and
    ``max_batch_size`` together; it never grows with the length); a length with ``fit`` 0
    (over the budget) gets one batch per sample. With ``drop_last`` the last batch of
    fitting samples is dropped when it could still take one of its longest length.
    ``varlen = (A, limit)`` with ``A > 0``: varlen attention, a batch is filled while
    ``rows x longest + A x sum(len^2) <= limit`` (and ``rows <= mbs``), `varlen_take`.
    Returns ``(batches, dropped samples)``: the policy's numbers
    (`gpu_profiler.analysis.policies`), plus one batch per over-budget sample, which the
    policy leaves out as unbatchable."""
    a, limit = varlen[0], varlen[1]
    nb, pos, rows, full, dropped, longest = 0, 0, 0, 0, 0, 0
    sumsq = 0.0
    for j in range(counts.size + 1):
        c = counts[j] if j < counts.size else 0
        v = values[j] if j < counts.size else 0
        if j == counts.size:
            f = 0
        elif a > 0:
            f = varlen_take(0, 0.0, v, mbs, a, limit, mbs)
        else:
            f = fit[j]
        if rows and (j == counts.size or f == 0):  # the open batch is the last that fits
            more = varlen_take(rows, sumsq, longest, 1, a, limit, mbs) if a > 0 else \
                (1 if rows < full else 0)
            if drop_last and more:
                dropped = rows
            else:
                out[nb, 0], out[nb, 1] = pos - rows, pos
                nb += 1
            rows = 0
        if j == counts.size:
            break
        if f == 0:  # ascending: this and every longer length get single batches
            for _ in range(c):
                out[nb, 0], out[nb, 1] = pos, pos + 1
                nb += 1
                pos += 1
            continue
        if rows:
            if a > 0:
                take = varlen_take(rows, sumsq, v, c, a, limit, mbs)
            else:
                take = min(c, f - rows) if f > rows else 0
            rows, pos, full, c = rows + take, pos + take, f, c - take
            sumsq += take * np.float64(v) * np.float64(v)
            longest = v
            if c:
                out[nb, 0], out[nb, 1] = pos - rows, pos
                nb += 1
                rows = 0
        while c >= f:
            out[nb, 0], out[nb, 1] = pos, pos + f
            nb += 1
            pos += f
            c -= f
        if c:
            rows, pos, full, longest = c, pos + c, f, v
            sumsq = c * np.float64(v) * np.float64(v)
    return (nb, dropped)


@kernel(nogil=True)
def source_counts(x, cap, bucket, sources, groups, counts):
    """``counts[b * groups + s] +=`` the samples of source ``s`` whose clipped length
    ``min(x[i], cap)`` is in bucket ``b = bucket[length]`` (-1: none; negative lengths
    none): one pass in sample order."""
    for i in range(x.size):
        v = np.int64(x[i])
        if v < 0:
            continue
        b = bucket[min(v, cap)]
        if b >= 0:
            counts[b * groups + sources[i]] += 1


@kernel(nogil=True)
def expand(seq, first, unit, out, taken):
    """Batch numbers of the planned groups: group ``t`` of bucket ``b = seq[t]`` (its
    ``j``-th) is batches ``first[b] + j * unit + u`` for ``u < unit``, written to
    ``out[t * unit + u]`` (``taken``: one int64 per bucket of scratch, zeroed here)."""
    for b in range(taken.size):
        taken[b] = 0
    for t in range(seq.size):
        b = seq[t]
        base = first[b] + taken[b] * unit
        taken[b] += 1
        for u in range(unit):
            out[t * unit + u] = base + u
