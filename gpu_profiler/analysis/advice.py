"""The one recommendation on a dominant bucket: ``profile``, ``schedule`` and ``suggest``
all give it, so on one corpus they name the same bounds.

When one bucket makes more than `DOMINANT_BATCH_PCT` (40%) of the epoch's batches under
the ``fixed`` policy, same-bucket batches run back to back and the loss curve bands. The
advice names two fixes, with their numbers:

- **bounds**: of ``suggest``'s proposals for K buckets (`ADVISED`; K is the current bucket
  count, or ``suggest --buckets K``), the one with the least padding among those whose
  largest share is at most 40%, else the one with the smallest largest share, when that is
  smaller than now. It names the method and its bucket count (and why it has fewer than K).
  The ``balanced`` proposal (``suggest --balance``) is left out: the advice must not change
  with an option only ``suggest`` has.
- **order**: keep the bounds and interleave them (``schedule --order stride``, the order
  `gpu_profiler.BucketBatchSampler` and ``gpu-profiler plan`` train in), whose longest
  same-bucket run is the least possible, `~gpu_profiler.analysis.interleave.min_run`.

This module sits above the computations (buckets, policies, bounds, schedule, interleave),
none of which imports it; the commands attach its `Advice` to their results (`attach`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeVar

from gpu_profiler.analysis.buckets import DOMINANT_BATCH_PCT, BucketTable, pct
from gpu_profiler.analysis.interleave import min_run
from gpu_profiler.analysis.policies import PolicyResult, evaluate_policy
from gpu_profiler.frozen import frozen
from gpu_profiler.histogram import LengthHistogram
from gpu_profiler.params import BucketParams

if TYPE_CHECKING:  # (a schedule is advised where one was simulated; bounds proposed where
    # a bucket dominates: imported then)
    from gpu_profiler.analysis.bounds import Proposal, Suggestion
    from gpu_profiler.analysis.schedule import ScheduleResult

#: The proposals the advice chooses from.
ADVISED = ("equal-samples", "equal-tokens", "equal-batches", "min-padding")

#: The results that carry an advice.
Advised = TypeVar("Advised", BucketTable, "ScheduleResult", "Suggestion")


@frozen
class Advice:
    """What to do about bucket ``bucket`` ``[lo, hi)``, which makes ``batch_pct`` percent
    of the ``total_batches`` batches (``batches`` of them) under the ``fixed`` policy
    (whole batches, current bounds); the bucket table's estimate (samples / batch size, a
    float: what ``profile``'s table shows) gives it ``est_batch_pct`` percent of
    ``est_total_batches``, and the text states both, so it agrees with the table it is
    printed under (``profile``'s estimate, or ``schedule``'s and ``suggest``'s fixed
    batches).

    Attributes:
        buckets: the bucket count the proposals were asked for.
        proposal: the bounds to use instead (None when no proposal lowers the share).
        padding_pct: the current bounds' padding, to weigh the proposal's against.
        longest_run: the interleaved order's longest same-bucket run with the current bounds,
            the least possible (None when one bucket has every batch: nothing to interleave).
        text: all of it in one sentence, as every command prints it.
    """

    bucket: int
    lo: int
    hi: int
    batch_pct: float
    total_batches: int
    buckets: int
    proposal: Proposal | None
    padding_pct: float
    longest_run: int | None
    text: str
    batches: int = 0
    est_batch_pct: float = 0.0
    est_total_batches: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        q = self.proposal
        return {"bucket": self.bucket, "lo": self.lo, "hi": self.hi,
                "batch_pct": self.batch_pct, "total_batches": self.total_batches,
                "policy": "fixed", "batches": self.batches,
                "est_batch_pct": self.est_batch_pct,
                "est_total_batches": self.est_total_batches,
                "padding_pct": self.padding_pct, "buckets": self.buckets,
                "bounds": None if q is None else {
                    "method": q.method, "bounds": list(q.bounds), "buckets": len(q.bounds) - 1,
                    "max_batch_pct": q.max_batch_pct, "padding_pct": q.padding_pct,
                    "why_fewer": q.why_fewer},
                "order": None if self.longest_run is None else {
                    "order": "stride", "longest_run": self.longest_run},
                "text": self.text}


def advise(hist: LengthHistogram, params: BucketParams | None = None,
           buckets: int | None = None, *, drop_last: bool = False,
           suggestion: Suggestion | None = None, fixed: PolicyResult | None = None
           ) -> Advice | None:
    """The advice on ``hist`` under ``params`` (None when no bucket makes more than 40% of
    the batches, or when neither fix would help, e.g. one bucket of one length).

    ``buckets`` defaults to the current bucket count; ``suggestion``, when the caller has
    it (``suggest``), is ``suggest_bounds(hist, buckets, params, drop_last=drop_last)``,
    reused instead of computed again; so is ``fixed``, ``evaluate_policy(hist, "fixed",
    params, drop_last=drop_last)``, when the caller has it (``profile``'s table).
    """
    p = params or BucketParams()
    k = buckets or len(p.bounds) - 1
    if suggestion is not None and (suggestion.params, suggestion.buckets,
                                   suggestion.drop_last) != (p, k, drop_last):
        raise ValueError("the suggestion was made for other parameters")
    current = suggestion["current"].policy if suggestion else fixed or evaluate_policy(
        hist, "fixed", p, drop_last=drop_last)
    top = max(current.buckets, key=lambda b: b.batch_pct, default=None)
    if top is None or top.batch_pct <= DOMINANT_BATCH_PCT:
        return None
    counts = [int(b.batches) for b in current.buckets]
    run = min_run(counts) if sum(1 for c in counts if c) > 1 else None
    proposal = None
    if not current.unbatchable_samples:  # else no bounds batch every sample: suggest refuses
        from gpu_profiler.analysis.bounds import suggest_bounds

        s = suggestion or suggest_bounds(hist, k, p, drop_last=drop_last, current=current)
        proposal = _pick([q for q in s.proposals if q.method in ADVISED], top.batch_pct)
    if proposal is None and run is None:
        return None
    est = estimated(current)
    est_pct = pct(est[top.index], sum(est))
    return Advice(top.index, top.lo, top.hi, top.batch_pct, int(current.total_batches), k,
                  proposal, current.padding_pct, run,
                  _text(current, top, k, proposal, run, est_pct, sum(est)),
                  int(top.batches), est_pct, sum(est))


def estimated(fixed: PolicyResult) -> list[float]:
    """Each bucket's batches as the bucket table estimates them (`bucket_table`: every
    sample of the bucket / its batch size, at least 1), from the ``fixed`` policy, which
    has the same batch sizes: its batched, dropped (``drop_last``) and over-budget
    samples."""
    return [(b.samples + b.dropped_samples + b.unbatchable_samples) / max(b.batch_size, 1)
            for b in fixed.buckets]


def attach(result: Advised, advice: Advice | None) -> Advised:
    """``result`` (a bucket table, schedule or suggestion) carrying ``advice``: its
    ``advice`` field, and its text as the first warning."""
    if advice is None:
        return result
    return replace(result, advice=advice,
                   warnings=(advice.text, *result.warnings))


def _pick(proposals: list[Proposal], share: float) -> Proposal | None:
    """The least padding with every share <= 40%, else the smallest largest share when it
    is below ``share`` (ties: the first of `ADVISED`)."""
    balanced = [q for q in proposals if q.max_batch_pct <= DOMINANT_BATCH_PCT]
    if balanced:
        return min(balanced, key=lambda q: q.padded_tokens)
    flat = min(proposals, key=lambda q: q.max_batch_pct, default=None)
    return flat if flat is not None and flat.max_batch_pct < share else None


def _text(current: PolicyResult, top: Any, k: int, q: Proposal | None, run: int | None,
          est_pct: float, est_total: float) -> str:
    fixes = []
    if q is not None:
        n = len(q.bounds) - 1
        fewer = f" ({k} asked: {q.why_fewer})" if q.why_fewer else ""
        still = (f", still above {DOMINANT_BATCH_PCT:.0f}%: try more buckets"
                 if q.max_batch_pct > DOMINANT_BATCH_PCT else "")
        fixes.append(f"{q.method} bounds for {n} buckets{fewer}: {','.join(map(str, q.bounds))}: "
                     f"largest share {q.max_batch_pct:.1f}% at {q.padding_pct:.1f}% padding "
                     f"(now {current.padding_pct:.1f}%{still}; gpu-profiler suggest --buckets "
                     f"{k} compares them)")
    if run is not None:
        runs = (f"runs at most {run} batches of one bucket back to back, the least possible"
                if run > 1 else "never runs two batches of one bucket back to back")
        fixes.append("keep the bounds and interleave them: `gpu-profiler schedule --order "
                     f"stride` {runs} (gpu_profiler.BucketBatchSampler and `gpu-profiler plan` "
                     "train in that order)")
    return (f"bucket {top.index} [{top.lo}, {top.hi}) makes {top.batch_pct:.1f}% of the "
            f"batches under the fixed policy ({int(top.batches):,} of "
            f"{int(current.total_batches):,} whole batches; {est_pct:.1f}% of the "
            f"{est_total:,.2f} that profile's bucket table estimates as samples / batch "
            f"size), more than {DOMINANT_BATCH_PCT:.0f}%: same-bucket batches run back to "
            "back and the loss curve bands. Fix: " + "; or ".join(fixes))
