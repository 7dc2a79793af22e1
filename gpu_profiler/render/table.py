"""The terminal rendering: a rich table per split, summary and warnings."""

from __future__ import annotations

from typing import Any

from gpu_profiler.analysis.buckets import DOMINANT_BATCH_PCT, BucketTable
from gpu_profiler.render.formats import (
    composition_rows,
    distribution_line,
    group_rows,
    shape_lines,
    shape_rows,
    shared_warnings,
    split_tables,
    summary_line,
)


def print_profile(result: Any, console: Any) -> None:
    """Print ``result`` (a ProfileResult) on a rich console: one bucket table (of every
    split and their total, a DatasetDict's), each split's summary, then each warning once,
    naming the splits it applies to."""
    tables = split_tables(result) if result.splits else [("", result.table)]
    console.print(bucket_table_view(tables, _title(result)))
    from rich.markup import escape  # split and group names are text, not rich markup

    for name, table in tables:
        prefix = f"{escape(name)}: " if name else ""
        console.print(prefix + summary_line(table), highlight=False)
        console.print(prefix + distribution_line(table), highlight=False)
    if result.mixture is not None:
        console.print()
        for view in group_views(result):
            console.print(view)
    if result.shape is not None:
        console.print()
        for line in shape_lines(result):
            console.print(line, highlight=False)
        console.print(_rows_view(shape_rows(result), "loss tokens per bucket (after "
                                 "truncation)"))
    for text, names in shared_warnings(tables).items():
        where = escape(f" ({', '.join(names)})") if any(names) else ""
        console.print(f"[bold yellow]warning{where}:[/] {escape(text)}", highlight=False)
    console.print()
    if getattr(result, "policies", ()):
        from gpu_profiler.render.analysis import print_policies

        print_policies(result.policies, result.table.params, console)


def _title(result: Any) -> str:
    from rich.markup import escape  # paths are text, not rich markup

    return escape(f"{result.source} — {result.length_source}, backend {result.backend}")


def bucket_table_view(tables: list[tuple[str, BucketTable]], title: str) -> Any:
    """A rich Table of the buckets of each ``(split, table)``: with a split column when
    there are named splits, a section each."""
    from rich import box
    from rich.markup import escape  # a split is text, not rich markup
    from rich.table import Table

    view = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD,
                 padding=(0, 1), collapse_padding=True, pad_edge=False,
                 caption="%: share of samples; bsz: est. batch size; batches: samples / bsz"
                 + _cost_caption(tables), caption_justify="left")
    named = any(name for name, _ in tables)
    priced = any(not t.params.cost.is_default for _, t in tables)
    for col in ("split",) * named + ("bucket", "samples", "%", "tokens", "avg", "max", "bsz",
                                     "batches", "% batches") + ("cost", "% cost") * priced:
        view.add_column(col, justify="left" if col in ("split", "bucket") else "right",
                        no_wrap=True)
    for name, t in tables:
        for b in t.buckets:
            size = f"[red]{b.est_batch_size}[/]" if b.over_budget else str(b.est_batch_size)
            share = (f"[bold yellow]{b.batch_pct:.1f}[/]" if b.batch_pct > DOMINANT_BATCH_PCT
                     else f"{b.batch_pct:.1f}")
            view.add_row(*(escape(name),) * named, f"{b.index} [{b.lo},{b.hi})",
                         f"{b.samples:,}", f"{b.sample_pct:.1f}", _si(b.tokens),
                         f"{b.avg_len:,.0f}", f"{b.max_len:,}", size, f"{b.est_batches:,.1f}",
                         share, *(_g(b.est_cost), f"{b.cost_pct or 0.0:.1f}") * priced,
                         end_section=b is t.buckets[-1])
    return view


def _cost_caption(tables: list[tuple[str, BucketTable]]) -> str:
    """What the cost columns count, when a cost model prices the batches."""
    costs = {t.params.cost for _, t in tables if not t.params.cost.is_default}
    if not costs:
        return ""
    c = next(iter(costs))
    from rich.markup import escape  # a unit is text (a curve file's header), not markup

    from gpu_profiler.cost import cost_words

    how = (f", rows x (longest + {c.attention_weight:g} x longest^2)" if c.kind == "attention"
           else ", rows x curve(longest)" if c.kind == "curve" else "")
    return (f"\ncost: {cost_words(c, estimate=True)}{how}, in {escape(c.unit)}; % cost: "
            "share of the epoch's")


def _g(x: float | None) -> str:
    """A cost: 4 significant digits, compact."""
    if x is None:
        return ""
    return _si(x) if abs(x) >= 1e3 else f"{x:.4g}"


def _si(n: float) -> str:
    """Compact count: 27.4M, 1.2G (JSON keeps the exact number)."""
    for unit, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.1f}{unit}"
    return str(n)


def group_views(result: Any) -> list[Any]:
    """Two rich Tables of a grouped profile: each group's shares and lengths, and each
    bucket's composition by group."""
    from gpu_profiler.analysis.mixture import NOUNS

    by = NOUNS.get(result.mixture.by, result.mixture.by)
    split = f" (split {result.group_split})" if result.group_split else ""
    return [_rows_view(group_rows(result), f"by {by}{split}"),
            _rows_view(composition_rows(result), "bucket composition (% of the bucket's "
                       "samples)")]


def _rows_view(rows: list[list[str]], title: str) -> Any:
    """A rich Table of a header and body rows (the first column left-aligned)."""
    from rich import box
    from rich.markup import escape
    from rich.table import Table

    view = Table(title=escape(title), title_justify="left", box=box.SIMPLE_HEAD,
                 padding=(0, 1), collapse_padding=True, pad_edge=False)
    for i, col in enumerate(rows[0]):
        view.add_column(escape(col), justify="left" if i == 0 else "right", no_wrap=True)
    for row in rows[1:]:
        view.add_row(*map(escape, row))
    return view
