"""Two length distributions side by side (``gpu-profiler compare``): per-bucket deltas,
percentile shifts, and distances between the unclipped lengths, all from the histograms.

The distances are over the valid samples of each histogram, normalized to 1:
``ks`` = max over L of ``|F_a(L) - F_b(L)|`` (Kolmogorov-Smirnov), ``tv`` = half the sum
of ``|p_a(L) - p_b(L)|`` (total variation) and ``w1`` = the sum over L of ``|F_a(L) -
F_b(L)|``, in tokens (Wasserstein-1: how far, on average, each sample's length must move
to turn one distribution into the other). They are exact up to float64 rounding when both
histograms bin every length; lengths past `gpu_profiler.histogram.MAX_AUTO_CAP` are not
binned, and then ``exact`` is False (they count as one point past the bins).

With groups (``--group-by``: sources, languages, files), each group of B is compared with
the same group of A the same way, and the group's share of each side's samples and tokens
is reported beside it: a source that grew, shrank, came or went, or whose lengths moved.
"""

from __future__ import annotations

from dataclasses import field, replace
from typing import Any

import numpy as np

from gpu_profiler.analysis.buckets import BucketTable, bucket_table, pct
from gpu_profiler.analysis.mixture import NOUNS
from gpu_profiler.analysis.policies import PolicyResult, evaluate_policy
from gpu_profiler.frozen import frozen
from gpu_profiler.histogram import PERCENTILES, LengthHistogram
from gpu_profiler.params import BucketParams

SCHEMA = "gpu-profiler/compare/v1"

#: What `compare` compares group by group: ``(by, A's groups, B's groups)``.
Groups = tuple[str, dict[str, LengthHistogram], dict[str, LengthHistogram]]


@frozen
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


@frozen
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


@frozen
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


@frozen
class Comparison:
    """B against A: every delta and shift is ``b - a``."""

    a: Side
    b: Side
    distances: Distances
    buckets: tuple[BucketDelta, ...]
    warnings: tuple[str, ...] = field(default=())
    group_by: str | None = None
    #: each group's comparison (``--group-by``), by name
    groups: dict[str, Comparison] = field(default_factory=dict)
    #: of a group's comparison: its percent of each side's samples and tokens
    #: (``sample_pct_a``, ``sample_pct_b``, ``token_pct_a``, ``token_pct_b``)
    shares: dict[str, float] = field(default_factory=dict)

    @property
    def both_sides(self) -> bool:
        """Whether both sides have samples (a group's comparison may have one only: it is
        then compared with nothing, and has no distance)."""
        return bool(self.a.table.total_samples and self.b.table.total_samples)

    def shift(self, key: str) -> float | None:
        """``b - a`` of a number both sides report (a percentile by its name), or None when
        either side has no value."""
        va, vb = (side_value(s.to_dict(), key) for s in (self.a, self.b))
        return None if va is None or vb is None else vb - va

    def to_dict(self) -> dict[str, Any]:
        d = self.distances
        # a group on one side only is compared with nothing: no distance (not 0, "equal")
        one_sided = bool(self.shares) and not self.both_sides
        out: dict[str, Any] = {"schema": SCHEMA, "a": self.a.to_dict(), "b": self.b.to_dict(),
                               **{k: None if one_sided else getattr(d, k)
                                  for k in ("ks", "tv", "w1")}, "exact": d.exact}
        for key in SHIFTS:
            out[f"{key}_shift"] = self.shift(key)
        out["buckets"] = [b.to_dict() for b in self.buckets]
        out["warnings"] = list(self.warnings)
        out.update(self.shares)
        if self.group_by is not None:
            out["group_by"] = self.group_by
            out["groups"] = {name: {k: v for k, v in g.to_dict().items() if k != "schema"}
                             for name, g in self.groups.items()}
            out["max_group_ks"] = max((g.distances.ks for g in self.groups.values()
                                       if g.both_sides), default=None)
            out["max_group_token_pct_shift"] = max(
                (abs(g.shares["token_pct_b"] - g.shares["token_pct_a"])
                 for g in self.groups.values()), default=None)
        return out


#: The numbers whose ``b - a`` a comparison reports as ``<name>_shift``.
SHIFTS = ("total_samples", "total_tokens", "mean_len", *PERCENTILES, "max_len",
          "steps_per_epoch", "max_batch_pct", "padding_pct")


def side_value(d: dict[str, Any], key: str) -> Any:
    """A number of a `Side.to_dict`, a percentile by its name (``p99``)."""
    return d["percentiles"][key] if key in d["percentiles"] else d[key]


#: A group whose share of the tokens moves by more than this many points is warned about.
SHARE_POINTS = 5.0


def compare(a: LengthHistogram, b: LengthHistogram, params_a: BucketParams,
            params_b: BucketParams, *, source_a: str = "A", source_b: str = "B",
            drop_last: bool = False, groups: Groups | None = None) -> Comparison:
    """Compare ``b`` under ``params_b`` with ``a`` under ``params_a``; with ``groups``
    (``(by, A's groups, B's groups)``, histograms summing to ``a`` and ``b``), each group
    too (one side only: its other side empty)."""
    whole = _compare(a, b, params_a, params_b, source_a, source_b, drop_last)
    if groups is None:
        return whole
    by, hists_a, hists_b = groups
    per: dict[str, Comparison] = {}
    only: dict[str, list[str]] = {"A": [], "B": []}
    moved: list[str] = []
    for name in sorted(hists_a.keys() | hists_b.keys()):
        ga = hists_a.get(name) or LengthHistogram.empty(0)
        gb = hists_b.get(name) or LengthHistogram.empty(0)
        g = _compare(ga, gb, params_a, params_b, name, name, drop_last)
        shares = {f"{key}_{side}": pct(getattr(mine.table, attr), getattr(all_.table, attr))
                  for key, attr in (("sample_pct", "total_samples"),
                                    ("token_pct", "total_tokens"))
                  for side, mine, all_ in (("a", g.a, whole.a), ("b", g.b, whole.b))}
        per[name] = replace(g, shares=shares)
        if name not in hists_a or name not in hists_b:
            only["B" if name in hists_b else "A"].append(repr(name))
        elif abs(shares["token_pct_b"] - shares["token_pct_a"]) > SHARE_POINTS:
            moved.append(f"{name!r} {shares['token_pct_a']:.1f}% -> "
                         f"{shares['token_pct_b']:.1f}%")
    noun = NOUNS.get(by, by)
    warnings = [*whole.warnings, *(f"{noun} only in {side}: {_listed(names)}"
                                   for side, names in only.items() if names)]
    if moved:
        warnings.append(f"{noun} whose share of the tokens moved by more than "
                        f"{SHARE_POINTS:g} points: {_listed(moved)}")
    return replace(whole, warnings=tuple(warnings), group_by=by, groups=per)


def _listed(items: list[str], most: int = 10) -> str:
    """``items`` joined, the first `most` of them and how many more."""
    more = len(items) - most
    return ", ".join(items[:most]) + (f" and {more:,} more" if more > 0 else "")


def _compare(a: LengthHistogram, b: LengthHistogram, params_a: BucketParams,
             params_b: BucketParams, source_a: str, source_b: str, drop_last: bool
             ) -> Comparison:
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
