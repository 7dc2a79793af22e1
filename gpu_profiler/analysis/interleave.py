"""The interleaving planner: in which order an epoch's same-bucket batches (or steps) run.

One planner serves ``schedule --order stride``, every warning's advice, ``plan`` and
`gpu_profiler.BucketBatchSampler`, so what is profiled is what is trained.

Guarantees, for any batches per bucket ``m`` (``N`` in all, ``B`` buckets with batches):

- **Runs**: no bucket runs more than ``max_run`` batches back to back, and by default
  ``max_run`` is :func:`min_run`, the least any order can do: a bucket with ``m`` batches
  has a run of at least ``ceil(m / (N - m + 1))``, since the others leave ``N - m + 1``
  gaps.
- **Spread**: after any ``t`` batches, every bucket's count is within ``max_run + B - 1``
  of its share ``t * m / N`` (tested; far less in practice, e.g. 3.6 batches for a 72%
  bucket with ``max_run`` 3 and 6 buckets).
- **Exhaustion**: every bucket runs its last batch in the final :data:`TAIL_PCT` percent of
  the epoch whenever some order under the same ``max_run`` can do it (checked against an
  exhaustive search); :func:`early_buckets` names those that cannot.

It builds the epoch from its end backwards (`gpu_profiler.kernels.plan.interleave`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from gpu_profiler.errors import ProfilerError

#: Steps the planner may take back looking for an order under a cap of source runs (plus
#: one per 4 batches), and the caps it tries: exact on small epochs, and on long ones about
#: `PROBES` passes over the epoch at most (a few seconds for a million batches of 64 buckets).
BACKTRACKS, PROBES = 100_000, 8
#: Every bucket's last batch falls in this final share of the epoch (where the counts let it).
TAIL_PCT = 2.0


def _counts(batches: Sequence[int] | np.ndarray) -> np.ndarray:
    counts = np.asarray(batches)
    if counts.ndim != 1 or (counts.size and (not np.issubdtype(counts.dtype, np.integer)
                                             or (counts < 0).any())):
        raise ProfilerError(f"batches per bucket must be non-negative integers, got "
                            f"{list(np.ravel(batches))[:8]}")
    return counts.astype(np.int64)


def min_run(batches: Sequence[int] | np.ndarray, total: int | None = None) -> int:
    """The shortest longest same-bucket run any order of these batches can have (0 when
    there are none): ``max ceil(m / (N - m + 1))`` over the buckets, ``N`` their sum, or
    ``total`` when other batches (of no bucket counted here) share the epoch."""
    counts = _counts(batches)
    n = int(counts.sum()) if total is None else total
    return max((-(-int(m) // (n - int(m) + 1)) for m in counts if m), default=0)


def check_max_run(batches: Sequence[int] | np.ndarray, max_run: int | None) -> int:
    """:func:`min_run` of ``batches``, after checking that ``max_run`` (when given) is a
    cap some order meets; else a `ProfilerError` naming the minimum."""
    counts = _counts(batches)
    least = min_run(counts)
    if max_run is None:
        return least
    if isinstance(max_run, bool) or not isinstance(max_run, (int, np.integer)) or max_run < 1:
        raise ProfilerError(f"--max-run must be a positive integer, got {max_run!r}")
    if max_run < least:
        top = int(np.argmax(counts))
        raise ProfilerError(
            f"--max-run {max_run} is infeasible: bucket {top} has {int(counts[top]):,} of the "
            f"{int(counts.sum()):,} batches, so some run of it is at least {least} (use "
            f"--max-run {least} or more)")
    return least


def interleave(batches: Sequence[int] | np.ndarray, max_run: int | None = None,
               classes: Sequence[int] | np.ndarray | None = None) -> np.ndarray:
    """The bucket index of every batch of the epoch (int32), runs at most ``max_run``
    (default and least: :func:`min_run`); deterministic. An infeasible ``max_run`` is a
    `ProfilerError` naming the minimum.

    ``classes`` (per bucket: the source that makes it mostly, any integer, or -1 for
    none) interleaves the sources too: under the same cap on same-bucket runs, an order
    whose longest run of one class's batches is as short as the planner finds (bisected,
    `PROBES` tries at most, between the classes' own lower bound and the order without
    classes: never longer than that order; the least possible on small epochs, checked by
    exhaustive search; on long epochs where one source holds nearly every batch, it can
    stay well above the least)."""
    counts = _counts(batches)
    least = check_max_run(counts, max_run)
    cap = int(max_run or least)
    n = int(counts.sum())
    cls = np.full(counts.size, -1, np.int64) if classes is None else \
        np.array(classes, dtype=np.int64)
    if cls.shape != counts.shape:
        raise ProfilerError(f"classes: one per bucket ({counts.size}), got {cls.size}")
    _, cls[cls >= 0] = np.unique(cls[cls >= 0], return_inverse=True)  # 0 .. k-1
    best = _lay_out(counts, cls, cap, n)  # no cap on classes: there always is one
    if best is None:  # the feasibility rule of one cap is exact: reaching this is a bug
        raise RuntimeError(f"interleave found no order with runs <= {cap}")
    lo = min_run(np.bincount(cls[cls >= 0], weights=counts[cls >= 0]).astype(np.int64), n)
    hi = class_run(best, cls)
    for _ in range(PROBES):
        if lo >= hi:
            break
        mid = (lo + hi) // 2
        order = _lay_out(counts, cls, cap, mid)
        if order is None:
            lo = mid + 1
        else:
            best, hi = order, class_run(order, cls)
    return best


def _lay_out(counts: np.ndarray, cls: np.ndarray, cap: int, kcap: int) -> np.ndarray | None:
    """The planner's order (`gpu_profiler.kernels.plan.interleave`), or None where it
    finds none with class runs at most ``kcap`` within its backtracks (`BACKTRACKS`)."""
    from gpu_profiler import native

    out = np.zeros(int(counts.sum()), dtype=np.int32)
    if out.size:
        work = np.zeros(3 * counts.size + 2 * out.size, np.int64)
        status, = native.kernel("interleave")(counts, cls, cap, max(kcap, 1),
                                               BACKTRACKS + out.size // 4, out, work)
        if status:
            return None
    return out


def class_run(order: np.ndarray, classes: np.ndarray) -> int:
    """The longest run of batches of one class (``classes[bucket]``, -1: none) in ``order``."""
    return tagged_run(np.asarray(classes)[order] if order.size else np.zeros(0, np.int64))[0]


def tagged_run(tagged: np.ndarray) -> tuple[int, int]:
    """The longest run of one tag (>= 0; -1 is no tag) in ``tagged``, and that tag (the
    first such run; ``(0, -1)`` when no item has one)."""
    if not tagged.size:
        return 0, -1
    starts = np.concatenate([[0], np.flatnonzero(np.diff(tagged)) + 1])
    lengths = np.diff(np.concatenate([starts, [tagged.size]]))
    lengths[tagged[starts] < 0] = 0
    at = int(lengths.argmax())
    return (int(lengths[at]), int(tagged[starts[at]])) if lengths[at] else (0, -1)


def longest_run(order: np.ndarray) -> tuple[int, int | None]:
    """The longest run of equal consecutive values of ``order``, and its value (the first
    such run; ``(0, None)`` when empty)."""
    if not order.size:
        return 0, None
    ends = np.flatnonzero(order[1:] != order[:-1])  # a run ends at each change
    lengths = np.diff(ends, prepend=-1, append=order.size - 1)
    i = int(np.argmax(lengths))
    return int(lengths[i]), int(order[ends[i] if i < ends.size else -1])


def tail_size(n: int) -> int:
    """Batches in the final :data:`TAIL_PCT` percent of an ``n``-batch epoch (at least 1)."""
    return max(1, math.ceil(n * TAIL_PCT / 100)) if n else 0


def early_buckets(order: np.ndarray, buckets: int, tail: int | None = None) -> list[int]:
    """Buckets with batches whose last batch runs before the last ``tail`` batches of
    ``order`` (default: :func:`tail_size`, the final :data:`TAIL_PCT` percent)."""
    n = order.size
    first_of_tail = n - (tail_size(n) if tail is None else tail)
    ran = np.bincount(order, minlength=buckets) > 0
    late = np.bincount(order[first_of_tail:], minlength=buckets) > 0
    return [b for b in range(buckets) if ran[b] and not late[b]]
