"""Batching policies computed exactly from the histogram: integer batches, padding, packing.

Every policy sees the clipped lengths ``c = min(len, max_seq_len)`` of the bucketed samples
(those inside ``[bounds[0], bounds[-1])``). "Padded tokens" is what the GPU computes: rows x
longest row, summed over batches; ``padding_pct`` is the share of it that is padding.

- ``estimate``: the docs/design.md estimate (float batches, every sample padded to its bucket max).
- ``fixed``: one batch size per bucket (the estimate's), ``ceil`` batches (``floor`` with
  ``drop_last``); batches are random draws from the bucket, so padding is the exact
  *expected* maximum of a random batch, from the bucket's length distribution.
- ``sorted``: each bucket sorted ascending and filled greedily while ``rows x longest <=
  token_budget`` and ``rows <= max_batch_size``; ``drop_last`` drops a bucket's final batch
  when it could still take one more sample of its longest length.
- ``packed`` / ``packed-ffd``: all bucketed samples concatenated into rows of
  ``max_seq_len`` by best-fit-decreasing / first-fit-decreasing, run on the histogram itself
  (time grows with the number of distinct lengths, never with the number of samples);
  ``min(token_budget // max_seq_len, max_batch_size)`` rows per batch.

With a cost model (``params.cost``, `gpu_profiler.cost`) every batch size above is
`gpu_profiler.cost.batch_rows` (``rows x row_cost(longest) <= budget``, e.g. ``row_cost(L)
= L + A L^2``) in place of ``token_budget // longest``, and each bucket adds its ``cost``
(``rows x row_cost(longest)`` summed over its batches; ``fixed``: the expectation, the
expected maximum taken over the row costs, which never decrease with the length) and
``cost_pct``; without one those are None and left out of ``to_dict``.
"""

from __future__ import annotations

from dataclasses import asdict, field
from typing import Any

import numpy as np

from gpu_profiler.analysis.buckets import clipped_counts, pct, without_cost
from gpu_profiler.cost import (
    batch_rows,
    batch_rows_array,
    budget_option,
    budget_words,
    row_cost,
    squares,
    varlen_cost,
    varlen_take,
)
from gpu_profiler.errors import ProfilerError
from gpu_profiler.frozen import frozen
from gpu_profiler.histogram import LengthHistogram
from gpu_profiler.params import BucketParams

POLICIES = ("estimate", "fixed", "sorted", "packed", "packed-ffd")
_PACKING = {"packed": "bfd", "packed-ffd": "ffd"}


@frozen
class PolicyBucket:
    """One bucket under a policy.

    ``sample_pct``, ``token_pct`` and ``batch_pct`` are the bucket's shares of the batched
    samples, real tokens and batches: its share of the gradient under per-sample loss
    averaging (over the whole step), per-token loss averaging (over the whole step) and
    per-batch averaging (each micro-batch's mean loss weighted equally), respectively.
    """

    index: int
    lo: int
    hi: int
    samples: int
    batches: int | float
    batch_size: int | float
    min_batch_size: int
    max_batch_size: int
    tokens: int | float
    padded_tokens: int | float
    padding_pct: float
    sample_pct: float
    token_pct: float
    batch_pct: float
    dropped_samples: int
    unbatchable_samples: int
    #: With a cost model (`gpu_profiler.cost`; None without one, and left out of the JSON):
    #: the batches' total cost in its unit (``fixed``: expected) and its share of the epoch's.
    cost: float | None = None
    cost_pct: float | None = None


@frozen
class PolicyResult:
    """A batching policy applied to every bucket, with corpus totals.

    Attributes:
        expected: True when tokens/padding are expectations over random batch composition
            (``fixed``, and ``drop_last`` packing), False when exact.
        rows, rows_per_batch, packing_efficiency, algorithm: packing only
            (``packing_efficiency = tokens / (rows * max_seq_len)``).
        split: the DatasetDict split evaluated (set by `gpu_profiler.profile`; None for an
            unsplit source).
    """

    name: str
    drop_last: bool
    expected: bool
    buckets: tuple[PolicyBucket, ...]
    samples: int
    tokens: int | float
    padded_tokens: int | float
    padding_pct: float
    total_batches: int | float
    steps_per_epoch: int | float
    dropped_samples: int
    unbatchable_samples: int
    rows: int | None = None
    rows_per_batch: int | None = None
    packing_efficiency: float | None = None
    algorithm: str | None = None
    warnings: tuple[str, ...] = field(default=())
    split: str | None = None
    #: The epoch's cost in the cost model's unit (None without a cost model).
    cost: float | None = None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["buckets"] = [without_cost(asdict(b), "cost") for b in self.buckets]
        d["warnings"] = list(self.warnings)
        if self.rows is None:
            for key in ("rows", "rows_per_batch", "packing_efficiency", "algorithm"):
                del d[key]
        return without_cost(d, "cost")


