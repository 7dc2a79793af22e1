"""Plain-text renderings of a profile: JSON (the stable interface), CSV and Markdown."""

from __future__ import annotations

import io
import json
from typing import TYPE_CHECKING, Any

from gpu_profiler.analysis.buckets import BucketTable
from gpu_profiler.histogram import PERCENTILES

if TYPE_CHECKING:  # (imported where CSV is written)
    import csv

#: The one CSV schema of ``profile`` (README, "CSV"): a row per bucket and an ``all`` row
#: per split, of the bucket table (policy ``table``) and of each ``--policy``. On ``all``
#: rows ``tokens`` is clipped and ``total_tokens`` unclipped, and the lengths (``max_len``,
#: ``min_len``, ``mean_len``, ``p50``...) describe the unclipped distribution.
PROFILE_CSV = ("split", "policy", "bucket", "lo", "hi", "samples", "sample_pct", "tokens",
               "total_tokens", "avg_len", "max_len", "batch_size", "batches", "batch_pct",
               "padded_tokens", "padding_pct", "steps_per_epoch", "min_len", "mean_len",
               *PERCENTILES)


def to_json(result: Any) -> str:
    """``result.to_dict()`` as indented JSON."""
    return json.dumps(result.to_dict(), indent=2) + "\n"


#: The columns a cost model (`gpu_profiler.cost`) adds to `PROFILE_CSV`, only with one:
#: each row's batches' cost in its unit, and its share of the epoch's.
COST_CSV = ("cost", "cost_pct")


def to_csv(result: Any) -> str:
    """A profile in the `PROFILE_CSV` schema (and `COST_CSV` with a cost model); a grouped
    one (``--group-by``) has a first column ``group``, empty on the corpus's rows, and ends
    with each group's bucket table."""
    import csv

    out = io.StringIO()
    priced = not result.table.params.cost.is_default
    grouped = bool(getattr(result, "groups", None))
    w = csv.DictWriter(out, ("group",) * grouped + PROFILE_CSV + COST_CSV * priced,
                       lineterminator="\n")
    w.writeheader()
    for split, t in split_tables(result):
        _table_rows(w, split, t)
    for p in getattr(result, "policies", ()):
        for pb in p.buckets:
            w.writerow(dict(split=p.split or "", policy=p.name, bucket=pb.index, lo=pb.lo,
                            hi=pb.hi, samples=pb.samples, sample_pct=pb.sample_pct,
                            tokens=pb.tokens, batch_size=pb.batch_size, batches=pb.batches,
                            batch_pct=pb.batch_pct, padded_tokens=pb.padded_tokens,
                            padding_pct=pb.padding_pct, **_cost_cells(pb.cost, pb.cost_pct)))
        w.writerow(dict(split=p.split or "", policy=p.name, bucket="all", samples=p.samples,
                        sample_pct=100.0, tokens=p.tokens, batch_size=p.rows_per_batch or "",
                        batches=p.total_batches, batch_pct=100.0, padded_tokens=p.padded_tokens,
                        padding_pct=p.padding_pct, steps_per_epoch=p.steps_per_epoch,
                        **_cost_cells(p.cost, 100.0)))
    for name, t in (result.groups.items() if grouped else ()):
        _table_rows(w, result.group_split or "", t, group=name)
    return out.getvalue()


def _table_rows(w: csv.DictWriter, split: str, t: BucketTable, **group: str) -> None:
    """A bucket table's rows (``policy`` = ``table``): its buckets, then its ``all`` row."""
    for b in t.buckets:
        w.writerow(dict(**group, split=split, policy="table", bucket=b.index, lo=b.lo,
                        hi=b.hi, samples=b.samples, sample_pct=b.sample_pct, tokens=b.tokens,
                        avg_len=b.avg_len, max_len=b.max_len, batch_size=b.est_batch_size,
                        batches=b.est_batches, batch_pct=b.batch_pct,
                        **_cost_cells(b.est_cost, b.cost_pct)))
    w.writerow(dict(**group, split=split, policy="table", bucket="all",
                    samples=t.total_samples, sample_pct=100.0, tokens=t.clipped_tokens,
                    total_tokens=t.total_tokens, max_len=t.max_len,
                    batches=t.total_est_batches, batch_pct=100.0,
                    steps_per_epoch=t.steps_per_epoch, min_len=t.min_len,
                    mean_len=t.mean_len, **t.percentiles,
                    **_cost_cells(t.total_est_cost, 100.0)))


