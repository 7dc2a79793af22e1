"""Bucket bounds search: proposals for K buckets, each scored under the ``fixed`` policy.

Methods (all keep the outer edges ``bounds[0]`` and ``bounds[-1]``, so every proposal
buckets the same samples):

- ``equal-samples``: sample quantiles;
- ``equal-tokens``: token quantiles (how lhotse / NeMo estimate duration bins);
- ``equal-batches``: quantiles of each sample's share of a batch, ``1 / batch_size(len)``;
- ``min-padding``: dynamic programming over candidate edges (a grid of sample quantiles and
  evenly spaced lengths, plus every edge of the other proposals and of the current bounds),
  minimizing the ``fixed`` policy's expected padded tokens with at most K buckets, then
  refined edge by edge. With at most `GRID` present lengths every one is a candidate and
  every bucket is priced exactly (`_interval_cost`): the split is the exact optimum. With
  more, buckets are priced by `_Binned`: batches exact, expected padded tokens approximate
  (within 1% of exact on random buckets, 0.02% typically; `tests/test_bounds.py`), as the
  exact price of the ~1,000 grid pairs and of the refinement's trials (~100 us each) cost
  more than the scan itself. Either way every proposal is scored exactly
  (`evaluate_policy`), and min-padding is the least padding of the search's split and the
  other proposals, so it never pads more than they do;
- ``balanced`` (with ``balance > 0``): minimizes ``padded_tokens / tokens + balance *
  max_batch_share``, by the same DP under a cap on any bucket's batches, for a range of caps,
  refined on that objective (and, with binned prices, also from a refinement on a smooth
  stand-in for the largest share: the better one, scored exactly).

A proposal may have fewer buckets than asked (quantile edges coincide on a heavy length; no
split into more buckets pads less); it then says why (``why_fewer``). What to do about a bucket
that makes most of the batches is `gpu_profiler.analysis.advice`'s to say, not this module's.
"""

from __future__ import annotations

from dataclasses import asdict, field, replace
from typing import Any

import numpy as np

from gpu_profiler.analysis.buckets import clipped_counts
from gpu_profiler.analysis.policies import (
    PolicyResult,
    draw_all_below,
    evaluate_policy,
    log_falling,
    present_lengths,
)
from gpu_profiler.cost import (
    batch_rows,
    batch_rows_array,
    budget_option,
    budget_words,
    padded_price,
    row_cost,
    squares,
    varlen_cost,
)
from gpu_profiler.errors import ProfilerError
from gpu_profiler.frozen import frozen
from gpu_profiler.histogram import LengthHistogram
from gpu_profiler.params import BucketParams

SCHEMA = "gpu-profiler/suggest/v1"
METHODS = ("current", "equal-samples", "equal-tokens", "equal-batches", "min-padding",
           "balanced")
#: Candidate edges of the DP grid (half sample quantiles, half evenly spaced lengths).
GRID = 32
#: The refinement's largest single move of an edge, in distinct lengths.
REFINE_SPAN = 64
#: After its first round (every bin edge), the binned refinement tries this many bin edges
#: each side of an edge.
REFINE_BINS = 2
#: The binned refinement takes a move that lowers the key by more than this fraction of it
#: (less is below `_Binned`'s accuracy).
REFINE_TOL = 1e-5
#: P(batch max <= v) below this is dropped from the expected-maximum sum in the DP.
_NEGLIGIBLE = 1e-18
#: Bins of the present lengths behind the refinement's approximate bucket prices (`_Binned`).
BINS = 128
#: With at most this many present lengths, `_Binned` takes each alone: its prices are exact.
EXACT_LENGTHS = 512
#: `_Binned` drops the terms of the expected-maximum sum with P(batch max <= v) below this.
_MODEL_NEGLIGIBLE = 1e-12
#: `_Binned` takes a bucket's longest this many lengths one by one (exact), not binned.
EXACT_TOP = 8
#: The DP grid's pairs are priced by a coarser `_Binned`: its bins cut at the candidates, a
#: bucket's longest ``DP_TOP`` lengths one by one.
DP_TOP = 1
#: `_Binned` sums a bucket's last batch as its full ones when it has fewer full ones than
#: this (else it interpolates it: an error of its share of the rows at most).
LAST_EXACT_BELOW = 256
#: `_Binned` takes P(batch max <= v) below exp(this) as exp(this) (a dropped term's size).
_LOG_TINY = -700.0