def evaluate_policies(hist: LengthHistogram, names: Any = POLICIES,
                      params: BucketParams | None = None, *,
                      drop_last: bool = False) -> tuple[PolicyResult, ...]:
    """Several policies at once; ``names`` may also be ``"all"`` or ``"fixed,sorted"``."""
    p = params or BucketParams()
    return tuple(evaluate_policy(hist, n, p, drop_last=drop_last) for n in parse_policies(names))


def parse_policies(names: Any) -> tuple[str, ...]:
    """``"all"`` / ``"fixed,sorted"`` / ``["fixed", "packed"]`` -> validated unique names."""
    return parse_names(names, POLICIES, "policy")


def parse_names(names: Any, choices: tuple[str, ...], noun: str) -> tuple[str, ...]:
    """``"all"`` / ``"a,b"`` / ``["a", "b"]`` -> the unique ``choices`` named, in order; a
    name not among them is a `ProfilerError` calling it an unknown ``noun``."""
    items = [names] if isinstance(names, str) else list(names)
    out: list[str] = []
    for item in items:
        for name in str(item).replace(" ", "").split(","):
            for n in choices if name == "all" else (name,) if name else ():
                if n not in choices:
                    raise ProfilerError(f"unknown {noun} {n!r}; choose from "
                                        f"{', '.join(choices)} or all")
                if n not in out:
                    out.append(n)
    return tuple(out)


def evaluate_policy(hist: LengthHistogram, name: str, params: BucketParams | None = None, *,
                    drop_last: bool = False) -> PolicyResult:
    """Apply one batching policy (see the module docstring) to ``hist``."""
    p = params or BucketParams()
    if name not in POLICIES:
        raise ProfilerError(f"unknown policy {name!r}; choose from {', '.join(POLICIES)}")
    counts = clipped_counts(hist, p.max_seq_len)
    if name in _PACKING:
        return _packed(counts, p, drop_last, _PACKING[name])
    rows = [_BUCKET_FNS[name](present_lengths(counts, lo, hi), p, drop_last)
            for lo, hi in zip(p.bounds[:-1], p.bounds[1:], strict=True)]
    return _assemble(name, rows, p, drop_last, expected=name == "fixed")


