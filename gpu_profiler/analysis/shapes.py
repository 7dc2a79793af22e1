"""SFT and DPO samples against the bucket table (`gpu_profiler.shapes` counts them): per
bucket of the length that sets memory, the samples, the rows they make (two a DPO sample),
the tokens and the loss tokens after truncation to ``max_seq_len`` (the prompt is kept and
the answer cut, as right truncation does), and the prompt x completion heat map.

SFT losses count only completion tokens: a bucket of long prompts and short answers costs
compute that teaches little; DPO batches hold a prompt twice, with each answer."""

from __future__ import annotations

from dataclasses import asdict, field
from typing import Any

import numpy as np

from gpu_profiler.analysis.buckets import pct
from gpu_profiler.frozen import frozen
from gpu_profiler.histogram import LengthHistogram
from gpu_profiler.params import BucketParams

#: Bins a side of the prompt x completion heat map (at most).
HEAT_BINS = 32


@frozen
class ShapeBucket:
    """One bucket ``[lo, hi)`` of the memory length (clipped to ``max_seq_len``): its
    samples, rows, tokens, loss tokens and prompt tokens after truncation."""

    index: int
    lo: int
    hi: int
    samples: int
    rows: int
    tokens: int
    loss_tokens: int
    prompt_tokens: int
    loss_token_pct: float


@frozen
class ShapeProfile:
    """Every number of a shaped profile (see the module docstring).

    Attributes:
        shape: the `gpu_profiler.shapes.Shape` as a dict (kind, columns, count).
        samples, rows: samples counted, and the rows (sequences) they make.
        tokens, loss_tokens, truncated_loss_tokens: after truncation, and the loss tokens
            it cut.
        parts: each part's (prompt, completion, or prompt, chosen, rejected) total tokens
            and exact percentiles (unclipped).
        heatmap: prompt (rows) x completion (columns; DPO: the longer answer) counts in
            ``prompt_edges`` x ``completion_edges`` bins ``[e[i], e[i+1])``.
    """

    shape: dict[str, Any]
    samples: int
    rows: int
    tokens: int
    loss_tokens: int
    loss_token_pct: float
    truncated_loss_tokens: int
    parts: dict[str, dict[str, Any]]
    buckets: tuple[ShapeBucket, ...]
    heatmap: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["buckets"] = [asdict(b) for b in self.buckets]
        return d


def memory_length(parts: np.ndarray) -> np.ndarray:
    """Each row of part lengths' length that sets memory: the prompt and its longest
    answer (SFT: its completion; DPO: the longer of chosen and rejected)."""
    return parts[:, 0] + parts[:, 1:].max(axis=1, initial=0)


def shape_profile(keys: np.ndarray, counts: np.ndarray, shape: dict[str, Any],
                  params: BucketParams) -> ShapeProfile:
    """The profile of samples whose parts are ``keys`` (one row per distinct tuple, in the
    shape's part order: prompt, completion, or prompt, chosen, rejected), ``counts`` of
    each."""
    msl = params.max_seq_len
    dpo = shape["kind"] == "dpo"
    p = keys[:, 0]
    answers = keys[:, 1:]
    memory = memory_length(keys)
    kept_p = np.minimum(p, msl)
    kept = np.clip(np.minimum(answers, (msl - p)[:, None]), 0, None)
    loss = kept.sum(axis=1)
    cut = answers.sum(axis=1) - loss
    rows_each = 2 if dpo else 1
    tokens = kept_p * rows_each + loss
    c = np.minimum(memory, msl)
    bounds = params.bounds
    buckets = []
    for b in range(len(bounds) - 1):
        inside = (c >= bounds[b]) & (c < bounds[b + 1])
        n = counts[inside]
        t, lo_ = int(n @ tokens[inside]), int(n @ loss[inside])
        buckets.append(ShapeBucket(b, bounds[b], bounds[b + 1], int(n.sum()),
                                   int(n.sum()) * rows_each, t, lo_,
                                   int(n @ kept_p[inside]) * rows_each,
                                   pct(lo_, t)))
    all_tokens, all_loss = int(counts @ tokens), int(counts @ loss)
    names = ("prompt", "completion") if not dpo else ("prompt", "chosen", "rejected")
    parts = {}
    for j, name in enumerate(names):
        h = LengthHistogram(np.bincount(keys[:, j], weights=counts, minlength=1)
                            .astype(np.int64)) if keys.size else LengthHistogram.empty(0)
        parts[name] = {"tokens": h.tokens, "mean": h.mean, "max": h.max,
                       "percentiles": h.percentiles()}
    return ShapeProfile(shape, int(counts.sum()), int(counts.sum()) * rows_each, all_tokens,
                        all_loss, pct(all_loss, all_tokens),
                        int(counts @ cut), parts, tuple(buckets),
                        _heatmap(p, answers.max(axis=1, initial=0), counts))


def _heatmap(p: np.ndarray, a: np.ndarray, counts: np.ndarray) -> dict[str, Any]:
    """Counts of (prompt, answer) in at most `HEAT_BINS` x `HEAT_BINS` integer bins."""
    def edges(v: np.ndarray) -> np.ndarray:
        top = int(v.max(initial=0)) + 1
        width = -(-top // HEAT_BINS)
        return np.arange(0, top + width, width)

    pe, ae = edges(p), edges(a)
    i, j = p // (pe[1] - pe[0]), a // (ae[1] - ae[0])
    grid = np.bincount(i * (ae.size - 1) + j, weights=counts,
                       minlength=(pe.size - 1) * (ae.size - 1)).astype(np.int64)
    return {"prompt_edges": pe.tolist(), "completion_edges": ae.tolist(),
            "counts": grid.reshape(pe.size - 1, ae.size - 1).tolist()}