@frozen
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
    #: with groups (``suggest --group-by``): the stride order's
    #: `gpu_profiler.analysis.schedule.GroupMix` under these bounds
    groups: Any = None

    @property
    def cost(self) -> float:
        """What min-padding minimizes: the padded tokens, or with a cost model the
        batches' cost in its unit."""
        return self.padded_tokens if self.policy.cost is None else float(self.policy.cost)

    def to_dict(self) -> dict[str, Any]:
        return {"method": self.method, "bounds": list(self.bounds),
                "padded_tokens": self.padded_tokens, "padding_pct": self.padding_pct,
                "total_batches": self.total_batches, "steps_per_epoch": self.steps_per_epoch,
                "max_batch_pct": self.max_batch_pct, "objective": self.objective,
                "why_fewer": self.why_fewer, "buckets": self.policy.to_dict()["buckets"],
                **({} if self.policy.cost is None else {"cost": self.cost}),
                **({} if self.groups is None else {"groups": asdict(self.groups)})}


@frozen
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
    #: ``--group-by``: what grouped the samples (each proposal's ``groups``)
    group_by: str | None = None

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
                "warnings": list(self.warnings),
                **({} if self.group_by is None else {"group_by": self.group_by})}


def suggest_bounds(hist: LengthHistogram, buckets: int, params: BucketParams | None = None,
                   *, balance: float = 0.0, drop_last: bool = False,
                   current: PolicyResult | None = None) -> Suggestion:
    """Propose bounds for ``buckets`` buckets (see the module docstring); every proposal
    with fewer buckets says why, in its ``why_fewer`` and in the warnings. ``current``, when
    the caller has it, is ``evaluate_policy(hist, "fixed", params, drop_last=drop_last)``,
    taken instead of computed again."""
    p = params or BucketParams()
    if isinstance(buckets, bool) or not isinstance(buckets, int) or buckets < 1:
        raise ProfilerError(f"--buckets must be a positive integer, got {buckets!r}")
    if not balance >= 0:
        raise ProfilerError(f"--balance must be >= 0, got {balance!r}")
    lo, hi = p.bounds[0], p.bounds[-1]
    counts = clipped_counts(hist, p.max_seq_len)
    hist = LengthHistogram(counts)  # all a policy reads, clipped once, not in each one
    values, cnt = present_lengths(counts, lo, hi)
    if not values.size:
        raise ProfilerError(f"no samples inside the bounds [{lo}, {hi}) to split")
    if not batch_rows(int(values[-1]), p):
        raise ProfilerError(
            f"the longest sample ({int(values[-1])} tokens) exceeds the {budget_words(p)}, "
            f"so no bounds can batch it; raise {budget_option(p)} or lower --max-seq-len")
    # what the search weighs: padded tokens over real ones, or with a cost model, the
    # batches' cost over the least it could be (every sample in a batch of its own length)
    tokens: float = max(int(cnt @ values), 1) if p.cost.is_default else \
        max(float(cnt @ np.asarray(row_cost(values, p.cost), np.float64)), 1e-300)

    def score(method: str, bounds: tuple[int, ...], pol: PolicyResult | None = None
              ) -> Proposal:  # under the fixed policy
        pol = pol or evaluate_policy(hist, "fixed", replace(p, bounds=bounds),
                                     drop_last=drop_last)
        max_pct = max((b.batch_pct for b in pol.buckets), default=0.0)
        cost = pol.padded_tokens if pol.cost is None else pol.cost
        return Proposal(method, bounds, float(pol.padded_tokens), pol.padding_pct,
                        int(pol.total_batches), int(pol.steps_per_epoch), max_pct,
                        cost / tokens + balance * max_pct / 100, pol)

    def propose(method: str, idx: Any) -> Proposal:  # edges: indices into ``values``
        return score(method, _with_edges(lo, hi, values, idx))

    out = [score("current", p.bounds, current)]
    for method in ("equal-samples", "equal-tokens", "equal-batches"):
        out.append(propose(method, _quantile_picks(_weights(method, values, cnt, p), buckets)))
    rivals = [q for q in out if len(q.bounds) - 1 <= buckets]
    dp = _Dp(values, cnt, p, drop_last, buckets, [q.bounds for q in out])

    def padding(costs: Any, batches: Any) -> Any:  # lists, or arrays (parts x splits)
        return sum(costs)

    found = [propose("min-padding", _refine(dp.solve(), dp, padding))]
    if not dp.exact and len(found[0].bounds) - 1 == buckets:
        dp.all_buckets = found[0]
    elif not dp.exact and dp.solve(buckets=buckets):
        # binned costs chose fewer buckets: the cheapest split into all of them, scored too
        dp.all_buckets = propose("min-padding", _refine(dp.solve(buckets=buckets), dp, padding))
        found.append(dp.all_buckets)
    # Every proposal is scored exactly: the least padding of the search's and the others'
    # (on exact costs the grid holds every rival's edges, so a rival is taken on a tie only).
    best = min([*found, *(replace(q, method="min-padding") for q in rivals)],
               key=lambda q: q.cost)
    out.append(best)
    if balance > 0:
        def objective(costs: Any, batches: Any) -> Any:  # lists, or arrays (parts x splits)
            return (sum(costs) / tokens + balance * np.max(batches, axis=0)
                    / np.maximum(np.sum(batches, axis=0), 1))

        splits = dp.solve_capped(best.total_batches)
        parts = _parts_of(dp, splits)
        edges = splits[min(range(len(splits)), key=lambda i: objective(*parts[i]))]
        tried = [_refine(edges, dp, objective)]
        if not dp.exact:  # also from a smooth stand-in for the largest share (a p-norm),
            # which one edge's move can lower while several buckets hold the largest
            def smooth(costs: Any, batches: Any) -> Any:
                share = np.asarray(batches, np.float64) / np.maximum(
                    np.sum(batches, axis=0), 1)
                return (sum(costs) / tokens + balance * np.sum(share ** 64, axis=0)
                        ** (1 / 64))

            tried.append(_refine(_refine(edges, dp, smooth), dp, objective))
        bal = min((propose("balanced", e) for e in tried), key=lambda q: q.objective)
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
    return cnt / np.maximum(batch_rows_array(values, p), 1)


