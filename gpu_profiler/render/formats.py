"""Plain-text renderings of a profile: JSON (the stable interface), CSV and Markdown."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from gpu_profiler.analysis.buckets import BucketTable

BUCKET_COLUMNS = ("index", "lo", "hi", "samples", "sample_pct", "tokens", "avg_len", "max_len",
                  "est_batch_size", "est_batches", "batch_pct")


def to_json(result: Any) -> str:
    """``result.to_dict()`` as indented JSON."""
    return json.dumps(result.to_dict(), indent=2) + "\n"


def to_csv(result: Any) -> str:
    """One row per bucket (and per split, when the source has named splits); with
    policies, one row per policy and bucket instead."""
    if getattr(result, "policies", ()):
        from gpu_profiler.render.analysis import policies_csv

        return policies_csv(result.policies)
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(("split", *BUCKET_COLUMNS))
    for split, table in split_tables(result):
        for b in table.buckets:
            w.writerow((split, *(getattr(b, c) for c in BUCKET_COLUMNS)))
    return out.getvalue()


def to_markdown(result: Any) -> str:
    """A Markdown table per split plus summary and warnings."""
    parts = []
    for split, t in split_tables(result):
        if result.splits:
            parts.append(f"### {split}\n")
        parts.append("| bucket | samples | % samples | tokens | avg len | max len | batch size "
                     "| est batches | % batches |\n|---|--:|--:|--:|--:|--:|--:|--:|--:|")
        for b in t.buckets:
            parts.append(f"| [{b.lo}, {b.hi}) | {b.samples:,} | {b.sample_pct:.2f} | "
                         f"{b.tokens:,} | {b.avg_len:.1f} | {b.max_len:,} | "
                         f"{b.est_batch_size} | {b.est_batches:,.2f} | {b.batch_pct:.2f} |")
        parts.append("")
        parts.append(summary_line(t))
        parts.extend(f"\n> **warning:** {w}" for w in t.warnings)
        parts.append("")
    if getattr(result, "policies", ()):
        from gpu_profiler.render.analysis import policies_markdown

        parts.append(policies_markdown(result.policies))
    return "\n".join(parts) + "\n"


def summary_line(t: BucketTable) -> str:
    """Corpus-level counts in one sentence."""
    p = t.params
    return (f"{t.total_samples:,} samples, {t.total_tokens:,} tokens; "
            f"{t.total_est_batches:,.2f} est. batches = {t.steps_per_epoch:,.2f} steps/epoch "
            f"(grad_accum {p.grad_accum} x world_size {p.world_size}); "
            f"null {t.null_samples:,}, invalid {t.invalid_samples:,}, "
            f"unbucketed {t.unbucketed_samples:,}, truncated {t.truncated_samples:,} "
            f"({t.truncated_tokens:,} tokens cut at {p.max_seq_len:,})")


def split_tables(result: Any) -> list[tuple[str, BucketTable]]:
    """``(split, table)`` for each named split, then ``("all", total)``."""
    return [*result.splits.items(), ("all", result.table)]
