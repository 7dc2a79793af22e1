"""``gpu-profiler report``: everything the other commands say about one source, as one
offline HTML page."""

from __future__ import annotations

import shlex
from typing import Annotated, Any

import typer

from gpu_profiler.cli import analysis as a
from gpu_profiler.cli import options as o
from gpu_profiler.cli.output import emit, guard


@o.scan_options_except("output_format", "width")
def report(
    ctx: typer.Context,
    paths: o.Paths_,
    buckets: Annotated[int | None, typer.Option(
        "--buckets", "-k", metavar="N", help="Buckets the bounds suggestions are for "
        "(default: as many as --bounds has).")] = None,
    seed: Annotated[int, typer.Option(
        "--seed", metavar="N", help="Seed of the random batch order.")] = 0,
    drop_last: a.DropLast = False,
    group_by: a.GroupBy = None,
    sft: a.Sft = None,
    dpo: a.Dpo = None,
    sft_labels: a.SftLabels = None,
    sft_mask: a.SftMask = None,
    log: Annotated[str | None, typer.Option(
        "--log", metavar="LOG", help="Also diagnose this training loss log (gpu-profiler "
        "diagnose: from the loss alone, or with --log-plan).")] = None,
    log_plan: Annotated[list[str] | None, typer.Option(
        "--log-plan", metavar="FILE", help="The plan file(s) LOG trained on, one per epoch "
        "(its optimizer steps: the --grad-accum each records).")] = None,
    *,
    opts: o.ScanOptions,
) -> None:
    """Write one self-contained HTML page (-o FILE, else stdout) on PATH.

    The summary and percentiles, the bucket table, every batching policy, the bounds
    suggestions, the random and interleaved batch orders, every warning with its fix,
    the plots, and the command that made it. Inline CSS and SVG only: the page opens
    offline and fetches nothing. Of a DatasetDict, policies, suggestions and orders are of
    the train split unless --split names another. With --group-by, a section on the
    groups: their shares and each bucket's composition; with --sft or --dpo, on the
    samples' parts: loss tokens per bucket and the prompt x completion heat map (the
    tables are then the split's).
    """
    guard({"-o": opts.output}, *paths, log, *(log_plan or ()))
    write_report(paths, opts, command=command_line(ctx), buckets=buckets, seed=seed,
                 drop_last=drop_last, group_by=group_by,
                 shape=a.shape(sft, dpo, sft_labels, sft_mask), log=log, log_plan=log_plan)


def write_report(paths: list[str], opts: o.ScanOptions, *, command: str, buckets: int | None = None,
                 seed: int = 0, drop_last: bool = False, group_by: str | None = None,
                 shape: Any = None, log: str | None = None,
                 log_plan: list[str] | None = None) -> None:
    """Run every analysis on ``paths`` and write the page to ``opts.output`` (stdout when
    None); ``command`` is the command line the page says made it."""
    from dataclasses import replace

    from gpu_profiler import __version__
    from gpu_profiler.analysis.advice import advise, attach
    from gpu_profiler.analysis.bounds import suggest_bounds
    from gpu_profiler.analysis.schedule import simulate_schedule, sources_of
    from gpu_profiler.api import profile
    from gpu_profiler.errors import ProfilerError
    from gpu_profiler.render import plots
    from gpu_profiler.render.formats import split_tables
    from gpu_profiler.render.report import mixture, report_html, shaped

    params = opts.params()
    if buckets is not None and buckets < 1:
        raise ProfilerError(f"--buckets must be a positive integer, got {buckets}")
    k = buckets or len(params.bounds) - 1
    plots.require_matplotlib("report")
    result = profile(opts.source(paths), **opts.bucketing(), execution=opts.execution(),
                     policies="all", drop_last=drop_last, group_by=group_by, shape=shape)
    split = result.policies[0].split
    hist = result.split_histograms.get(split, result.histogram) if split else result.histogram
    groups = None if result.mixture is None else (result.mixture.by, result.group_histograms)
    suggestion, no_suggestion = None, ""
    try:
        proposed = suggest_bounds(hist, k, params, drop_last=drop_last)
    except ProfilerError as exc:  # the data allows none (no samples, one over the budget)
        no_suggestion = str(exc)
    else:
        suggestion = attach(replace(proposed, split=split), advise(
            hist, params, k, drop_last=drop_last, suggestion=proposed))
        if groups is not None:
            suggestion = sources_of(suggestion, hist, groups)
    schedule = simulate_schedule(hist, ("random", "stride"), params, drop_last=drop_last,
                                 seed=seed, groups=groups)
    # The advice schedule attaches is the analysed table's, which profile computed.
    analysed = result.splits.get(split or "", result.table)
    schedule = attach(replace(schedule, split=split), analysed.advice)
    tables = split_tables(result)
    of = f" [{split}]" if split else ""
    found = [(f"profile ({name})", table.warnings) for name, table in tables]
    found += [(f"policy {p.name}", p.warnings) for p in result.policies]
    found += [("suggest", suggestion.warnings if suggestion else ()),
              ("schedule", schedule.warnings)]
    figures = {
        "profile": ("length distribution and per-bucket shares (all splits)",
                    plots.profile_figure(result.histogram, result.table, result.source,
                                         drop_last=drop_last)),
        "schedule": (f"batch order over the epoch{of}", plots.schedule_figure(
            schedule, plots.titled(result.source, "batch order over the epoch", split)))}
    if suggestion:
        figures["suggest"] = (f"current and proposed bucket edges{of}", plots.suggest_figure(
            hist, suggestion, plots.titled(result.source, f"bounds for {k} buckets", split)))
    html = report_html(
        title=f"gpu-profiler report: {result.source}", command=command,
        parameters=[("gpu-profiler", __version__), ("backend", result.backend),
                    ("length source", result.length_source),
                    *{**params.to_dict(), "bounds": opts.bounds}.items(),
                    ("analysed split", split or "none (no splits)"), ("suggested buckets", k),
                    ("seed", seed), ("drop_last", drop_last)],
        tables=tables, pols=result.policies, suggestion=suggestion or no_suggestion,
        schedule=schedule, found=found, figures=figures,
        section=mixture(result, plots.mixture_figure(result)) if result.mixture else
        shaped(result, plots.shape_figure(result)) if result.shape else "",
        log=_diagnosed(log, log_plan) if log else "")
    emit(html, opts.output)


def _diagnosed(log: str, plans: list[str] | None) -> str:
    """The report's section on a training loss log (before the command)."""
    from gpu_profiler.analysis.diagnose import diagnose
    from gpu_profiler.render import plots
    from gpu_profiler.render.diagnose import diagnose_html

    r = diagnose(log, plan=plans)
    return diagnose_html(r, plots.diagnose_figure(r, plots.titled(log, "loss curve")))


def command_line(ctx: Any) -> str:
    """The command that reproduces this report, every option spelled out (defaults too),
    shell-quoted."""
    words = ["gpu-profiler", ctx.info_name]
    for p in ctx.command.params:
        value = ctx.params.get(p.name)
        value = getattr(value, "value", value)  # an Enum choice
        if p.param_type_name == "argument":
            words += [str(v) for v in value] if isinstance(value, (list, tuple)) else \
                [str(value)]
        elif getattr(p, "is_flag", False):
            words += [p.opts[0]] if value else []
        elif value is not None:
            for v in value if isinstance(value, (list, tuple)) else [value]:
                words += [p.opts[0], str(v)]
    return shlex.join(words)