def _parts(dp: _Dp, edges: list[int]) -> tuple[Any, Any]:
    """The costs and batches of the buckets that ``edges`` cut the present lengths into."""
    return dp.intervals([0, *edges], [*edges, dp.size])


def _parts_of(dp: _Dp, splits: list[list[int]]) -> list[tuple[Any, Any]]:
    """`_parts` of each split (with binned costs, in one call)."""
    if dp.exact:
        return [_parts(dp, e) for e in splits]
    ends = [np.array([0, *e, dp.size], dtype=np.int64) for e in splits]
    c, b = dp.cached(np.concatenate([x[:-1] for x in ends]),
                     np.concatenate([x[1:] for x in ends]))
    at = np.cumsum([0, *(x.size - 1 for x in ends)])
    return [(c[i:j], b[i:j]) for i, j in zip(at[:-1], at[1:], strict=True)]


def _with_edges(lo: int, hi: int, values: np.ndarray, idx: Any) -> tuple[int, ...]:
    """Bounds ``lo, values[j] for j in idx, hi`` (indices into the present lengths; each
    once, ascending)."""
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
        cost = dp.cheapest_k() if dp.exact else (
            np.inf if dp.all_buckets is None else dp.all_buckets.cost)
        if not np.isfinite(cost):
            return (f"its candidate grid holds {len(dp.cand)} edges, fewer than the {k - 1} "
                    f"that {k} buckets need")
        if p.cost.varlen and dp.exact:  # the DP prices the padded part; add the samples'
            cost = varlen_cost(cost / p.cost.rows_per_sample, squares(values, cnt), p.cost)
        if not p.cost.is_default:
            return (f"no {k}-bucket split of its candidate grid costs less (the cheapest "
                    f"expects {cost:,.6g} {p.cost.unit}, these bounds {q.cost:,.6g})")
        return (f"no {k}-bucket split of its candidate grid pads less (the cheapest expects "
                f"{cost:,.0f} padded tokens, these bounds {q.padded_tokens:,.0f})")
    return ("no split tried with more buckets scores a lower objective (padding + balance x "
            "largest share)")


#: The refinement's moves of one edge: -1, +1, -2, +2, -4, ... +-`REFINE_SPAN` places.
_STEPS = np.array([d * 2 ** i for i in range(int(np.log2(REFINE_SPAN)) + 1) for d in (-1, 1)])


def _refine(idx: list[int], dp: _Dp, key: Any) -> list[int]:
    """Hill-climb the edges ``idx`` (indices into the present lengths) while ``key(costs,
    batches)`` of the split decreases: `_refine_exact` where the DP is exact, else
    `_refine_binned`."""
    return _refine_exact(idx, dp, key) if dp.exact else _refine_binned(idx, dp, key)


