"""Two length distributions side by side (``gpu-profiler compare``): per-bucket deltas,
percentile shifts, and distances between the unclipped lengths, all from the histograms.

The distances are over the valid samples of each histogram, normalized to 1:
``ks`` = max over L of ``|F_a(L) - F_b(L)|`` (Kolmogorov-Smirnov), ``tv`` = half the sum
of ``|p_a(L) - p_b(L)|`` (total variation) and ``w1`` = the sum over L of ``|F_a(L) -
F_b(L)|``, in tokens (Wasserstein-1: how far, on average, each sample's length must move
to turn one distribution into the other). They are exact up to float64 rounding when both
histograms bin every length; lengths past `gpu_profiler.histogram.MAX_AUTO_CAP` are not
binned, and then ``exact`` is False (they count as one point past the bins).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpu_profiler.analysis.buckets import BucketTable, bucket_table
from gpu_profiler.analysis.policies import PolicyResult, evaluate_policy
from gpu_profiler.histogram import PERCENTILES, LengthHistogram
from gpu_profiler.params import BucketParams

SCHEMA = "gpu-profiler/compare/v1"


@dataclass(frozen=True)
class Distances:
    """``ks``, ``tv`` and ``w1`` of two histograms (see the module docstring)."""

    ks: float
    tv: float
    w1: float
    exact: bool


def distances(a: LengthHistogram, b: LengthHistogram) -> Distances:
    """The distances between the valid lengths of ``a`` and ``b`` (all 0 when either is
    empty: nothing to compare)."""
    na, nb = a.valid, b.valid
    if not na or not nb:
        return Distances(0.0, 0.0, 0.0, True)
    exact = not (a.above_count or b.above_count)
    pa, pb = _on_one_grid(a, b)
    fa, fb = np.cumsum(pa) / na, np.cumsum(pb) / nb
    gap = np.abs(fa - fb)
    return Distances(ks=float(gap.max()), tv=float(np.abs(pa / na - pb / nb).sum() / 2),
                     w1=float(gap[:-1].sum()), exact=exact)


def _on_one_grid(a: LengthHistogram, b: LengthHistogram) -> tuple[np.ndarray, np.ndarray]:
    """Both histograms' counts over lengths ``0..C`` and one bin past it for their
    unbinned lengths (C: the larger cap)."""
    cap = max(a.cap, b.cap)
    out = []
    for h in (a, b):
        counts = np.zeros(cap + 2, np.int64)
        counts[:h.counts.size] = h.counts
        counts[h.counts.size if h.cap < cap else cap + 1] += h.above_count
        out.append(counts)
    return out[0], out[1]


@dataclass(frozen=True)
class Side:
    """One side of a comparison: its source, bucket table and ``fixed`` policy (for the
    padding, as ``profile`` reports it)."""

    source: str
    table: BucketTable
    fixed: PolicyResult

    def to_dict(self) -> dict[str, Any]:
        t = self.table
        return {"source": self.source, "bounds": list(t.params.bounds),
                "total_samples": t.total_samples, "total_tokens": t.total_tokens,
                "clipped_tokens": t.clipped_tokens, "min_len": t.min_len,
                "mean_len": t.mean_len, "max_len": t.max_len,
                "percentiles": dict(t.percentiles), "steps_per_epoch": t.steps_per_epoch,
                "max_batch_pct": t.max_batch_pct, "padding_pct": self.fixed.padding_pct}


@dataclass(frozen=True)
class BucketDelta:
    """Bucket ``index`` on each side (None where that side has fewer buckets)."""

    index: int
    a: dict[str, Any] | None
    b: dict[str, Any] | None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"index": self.index}
        for key in ("lo", "hi", *_DELTAS):
            va = None if self.a is None else self.a[key]
            vb = None if self.b is None else self.b[key]
            d[f"{key}_a"], d[f"{key}_b"] = va, vb
            if key in _DELTAS:
                d[f"{key}_delta"] = (vb or 0) - (va or 0)
        return d


_DELTAS = ("samples", "batches", "padding_pct")


@dataclass(frozen=True)
class Comparison:
    """B against A: every delta and shift is ``b - a``."""

    a: Side
    b: Side
    distances: Distances
    buckets: tuple[BucketDelta, ...]
    warnings: tuple[str, ...] = field(default=())

    def shift(self, key: str) -> float | None:
        """``b - a`` of a number both sides report (a percentile by its name), or None when
        either side has no value."""
        va, vb = (side_value(s.to_dict(), key) for s in (self.a, self.b))
        return None if va is None or vb is None else vb - va

    def to_dict(self) -> dict[str, Any]:
        d = self.distances
        out: dict[str, Any] = {"schema": SCHEMA, "a": self.a.to_dict(), "b": self.b.to_dict(),
                               "ks": d.ks, "tv": d.tv, "w1": d.w1, "exact": d.exact}
        for key in SHIFTS:
            out[f"{key}_shift"] = self.shift(key)
        out["buckets"] = [b.to_dict() for b in self.buckets]
        out["warnings"] = list(self.warnings)
        return out


#: The numbers whose ``b - a`` a comparison reports as ``<name>_shift``.
SHIFTS = ("total_samples", "total_tokens", "mean_len", *PERCENTILES, "max_len",
          "steps_per_epoch", "max_batch_pct", "padding_pct")


def side_value(d: dict[str, Any], key: str) -> Any:
    """A number of a `Side.to_dict`, a percentile by its name (``p99``)."""
    return d["percentiles"][key] if key in d["percentiles"] else d[key]


def compare(a: LengthHistogram, b: LengthHistogram, params_a: BucketParams,
            params_b: BucketParams, *, source_a: str = "A", source_b: str = "B",
            drop_last: bool = False) -> Comparison:
    """Compare ``b`` under ``params_b`` with ``a`` under ``params_a``."""
    sides = [Side(src, bucket_table(h, p), evaluate_policy(h, "fixed", p, drop_last=drop_last))
             for src, h, p in ((source_a, a, params_a), (source_b, b, params_b))]
    rows = [_rows(s) for s in sides]
    deltas = tuple(BucketDelta(i, *(r[i] if i < len(r) else None for r in rows))
                   for i in range(max(map(len, rows))))
    dist = distances(a, b)
    warnings = () if dist.exact else (
        "lengths past the binned range (MAX_AUTO_CAP) count as one point past it: ks, tv "
        "and w1 are not exact",)
    return Comparison(sides[0], sides[1], dist, deltas, warnings)


def _rows(side: Side) -> list[dict[str, Any]]:
    return [{"lo": t.lo, "hi": t.hi, "samples": t.samples, "batches": t.est_batches,
             "padding_pct": f.padding_pct}
            for t, f in zip(side.table.buckets, side.fixed.buckets, strict=True)]
