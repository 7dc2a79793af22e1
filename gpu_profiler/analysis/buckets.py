"""The seed-compatible bucket table (docs/design.md), computed exactly from the histogram."""

from __future__ import annotations

from dataclasses import asdict, fields
from typing import Any

import numpy as np

from gpu_profiler.cost import (
    batch_rows,
    budget_option,
    budget_words,
    row_cost,
    squares,
    varlen_cost,
)
from gpu_profiler.frozen import frozen
from gpu_profiler.histogram import MAX_AUTO_CAP, LengthHistogram
from gpu_profiler.params import BucketParams

#: A bucket producing more than this share of batches makes a banded loss curve likely
#: (what to do then: `gpu_profiler.analysis.advice`).
DOMINANT_BATCH_PCT = 40.0


@frozen
class BucketRow:
    """One bucket ``[lo, hi)`` of clipped lengths."""

    index: int
    lo: int
    hi: int
    samples: int
    sample_pct: float
    tokens: int
    avg_len: float
    max_len: int
    est_batch_size: int
    est_batches: float
    batch_pct: float
    over_budget: bool
    #: With a cost model (`gpu_profiler.cost`; None without, and left out of the JSON): the
    #: estimate's compute, ``samples x row_cost(max_len)`` in the model's unit, and its
    #: share of the epoch's.
    est_cost: float | None = None
    cost_pct: float | None = None


@frozen
class BucketTable:
    """Every bucket plus corpus-level counts; see docs/design.md for the exact formulas.

    ``total_tokens`` sums the unclipped lengths, ``clipped_tokens`` the clipped ones (what
    the buckets hold). ``min_len``, ``mean_len``, ``max_len`` and ``percentiles``
    (`gpu_profiler.histogram.PERCENTILES`, nearest-rank) describe the unclipped lengths,
    exactly: a percentile is None only when its rank falls among lengths the histogram did
    not bin (past `gpu_profiler.histogram.MAX_AUTO_CAP`), and ``percentile_bounds`` then
    gives the ``[lo, hi]`` it lies in.
    ``advice`` is the `gpu_profiler.analysis.advice.Advice` on a dominant bucket, and
    ``padding_pct`` the ``fixed`` policy's expected padding (what the advice weighs), both of
    which `gpu_profiler.profile` attaches (None here).
    """

    params: BucketParams
    total_samples: int
    null_samples: int
    invalid_samples: int
    unbucketed_samples: int
    truncated_samples: int
    truncated_tokens: int
    total_tokens: int
    clipped_tokens: int
    min_len: int | None
    mean_len: float | None
    max_len: int | None
    percentiles: dict[str, int | None]
    percentile_bounds: dict[str, list[int]]
    buckets: tuple[BucketRow, ...]
    total_est_batches: float
    steps_per_epoch: float
    warnings: tuple[str, ...]
    advice: Any = None
    padding_pct: float | None = None
    #: The estimate's compute of every bucket, in the cost model's unit (None without one).
    total_est_cost: float | None = None

    @property
    def max_batch_pct(self) -> float:
        """The largest bucket's share of the batches (0 with none)."""
        return max((b.batch_pct for b in self.buckets), default=0.0)

    @property
    def truncated_pct(self) -> float:
        """Share of the samples longer than max_seq_len."""
        return pct(self.truncated_samples, self.total_samples)

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in fields(self)
             if f.name not in ("params", "buckets", "advice")}
        d["max_batch_pct"] = self.max_batch_pct
        d["truncated_pct"] = self.truncated_pct
        d["percentiles"] = dict(self.percentiles)
        d["percentile_bounds"] = {k: list(v) for k, v in self.percentile_bounds.items()}
        d["params"] = self.params.to_dict()
        d["buckets"] = [without_cost(asdict(b), "est_cost") for b in self.buckets]
        d["warnings"] = list(self.warnings)
        d["advice"] = self.advice.to_dict() if self.advice else None
        if self.params.cost.is_default:
            del d["total_est_cost"]
        return d


def without_cost(d: dict[str, Any], key: str) -> dict[str, Any]:
    """``d`` less ``key`` and ``cost_pct`` when no cost model priced it (``key`` None): the
    outputs stay as they were without one."""
    if d.get(key) is None:
        for k in (key, "cost_pct"):
            d.pop(k, None)
    return d


def pct(part: float, whole: float) -> float:
    """``part`` in percent of ``whole`` (0 when ``whole`` is 0)."""
    return part / whole * 100 if whole else 0.0


def clipped_counts(hist: LengthHistogram, max_seq_len: int) -> np.ndarray:
    """Counts of ``c = min(length, max_seq_len)`` for ``c = 0..max_seq_len`` (below the
    histogram's cap, without `LengthHistogram.with_cap`'s exact statistics above it, which
    no count needs: half a millisecond on a histogram binned to 151k)."""
    if max_seq_len < hist.cap:
        counts = hist.counts[:max_seq_len + 1].copy()
        counts[max_seq_len] += int(hist.counts[max_seq_len + 1:].sum()) + hist.above_count
        return counts
    h = hist.with_cap(max_seq_len)
    counts = h.counts.copy()
    counts[max_seq_len] += h.above_count
    return counts


