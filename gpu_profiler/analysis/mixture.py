"""A mixture's groups (``--group-by``) against its bucket table: each group's share of the
samples, tokens and batches, and each bucket's composition by group.

A group's batches are its share of each bucket's batches (its samples there over the
bucket's), summed: batches are drawn from a bucket's samples whatever their group. Users
weight sources by samples and pay by tokens and steps; the three shares say how far apart
those are. A bucket made mostly of one group that is not most of the corpus turns the
order of buckets into an order of domains: the banded loss comes back as domain switching
even with lengths interleaved."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import numpy as np

from gpu_profiler.analysis.buckets import BucketTable, pct
from gpu_profiler.frozen import frozen

#: A group making more than this share of a bucket's samples...
MOST_PCT = 50.0
#: ...and this many points more than its share of the corpus's samples is warned about.
OVER_POINTS = 20.0

#: How a file grouping is named in words (a column by its name).
NOUNS = {"@file": "file", "@dir": "directory"}


@frozen
class GroupShare:
    """One group's samples, tokens (unclipped) and estimated batches, and its percent of
    the whole source's."""

    name: str
    samples: int
    tokens: int
    batches: float
    sample_pct: float
    token_pct: float
    batch_pct: float


@frozen
class BucketMix:
    """One bucket's samples by group: ``groups`` maps each group to its percent of the
    bucket's samples; ``top`` is the largest (None in an empty bucket)."""

    index: int
    lo: int
    hi: int
    samples: int
    groups: dict[str, float]
    top: str | None
    top_pct: float


@frozen
class Mixture:
    """Every group's shares and every bucket's composition, with the warnings."""

    by: str
    shares: tuple[GroupShare, ...]
    buckets: tuple[BucketMix, ...]
    warnings: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"by": self.by, "buckets": [asdict(b) for b in self.buckets],
                "warnings": list(self.warnings)}


def dominant(counts: np.ndarray, corpus_pct: np.ndarray) -> np.ndarray:
    """Per row of ``counts`` (samples by group: a bucket's, a step's), the group making it
    mostly: over `MOST_PCT` of its samples and `OVER_POINTS` above that group's percent of
    the corpus (``corpus_pct``); else -1. The one rule of the profile's warning,
    ``schedule``, ``suggest`` and ``plan``."""
    if not counts.size:
        return np.full(len(counts), -1, np.int64)
    totals = counts.sum(axis=1)
    top = counts.argmax(axis=1)
    share = np.divide(counts[np.arange(len(counts)), top], totals,
                      out=np.zeros(len(counts)), where=totals > 0) * 100
    return np.where((share > MOST_PCT) & (share - corpus_pct[top] >= OVER_POINTS), top, -1)


def bucket_counts(groups: dict[str, BucketTable], buckets: int) -> np.ndarray:
    """Each of the ``buckets`` buckets' samples by group (buckets x groups, in ``groups``'
    order): tables under the same parameters."""
    tables = list(groups.values())
    return np.array([[t.buckets[b].samples for t in tables] for b in range(buckets)],
                    np.float64).reshape(buckets, len(tables))


def mixture(by: str, groups: dict[str, BucketTable], total: BucketTable) -> Mixture:
    """The shares and composition of ``groups`` (tables under the same parameters as
    ``total``, whose histograms sum to its histogram)."""
    batches = {name: sum(pct(b.samples, tb.samples) / 100 * tb.est_batches
                         for b, tb in zip(t.buckets, total.buckets, strict=True))
               for name, t in groups.items()}
    shares = tuple(GroupShare(name, t.total_samples, t.total_tokens, batches[name],
                              pct(t.total_samples, total.total_samples),
                              pct(t.total_tokens, total.total_tokens),
                              pct(batches[name], total.total_est_batches))
                   for name, t in groups.items())
    mixes = []
    for tb in total.buckets:
        parts = {name: pct(t.buckets[tb.index].samples, tb.samples)
                 for name, t in groups.items()}
        top = max(parts, key=parts.__getitem__) if tb.samples and parts else None
        mixes.append(BucketMix(tb.index, tb.lo, tb.hi, tb.samples, parts, top,
                               parts[top] if top is not None else 0.0))
    corpus = {s.name: s.sample_pct for s in shares}
    noun = NOUNS.get(by, by)
    tags = dominant(bucket_counts(groups, len(mixes)), np.array(list(corpus.values())))
    mostly = [m for m, tag in zip(mixes, tags, strict=True) if tag >= 0]
    said = {m.index: corpus[m.top] for m in mostly if m.top is not None}
    warnings = () if not mostly else (
        f"buckets made mostly of one {noun} (its share of the bucket, of the corpus; the "
        "bucket's share of the batches): " + "; ".join(
            f"{m.index} [{m.lo}, {m.hi}) {m.top!r} {m.top_pct:.1f}% ({said[m.index]:.1f}%; "
            f"{total.buckets[m.index].batch_pct:.1f}% of batches)" for m in mostly)
        + ". Batches in bucket order switch sources too (the banded loss of the length "
        "ladder): interleave the buckets (schedule --order stride, the sampler) and watch "
        f"the loss per {noun}",)
    return Mixture(by, shares, tuple(mixes), warnings)
