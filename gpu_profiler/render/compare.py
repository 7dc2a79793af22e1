"""Renderings of a `gpu_profiler.analysis.compare.Comparison`: rich tables, Markdown and
CSV (JSON is its ``to_dict``). Every delta is B - A."""

from __future__ import annotations

import csv
import io
from typing import Any

from gpu_profiler.analysis.compare import SHIFTS, side_value
from gpu_profiler.histogram import PERCENTILES
from gpu_profiler.render.analysis import markdown_table, print_warnings, rich_table

#: The one CSV schema of ``compare`` (README, "CSV"): a row per bucket index, then an
#: ``all`` row with the totals, distances and shifts.
COMPARE_CSV = ("bucket", "lo_a", "hi_a", "lo_b", "hi_b", "samples_a", "samples_b",
               "samples_delta", "batches_a", "batches_b", "batches_delta", "padding_pct_a",
               "padding_pct_b", "padding_pct_delta", "steps_per_epoch_a",
               "steps_per_epoch_b", "ks", "tv", "w1", *(f"{k}_shift" for k in SHIFTS))

#: The summary rows: (label, key of `Side.to_dict` or a percentile).
_SUMMARY = (("samples", "total_samples"), ("tokens (unclipped)", "total_tokens"),
            ("tokens (clipped)", "clipped_tokens"), ("min", "min_len"),
            *((k, k) for k in PERCENTILES), ("max", "max_len"), ("mean", "mean_len"),
            ("steps/epoch", "steps_per_epoch"), ("max batch %", "max_batch_pct"),
            ("padding %", "padding_pct"))


def _num(v: Any, signed: bool = False) -> str:
    if v is None:
        return "-"
    sign = "+" if signed else ""
    return f"{v:{sign},.0f}" if float(v).is_integer() else f"{v:{sign},.2f}"


def _summary(c: Any) -> list[tuple[str, str, str, str]]:
    a, b = c.a.to_dict(), c.b.to_dict()
    return [(label, _num(side_value(a, key)), _num(side_value(b, key)),
             _num(c.shift(key), signed=True)) for label, key in _SUMMARY]


def _edges(d: dict[str, Any], side: str) -> str:
    lo, hi = d[f"lo_{side}"], d[f"hi_{side}"]
    return "-" if lo is None else f"[{lo},{hi})"


_BUCKET_HEAD = ("bucket", "A", "B", "samples A", "samples B", "Δ samples", "batches Δ",
                "padding % Δ")


def _bucket_cells(b: Any) -> list[str]:
    """A `BucketDelta` as the per-bucket table's cells."""
    d = b.to_dict()
    return [str(b.index), _edges(d, "a"), _edges(d, "b"), _num(d["samples_a"]),
            _num(d["samples_b"]), _num(d["samples_delta"], True),
            _num(d["batches_delta"], True), _num(d["padding_pct_delta"], True)]


def side_names(c: Any) -> tuple[str, str]:
    """``("A: SOURCE", "B: OTHER")``, each with its own bounds when the two sides' differ
    (``compare PATH --bounds-b``: one source, two bucketings)."""
    names = (f"A: {c.a.source}", f"B: {c.b.source}")
    bounds = (c.a.table.params.bounds, c.b.table.params.bounds)
    if bounds[0] == bounds[1]:
        return names
    return (f"{names[0]} (bounds {','.join(map(str, bounds[0]))})",
            f"{names[1]} (bounds {','.join(map(str, bounds[1]))})")


def distance_line(c: Any) -> str:
    """The three distances in one line."""
    d = c.distances
    return (f"distances: ks {d.ks:.4f}, tv {d.tv:.4f}, w1 {d.w1:,.2f} tokens"
            + ("" if d.exact else " (not exact: see the warning)"))


