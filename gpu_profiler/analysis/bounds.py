"""Bucket bounds search: proposals for K buckets, each scored under the ``fixed`` policy.

Methods (all keep the outer edges ``bounds[0]`` and ``bounds[-1]``, so every proposal
buckets the same samples):

- ``equal-samples``: sample quantiles;
- ``equal-tokens``: token quantiles (how lhotse / NeMo estimate duration bins);
- ``equal-batches``: quantiles of each sample's share of a batch, ``1 / batch_size(len)``;
- ``min-padding``: dynamic programming over candidate edges (a grid of sample quantiles and
  evenly spaced lengths, plus every edge of the other proposals and of the current bounds),
  minimizing the ``fixed`` policy's expected padded tokens with at most K buckets, then
  refined edge by edge. Its candidate set contains the other proposals, so it is never
  worse than them on that objective;
- ``balanced`` (with ``balance > 0``): minimizes ``padded_tokens / tokens + balance *
  max_batch_share``, by the same DP under a cap on any bucket's batches, for a range of caps.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from gpu_profiler.analysis.buckets import DOMINANT_BATCH_PCT, clipped_counts
from gpu_profiler.analysis.policies import (
    PolicyResult,
    _segment,
    batch_size_for,
    draw_all_below,
    evaluate_policy,
)
from gpu_profiler.errors import ProfilerError
from gpu_profiler.histogram import LengthHistogram
from gpu_profiler.params import BucketParams

SCHEMA = "gpu-profiler/suggest/v1"
METHODS = ("current", "equal-samples", "equal-tokens", "equal-batches", "min-padding",
           "balanced")
#: Candidate edges of the DP grid (half sample quantiles, half evenly spaced lengths).
GRID = 32
#: The refinement's largest single move of an edge, in distinct lengths.
REFINE_SPAN = 64
#: P(batch max <= v) below this is dropped from the expected-maximum sum in the DP.
_NEGLIGIBLE = 1e-18


@dataclass(frozen=True)
class Proposal:
    """One set of bounds, scored under the ``fixed`` policy.

    ``objective = padded_tokens / tokens + balance * max_batch_pct / 100``.
    """

    method: str
    bounds: tuple[int, ...]
    padded_tokens: float
    padding_pct: float
    total_batches: int
    steps_per_epoch: int
    max_batch_pct: float
    objective: float
    policy: PolicyResult

    def to_dict(self) -> dict[str, Any]:
        return {"method": self.method, "bounds": list(self.bounds),
                "padded_tokens": self.padded_tokens, "padding_pct": self.padding_pct,
                "total_batches": self.total_batches, "steps_per_epoch": self.steps_per_epoch,
                "max_batch_pct": self.max_batch_pct, "objective": self.objective,
                "buckets": self.policy.to_dict()["buckets"]}


@dataclass(frozen=True)
class Suggestion:
    """Every proposal for ``buckets`` buckets, the current bounds first."""

    params: BucketParams
    buckets: int
    balance: float
    drop_last: bool
    proposals: tuple[Proposal, ...]
    warnings: tuple[str, ...] = field(default=())

    def __getitem__(self, method: str) -> Proposal:
        for p in self.proposals:
            if p.method == method:
                return p
        raise KeyError(method)

    def to_dict(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "params": self.params.to_dict(), "buckets": self.buckets,
                "balance": self.balance, "drop_last": self.drop_last,
                "proposals": [p.to_dict() for p in self.proposals],
                "warnings": list(self.warnings)}


def suggest_bounds(hist: LengthHistogram, buckets: int, params: BucketParams | None = None,
                   *, balance: float = 0.0, drop_last: bool = False) -> Suggestion:
    """Propose bounds for ``buckets`` buckets (see the module docstring)."""
    p = params or BucketParams()
    if isinstance(buckets, bool) or not isinstance(buckets, int) or buckets < 1:
        raise ProfilerError(f"--buckets must be a positive integer, got {buckets!r}")
    if not balance >= 0:
        raise ProfilerError(f"--balance must be >= 0, got {balance!r}")
    lo, hi = p.bounds[0], p.bounds[-1]
    values, cnt = _segment(clipped_counts(hist, p.max_seq_len), lo, hi)
    if not values.size:
        raise ProfilerError(f"no samples inside the bounds [{lo}, {hi}) to split")
    if not batch_size_for(int(values[-1]), p):
        raise ProfilerError(
            f"the longest sample ({int(values[-1])} tokens) exceeds the token budget "
            f"({p.token_budget}), so no bounds can batch it; raise --token-budget or lower "
            "--max-seq-len")
    tokens = int(cnt @ values)
    score = _Scorer(hist, p, balance, drop_last, tokens)
    out = [score("current", p.bounds)]
    for method in ("equal-samples", "equal-tokens", "equal-batches"):
        edges = _quantile_edges(_weights(method, values, cnt, p), buckets)
        out.append(score(method, _with_edges(lo, hi, values, edges)))
    rivals = [q for q in out if len(q.bounds) - 1 <= buckets]
    dp = _Dp(values, cnt, p, drop_last, buckets, [q.bounds for q in out])
    edges = _refine(dp.solve(), dp, lambda costs, batches: sum(costs))
    best = score("min-padding", _with_edges(lo, hi, values, edges))
    # Ties within rounding: the grid holds every rival's edges, so taking the cheaper one is
    # still the DP optimum.
    best = min([best, *(replace(q, method="min-padding") for q in rivals)],
               key=lambda q: q.padded_tokens)
    out.append(best)
    if balance > 0:
        def objective(costs: list[float], batches: list[int]) -> float:
            return sum(costs) / tokens + balance * max(batches) / max(sum(batches), 1)

        splits = dp.solve_capped(best.total_batches)
        edges = min(splits, key=lambda e: objective(*_parts(dp, e)))
        bal = score("balanced", _with_edges(lo, hi, values, _refine(edges, dp, objective)))
        bal = min([bal, *(replace(q, method="balanced") for q in [*rivals, best])],
                  key=lambda q: q.objective)
        out.append(bal)
    return Suggestion(p, buckets, float(balance), drop_last, tuple(out),
                      tuple(_warnings(out, buckets)))


def equal_batches_proposal(hist: LengthHistogram, buckets: int,
                           params: BucketParams | None = None) -> Proposal:
    """Just the ``equal-batches`` proposal (cheap: no DP)."""
    p = params or BucketParams()
    values, cnt = _segment(clipped_counts(hist, p.max_seq_len), p.bounds[0], p.bounds[-1])
    edges = _quantile_edges(_weights("equal-batches", values, cnt, p), buckets)
    score = _Scorer(hist, p, 0.0, False, max(int(cnt @ values), 1))
    return score("equal-batches", _with_edges(p.bounds[0], p.bounds[-1], values, edges))


def _weights(method: str, values: np.ndarray, cnt: np.ndarray, p: BucketParams) -> np.ndarray:
    if method == "equal-samples":
        return cnt.astype(np.float64)
    if method == "equal-tokens":
        return (cnt * values).astype(np.float64)
    sizes = np.minimum(p.token_budget // np.maximum(values, 1), p.max_batch_size)
    return cnt / np.where(values > 0, np.maximum(sizes, 1), p.max_batch_size)


class _Scorer:
    """Scores bounds under the ``fixed`` policy."""

    def __init__(self, hist: LengthHistogram, p: BucketParams, balance: float,
                 drop_last: bool, tokens: int):
        self.hist, self.p, self.balance, self.drop_last = hist, p, balance, drop_last
        self.tokens = tokens

    def __call__(self, method: str, bounds: tuple[int, ...]) -> Proposal:
        pol = evaluate_policy(self.hist, "fixed", replace(self.p, bounds=bounds),
                              drop_last=self.drop_last)
        max_pct = max((b.batch_pct for b in pol.buckets), default=0.0)
        return Proposal(method, bounds, float(pol.padded_tokens), pol.padding_pct,
                        int(pol.total_batches), int(pol.steps_per_epoch), max_pct,
                        pol.padded_tokens / self.tokens + self.balance * max_pct / 100, pol)


def _parts(dp: _Dp, edges: list[int]) -> tuple[list[float], list[int]]:
    parts = [dp.interval(a, b) for a, b in zip([0, *edges], [*edges, dp.size], strict=True)]
    return [c for c, _ in parts], [n for _, n in parts]


def _with_edges(lo: int, hi: int, values: np.ndarray, idx: Any) -> tuple[int, ...]:
    """Bounds ``lo, values[j] for j in idx, hi`` (indices into the present lengths)."""
    return (lo, *(int(values[j]) for j in sorted(set(int(j) for j in idx))), hi)


def _quantile_edges(w: np.ndarray, k: int) -> list[int]:
    """Indices j (1..D-1) whose weight below ``values[j]`` is closest to ``i/k`` of the total."""
    below = np.cumsum(w)[:-1]  # below[j - 1]: weight of values[:j]
    if not below.size:
        return []
    targets = float(w.sum()) * np.arange(1, k) / k
    right = np.minimum(np.searchsorted(below, targets), below.size - 1)
    left = np.maximum(right - 1, 0)
    pick = np.where(np.abs(below[left] - targets) <= np.abs(below[right] - targets), left, right)
    return sorted(set((pick + 1).tolist()))


def _refine(idx: list[int], dp: _Dp, key: Any) -> list[int]:
    """Hill-climb: move single edges (indices into the present lengths) by +-1, 2, 4, ...
    ``REFINE_SPAN`` places while ``key(costs, batches)`` of the split decreases."""
    steps = [s * d for s in 2 ** np.arange(int(np.log2(REFINE_SPAN)) + 1) for d in (-1, 1)]
    current = key(*_parts(dp, idx))
    improved = True
    while improved:
        improved = False
        for e in range(len(idx)):
            left = idx[e - 1] + 1 if e else 1
            right = idx[e + 1] - 1 if e + 1 < len(idx) else dp.size - 1
            for step in steps:
                j = idx[e] + int(step)
                if left <= j <= right:
                    trial = idx[:e] + [j] + idx[e + 1:]
                    v = key(*_parts(dp, trial))
                    if v < current:
                        idx, current, improved = trial, v, True
    return idx


class _Dp:
    """Interval costs (cached) over the present lengths, and the DP on candidate edges."""

    def __init__(self, values: np.ndarray, cnt: np.ndarray, p: BucketParams, drop_last: bool,
                 k: int, seeds: list[tuple[int, ...]]):
        self.values, self.p, self.drop_last, self.k = values, p, drop_last, k
        self.size = values.size
        self.cum = np.cumsum(cnt)
        self.gaps = np.diff(values).astype(np.float64)
        self._cache: dict[tuple[int, int], tuple[float, int]] = {}
        grid = set(np.searchsorted(self.cum, self.cum[-1] * np.arange(1, GRID // 2) /
                                   (GRID // 2), side="right").tolist())
        grid |= set(np.searchsorted(
            values, np.linspace(values[0], values[-1], GRID // 2 + 1)[1:-1]).tolist())
        for bounds in seeds:
            grid |= set(np.searchsorted(values, bounds[1:-1]).tolist())
        self.cand = sorted(j for j in grid if 0 < j < self.size)
        pos = [0, *self.cand, self.size]
        g = len(pos)
        self.cost = np.full((g, g), np.inf)
        self.batches = np.zeros((g, g), dtype=np.int64)
        for a in range(g - 1):
            for b in range(a + 1, g):
                self.cost[a, b], self.batches[a, b] = self.interval(pos[a], pos[b])

    def interval(self, a: int, b: int) -> tuple[float, int]:
        """(expected padded tokens, batches) of the bucket holding ``values[a:b]``."""
        key = (a, b)
        if key not in self._cache:
            self._cache[key] = _interval_cost(self.values, self.cum, self.gaps, a, b, self.p,
                                              self.drop_last)
        return self._cache[key]

    def solve(self, cap: int | None = None) -> list[int]:
        """Edges (indices into the present lengths) of the cheapest split into at most k
        buckets on the candidate grid, each bucket's batches ``<= cap`` when given."""
        cost = self.cost if cap is None else np.where(self.batches <= cap, self.cost, np.inf)
        g = cost.shape[0]
        best = np.full(g, np.inf)
        best[0] = 0.0
        back, ends = [], []
        for _ in range(self.k):
            total = best[:, None] + cost
            arg = np.argmin(total, axis=0)
            best = total[arg, np.arange(g)]
            back.append(arg)
            ends.append(best[-1])
        layers = int(np.argmin(ends)) + 1
        if not np.isfinite(ends[layers - 1]):
            return []
        edges, j = [], g - 1
        for layer in range(layers - 1, 0, -1):
            j = int(back[layer][j])
            edges.append(self.cand[j - 1])
        return edges[::-1]

    def solve_capped(self, total_batches: int) -> list[list[int]]:
        """Cheapest splits under a range of caps on any one bucket's batches."""
        low = max(1, total_batches // self.k)
        caps = np.unique(np.geomspace(low, max(low, total_batches), 24).round().astype(int))
        splits = [self.solve(int(c)) for c in caps]
        return [e for e in splits if e] or [[]]


def _interval_cost(values: np.ndarray, cum: np.ndarray, gaps: np.ndarray, a: int, b: int,
                   p: BucketParams, drop_last: bool) -> tuple[float, int]:
    """The ``fixed`` policy's expected padded tokens and batches of the bucket holding
    ``values[a:b]``; infinite cost when its longest sample exceeds the budget."""
    base = int(cum[a - 1]) if a else 0
    n = int(cum[b - 1]) - base
    size = batch_size_for(int(values[b - 1]), p)
    if not size:
        return np.inf, 0
    full, rest = divmod(n, size)
    padded = 0.0
    for k, rows in ((size, full * size), (rest, 0 if drop_last else rest)):
        if not rows:
            continue
        thr = max(k, int(n * _NEGLIGIBLE ** (1.0 / k)))
        j0 = max(a, int(np.searchsorted(cum, base + thr, side="left")))
        tail = 0.0
        if j0 < b - 1:
            tail = float(gaps[j0:b - 1] @ draw_all_below(cum[j0:b - 1] - base, n, k))
        padded += rows * (float(values[b - 1]) - tail)
    return padded, full + (1 if rest and not drop_last else 0)


def _warnings(out: list[Proposal], k: int) -> list[str]:
    current, best = out[0], next(q for q in out if q.method == "min-padding")
    flat = min(out[1:], key=lambda q: q.max_batch_pct)
    msgs = []
    if current.max_batch_pct > DOMINANT_BATCH_PCT:
        top = max(current.policy.buckets, key=lambda b: b.batch_pct)
        if flat.max_batch_pct <= DOMINANT_BATCH_PCT:
            fix = (f"{flat.method} bounds {','.join(map(str, flat.bounds))} bring the largest "
                   f"share to {flat.max_batch_pct:.1f}% at {flat.padding_pct:.1f}% padding"
                   + ("" if flat is best else f" (min-padding: {best.padding_pct:.1f}% "
                      f"padding, largest share {best.max_batch_pct:.1f}%)"))
        else:
            fix = (f"no proposal for {k} buckets gets the largest share under "
                   f"{DOMINANT_BATCH_PCT:.0f}% (best: {flat.method}, {flat.max_batch_pct:.1f}%); "
                   "try more --buckets")
        msgs.append(
            f"the current bounds put {top.batch_pct:.1f}% of the batches in bucket {top.index} "
            f"[{top.lo}, {top.hi}) (> {DOMINANT_BATCH_PCT:.0f}%); {fix}; or keep the bounds "
            "and interleave with `gpu-profiler schedule --order stride`")
    if best.max_batch_pct > DOMINANT_BATCH_PCT and flat is not best:
        trade = (f"the balanced bounds bring it to {out[-1].max_batch_pct:.1f}% at "
                 f"{out[-1].padding_pct:.1f}% padding" if out[-1].method == "balanced"
                 else "add --balance 1 to trade padding for balance")
        msgs.append(
            f"min-padding bounds leave {best.max_batch_pct:.1f}% of the batches in one bucket; "
            f"{trade}, or interleave with `gpu-profiler schedule --order stride`")
    return msgs
