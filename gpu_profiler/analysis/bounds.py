"""Bucket bounds search: proposals for K buckets, each scored under the ``fixed`` policy.

Methods (all keep the outer edges ``bounds[0]`` and ``bounds[-1]``, so every proposal
buckets the same samples):

- ``equal-samples``: sample quantiles;
- ``equal-tokens``: token quantiles (how lhotse / NeMo estimate duration bins);
- ``equal-batches``: quantiles of each sample's share of a batch, ``1 / batch_size(len)``;
- ``min-padding``: dynamic programming over candidate edges (a grid of sample quantiles and
  evenly spaced lengths, plus every edge of the other proposals and of the current bounds;
  every present length when there are at most ``GRID``),
  minimizing the ``fixed`` policy's expected padded tokens with at most K buckets, then
  refined edge by edge. Its candidate set contains the other proposals, so it is never
  worse than them on that objective;
- ``balanced`` (with ``balance > 0``): minimizes ``padded_tokens / tokens + balance *
  max_batch_share``, by the same DP under a cap on any bucket's batches, for a range of caps.

A proposal may have fewer buckets than asked (quantile edges coincide on a heavy length; no
split into more buckets pads less); it then says why (``why_fewer``). What to do about a bucket
that makes most of the batches is `gpu_profiler.analysis.advice`'s to say, not this module's.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from gpu_profiler.analysis.buckets import clipped_counts
from gpu_profiler.analysis.policies import (
    PolicyResult,
    batch_size_for,
    draw_all_below,
    evaluate_policy,
    present_lengths,
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

    ``objective = padded_tokens / tokens + balance * max_batch_pct / 100``; ``why_fewer``
    says why a proposal has fewer buckets than asked (None when it has them all).
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
    why_fewer: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"method": self.method, "bounds": list(self.bounds),
                "padded_tokens": self.padded_tokens, "padding_pct": self.padding_pct,
                "total_batches": self.total_batches, "steps_per_epoch": self.steps_per_epoch,
                "max_batch_pct": self.max_batch_pct, "objective": self.objective,
                "why_fewer": self.why_fewer, "buckets": self.policy.to_dict()["buckets"]}


@dataclass(frozen=True)
class Suggestion:
    """Every proposal for ``buckets`` buckets, the current bounds first.

    ``split`` names the DatasetDict split analysed and ``advice`` is the
    `gpu_profiler.analysis.advice.Advice` on it; the commands attach both (None here).
    """

    params: BucketParams
    buckets: int
    balance: float
    drop_last: bool
    proposals: tuple[Proposal, ...]
    warnings: tuple[str, ...] = field(default=())
    split: str | None = None
    advice: Any = None

    def __getitem__(self, method: str) -> Proposal:
        for p in self.proposals:
            if p.method == method:
                return p
        raise KeyError(method)

    def to_dict(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "split": self.split, "params": self.params.to_dict(),
                "buckets": self.buckets, "balance": self.balance, "drop_last": self.drop_last,
                "proposals": [p.to_dict() for p in self.proposals],
                "advice": self.advice.to_dict() if self.advice else None,
                "warnings": list(self.warnings)}


def suggest_bounds(hist: LengthHistogram, buckets: int, params: BucketParams | None = None,
                   *, balance: float = 0.0, drop_last: bool = False) -> Suggestion:
    """Propose bounds for ``buckets`` buckets (see the module docstring); every proposal
    with fewer buckets says why, in its ``why_fewer`` and in the warnings."""
    p = params or BucketParams()
    if isinstance(buckets, bool) or not isinstance(buckets, int) or buckets < 1:
        raise ProfilerError(f"--buckets must be a positive integer, got {buckets!r}")
    if not balance >= 0:
        raise ProfilerError(f"--balance must be >= 0, got {balance!r}")
    lo, hi = p.bounds[0], p.bounds[-1]
    values, cnt = present_lengths(clipped_counts(hist, p.max_seq_len), lo, hi)
    if not values.size:
        raise ProfilerError(f"no samples inside the bounds [{lo}, {hi}) to split")
    if not batch_size_for(int(values[-1]), p):
        raise ProfilerError(
            f"the longest sample ({int(values[-1])} tokens) exceeds the token budget "
            f"({p.token_budget}), so no bounds can batch it; raise --token-budget or lower "
            "--max-seq-len")
    tokens = max(int(cnt @ values), 1)  # all lengths 0: no padding to weigh
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
    out = [replace(q, why_fewer=_why_fewer(q, buckets, values, cnt, p, dp)) for q in out]
    return Suggestion(p, buckets, float(balance), drop_last, tuple(out), tuple(
        f"{q.method}: {len(q.bounds) - 1} buckets, not {buckets}: {q.why_fewer}"
        for q in out if q.why_fewer))


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


def _quantile_picks(w: np.ndarray, k: int) -> np.ndarray:
    """For each ``i = 1..k-1``, the index j (1..D-1) whose weight below ``values[j]`` is
    closest to ``i/k`` of the total; two equal picks are one edge (a bucket fewer)."""
    below = np.cumsum(w)[:-1]  # below[j - 1]: weight of values[:j]
    if not below.size:
        return np.zeros(0, np.int64)
    targets = float(w.sum()) * np.arange(1, k) / k
    right = np.minimum(np.searchsorted(below, targets), below.size - 1)
    left = np.maximum(right - 1, 0)
    pick = np.where(np.abs(below[left] - targets) <= np.abs(below[right] - targets), left, right)
    return pick + 1


def _quantile_edges(w: np.ndarray, k: int) -> list[int]:
    """The distinct `_quantile_picks`, ascending."""
    return sorted(set(_quantile_picks(w, k).tolist()))


_WEIGHED = {"equal-samples": "samples", "equal-tokens": "tokens", "equal-batches": "batches"}


def _why_fewer(q: Proposal, k: int, values: np.ndarray, cnt: np.ndarray, p: BucketParams,
               dp: _Dp) -> str | None:
    """Why proposal ``q`` has fewer than ``k`` buckets (None when it has them, and for the
    current bounds, which are the user's)."""
    n = len(q.bounds) - 1
    if q.method == "current" or n >= k:
        return None
    if values.size < k:
        many = "s lie" if values.size > 1 else " lies"
        return (f"only {values.size} distinct length{many} inside [{p.bounds[0]}, "
                f"{p.bounds[-1]}), and a bucket boundary cannot split a length")
    if q.method in _WEIGHED:
        w = _weights(q.method, values, cnt, p)
        picks, times = np.unique(_quantile_picks(w, k), return_counts=True)
        heavy = sorted({int(j if w[j] >= w[j - 1] else j - 1) for j in picks[times > 1]})
        held = " and ".join(f"length {int(values[j])} holds {w[j] / w.sum() * 100:.1f}%"
                            for j in heavy)
        return (f"{held} of the {_WEIGHED[q.method]} (a bucket's share: {100 / k:.1f}%) and "
                "a bucket boundary cannot split a length, so quantile edges coincide")
    if q.method == "min-padding":
        cost = dp.cheapest_k()
        if not np.isfinite(cost):
            return (f"its candidate grid holds {len(dp.cand)} edges, fewer than the {k - 1} "
                    f"that {k} buckets need")
        return (f"no {k}-bucket split of its candidate grid pads less (the cheapest expects "
                f"{cost:,.0f} padded tokens, these bounds {q.padded_tokens:,.0f})")
    return ("no split tried with more buckets scores a lower objective (padding + balance x "
            "largest share)")


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
        if self.size <= GRID:  # few lengths: every one is a candidate, and the DP is exact
            grid |= set(range(1, self.size))
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

    def _layers(self, cap: int | None) -> tuple[list[np.ndarray], list[float]]:
        """The DP: per bucket count ``1..k``, the back pointers and the cheapest cost."""
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
            ends.append(float(best[-1]))
        return back, ends

    def cheapest_k(self) -> float:
        """Expected padded tokens of the cheapest split into exactly k buckets on the
        candidate grid (infinite when the grid has too few edges)."""
        return self._layers(None)[1][-1]

    def solve(self, cap: int | None = None) -> list[int]:
        """Edges (indices into the present lengths) of the cheapest split into at most k
        buckets on the candidate grid, each bucket's batches ``<= cap`` when given."""
        back, ends = self._layers(cap)
        g = self.cost.shape[0]
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