def print_compare(c: Any, console: Any) -> None:
    """Summary side by side, the distances, then the per-bucket deltas."""
    from rich.markup import escape

    view = rich_table(escape("  vs  ".join(side_names(c))), ("", "A", "B", "B - A"))
    for row in _summary(c):
        view.add_row(*row)
    console.print(view)
    console.print(distance_line(c), highlight=False)
    per = rich_table("per bucket", _BUCKET_HEAD,
                     caption="A, B: bucket edges; batches: est. batches; padding: fixed policy")
    for b in c.buckets:
        per.add_row(*_bucket_cells(b))
    console.print(per)
    if c.group_by is not None:
        view = rich_table(f"by {escape(c.group_by)}", _GROUP_HEAD,
                          caption="% of each side's samples and tokens; ks: the group's "
                          "lengths, B against A")
        for name, g in c.groups.items():
            view.add_row(*map(escape, _group_cells(name, g)))
        console.print(view)
    print_warnings(console, c.warnings)


def compare_markdown(c: Any) -> str:
    out = ["| | A | B | B - A |", "|---|--:|--:|--:|"]
    out += [f"| {' | '.join(row)} |" for row in _summary(c)]
    out += ["", distance_line(c), "", markdown_table([list(_BUCKET_HEAD),
                                                      *map(_bucket_cells, c.buckets)], left=3)]
    if c.group_by is not None:
        out += ["", f"by {c.group_by}", "", markdown_table(
            [list(_GROUP_HEAD), *(_group_cells(n, g) for n, g in c.groups.items())])]
    out += [f"\n> **warning:** {w}" for w in c.warnings]
    return "\n".join(out) + "\n"


def compare_csv(c: Any) -> str:
    """A comparison in the `COMPARE_CSV` schema; with groups, a first column ``group``
    (empty on the whole's rows), `GROUP_CSV` last, and each group's rows after the
    whole's."""
    out = io.StringIO()
    grouped = c.group_by is not None
    head = ("group", *COMPARE_CSV, *GROUP_CSV) if grouped else COMPARE_CSV
    w = csv.DictWriter(out, head, lineterminator="\n", extrasaction="ignore")
    w.writeheader()
    _csv_rows(w, c, "" if grouped else None)
    for name, g in c.groups.items():
        _csv_rows(w, g, name)
    return out.getvalue()


def _csv_rows(w: Any, c: Any, group: str | None) -> None:
    """``c``'s rows: a row per bucket index, then its ``all`` row."""
    tag = {} if group is None else {"group": group}
    for b in c.buckets:
        w.writerow({**tag, "bucket": b.index, **b.to_dict()})
    d = c.to_dict()
    w.writerow({**d, **tag, "bucket": "all", "samples_a": d["a"]["total_samples"],
                "samples_b": d["b"]["total_samples"],
                "samples_delta": d["total_samples_shift"],
                "padding_pct_a": d["a"]["padding_pct"], "padding_pct_b": d["b"]["padding_pct"],
                "padding_pct_delta": d["padding_pct_shift"],
                "steps_per_epoch_a": d["a"]["steps_per_epoch"],
                "steps_per_epoch_b": d["b"]["steps_per_epoch"]})


#: The columns a grouped comparison's CSV adds: a group's share of each side.
GROUP_CSV = ("sample_pct_a", "sample_pct_b", "token_pct_a", "token_pct_b")
_GROUP_HEAD = ("group", "samples A", "samples B", "% samples A", "% samples B",
               "% tokens A", "% tokens B", "p50 A", "p50 B", "p99 A", "p99 B", "ks")


def _group_cells(name: str, g: Any) -> list[str]:
    """A group's `Comparison` as the group table's cells."""
    a, b = g.a.to_dict(), g.b.to_dict()
    pct = [f"{g.shares[k]:.1f}" for k in GROUP_CSV]
    return [name, _num(a["total_samples"]), _num(b["total_samples"]), *pct,
            _num(a["percentiles"].get("p50")), _num(b["percentiles"].get("p50")),
            _num(a["percentiles"].get("p99")), _num(b["percentiles"].get("p99")),
            f"{g.distances.ks:.4f}" if g.both_sides else "-"]