def _cost_cells(cost: float | None, pct: float | None) -> dict[str, Any]:
    """The `COST_CSV` cells of a row (none without a cost model)."""
    return {} if cost is None else {"cost": cost, "cost_pct": pct}


def to_markdown(result: Any) -> str:
    """One Markdown bucket table (with a split column for a DatasetDict's splits and
    total), each split's summary, then each warning once, naming its splits."""
    from gpu_profiler.render.analysis import markdown_table, policies_markdown

    tables = split_tables(result) if result.splits else [("", result.table)]
    named = bool(result.splits)
    parts = [bucket_markdown(tables, named, not result.table.params.cost.is_default), ""]
    for split, t in tables:
        prefix = f"**{split}**: " if named else ""
        parts += [prefix + summary_line(t), "", prefix + distribution_line(t), ""]
    if result.mixture is not None:
        from gpu_profiler.analysis.mixture import NOUNS

        split = f" (split {result.group_split})" if result.group_split else ""
        by = NOUNS.get(result.mixture.by, result.mixture.by)
        parts.append(f"**By {by}**{split}:\n")
        parts += [markdown_table(group_rows(result)), "",
                  "**Bucket composition** (% of the bucket's samples):\n",
                  markdown_table(composition_rows(result)), ""]
    if result.shape is not None:
        parts += [*(line + "\n" for line in shape_lines(result)),
                  markdown_table(shape_rows(result)), ""]
    for text, names in shared_warnings(tables).items():
        where = f" ({', '.join(names)})" if named else ""
        parts.append(f"> **warning{where}:** {text}\n")
    if getattr(result, "policies", ()):
        parts.append(policies_markdown(result.policies))
    return "\n".join(parts) + "\n"


def bucket_markdown(tables: list[tuple[str, BucketTable]], named: bool, priced: bool) -> str:
    """One Markdown table of the buckets of each ``(split, table)`` (`markdown_table`): with
    a split column when ``named``, and the cost columns when ``priced``."""
    from gpu_profiler.render.analysis import markdown_table

    return markdown_table([
        [*["split"] * named, "bucket", "samples", "% samples", "tokens", "avg len", "max len",
         "batch size", "est batches", "% batches", *["est cost", "% cost"] * priced],
        *([*[split] * named, f"[{b.lo}, {b.hi})", f"{b.samples:,}", f"{b.sample_pct:.2f}",
           f"{b.tokens:,}", f"{b.avg_len:,.1f}", f"{b.max_len:,}", f"{b.est_batch_size}",
           f"{b.est_batches:,.2f}", f"{b.batch_pct:.2f}",
           *[f"{b.est_cost or 0.0:,.6g}", f"{b.cost_pct or 0.0:.2f}"] * priced]
          for split, t in tables for b in t.buckets)], left=1 + named)


def summary_line(t: BucketTable) -> str:
    """Corpus-level counts in one sentence."""
    p = t.params
    return (f"{t.total_samples:,} samples, {t.total_tokens:,} tokens unclipped "
            f"({t.clipped_tokens:,} clipped to {p.max_seq_len:,}); "
            f"{t.total_est_batches:,.2f} est. batches = {t.steps_per_epoch:,.2f} steps/epoch "
            f"(grad_accum {p.grad_accum} x world_size {p.world_size}); "
            f"null {t.null_samples:,}, invalid {t.invalid_samples:,}, "
            f"unbucketed {t.unbucketed_samples:,}, truncated {t.truncated_samples:,} "
            f"({t.truncated_tokens:,} tokens cut at {p.max_seq_len:,})")


def distribution_line(t: BucketTable) -> str:
    """The unclipped lengths' min, percentiles, max and mean in one line."""
    def n(k: str, v: int | None) -> str:
        if v is not None:
            return f"{v:,}"
        bounds = t.percentile_bounds.get(k)
        return f"{bounds[0]:,}..{bounds[1]:,}" if bounds else "-"

    points = [("min", t.min_len), *t.percentiles.items(), ("max", t.max_len)]
    mean = "-" if t.mean_len is None else f"{t.mean_len:,.1f}"
    return ("lengths (unclipped): " + ", ".join(f"{k} {n(k, v)}" for k, v in points)
            + f", mean {mean}")