def bucket_table(hist: LengthHistogram, params: BucketParams | None = None) -> BucketTable:
    """Build the bucket table of ``hist`` under ``params`` (no data is read)."""
    p = params or BucketParams()
    h = hist.with_cap(p.max_seq_len)
    counts = clipped_counts(h, p.max_seq_len)
    lengths = np.arange(counts.size, dtype=np.int64)
    total = int(counts.sum())
    rows: list[dict[str, Any]] = []
    for b in range(len(p.bounds) - 1):
        lo, hi = p.bounds[b], p.bounds[b + 1]
        seg = counts[min(lo, counts.size):min(hi, counts.size)]
        samples = int(seg.sum())
        span = lengths[min(lo, counts.size):min(hi, counts.size)]
        tokens = int(seg @ span)
        nz = np.flatnonzero(seg)
        max_len = lo + int(nz[-1]) if nz.size else 0
        size = batch_rows(max_len, p)
        rows.append(dict(index=b, lo=lo, hi=hi, samples=samples,
                         sample_pct=pct(samples, total), tokens=tokens,
                         avg_len=tokens / samples if samples else 0.0, max_len=max_len,
                         est_batch_size=size, est_batches=samples / max(size, 1),
                         over_budget=size == 0,
                         est_cost=None if p.cost.is_default else varlen_cost(
                             samples * max_len, squares(span, seg), p.cost)
                         if p.cost.varlen else samples * float(row_cost(max_len, p.cost))))
    total_batches = float(sum(r["est_batches"] for r in rows))
    total_cost = None if p.cost.is_default else float(sum(r["est_cost"] for r in rows))
    buckets = tuple(BucketRow(**r, batch_pct=pct(r["est_batches"], total_batches),
                              cost_pct=None if total_cost is None else
                              pct(r["est_cost"], total_cost))
                    for r in rows)
    unbucketed = total - sum(r.samples for r in buckets)
    pcts = hist.percentiles()
    truncated_tokens = h.above_tokens - h.above_count * p.max_seq_len
    return BucketTable(
        params=p, total_samples=total, null_samples=h.null_count,
        invalid_samples=h.invalid_count, unbucketed_samples=unbucketed,
        truncated_samples=h.above_count,
        truncated_tokens=truncated_tokens, total_tokens=h.tokens,
        clipped_tokens=h.tokens - truncated_tokens, min_len=h.min, mean_len=h.mean,
        max_len=h.max,
        percentiles=pcts,
        percentile_bounds={k: list(hist.percentile_range(k[1:]) or ())
                           for k, v in pcts.items()
                           if v is None and hist.valid},
        buckets=buckets,
        total_est_batches=total_batches,
        steps_per_epoch=total_batches / (p.grad_accum * p.world_size),
        warnings=tuple(_warnings(p, buckets, unbucketed, h)), total_est_cost=total_cost)


#: Longer than any context trained on (2**24 tokens): a column past it holds something
#: else (timestamps, byte offsets, ids), which the bucket table says rather than bins.
PLAUSIBLE = MAX_AUTO_CAP


def _warnings(p: BucketParams, buckets: tuple[BucketRow, ...], unbucketed: int,
              h: LengthHistogram) -> list[str]:
    if not h.total:
        return ["the source holds no samples: nothing to bucket (an empty dataset, or "
                "shards without rows)"]
    out = [f"bucket {b.index} [{b.lo}, {b.hi}): its longest sample ({b.max_len} tokens) "
           f"exceeds the {budget_words(p)}, so no batch fits; raise {budget_option(p)} or "
           "lower --max-seq-len" for b in buckets if b.over_budget]
    if unbucketed:
        fix = (f": every sample of {p.max_seq_len} tokens or more is clipped to "
               f"{p.max_seq_len}, past the last bound; end the bounds at {p.max_seq_len + 1} "
               "to train them truncated" if p.bounds[-1] <= p.max_seq_len else "")
        out.append(f"{unbucketed} samples fall outside every bucket [{p.bounds[0]}, "
                   f"{p.bounds[-1]}) after clipping to {p.max_seq_len} and would never be "
                   f"trained{fix} (BucketBatchSampler and plan refuse them unless told "
                   "drop_outside / --drop-outside)")
    if h.max is not None and h.max > PLAUSIBLE:
        out.append(f"lengths range from {h.min:,} to {h.max:,}: past {PLAUSIBLE:,} tokens no "
                   "training sample is a plausible length; is the column a token count "
                   "(--column, --offsets-of)?")
    if h.null_count or h.invalid_count:
        out.append(f"{h.null_count} null and {h.invalid_count} negative lengths were "
                   "counted and left out of every bucket")
    return out