# ---------------------------------------------------------------- histogram segments
def present_lengths(counts: np.ndarray, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """The present lengths of bucket ``[lo, hi)`` (ascending) and their counts, out of
    `clipped_counts`: what every policy, and the bounds search (`analysis.bounds`), works
    on."""
    lo_, hi_ = min(lo, counts.size), min(hi, counts.size)
    nz = np.flatnonzero(counts[lo_:hi_])
    return (lo_ + nz).astype(np.int64), counts[lo_:hi_][nz]


# ---------------------------------------------------------------- expected batch maximum
_STIRLING_MIN = 30
_PRODUCT_MAX_K = 24
#: `draw_all_below` builds its ``k`` factors in one array up to this many (the same products,
#: in the same order, as one factor at a time).
_PRODUCT_AT_ONCE = 1 << 18


def log_falling(m: np.ndarray, k: Any) -> np.ndarray:
    """``log(m (m-1) ... (m-k+1))`` (float array; ``-inf`` where ``m < k``), stable for huge
    ``m``; ``k`` is an int or an int array of ``m``'s shape.

    Stirling's series on ``lgamma(m+1) - lgamma(m-k+1)`` written without cancellation; the
    few small arguments use an exact log-factorial table.
    """
    m = np.asarray(m, dtype=np.float64)
    kf = np.asarray(k, dtype=np.float64)
    z, w = m + 1.0, m - kf + 1.0
    small = w < _STIRLING_MIN
    if not small.any():  # the common case: no masks
        return _stirling(z, w, kf)
    kf = np.broadcast_to(kf, m.shape)
    out = np.empty_like(m)
    ms, ks = m[small], kf[small]
    top = int(ks.max()) + _STIRLING_MIN + 1
    table = np.concatenate(([0.0], np.cumsum(np.log(np.arange(1, top + 1)))))
    ok = ms >= ks
    mi = np.where(ok, ms, 0).astype(np.int64)
    out[small] = np.where(ok, table[mi] - table[mi - np.where(ok, ks, 0).astype(np.int64)],
                          -np.inf)
    big = ~small
    if big.any():
        out[big] = _stirling(z[big], w[big], kf[big])
    return out


def _stirling(z: np.ndarray, w: np.ndarray, kf: np.ndarray) -> np.ndarray:
    """``lgamma(z) - lgamma(w)`` for ``z = m + 1``, ``w = z - k``, by Stirling's series."""
    return (kf * np.log(z) - (w - 0.5) * np.log1p(-kf / z) - kf
            + _stirling_tail(z) - _stirling_tail(w))


def _stirling_tail(z: np.ndarray) -> np.ndarray:
    r = 1.0 / z
    r2 = r * r
    return r * (1.0 / 12.0 - r2 * (1.0 / 360.0 - r2 / 1260.0))


def draw_all_below(m: np.ndarray, n: int, k: int) -> np.ndarray:
    """``C(m, k) / C(n, k)``: the chance that ``k`` draws without replacement from ``n``
    items all come from a given ``m`` of them (``m``: int array, ``k <= m <= n``)."""
    if k <= _PRODUCT_MAX_K:
        mf = m.astype(np.float64)
        if k * m.size <= _PRODUCT_AT_ONCE:  # the k factors in one array, multiplied in order
            drawn = np.arange(k)
            factors = mf[None, :] - drawn[:, None]
            factors *= (1.0 / (n - drawn))[:, None]
            return np.multiply.reduce(factors, axis=0)
        prob = np.ones(m.size)
        for i in range(k):
            prob *= (mf - i) * (1.0 / (n - i))
        return prob
    return np.exp(log_falling(m, k) - log_falling(np.array([n]), k)[0])


def expected_max(values: np.ndarray, counts: np.ndarray, k: int) -> float:
    """Exact expected maximum of ``k`` samples drawn without replacement from the multiset
    (``values`` ascending, with ``counts``): ``vmax - sum gap_j * P(max <= v_j)`` where
    ``P(max <= v_j) = C(M_j, k) / C(n, k)``, ``M_j`` the count of samples ``<= v_j``."""
    if k <= 0 or values.size == 0:
        return 0.0
    n = int(counts.sum())
    if k > n:
        raise ValueError(f"cannot draw {k} of {n} samples")
    return _expected_max(values, np.cumsum(counts)[:-1], np.diff(values).astype(np.float64),
                         n, k)


def _expected_max(values: np.ndarray, cum: np.ndarray, gaps: np.ndarray, n: int,
                  k: int) -> float:
    """`expected_max` from ``cum = cumsum(counts)[:-1]``, ``gaps = diff(values)`` and
    ``n = counts.sum()`` (``1 <= k <= n``), which several ``k`` share."""
    use = cum >= k
    if not use.any():
        return float(values[-1])
    return float(values[-1]) - float(gaps[use] @ draw_all_below(cum[use], n, k))


# ---------------------------------------------------------------- per-bucket policies
def _estimate_bucket(seg: tuple[np.ndarray, np.ndarray], p: BucketParams, drop_last: bool
                     ) -> dict[str, Any]:
    """The bucket table's numbers, unchanged (an over-budget bucket is flagged, not dropped)."""
    values, cnt = seg
    n, tokens = int(cnt.sum()), int(cnt @ values)
    max_len = int(values[-1]) if n else 0
    size = batch_rows(max_len, p)
    cost = varlen_cost(n * max_len, squares(values, cnt), p.cost) if p.cost.varlen else \
        n * float(row_cost(max_len, p.cost))
    return dict(samples=n, batches=n / max(size, 1), batch_size=size, min_batch_size=size,
                max_batch_size=size, tokens=tokens, padded_tokens=n * max_len,
                dropped_samples=0, unbatchable_samples=n if n and not size else 0, cost=cost)


def _fixed_bucket(seg: tuple[np.ndarray, np.ndarray], p: BucketParams, drop_last: bool
                  ) -> dict[str, Any]:
    values, cnt = seg
    n, tokens = int(cnt.sum()), int(cnt @ values)
    size = batch_rows(int(values[-1]) if n else 0, p)
    if n and not size:
        return dict(samples=0, batches=0, batch_size=0, min_batch_size=0, max_batch_size=0,
                    tokens=0, padded_tokens=0, dropped_samples=0, unbatchable_samples=n,
                    cost=0.0)
    full, rest = divmod(n, size)
    cum, gaps = np.cumsum(cnt)[:-1], np.diff(values).astype(np.float64)
    # the expected cost of a batch's row: E[row_cost(max)], the same sum over the row
    # costs of the lengths (row_cost never decreases with length: max and cost commute)
    priced = np.asarray(row_cost(values, p.cost), np.float64)
    pgaps = np.diff(priced)
    padded = full * size * _expected_max(values, cum, gaps, n, size) if full else 0.0
    cost = full * size * _expected_max(priced, cum, pgaps, n, size) if full else 0.0
    sizes = [size] if full else []
    if rest and not drop_last:
        padded += rest * _expected_max(values, cum, gaps, n, rest)
        cost += rest * _expected_max(priced, cum, pgaps, n, rest)
        sizes.append(rest)
    dropped = rest if drop_last else 0
    kept = n - dropped
    if p.cost.varlen:  # the expected squared lengths of the samples kept
        cost = varlen_cost(padded, squares(values, cnt) * kept / n if n else 0.0, p.cost)
    return dict(samples=kept, batches=full + (1 if rest and not drop_last else 0),
                batch_size=size, min_batch_size=min(sizes, default=0),
                max_batch_size=max(sizes, default=0),
                tokens=tokens * kept / n if dropped else tokens, padded_tokens=padded,
                dropped_samples=dropped, unbatchable_samples=0, cost=cost)


def _sorted_bucket(seg: tuple[np.ndarray, np.ndarray], p: BucketParams, drop_last: bool
                   ) -> dict[str, Any]:
    values, cnt = seg
    batches = padded = tokens = kept = unbatchable = 0
    cost = 0.0
    min_rows, max_rows = None, 0
    rows = open_tokens = longest = 0  # the open (not yet closed) batch
    sumsq = kept_sumsq = 0.0  # the open batch's squared lengths, and the kept samples'
    varlen = p.cost.varlen

    price = dict(zip(values.tolist(), np.asarray(row_cost(values, p.cost), np.float64).tolist(),
                     strict=True))  # the row cost of each present length, priced at once

    def close(r: int, length: int, nb: int = 1) -> None:
        nonlocal batches, padded, cost, min_rows, max_rows
        batches += nb
        padded += nb * r * length
        cost += nb * r * price[length]
        min_rows = r if min_rows is None else min(min_rows, r)
        max_rows = max(max_rows, r)

    mbs = p.max_batch_size
    # `batch_rows` of every length at once; varlen: a fresh batch of one length
    caps = [varlen_take(0, 0.0, v, mbs, p) for v in values.tolist()] if varlen else \
        batch_rows_array(values, p).tolist()
    for v, c, cap in zip(values.tolist(), cnt.tolist(), caps, strict=True):
        if cap == 0:  # ascending: this and every longer length exceed the budget
            unbatchable = int(cnt[values >= v].sum())
            break
        if rows:
            take = varlen_take(rows, sumsq, v, c, p) if varlen else min(c, max(cap - rows, 0))
            if take:
                rows, open_tokens, longest, c = rows + take, open_tokens + take * v, v, c - take
                sumsq += take * float(v) * float(v)
            if c:
                close(rows, longest)
                tokens, kept, kept_sumsq = tokens + open_tokens, kept + rows, kept_sumsq + sumsq
                rows = open_tokens = 0
        if c:
            full, rest = divmod(c, cap)
            if full:
                close(cap, v, full)
                tokens, kept = tokens + full * cap * v, kept + full * cap
                kept_sumsq += full * cap * float(v) * float(v)
            if rest:
                rows, open_tokens, longest = rest, rest * v, v
                sumsq = rest * float(v) * float(v)
    dropped = 0
    if rows:
        more = varlen_take(rows, sumsq, longest, 1, p) if varlen else \
            rows < batch_rows(longest, p)
        if drop_last and more:
            dropped = rows
        else:
            close(rows, longest)
            tokens, kept, kept_sumsq = tokens + open_tokens, kept + rows, kept_sumsq + sumsq
    if varlen:
        cost = varlen_cost(padded, kept_sumsq, p.cost)
    return dict(samples=kept, batches=batches, batch_size=kept / batches if batches else 0.0,
                min_batch_size=min_rows or 0, max_batch_size=max_rows, tokens=tokens,
                padded_tokens=padded, dropped_samples=dropped, unbatchable_samples=unbatchable,
                cost=cost)


_BUCKET_FNS = {"estimate": _estimate_bucket, "fixed": _fixed_bucket, "sorted": _sorted_bucket}


def _steps(batches: float, p: BucketParams, name: str, drop_last: bool) -> int | float:
    per_step = p.grad_accum * p.world_size
    if name == "estimate":
        return batches / per_step
    return int(batches) // per_step if drop_last else -(-int(batches) // per_step)


def _assemble(name: str, rows: list[dict[str, Any]], p: BucketParams, drop_last: bool,
              expected: bool) -> PolicyResult:
    priced = not p.cost.is_default
    total_cost = float(sum(r["cost"] for r in rows))
    for r in rows:
        r["cost"], r["cost_pct"] = (r["cost"], pct(r["cost"], total_cost)) if priced else \
            (None, None)
    samples = sum(r["samples"] for r in rows)
    tokens = sum(r["tokens"] for r in rows)
    padded = sum(r["padded_tokens"] for r in rows)
    batches = sum(r["batches"] for r in rows)
    buckets = tuple(
        PolicyBucket(index=i, lo=lo, hi=hi, **r,
                     padding_pct=pct(r["padded_tokens"] - r["tokens"], r["padded_tokens"]),
                     sample_pct=pct(r["samples"], samples), token_pct=pct(r["tokens"], tokens),
                     batch_pct=pct(r["batches"], batches))
        for i, (r, lo, hi) in enumerate(zip(rows, p.bounds[:-1], p.bounds[1:], strict=True)))
    warnings = [f"{name}: {b.unbatchable_samples} samples of bucket {b.index} [{b.lo}, {b.hi})"
                f" are longer than the {budget_words(p)} and fit no batch; raise "
                f"{budget_option(p)} or lower --max-seq-len"
                for b in buckets if b.unbatchable_samples]
    return PolicyResult(
        name=name, drop_last=drop_last, expected=expected, buckets=buckets, samples=samples,
        tokens=tokens, padded_tokens=padded, padding_pct=pct(padded - tokens, padded),
        total_batches=batches, steps_per_epoch=_steps(batches, p, name, drop_last),
        dropped_samples=sum(b.dropped_samples for b in buckets),
        unbatchable_samples=sum(b.unbatchable_samples for b in buckets),
        warnings=tuple(warnings), cost=total_cost if priced else None)


# ---------------------------------------------------------------- packing
def _packed(counts: np.ndarray, p: BucketParams, drop_last: bool, algorithm: str
            ) -> PolicyResult:
    lo, hi = p.bounds[0], p.bounds[-1]
    values, cnt = present_lengths(counts, lo, hi)
    samples, tokens = int(cnt.sum()), int(cnt @ values)
    rows = pack_rows(values, cnt, p.max_seq_len, algorithm)
    per_batch = batch_rows(p.max_seq_len, p)
    warnings = []
    if per_batch == 0:
        per_batch = 1
        warnings.append(f"{algorithm} packing: one packed row of max_seq_len "
                        f"({p.max_seq_len} tokens) exceeds the {budget_words(p)}; each batch "
                        "holds one row")
    full, rest = divmod(rows, per_batch)
    batches = full + (1 if rest and not drop_last else 0)
    kept_rows = rows - rest if drop_last else rows
    kept_tokens: int | float = tokens * kept_rows / rows if drop_last and rest else tokens
    padded = kept_rows * p.max_seq_len
    name = "packed" if algorithm == "bfd" else "packed-ffd"
    return PolicyResult(
        name=name, drop_last=drop_last, expected=bool(drop_last and rest), buckets=(),
        samples=samples, tokens=kept_tokens, padded_tokens=padded,
        padding_pct=pct(padded - kept_tokens, padded), total_batches=batches,
        steps_per_epoch=_steps(batches, p, name, drop_last), dropped_samples=0,
        unbatchable_samples=0, rows=rows, rows_per_batch=per_batch,
        packing_efficiency=tokens / (rows * p.max_seq_len) if rows else 0.0,
        algorithm=algorithm, warnings=tuple(warnings),
        cost=None if p.cost.is_default else varlen_cost(
            padded, squares(values, cnt) * (kept_rows / rows if drop_last and rest else 1),
            p.cost) if p.cost.varlen else kept_rows * float(row_cost(p.max_seq_len, p.cost)))


def pack_rows(values: np.ndarray, counts: np.ndarray, capacity: int,
              algorithm: str = "bfd") -> int:
    """Rows of ``capacity`` tokens that best-fit-decreasing (``"bfd"``) or
    first-fit-decreasing (``"ffd"``) packing needs for the multiset ``values`` x ``counts``
    (every value ``<= capacity``), exactly as item-by-item packing would.

    Items of one length are placed in bulk: a row with ``r`` tokens free takes ``r // L``
    items of length ``L`` in a row before the next candidate row is tried, so the work grows
    with the number of distinct lengths, not with the number of items.
    """
    values, counts = np.asarray(values, np.int64), np.asarray(counts, np.int64)
    if values.size and int(values.max()) > capacity:
        raise ValueError(f"an item of {int(values.max())} exceeds the row capacity {capacity}")
    order = np.flatnonzero((values > 0) & (counts > 0))[::-1]
    fill = _bfd if algorithm == "bfd" else _ffd if algorithm == "ffd" else None
    if fill is None:
        raise ValueError(f"unknown packing algorithm {algorithm!r}")
    rows = fill(values[order], counts[order], capacity)
    has_zero = bool(counts[(values == 0)].sum()) if values.size else False
    return rows or (1 if has_zero else 0)


def _bfd(values: np.ndarray, counts: np.ndarray, capacity: int) -> int:
    """Best fit: ``level[r]`` counts open rows with ``r`` tokens free; an item of length L
    goes to the smallest ``r >= L``. No level above ``top`` holds a row."""
    level = np.zeros(capacity + 1, dtype=np.int64)
    rows = top = 0
    for length, c in zip(values.tolist(), counts.tolist(), strict=True):
        free = length + np.flatnonzero(level[length:top + 1]) if top >= length else \
            np.zeros(0, np.int64)
        top = min(top, length - 1) if len(free) == 0 else top
        if len(free):
            fits = level[free] * (free // length)
            done = np.cumsum(fits)
            k = int(np.searchsorted(done, c))  # first level that does not empty fully
            whole = free[:k]
            np.add.at(level, whole % length, level[whole])
            level[whole] = 0
            if k < free.size:  # the c items left, fewer than level free[k] holds
                c -= int(done[k - 1]) if k else 0
                r = int(free[k])
                for f, m in _filled(r, length, c):
                    level[r] -= m
                    level[f] += m
                continue
            c -= int(done[-1])
            top = length - 1
        if c:  # new rows
            opened = _filled(capacity, length, c)
            for f, m in opened:
                level[f] += m
                rows += m
            top = max(top, opened[-1][0])
    return rows


def _filled(free: int, length: int, c: int) -> list[tuple[int, int]]:
    """Rows with ``free`` tokens free that take ``c`` items of ``length``, one row filled
    before the next, as ``(tokens free after, rows)``: the full rows, then the one with
    the rest (if any); the last has the most room left."""
    full, rest = divmod(c, free // length)
    return [(free % length, full)] + ([(free - rest * length, 1)] if rest else [])


def _ffd(values: np.ndarray, counts: np.ndarray, capacity: int) -> int:
    """First fit: open rows kept in opening order as runs (``free`` tokens, ``n`` rows); an
    item goes to the first row it fits. New runs wait in ``pending`` until a length could
    fit one (no row has more than ``top`` tokens free); empty runs are dropped."""
    free = np.zeros(0, dtype=np.int64)
    n = np.zeros(0, dtype=np.int64)
    pending: list[tuple[int, int]] = []
    rows = top = 0
    for length, c in zip(values.tolist(), counts.tolist(), strict=True):
        if top >= length:
            if pending:
                free = np.concatenate((free, [f for f, _ in pending]))
                n = np.concatenate((n, [m for _, m in pending]))
                pending = []
            fit = np.flatnonzero(free >= length)
            done = np.cumsum(n[fit] * (free[fit] // length))
            k = int(np.searchsorted(done, c))
            free[fit[:k]] %= length
            if not fit.size:
                top = length - 1
            elif k < fit.size:
                c -= int(done[k - 1]) if k else 0
                j = int(fit[k])
                taken = _filled(int(free[j]), length, c)  # then the run's untouched rows
                left = int(n[j]) - sum(m for _, m in taken)
                free = np.concatenate((free[:j], [f for f, _ in taken], [free[j]], free[j + 1:]))
                n = np.concatenate((n[:j], [m for _, m in taken], [left], n[j + 1:]))
                keep = n > 0
                free, n = free[keep], n[keep]
                c = 0
            else:
                c -= int(done[-1])
                top = length - 1
        if c:  # new rows
            opened = _filled(capacity, length, c)
            pending += opened
            rows += sum(m for _, m in opened)
            top = max(top, opened[-1][0])
    return rows