def _refine_exact(idx: list[int], dp: _Dp, key: Any) -> list[int]:
    """Move single edges by `_STEPS` places, first improvement first."""
    current = key(*_parts(dp, idx))
    improved = True
    while improved:
        improved = False
        for e in range(len(idx)):
            left = idx[e - 1] + 1 if e else 1
            right = idx[e + 1] - 1 if e + 1 < len(idx) else dp.size - 1
            for step in _STEPS.tolist():
                j = idx[e] + step
                if left <= j <= right:
                    trial = idx[:e] + [j] + idx[e + 1:]
                    v = key(*_parts(dp, trial))
                    if v < current:
                        idx, current, improved = trial, v, True
    return idx


def _refine_binned(idx: list[int], dp: _Dp, key: Any) -> list[int]:
    """Coordinate descent on `_Binned` prices, all edges in one call a round: an edge's
    trials are its moves by `_STEPS` and the bin edges between its neighbours (all of them
    in the first round, then the `REFINE_BINS` nearest each side). Each edge's best trial,
    when it lowers ``key`` by more than `REFINE_TOL`, is taken (the largest gain first)
    unless a neighbouring edge has moved or it no longer lowers ``key`` (a key that is no
    sum, as the balanced objective, does not add the gains up); until no edge moves."""
    ends = np.array([0, *idx, dp.size], dtype=np.int64)
    bins = dp.model.edges if dp.model is not None else np.zeros(0, np.int64)
    active, parts = list(range(len(idx))), ends.size - 1
    while active:
        trials = []
        for e in active:
            left, at, right = ends[e:e + 3]
            i = int(np.searchsorted(bins, at))
            near = bins if parts else bins[max(i - REFINE_BINS, 0):i + REFINE_BINS + 1]
            t = _ascending(np.concatenate([near, at + _STEPS]))
            trials.append(t[(t > left) & (t < right) & (t != at)])
        edge = np.repeat(active, [t.size for t in trials])
        pos = np.concatenate(trials)
        m = pos.size
        if not m:
            break
        c, b = dp.cached(np.concatenate([ends[:-1][:parts], ends[edge], pos]),
                         np.concatenate([ends[1:][:parts], pos, ends[edge + 2]]))
        if parts:  # the first round prices the split itself too
            costs, batches, c, b = c[:parts], b[:parts], c[parts:], b[parts:]
            current, parts = key(costs, batches), 0
        tc, tb = np.repeat(costs[:, None], m, axis=1), np.repeat(batches[:, None], m, axis=1)
        cols = np.arange(m)
        tc[edge, cols], tc[edge + 1, cols] = c[:m], c[m:]
        tb[edge, cols], tb[edge + 1, cols] = b[:m], b[m:]
        values = np.asarray(key(tc, tb), dtype=np.float64)
        best = {}  # edge -> its best trial, when that lowers the key
        for e in active:
            mine = np.flatnonzero(edge == e)
            if mine.size:
                i = int(mine[np.argmin(values[mine])])
                if values[i] < current - abs(current) * REFINE_TOL:
                    best[e] = i
        moved: list[int] = []
        for e in sorted(best, key=lambda e: values[best[e]]):  # the largest gain first
            if all(abs(e - f) > 1 for f in moved):  # its two buckets: no other move's
                new_costs, new_batches = costs.copy(), batches.copy()
                new_costs[e:e + 2] = tc[e:e + 2, best[e]]
                new_batches[e:e + 2] = tb[e:e + 2, best[e]]
                value = key(new_costs, new_batches)
                if value < current:  # always for the first; the others, if they still help
                    moved.append(e)
                    ends[e + 1] = pos[best[e]]
                    costs, batches, current = new_costs, new_batches, value
        active = sorted({f for e in moved for f in (e - 1, e, e + 1) if 0 <= f < len(idx)})
    return [int(j) for j in ends[1:-1]]


def _ascending(x: np.ndarray) -> np.ndarray:
    """The distinct values of ``x``, ascending (``np.unique`` imports ``numpy.ma`` on its
    first call: 10-40 ms)."""
    x = np.sort(x)
    return x[np.concatenate(([True], x[1:] != x[:-1]))] if x.size else x


