"""Batch-schedule simulation: in which order an epoch's batches come out of the buckets.

Orders (each batch is named by its bucket index):

- ``random``: a global shuffle of all batches;
- ``uniform-bucket``: every step picks a non-empty bucket uniformly at random;
- ``sequential``: bucket after bucket;
- ``stride``: the interleaving planner (`gpu_profiler.analysis.interleave`): the least
  possible longest same-bucket run (or ``max_run``), every bucket spread evenly over the
  epoch, and all of them running out together in its final 2%.

Every batch stands for its bucket's mean sample length (exact in expectation: batches are
random draws from the bucket), which is what the autocorrelation and the windowed spread
are computed on. With groups (``--group-by``: sources, languages), every batch also stands
for its bucket's samples by group: an order that interleaves lengths can still switch
domains, when buckets are made mostly of one source (`GroupMix`).
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from dataclasses import asdict, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from gpu_profiler.analysis import curve
from gpu_profiler.analysis.bounds import Suggestion
from gpu_profiler.analysis.buckets import bucket_table, pct
from gpu_profiler.analysis.interleave import (
    TAIL_PCT,
    check_max_run,
    interleave,
    longest_run,
    min_run,
    tagged_run,
    tail_size,
)
from gpu_profiler.analysis.mixture import NOUNS, bucket_counts, dominant
from gpu_profiler.analysis.policies import PolicyResult, evaluate_policy, parse_names
from gpu_profiler.errors import ProfilerError
from gpu_profiler.frozen import frozen
from gpu_profiler.histogram import LengthHistogram
from gpu_profiler.params import BucketParams

SCHEMA = "gpu-profiler/schedule/v1"
ORDERS = ("random", "uniform-bucket", "sequential", "stride")
RANDOM_ORDERS = ("random", "uniform-bucket")
#: Same-bucket runs longer than this are worth a warning.
MAX_RUN = 3
#: Run lengths k reported as P(longest run >= k) for the random orders.
RUN_KS = (2, 4, 6, 8, 12, 16)
#: The tail of the epoch whose bucket mix is reported.
TAIL = 0.10
#: Seeds per random order by default; fewer (but at least MIN_TRIALS) when that would
#: simulate more than TRIAL_BUDGET batches.
DEFAULT_TRIALS, MIN_TRIALS, TRIAL_BUDGET = 100, 10, 2_000_000


@frozen
class OrderStats:
    """How one order lays the epoch's batches out.

    Attributes:
        longest_run, longest_run_bucket: the longest run of consecutive same-bucket batches
            in the simulated order (for random orders, the one drawn with ``seed``).
        expected_longest_run, p_run_ge, trials: random orders only: the mean longest run and
            ``P(longest run >= k)`` over ``trials`` seeds.
        exhausted_at: per bucket, the fraction of the epoch done when its last batch has run
            (None for a bucket without batches).
        tail_mix: per bucket, its share of the last 10% of the batches.
        lag1_autocorr: lag-1 autocorrelation of the batches' mean length (None when every
            batch has the same mean length).
        window_spread, window_min, window_max: standard deviation, minimum and maximum of
            the mean batch length averaged over consecutive windows of ``log_window`` batches.
    """

    name: str
    batches: int
    longest_run: int
    longest_run_bucket: int | None
    exhausted_at: tuple[float | None, ...]
    tail_mix: tuple[float, ...]
    lag1_autocorr: float | None
    window_spread: float
    window_min: float | None
    window_max: float | None
    expected_longest_run: float | None = None
    p_run_ge: dict[int, float] | None = None
    trials: int | None = None
    groups: GroupMix | None = None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if self.groups is None:
            del d["groups"]
        d["exhausted_at"] = list(self.exhausted_at)
        d["tail_mix"] = list(self.tail_mix)
        if self.p_run_ge is not None:
            d["p_run_ge"] = {str(k): v for k, v in self.p_run_ge.items()}
        return d


@frozen
class GroupMix:
    """How one order mixes the groups, each batch standing for its bucket's samples by
    group (exact in expectation).

    Attributes:
        longest_run, longest_run_group: the longest run of consecutive batches from buckets
            made mostly of one group (`gpu_profiler.analysis.mixture.dominant`), and that
            group: the domain switching a loss curve shows.
        least_run: a lower bound on the longest such run of any order of these batches
            (``max ceil(m / (N - m + 1))`` over the groups, m of the N batches theirs; the
            cap on same-bucket runs can force more).
        mostly_batch_pct: the percent of the batches from buckets made mostly of one group.
        windows: per group, its percent of the epoch's samples (``share``) and the
            ``min``, ``max`` and standard deviation (``spread``) of its percent of the
            samples of each window of ``log_window`` batches.
    """

    longest_run: int
    longest_run_group: str | None
    least_run: int
    mostly_batch_pct: float
    windows: dict[str, dict[str, float]]


def group_mix(order: np.ndarray, names: list[str], samples: np.ndarray, mostly: np.ndarray,
              log_window: int) -> GroupMix:
    """`GroupMix` of ``order`` (bucket per batch): ``samples[b, g]`` is group g's samples
    per batch of bucket b, ``mostly[b]`` the group making bucket b (-1: none). Memory:
    the windows by groups, never the batches by groups."""
    k = samples.shape[0]
    windows = order.size // log_window  # as `window_means`: else one window of all
    if windows:
        which = np.repeat(np.arange(windows), log_window) * k + order[:windows * log_window]
        per_window = np.bincount(which, minlength=windows * k).reshape(windows, k)
    else:
        per_window = np.bincount(order, minlength=k)[None, :]
    epoch = np.bincount(order, minlength=k) @ samples
    return _mix(mostly[order], per_window @ samples, epoch, names)


def _mix(tagged: np.ndarray, rows: np.ndarray, epoch: np.ndarray, names: list[str]
         ) -> GroupMix:
    """`GroupMix` of a sequence (batches or steps) whose items are made mostly of the
    groups ``tagged`` (-1: none), whose windows hold ``rows`` (windows x groups) samples,
    and the whole ``epoch`` (per group)."""
    longest, group = tagged_run(tagged)
    totals = rows.sum(axis=1, keepdims=True)
    share = np.divide(rows * 100.0, totals, out=np.zeros(rows.shape), where=totals > 0)
    whole = epoch.sum()
    epoch_pct = epoch * 100.0 / whole if whole else np.zeros(len(names))
    stats = {n: {"share": float(epoch_pct[g]), "min": float(share[:, g].min()),
                 "max": float(share[:, g].max()), "spread": float(share[:, g].std())}
             for g, n in enumerate(names)}
    made = np.bincount(tagged[tagged >= 0], minlength=len(names))
    n = tagged.size
    least = min_run(made, n)
    return GroupMix(longest, names[group] if group >= 0 else None, least,
                    float(made.sum() * 100 / n) if n else 0.0, stats)


#: Steps x groups counted at once by `plan_mix` (bounds its memory whatever the plan).
PLAN_CELLS = 1 << 22
#: Steps of a window in which `plan_mix` measures each group's share.
PLAN_WINDOW = 50


def plan_mix(index: np.ndarray, offsets: np.ndarray, world_size: int, codes: np.ndarray,
             names: list[str], log_window: int = PLAN_WINDOW) -> GroupMix:
    """The exact `GroupMix` of a plan (``index``, ``offsets``: its batches of sample
    indices; `gpu_profiler.sampler.EpochPlan.indices`) whose samples' groups are
    ``codes`` (into ``names``): a step (``world_size`` batches, one a rank) stands for its
    own samples, and a step is made mostly of one group by the rule of a bucket
    (`gpu_profiler.analysis.mixture.dominant`, against the plan's samples). Counted a
    run of whole windows of steps at a time (about `PLAN_CELLS` steps x groups)."""
    k = max(len(names), 1)
    steps = (offsets.size - 1) // world_size if offsets.size else 0
    end = int(offsets[steps * world_size]) if steps else 0
    epoch = np.bincount(codes[index[:end]], minlength=len(names)).astype(np.float64)
    corpus = epoch / epoch.sum() * 100 if epoch.sum() else np.zeros(len(names))
    sizes = np.diff(offsets[:steps * world_size + 1])
    step_of = np.repeat(np.arange(steps * world_size) // world_size, sizes)
    chunk = max(log_window, PLAN_CELLS // k // log_window * log_window)
    tagged, rows = [], []
    for s0 in range(0, steps, chunk):
        s1 = min(steps, s0 + chunk)
        lo, hi = int(offsets[s0 * world_size]), int(offsets[s1 * world_size])
        counts = np.bincount((step_of[lo:hi] - s0) * k + codes[index[lo:hi]],
                             minlength=(s1 - s0) * k).reshape(s1 - s0, k)[:, :len(names)]
        tagged.append(dominant(counts.astype(np.float64), corpus))
        whole = (s1 - s0) // log_window
        rows.append(counts[:whole * log_window].reshape(whole, log_window, len(names))
                    .sum(axis=1))
    per_window = np.concatenate(rows) if steps >= log_window else epoch[None, :]
    return _mix(np.concatenate(tagged) if tagged else np.zeros(0, np.int64), per_window,
                epoch, names)


@frozen
class ScheduleResult:
    """Orders simulated on one policy's per-bucket batch counts."""

    params: BucketParams
    policy: str
    drop_last: bool
    log_window: int
    seed: int
    batches: tuple[int, ...]
    batch_pct: tuple[float, ...]
    mean_len: tuple[float, ...]
    orders: tuple[OrderStats, ...]
    warnings: tuple[str, ...] = field(default=())
    #: The least longest run any order of these batches can have, and the cap asked for.
    min_run: int = 0
    max_run: int | None = None
    #: The DatasetDict split simulated, and the `gpu_profiler.analysis.advice.Advice` on
    #: it: attached by the command (None here).
    split: str | None = None
    advice: Any = None
    #: ``--group-by``: what grouped the samples (each order's `GroupMix`), and the group
    #: making each bucket mostly (-1: none), which the stride order interleaves too
    group_by: str | None = None
    classes: tuple[int, ...] | None = None

    def order(self, name: str) -> np.ndarray:
        """The order ``name`` simulated here, batch by batch (its bucket per batch)."""
        return batch_order(self.batches, name, seed=self.seed, max_run=self.max_run,
                           classes=None if self.classes is None else np.array(self.classes))

    @property
    def headline(self) -> OrderStats:
        """The order the top-level numbers describe: stride (the one `gpu-profiler plan`
        and the sampler train in) when simulated, else the first."""
        return next((o for o in self.orders if o.name == "stride"), self.orders[0])

    def __getitem__(self, name: str) -> OrderStats:
        for o in self.orders:
            if o.name == name:
                return o
        raise KeyError(name)

    def to_dict(self) -> dict[str, Any]:
        p = self.params
        return {"schema": SCHEMA, "split": self.split, "params": p.to_dict(),
                "policy": self.policy,
                "drop_last": self.drop_last, "log_window": self.log_window, "seed": self.seed,
                "buckets": [{"index": i, "lo": lo, "hi": hi, "batches": n, "batch_pct": pct,
                             "mean_len": m}
                            for i, (lo, hi, n, pct, m) in enumerate(zip(
                                p.bounds[:-1], p.bounds[1:], self.batches, self.batch_pct,
                                self.mean_len, strict=True))],
                "min_run": self.min_run, "max_run": self.max_run,
                "total_batches": sum(self.batches),
                "max_batch_pct": max(self.batch_pct, default=0.0),
                "order": self.headline.name, "longest_run": self.headline.longest_run,
                "window_spread": self.headline.window_spread,
                "orders": [o.to_dict() for o in self.orders],
                "advice": self.advice.to_dict() if self.advice else None,
                "warnings": list(self.warnings), **self._group_keys()}

    def _group_keys(self) -> dict[str, Any]:
        mix = self.headline.groups
        if self.group_by is None or mix is None:
            return {}
        return {"group_by": self.group_by, "longest_group_run": mix.longest_run,
                "longest_group_run_group": mix.longest_run_group,
                "max_group_window_spread": max(
                    (w["spread"] for w in mix.windows.values()), default=0.0)}


# ---------------------------------------------------------------- the order generator
def batch_order(batches: Sequence[int], order: str, *, seed: int = 0,
                max_run: int | None = None, classes: np.ndarray | None = None) -> np.ndarray:
    """The bucket index of every batch of the epoch, in ``order``.

    Args:
        batches: batches per bucket (e.g. ``[b.batches for b in policy.buckets]``).
        order: one of :data:`ORDERS`.
        seed: seeds the random orders (the same seed gives the same order).
        max_run: ``stride`` only: the cap on same-bucket runs (default: the least possible).
        classes: ``stride`` only: per bucket, the group making it mostly (-1: none), whose
            runs the planner keeps short too (`gpu_profiler.analysis.interleave`).
    """
    counts = np.asarray(batches, dtype=np.int64)
    if counts.ndim != 1 or (counts < 0).any():
        raise ProfilerError(f"batches per bucket must be non-negative integers, got {batches}")
    dtype = np.int16 if counts.size <= np.iinfo(np.int16).max else np.int32
    index = np.arange(counts.size, dtype=dtype)
    if order == "sequential":
        return np.repeat(index, counts)
    if order == "random":
        return np.random.default_rng(seed).permutation(np.repeat(index, counts))
    if order == "uniform-bucket":
        return _uniform_bucket(counts, np.random.default_rng(seed), dtype)
    if order == "stride":
        return interleave(counts, max_run, classes).astype(dtype)
    raise ProfilerError(f"unknown order {order!r}; choose from {', '.join(ORDERS)}")


def _uniform_bucket(counts: np.ndarray, rng: np.random.Generator, dtype: Any) -> np.ndarray:
    """While the set of non-empty buckets is fixed, steps are i.i.d. uniform draws from it:
    draw them in chunks (about as many as the first bucket to run dry needs) and cut at the
    step that takes some bucket's last batch."""
    left = counts.copy()
    out = []
    while (active := np.flatnonzero(left)).size:
        size = min(int(left.sum()), int(active.size * left[active].min() * 1.25) + 64)
        draws = active[rng.integers(0, active.size, size)]
        end = draws.size
        for b in active.tolist():
            hits = np.flatnonzero(draws[:end] == b)
            if hits.size >= left[b]:
                end = int(hits[left[b] - 1]) + 1
        out.append(draws[:end])
        left -= np.bincount(draws[:end], minlength=left.size)
    return np.concatenate(out).astype(dtype) if out else np.zeros(0, dtype)


def write_order(path: str | Path, order: np.ndarray) -> None:
    """Write an order atomically: ``.npy`` (numpy) or text, one bucket index per line."""
    from gpu_profiler.io.output import write_atomic

    if str(path).endswith(".npy"):
        buf = io.BytesIO()
        np.save(buf, order)
        write_atomic(path, buf.getvalue())
    else:
        write_atomic(path, "".join(f"{b}\n" for b in order.tolist()))


# ---------------------------------------------------------------- statistics
def _longest_run(order: np.ndarray) -> int:
    """``longest_run(order)[0]``, faster when runs are short (as in random orders): ``alive[i]``
    says that a run of the current length starts at ``i``; grow it until none is left."""
    if order.size < 2:
        return int(order.size)
    same = order[1:] == order[:-1]
    alive, length = same, 1
    while alive.any():
        length += 1
        if length > 32:
            return longest_run(order)[0]
        alive = alive[:-1] & same[length - 1:]
    return length


def order_stats(name: str, order: np.ndarray, mean_len: np.ndarray, log_window: int
                ) -> OrderStats:
    """Statistics of one concrete order (bucket index per batch)."""
    n, k = order.size, mean_len.size
    longest, bucket = longest_run(order)
    exhausted = []
    for b in range(k):
        hits = np.flatnonzero(order == b)
        exhausted.append((int(hits[-1]) + 1) / n if hits.size else None)
    tail = order[n - max(1, math.ceil(TAIL * n)):] if n else order
    mix = np.bincount(tail, minlength=k) / tail.size if tail.size else np.zeros(k)
    x = mean_len[order]
    d = x - x.mean() if n else x
    denom = float(d @ d)
    autocorr = float(d[:-1] @ d[1:]) / denom if denom > 0 else None
    means = window_means(order, mean_len, log_window)
    return OrderStats(name=name, batches=n, longest_run=longest, longest_run_bucket=bucket,
                      exhausted_at=tuple(exhausted), tail_mix=tuple(float(m) for m in mix),
                      lag1_autocorr=autocorr,
                      window_spread=float(means.std()) if means.size else 0.0,
                      window_min=float(means.min()) if means.size else None,
                      window_max=float(means.max()) if means.size else None)


def window_means(order: np.ndarray, mean_len: np.ndarray, log_window: int) -> np.ndarray:
    """The mean batch length over each whole window of ``log_window`` consecutive batches
    (what a logged loss curve averages); one window of all batches when the epoch is
    shorter than a window."""
    return curve.window_means(mean_len[order], log_window)


def default_trials(batches: int) -> int:
    """``DEFAULT_TRIALS``, or fewer for a long epoch (about ``TRIAL_BUDGET`` batches in all)."""
    return max(MIN_TRIALS, min(DEFAULT_TRIALS, TRIAL_BUDGET // max(batches, 1)))


def simulate_order(name: str, batches: Sequence[int], mean_len: Sequence[float], *,
                   trials: int | None = None, log_window: int = 50, seed: int = 0,
                   max_run: int | None = None, classes: np.ndarray | None = None,
                   drawn: np.ndarray | None = None) -> OrderStats:
    """Simulate one order; random orders are also run with seeds ``seed .. seed+trials-1``
    for the expected longest run and ``P(longest run >= k)`` (``trials`` defaults to
    :func:`default_trials`); ``max_run`` and ``classes`` shape the ``stride`` order
    (`batch_order`); ``drawn``: the order drawn with ``seed`` already."""
    if name not in ORDERS:
        raise ProfilerError(f"unknown order {name!r}; choose from {', '.join(ORDERS)}")
    if trials is None:
        trials = default_trials(int(sum(batches)))
    if trials < 1:
        raise ProfilerError(f"--trials must be a positive integer, got {trials}")
    if log_window < 1:
        raise ProfilerError(f"--log-window must be a positive integer, got {log_window}")
    means = np.asarray(mean_len, dtype=np.float64)
    if drawn is None:
        drawn = batch_order(batches, name, seed=seed, max_run=max_run, classes=classes)
    stats = order_stats(name, drawn, means, log_window)
    if name not in RANDOM_ORDERS:
        return stats
    longest = np.array([stats.longest_run] + [
        _longest_run(batch_order(batches, name, seed=seed + t)) for t in range(1, trials)])
    return OrderStats(**{**stats.__dict__, "expected_longest_run": float(longest.mean()),
                         "p_run_ge": {k: float((longest >= k).mean()) for k in RUN_KS},
                         "trials": trials})


def simulate_schedule(hist: LengthHistogram, orders: Sequence[str] | str = ("random", "stride"),
                      params: BucketParams | None = None, *, policy: str = "fixed",
                      drop_last: bool = False, trials: int | None = None, log_window: int = 50,
                      seed: int = 0, max_run: int | None = None,
                      groups: tuple[str, dict[str, LengthHistogram]] | None = None
                      ) -> ScheduleResult:
    """Simulate ``orders`` on the per-bucket batch counts of ``policy`` (``fixed`` or
    ``sorted``: the policies with integer batches per bucket); ``max_run`` caps the
    ``stride`` order's runs (default: the least possible). With ``groups`` (``(by, each
    group's histogram)``, summing to ``hist``), each order's `GroupMix` too, and the
    stride order interleaves the groups as well (as ``plan --group-by`` and the sampler's
    ``groups`` do)."""
    p = params or BucketParams()
    names = parse_orders(orders)
    if policy not in ("fixed", "sorted"):
        raise ProfilerError(f"schedule needs integer batches per bucket: policy fixed or "
                            f"sorted, got {policy!r}")
    pol = evaluate_policy(hist, policy, p, drop_last=drop_last)
    batches = [int(b.batches) for b in pol.buckets]
    mean_len = [b.tokens / b.samples if b.samples else 0.0 for b in pol.buckets]
    least = check_max_run(batches, max_run)
    made = None if groups is None else _made_of(groups, hist, p, pol)
    classes = None if made is None else made[2]
    drawn = [batch_order(batches, n, seed=seed, max_run=max_run, classes=classes)
             for n in names]  # each order once: its stats and its groups are of it
    stats = [simulate_order(n, batches, mean_len, trials=trials, log_window=log_window,
                            seed=seed, drawn=d) for n, d in zip(names, drawn, strict=True)]
    msgs = _warnings(pol, stats)
    if "stride" in names:
        msgs += _early_note(stats[names.index("stride")], max_run, least)
    if groups is not None and made is not None:
        stats, more = _grouped(groups[0], made, stats, drawn, log_window)
        msgs += more
    return ScheduleResult(p, policy, drop_last, log_window, seed, tuple(batches),
                          tuple(b.batch_pct for b in pol.buckets), tuple(mean_len),
                          tuple(stats), tuple(msgs), least, max_run,
                          group_by=None if groups is None else groups[0],
                          classes=None if classes is None else tuple(int(c) for c in classes))


def _made_of(groups: tuple[str, dict[str, LengthHistogram]], hist: LengthHistogram,
             p: BucketParams, pol: PolicyResult) -> tuple[list[str], np.ndarray, np.ndarray]:
    """The groups' names, each group's samples per batch of each bucket (buckets x groups),
    and the group making each bucket mostly (`gpu_profiler.analysis.mixture.dominant`; -1:
    none)."""
    hists = groups[1]
    names = sorted(hists)
    tables = {n: bucket_table(hists[n], p) for n in names}
    counts = bucket_counts(tables, len(pol.buckets))
    whole = hist.valid  # the samples every bucket table of hist counts
    corpus = np.array([pct(t.total_samples, whole) for t in tables.values()])
    batches_of = np.array([b.batches for b in pol.buckets], np.float64)[:, None]
    per_batch = np.divide(counts, batches_of, out=np.zeros(counts.shape), where=batches_of > 0)
    return names, per_batch, dominant(counts, corpus)


def _grouped(by: str, made: tuple[list[str], np.ndarray, np.ndarray],
             stats: list[OrderStats], drawn: list[np.ndarray], log_window: int
             ) -> tuple[list[OrderStats], list[str]]:
    """Each order's `GroupMix` (of the order ``drawn``, as its other numbers), and a
    warning when the stride order, which interleaves the groups too, still runs more than
    `MAX_RUN` batches of buckets one group makes back to back."""
    names, per_batch, mostly = made
    out = [replace(s, groups=group_mix(d, names, per_batch, mostly, log_window))
           for s, d in zip(stats, drawn, strict=True)]
    head = next((s for s in out if s.name == "stride"), out[0])
    gm = head.groups
    assert gm is not None
    noun = NOUNS.get(by, by)
    if head.name == "stride":  # it interleaves the groups already: the bounds make the runs
        warn = gm.longest_run > MAX_RUN
        why = (f"even with the {noun}s interleaved (a lower bound for any order: "
               f"{gm.least_run}; suggest --group-by shows bounds that mix them)")
    else:
        warn = gm.longest_run > max(MAX_RUN, gm.least_run)
        why = (f"against a lower bound of {gm.least_run} for any order (the stride order "
               f"interleaves the {noun}s too)")
    msgs = [f"order {head.name}: {gm.longest_run} batches in a row from buckets made mostly "
            f"of {noun} {gm.longest_run_group!r} {why}: the loss can band by {noun} even "
            f"with lengths interleaved (profile --group-by {by} shows each bucket's mix)"
            ] if warn else []
    return out, msgs


def sources_of(s: Suggestion, hist: LengthHistogram,
               groups: tuple[str, dict[str, LengthHistogram]]) -> Suggestion:
    """``s`` with each proposal's `GroupMix` under its bounds (of the stride order, which
    `plan` and the sampler train in): how far each choice of bounds turns the order of
    buckets into an order of sources (``suggest --group-by``)."""
    mixes = [simulate_schedule(hist, ("stride",), replace(s.params, bounds=q.bounds),
                               drop_last=s.drop_last, groups=groups).orders[0].groups
             for q in s.proposals]
    return replace(s, group_by=groups[0], proposals=tuple(
        replace(q, groups=g) for q, g in zip(s.proposals, mixes, strict=True)))


def parse_orders(orders: Sequence[str] | str) -> tuple[str, ...]:
    """``"random,stride"`` / ``["random", "stride"]`` / ``"all"`` -> validated names."""
    out = parse_names(orders, ORDERS, "order")
    if not out:
        raise ProfilerError("no order given; choose from " + ", ".join(ORDERS))
    return out


def _early_note(stride: OrderStats, max_run: int | None, least: int) -> list[str]:
    """Says which buckets the counts keep from ending in the epoch's final 2% (from the
    stride order just simulated: its last batch of each bucket, ``exhausted_at * n``)."""
    n, tail = stride.batches, tail_size(stride.batches)
    early = [b for b, e in enumerate(stride.exhausted_at)
             if e is not None and round(e * n) <= n - tail]
    if not early:
        return []
    names = ", ".join(map(str, early))
    return [f"--order stride: {'buckets' if len(early) > 1 else 'bucket'} {names} "
            f"run{'' if len(early) > 1 else 's'} out before "
            f"the final {TAIL_PCT:g}% of the epoch (its last {tail} of {n:,} batches): no order "
            f"with runs <= {max_run or least} fits every bucket's last batch there"]


def _stride_line(stride: OrderStats) -> str:
    first_out = min((e for e in stride.exhausted_at if e is not None), default=1.0)
    tail = stride.batches - round(first_out * stride.batches) + 1
    share = tail / max(stride.batches, 1) * 100
    share_text = f"{share:.2g}" if share < 10 else f"{share:.0f}"
    return (f"--order stride keeps every same-bucket run <= {stride.longest_run} and exhausts "
            f"all buckets in the last {tail} batches ({share_text}% of the epoch)")


def _stride(pol: PolicyResult, stats: Sequence[OrderStats]) -> OrderStats:
    return next((s for s in stats if s.name == "stride"), None) or simulate_order(
        "stride", [int(b.batches) for b in pol.buckets], [0.0] * len(pol.buckets))


def _warnings(pol: PolicyResult, stats: list[OrderStats]) -> list[str]:
    """Orders that run more than `MAX_RUN` same-bucket batches back to back, and what the
    stride order does instead (the bounds to change are `gpu_profiler.analysis.advice`'s)."""
    long = [s for s in stats if s.longest_run > MAX_RUN]
    if not long:
        return []
    stride = _stride(pol, stats)
    least = min_run([int(b.batches) for b in pol.buckets])
    if stride.longest_run <= MAX_RUN:
        fix = _stride_line(stride)
    elif stride.longest_run > least:
        fix = (f"--order stride under this --max-run leaves runs of {stride.longest_run}; "
               f"{least} is the least possible")
    else:
        fix = (f"even --order stride leaves runs of {least}, the least any order can with "
               "these bounds: split the bucket (gpu-profiler suggest)")
    runs = ", ".join(f"order {s.name}: {s.longest_run} batches of bucket "
                     f"{s.longest_run_bucket}" for s in long)
    return [f"{runs} run back to back (> {MAX_RUN}); {fix}"]
