"""``gpu-profiler suggest``: bucket bounds proposals for K buckets."""

from __future__ import annotations

from typing import Annotated

import typer

from gpu_profiler.cli import analysis as a
from gpu_profiler.cli import options as o
from gpu_profiler.cli.output import guard, show


@o.scan_options
def suggest(
    paths: o.Paths_,
    buckets: Annotated[int, typer.Option(
        "--buckets", "-k", metavar="N",
        help="Number of buckets to propose.")],
    balance: Annotated[float, typer.Option(
        "--balance", metavar="X",
        help="Also propose 'balanced' bounds minimizing padded/real tokens + "
        "BALANCE x the largest bucket's batch share.")] = 0.0,
    drop_last: a.DropLast = False,
    group_by: a.GroupBy = None,
    plot: a.Plot = None,
    *,
    opts: o.ScanOptions,
) -> None:
    """Propose bounds for K buckets and compare them with the current ones.

    Proposals: equal samples, equal tokens, equal batches, minimum expected padding (and
    balanced, with --balance), each printed as a full table next to the current bounds.
    Of a DatasetDict, the train split is analysed unless --split names another. PATH may
    also be a histogram saved with --save-hist.
    """
    from dataclasses import replace

    from gpu_profiler.analysis.advice import advise, attach
    from gpu_profiler.analysis.bounds import suggest_bounds
    from gpu_profiler.render import analysis as r
    from gpu_profiler.render import plots

    params = opts.params()
    guard({"-o": opts.output, "--plot": plot}, *paths)
    hist, split, groups = a.load_groups(paths, opts, group_by)
    result = suggest_bounds(hist, buckets, params, balance=balance, drop_last=drop_last)
    if groups is not None:
        from gpu_profiler.analysis.schedule import sources_of

        result = sources_of(result, hist, groups)
    result = attach(replace(result, split=split), advise(
        hist, params, buckets, drop_last=drop_last, suggestion=result))
    if plot:
        plots.save_figure(plots.suggest_figure(hist, result, plots.titled(
            o.one(paths), f"bounds for {buckets} buckets", split)), plot)
    show(result, opts.output_format, opts.output, r.print_suggestion, r.suggestion_markdown,
         r.suggestion_csv, opts.width)