class _Dp:
    """Interval costs over the present lengths, and the DP on candidate edges: exact with
    at most `GRID` present lengths (`exact`: each a candidate, each cost `_interval_cost`'s),
    else on `_Binned` costs (the module docstring), a coarse one (bins between the
    candidates) for the grid the DP runs on and `model` for the refinement's trials."""

    def __init__(self, values: np.ndarray, cnt: np.ndarray, p: BucketParams, drop_last: bool,
                 k: int, seeds: list[tuple[int, ...]]):
        self.values, self.p, self.drop_last, self.k = values, p, drop_last, k
        self.size = values.size
        self.cum = np.cumsum(cnt)
        #: what a row padded to each length costs (`gpu_profiler.cost.row_cost`), and the
        #: steps between them: the expected batch maximum is priced on these
        self.priced = np.asarray(padded_price(values, p.cost)).astype(np.float64)
        self.gaps = np.diff(self.priced)
        self._cache: dict[tuple[int, int], tuple[float, int]] = {}  # `interval`'s
        self._seen: tuple[np.ndarray, tuple[np.ndarray, np.ndarray]] = (  # `cached`'s
            np.zeros(0, np.int64), (np.zeros(0), np.zeros(0, np.int64)))
        #: With binned costs, the search's split into all k buckets, scored exactly (None
        #: when the grid has too few edges; see `suggest_bounds`).
        self.all_buckets: Proposal | None = None
        grid = set(_cuts(values, self.cum, GRID // 2).tolist())
        self.exact = self.size <= GRID
        for bounds in seeds:
            grid |= set(np.searchsorted(values, bounds[1:-1]).tolist())
        if self.exact:  # few lengths: every one is a candidate, and the DP is exact
            grid |= set(range(1, self.size))
        self.cand = sorted(j for j in grid if 0 < j < self.size)
        #: The refinement's bucket prices (None where `exact`).
        self.model = None if self.exact else _Binned(values, cnt, p, drop_last, [])
        pos = np.array([0, *self.cand, self.size], dtype=np.int64)
        g = len(pos)
        self.cost = np.full((g, g), np.inf)
        self.batches = np.zeros((g, g), dtype=np.int64)
        a, b = np.triu_indices(g, 1)
        if self.exact:
            cost, batches = self.intervals(pos[a], pos[b])
        else:  # ~G^2/2 pairs: a coarser model, its bins cut at the candidates
            cost, batches = _Binned(values, cnt, p, drop_last, self.cand, 0, DP_TOP)(
                pos[a], pos[b])
        self.cost[a, b], self.batches[a, b] = cost, batches

    def interval(self, a: int, b: int) -> tuple[float, int]:
        """Exact (expected padded tokens, batches) of the bucket holding ``values[a:b]``
        (cached)."""
        key = (a, b)
        if key not in self._cache:
            self._cache[key] = _interval_cost(self.values, self.cum, self.gaps, a, b, self.p,
                                              self.drop_last, self.priced)
        return self._cache[key]

    def intervals(self, a: Any, b: Any) -> tuple[Any, Any]:
        """(costs, batches) of the buckets ``values[a[i]:b[i]]``: lists of `interval` where
        `exact`, else arrays from one `model` call."""
        if self.model is not None:
            return self.model(np.asarray(a, np.int64), np.asarray(b, np.int64))
        parts = [self.interval(int(x), int(y)) for x, y in zip(a, b, strict=True)]
        return [c for c, _ in parts], [n for _, n in parts]

    def cached(self, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """`intervals` as arrays, each pair priced once (a `_Binned` call for the new ones;
        kept in arrays, not a dict: no Python object per pair for the collector)."""
        key = a * (self.size + 1) + b
        seen, (cost, batches) = self._seen
        at = np.minimum(np.searchsorted(seen, key), max(seen.size - 1, 0))
        new = _ascending(key[seen[at] != key]) if seen.size else _ascending(key)
        if new.size:
            c, n = self.intervals(new // (self.size + 1), new % (self.size + 1))
            seen = np.concatenate([seen, new])
            order = np.argsort(seen, kind="stable")
            seen, cost, batches = (seen[order], np.concatenate([cost, c])[order],
                                   np.concatenate([batches, n])[order])
            self._seen = seen, (cost, batches)
            at = np.searchsorted(seen, key)
        return cost[at], batches[at]

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

    def solve(self, cap: int | None = None, buckets: int | None = None) -> list[int]:
        """Edges (indices into the present lengths) of the cheapest split into at most k
        buckets (exactly ``buckets`` when given) on the candidate grid, each bucket's
        batches ``<= cap`` when given."""
        back, ends = self._layers(cap)
        g = self.cost.shape[0]
        layers = int(np.argmin(ends)) + 1 if buckets is None else buckets
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
        caps = _ascending(np.geomspace(low, max(low, total_batches), 24).round().astype(int))
        splits = [self.solve(int(c)) for c in caps]
        return [e for e in splits if e] or [[]]


def _cuts(values: np.ndarray, cum: np.ndarray, half: int) -> np.ndarray:
    """Indices into the present lengths ``values`` (``cum``: their cumulative counts) at
    the ``i / half`` sample quantiles, then at ``half - 1`` evenly spaced lengths: the DP's
    candidate edges, and `_Binned`'s bins."""
    return np.concatenate([
        np.searchsorted(cum, cum[-1] * np.arange(1, half) / half, side="right"),
        np.searchsorted(values, np.linspace(values[0], values[-1], half + 1)[1:-1])])


def _interval_cost(values: np.ndarray, cum: np.ndarray, gaps: np.ndarray, a: int, b: int,
                   p: BucketParams, drop_last: bool, priced: np.ndarray | None = None
                   ) -> tuple[float, int]:
    """The ``fixed`` policy's expected padded tokens (with a cost model: cost; ``priced``
    the row cost of each length, ``gaps`` its steps; None: the lengths) and batches of the
    bucket holding ``values[a:b]``; infinite cost when its longest sample exceeds the
    budget."""
    base = int(cum[a - 1]) if a else 0
    n = int(cum[b - 1]) - base
    size = batch_rows(int(values[b - 1]), p)
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
        padded += rows * (float((values if priced is None else priced)[b - 1]) - tail)
    return padded, full + (1 if rest and not drop_last else 0)


class _Binned:
    """The ``fixed`` policy's batches (exact) and expected padded tokens (approximate) of the
    buckets holding ``values[a:b]``, for many ``(a, b)`` in one vectorized pass.

    A bucket of ``n`` samples, longest ``v``, ``k`` rows a batch pads ``(n // k) k E_k +
    (n % k) E_(n % k)`` tokens, ``E_j`` the expected longest of ``j`` draws without
    replacement: ``v - sum_j gap_j P_j`` (`_interval_cost`), ``P_j = C(m_j, k) / C(n, k)``
    the chance that all come from the ``m_j`` samples ``<= values[j]``. Here:

    - ``E_k`` sums over bins of the present lengths, not lengths: about ``bins`` of them
      (half by sample quantile, half by even length; a length holding a bin's worth of
      samples alone; ``edges`` among their edges, the only ones when ``bins`` is 0), but a
      bucket's longest ``top`` lengths are taken one by one. Of a bin, the gap after its
      last length is exact (``P`` there is exact); the gaps before it take ``P`` geometric
      between ``P`` before the bin's first length and ``P`` before its last, that one with
      ``log P`` linear in the count (exact when ``P`` grows by one factor a length and the
      gaps are equal). ``log P`` is a
      difference of log falling factorials (`_Falling`): finite for any count and ``k``.
      Terms with ``P_j < _MODEL_NEGLIGIBLE`` are dropped. A bin of one length is exact, so
      is a bucket whose bins all are; so are ``E_1`` (the mean) and ``E_n`` (the longest).
    - ``E_(n % k)`` (the last batch) is interpolated between ``E_1`` and ``E_k`` as for a
      uniform distribution (``E_j = lo + (hi - lo) j / (j + 1)``); with ``exact_last``, it
      is summed as ``E_k`` is. The last batch is one of ``n // k + 1``.
    """

    def __init__(self, values: np.ndarray, cnt: np.ndarray, p: BucketParams, drop_last: bool,
                 edges: list[int], bins: int = BINS, top: int = EXACT_TOP,
                 exact_last: bool = False):
        d = values.size
        self.exact_last = exact_last
        self.cum = np.cumsum(cnt)
        # lengths priced (`gpu_profiler.cost.row_cost`; the default: themselves): the
        # expected maximum, and a one-row batch's mean, are of row costs
        priced = np.asarray(padded_price(values, p.cost)).astype(np.float64)
        self.tokens = np.cumsum(cnt * values) if p.cost.is_default else np.cumsum(cnt * priced)
        self.values = priced
        self.size = batch_rows_array(values, p)
        self.drop_last, self.top = drop_last, top
        if d <= EXACT_LENGTHS:  # a bin a length, the last batch summed too: exact
            t, self.exact_last = np.arange(d + 1), True
        else:
            half = max(bins // 2, 1)
            heavy = np.flatnonzero(cnt * half >= self.cum[-1])
            cuts = np.concatenate([_cuts(values, self.cum, half), heavy, heavy + 1,
                                   np.asarray(edges, np.int64), [0, d]]).astype(np.int64)
            t = _ascending(cuts[(cuts >= 0) & (cuts <= d)])
        #: The bins' edges (indices into the present lengths, 0 and the count included).
        self.edges = t
        self.bins = t.size - 1
        self.bin_of = np.repeat(np.arange(self.bins), np.diff(t))
        self.cnt = cnt.astype(np.float64)
        self.gap = np.append(np.diff(self.values), 0.0)  # gap[j]: from values[j] to the next
        first, last = t[:-1], t[1:] - 1  # a bin's first and last length
        # per bin (index i), then per length (index bins + j, a bin of one):
        self.inner = np.concatenate([self.values[last] - self.values[first], np.zeros(d)])
        self.steps = np.concatenate([np.maximum(last - first, 1).astype(np.float64),
                                     np.ones(d)])  # at least 1: inner is 0 then
        self.after = np.concatenate([self.gap[last], self.gap])  # the gap after the last
        self.last = np.concatenate([self.cnt[last], self.cnt])  # the last length's count
        self.below = self.cum[np.concatenate([last, np.arange(d)])].astype(np.float64)

    def __call__(self, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(expected padded tokens, batches) of each bucket ``values[a[i]:b[i]]``."""
        before = np.where(a > 0, self.cum[a - 1], 0)
        n = self.cum[b - 1] - before
        top, size = self.values[b - 1], self.size[b - 1]
        full, rest = np.divmod(n, np.maximum(size, 1))
        if self.drop_last:
            rest = np.zeros_like(rest)
        tokens = self.tokens[b - 1] - np.where(a > 0, self.tokens[a - 1], 0)
        mean = tokens / n
        # E[max] of a full batch: by bins; the mean for one row; the longest when no batch
        # is full (then the last one holds every sample)
        e_full = np.where(size == 1, mean, top)
        many = np.flatnonzero((full > 0) & (size > 1))
        if many.size:
            e_full[many] -= self._tails(a[many], b[many] - 2, before[many], n[many],
                                        size[many])
        # the last batch: interpolated between j = 1 (the mean) and k as for a uniform
        # distribution, whose E[max of j] is lo + (hi - lo) j / (j + 1); summed as the full
        # ones are where there are fewer than LAST_EXACT_BELOW of these (or exact_last)
        j, k = rest.astype(np.float64), size.astype(np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            w = (j - 1) / (j + 1) * (k + 1) / (k - 1)
        e_last = np.where(full > 0, mean + (e_full - mean) * np.where(k > 1, w, 0.0), top)
        many = np.flatnonzero((full > 0) & (rest > 1) & (
            self.exact_last | (full < LAST_EXACT_BELOW)))
        if many.size:
            e_last[many] = top[many] - self._tails(a[many], b[many] - 2, before[many],
                                                   n[many], rest[many])
        padded = np.where(size == 1, tokens, full * size * e_full + rest * e_last)
        batches = full + (rest > 0)
        unbatchable = size == 0
        padded[unbatchable], batches[unbatchable] = np.inf, 0
        return padded, batches

    def _tails(self, a: np.ndarray, last: np.ndarray, base: np.ndarray, n: np.ndarray,
               k: np.ndarray) -> np.ndarray:
        """``sum_{j=a}^{last} gap_j C(cum_j - base, k) / C(n, k)`` per job (``k >= 2``)."""
        cum, t = self.cum, self.edges
        out = np.zeros(a.size)
        thr = np.maximum(k, np.floor(n * _MODEL_NEGLIGIBLE ** (1.0 / k)))
        j0 = np.maximum(a, np.searchsorted(cum, base + thr.astype(np.int64), side="left"))
        live = np.flatnonzero(j0 <= last)
        if not live.size:
            return out
        a, last, base, k, j0 = a[live], last[live], base[live], k[live], j0[live]
        lf = _Falling(k, thr[live])
        den = lf(n[live].astype(np.float64))
        # a job's gaps: whole bins from j0's to split - 1, then lengths split..last one by one;
        # element i of a job is bin r0 + i, then length split + i - nb (at bins + length)
        split = np.maximum(j0, last - (self.top - 1))
        binned = split > j0
        r0 = self.bin_of[j0]
        nb = np.where(binned, self.bin_of[split - 1] - r0 + 1, 0)
        count = nb + last - split + 1
        start = np.cumsum(count) - count
        ix = np.arange(start[-1] + count[-1]) + np.repeat(
            np.stack([r0 - start, self.bins + split - start - nb], 1).ravel(),
            np.stack([nb, count - nb], 1).ravel())
        job = np.repeat(np.arange(a.size), count)
        inner, steps, gap, cnt = self.inner[ix], self.steps[ix], self.after[ix], self.last[ix]
        m = self.below[ix] - base[job]
        # the first bin starts at a (or at the bin's first length); the last ends at split - 1
        first = np.where(binned, np.maximum(t[r0], a), split)
        w = np.flatnonzero(binned)
        e, q = start[w] + nb[w] - 1, split[w] - 1
        low = np.where(nb[w] > 1, t[self.bin_of[q]], first[w])
        inner[e], steps[e] = self.values[q] - self.values[low], np.maximum(q - low, 1)
        gap[e], cnt[e], m[e] = self.gap[q], self.cnt[q], cum[q] - base[w]
        w = np.flatnonzero(nb > 1)
        q = t[r0[w] + 1] - 1
        inner[start[w]] = self.values[q] - self.values[first[w]]
        steps[start[w]] = np.maximum(q - first[w], 1)
        below = np.where(first > a, cum[first - 1] - base, 0).astype(np.float64)
        # log P(batch max <= .) after each bin's last length (hi), before its first (lo)
        hi = lf(m, job) - den[job]
        lo = np.empty_like(hi)
        lo[1:] = hi[:-1]
        lo[start] = np.maximum(lf(below) - den, _LOG_TINY)  # -inf below k samples
        m_lo = np.empty_like(m)
        m_lo[1:] = m[:-1]
        m_lo[start] = below
        # the gaps before the bin's last length: log P linear in the count from lo, geometric
        # over the gaps (steps: how many, at least 1; inner: their width); the one after: exact
        inner_hi = hi - (hi - lo) / (m - m_lo) * cnt
        step = np.minimum(lo - inner_hi, -1e-12)
        terms = gap * np.exp(hi) + inner * np.exp(inner_hi) * np.expm1(step) / (
            steps * np.expm1(step / steps))
        out[live] = np.add.reduceat(terms, start)
        return out


class _Falling:
    """``log(m (m-1) ... (m-k+1))`` for the jobs' ``k`` (one per job; ``-inf`` where ``m <
    k``): the series in ``1 / c``, ``c = m - (k-1)/2`` (``k log c - M2/(2c^2) - M4/(4c^4) -
    M6/(6c^6)``, the ``M`` the even moments of ``(k-1)/2 - i``; its next term is below 1e-10
    when ``c >= 5 k^(9/8)``), `policies.log_falling` below that. ``least``: the least ``m``
    each job is asked at by element (so the check for small ones is skipped when none is)."""

    def __init__(self, k: np.ndarray, least: np.ndarray):
        kf = k.astype(np.float64)
        k2 = kf * kf
        self.k, self.half = kf, (kf - 1.0) * 0.5
        base = kf * (k2 - 1.0)
        self.m2, self.m4 = base / 24.0, base * (3.0 * k2 - 7.0) / 960.0
        self.m6 = base * (3.0 * k2 * k2 - 18.0 * k2 + 31.0) / 8064.0
        self.small = self.half + 5.0 * kf ** 1.125
        self.check = bool((least < self.small).any())

    def __call__(self, m: np.ndarray, job: np.ndarray | None = None) -> np.ndarray:
        """At ``m[i]`` for job ``job[i]`` (for job ``i`` when ``job`` is None)."""
        def pick(x: np.ndarray) -> np.ndarray:
            return x if job is None else x[job]

        c = m - pick(self.half)
        with np.errstate(invalid="ignore", divide="ignore"):
            ic2 = 1.0 / (c * c)
            out = pick(self.k) * np.log(c) - ic2 * (pick(self.m2) + ic2 * (
                pick(self.m4) + ic2 * pick(self.m6)))
        if self.check or job is None:
            small = m < pick(self.small)
            if small.any():
                out[small] = log_falling(m[small], pick(self.k)[small])
        return out