def shared_warnings(tables: list[tuple[str, BucketTable]]) -> dict[str, list[str]]:
    """Each distinct warning of ``tables`` and the splits it applies to, in order. The
    advice on one dominant bucket is one warning whatever split it is given for: the first
    split's text, then the other splits' shares of their batches."""
    out: dict[str, list[str]] = {}
    advised: dict[tuple[int, int, int], list[tuple[str, Any]]] = {}
    for name, table in tables:
        advice = getattr(table, "advice", None)
        for w in table.warnings:
            if advice is not None and w == advice.text:
                same = advised.setdefault((advice.bucket, advice.lo, advice.hi), [])
                same.append((name, advice))
                if len(same) > 1:
                    continue
            out.setdefault(w, []).append(name)
    for same in advised.values():
        if len(same) > 1:
            (first, advice), rest = same[0], same[1:]
            others = "; ".join(f"{n}: {a.batch_pct:.1f}% of its {a.total_batches:,} batches "
                               f"under the fixed policy, {a.est_batch_pct:.1f}% of its "
                               f"{a.est_total_batches:,.2f} estimated" for n, a in rest)
            out = {(f"{w} (numbers of {first}; {others})" if w == advice.text else w):
                   ([first] + [n for n, _ in rest] if w == advice.text else names)
                   for w, names in out.items()}
    return out


def split_tables(result: Any) -> list[tuple[str, BucketTable]]:
    """``(split, table)`` for each named split, then ``("all", total)``."""
    return [*result.splits.items(), ("all", result.table)]


#: Groups shown as columns of the composition table (more: only the largest is named).
COMPOSITION_COLUMNS = 8


def group_rows(result: Any) -> list[list[str]]:
    """The header and one row per group of a grouped profile (text and Markdown)."""
    out = [["group", "samples", "% samples", "tokens", "% tokens", "batches", "% batches",
            "mean", "p50", "p99", "max"]]
    for share in result.mixture.shares:
        t = result.groups[share.name]
        p = t.percentiles
        out.append([share.name, f"{share.samples:,}", f"{share.sample_pct:.1f}",
                    f"{share.tokens:,}", f"{share.token_pct:.1f}", f"{share.batches:,.1f}",
                    f"{share.batch_pct:.1f}",
                    "-" if t.mean_len is None else f"{t.mean_len:,.0f}",
                    *("-" if p.get(k) is None else f"{p[k]:,}" for k in ("p50", "p99")),
                    "-" if t.max_len is None else f"{t.max_len:,}"])
    return out


def composition_rows(result: Any) -> list[list[str]]:
    """The header and one row per bucket: its samples, largest group and (for at most
    `COMPOSITION_COLUMNS` groups) every group's percent of its samples."""
    names = [s.name for s in result.mixture.shares]
    each = names if len(names) <= COMPOSITION_COLUMNS else []
    out = [["bucket", "samples", "largest", "%", *each]]
    for m in result.mixture.buckets:
        out.append([f"{m.index} [{m.lo},{m.hi})", f"{m.samples:,}", m.top or "-",
                    f"{m.top_pct:.1f}", *(f"{m.groups[n]:.1f}" for n in each)])
    return out


def shape_lines(result: Any) -> list[str]:
    """A shaped profile (``--sft``, ``--dpo``) in words: its loss tokens and each part's
    distribution (text and Markdown)."""
    sh = result.shape
    split = f" (split {result.group_split})" if result.group_split else ""
    out = [f"{sh.shape['kind'].upper()} samples{split}: {sh.samples:,} in {sh.rows:,} rows; "
           f"{sh.loss_tokens:,} of {sh.tokens:,} tokens ({sh.loss_token_pct:.1f}%) are loss "
           f"tokens after truncation to {result.table.params.max_seq_len:,} (it cuts "
           f"{sh.truncated_loss_tokens:,} more)"]
    for name, part in sh.parts.items():
        points = [*part["percentiles"].items(), ("max", part["max"])]
        out.append(f"{name}: {part['tokens']:,} tokens; " + ", ".join(
            f"{k} {'-' if v is None else format(v, ',')}" for k, v in points))
    return out


def shape_rows(result: Any) -> list[list[str]]:
    """The header and one row per bucket of a shaped profile: its samples, rows, tokens
    and loss tokens after truncation."""
    out = [["bucket", "samples", "rows", "tokens", "loss tokens", "loss %", "prompt %"]]
    for b in result.shape.buckets:
        out.append([f"{b.index} [{b.lo},{b.hi})", f"{b.samples:,}", f"{b.rows:,}",
                    f"{b.tokens:,}", f"{b.loss_tokens:,}", f"{b.loss_token_pct:.1f}",
                    f"{b.prompt_tokens / b.tokens * 100 if b.tokens else 0.0:.1f}"])
    return out
