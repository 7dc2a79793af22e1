"""Renderings of a `gpu_profiler.sampler.PlanSummary` (``gpu-profiler plan``)."""

from __future__ import annotations

import csv
import io
from typing import Any

from gpu_profiler.analysis.schedule import PLAN_WINDOW
from gpu_profiler.cost import budget_of

_FIELDS = ("samples", "batches", "steps", "longest_run", "min_run", "tokens",
           "padded_tokens", "padding_pct", "dropped_samples", "split_batches")


def _lines(s: Any) -> list[tuple[str, str]]:
    p = s.params
    return [("split", s.split or "-"), ("policy / order", f"{s.policy} / {s.order}"),
            ("seed / epoch", f"{s.seed} / {s.epoch}"),
            ("ranks / grad_accum", f"{p.world_size} / {s.grad_accum or '-'}"),
            ("samples", f"{s.samples:,}"), ("batches", f"{s.batches:,}"),
            ("steps (one batch per rank)", f"{s.steps:,}"),
            ("longest same-bucket run (steps)",
             f"{s.longest_run:,} steps (least possible: {s.min_run:,})"),
            ("padding", f"{s.padding_pct:.2f}% ({s.padded_tokens - s.tokens:,} of "
                        f"{s.padded_tokens:,} computed tokens)"),
            *([("cost", f"{s.cost:,.6g} {p.cost.unit} ({p.cost.kind} cost model, budget "
                        f"{budget_of(p):g} a batch)")]
              if s.cost is not None else []),
            ("dropped samples", f"{s.dropped_samples:,}"),
            ("batches split to fill the last step", f"{s.split_batches:,}"),
            ("buckets ending before the last 2%", ", ".join(map(str, s.early_buckets))
             + " (the counts leave no room)" if s.early_buckets else "none"),
            *_group_lines(s)]


def _group_lines(s: Any) -> list[tuple[str, str]]:
    """With ``--group-by``: the plan's steps by group."""
    g = s.groups
    if g is None:
        return []
    run = f"{g.longest_run:,} steps" + (f" ({g.longest_run_group})" if g.longest_run_group
                                        else "") + f" (lower bound: {g.least_run:,})"
    return [(f"steps made mostly of one {s.group_by}", f"{g.mostly_batch_pct:.1f}%"),
            ("longest run of such steps", run),
            *((f"{s.group_by} {name}", f"{w['share']:.1f}% of the samples; "
               f"{w['min']:.1f}-{w['max']:.1f}% of a window of {PLAN_WINDOW} steps "
               f"(std {w['spread']:.1f})")
              for name, w in g.windows.items())]


def print_plan(s: Any, console: Any) -> None:
    """The plan's summary, then its batches per bucket, in the plain tables every other
    command prints (`gpu_profiler.render.analysis.rich_table`)."""
    from rich.markup import escape  # a split name, a cost unit: text, not rich markup

    from gpu_profiler.render.analysis import rich_table

    view = rich_table("epoch plan", ("", ""),
                      caption="longest run: the most steps in a row in which a rank's "
                              "batches share one bucket")
    view.show_header = False
    view.columns[1].justify = "left"
    for k, v in _lines(s):
        view.add_row(escape(k), escape(v))
    console.print(view)
    per = rich_table("batches per bucket", ("bucket", "batches"))
    p = s.params
    for i, (lo, hi, n) in enumerate(zip(p.bounds[:-1], p.bounds[1:], s.bucket_batches,
                                        strict=True)):
        per.add_row(f"{i} [{lo},{hi})", f"{n:,}")
    console.print(per)


def plan_markdown(s: Any) -> str:
    cells = ([c.replace("|", "\\|") for c in line] for line in _lines(s))
    return "\n".join(["| | |", "|---|---|", *(f"| {k} | {v} |" for k, v in cells)]) + "\n"


def plan_csv(s: Any) -> str:
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    g = s.groups
    w.writerow(("split", "policy", "order", *_FIELDS, *(
        ("mostly_step_pct", "group_longest_run", "group_least_run") if g else ())))
    w.writerow((s.split or "", s.policy, s.order, *(getattr(s, f) for f in _FIELDS), *(
        (g.mostly_batch_pct, g.longest_run, g.least_run) if g else ())))
    return out.getvalue()
