"""``gpu-profiler diagnose``: read a training loss log and say whether batch composition
bands it, and (given the batch order) how much the buckets explain."""

from __future__ import annotations

from dataclasses import fields
from typing import Annotated

import typer

from gpu_profiler.cli import analysis as a
from gpu_profiler.cli import options as o
from gpu_profiler.cli.output import enforce, gates, guard, show

#: ``--grad-accum``, ``--world-size`` and the outputs are diagnose's own.
_OWN = ("grad_accum", "world_size", "output_format", "output", "width")


@o.scan_options_except(*_OWN)
@a.plan_options
def diagnose(
    log: Annotated[str, typer.Argument(
        metavar="LOG", help="The loss log: a TensorBoard run directory or event file, or a "
        "CSV / JSONL / Parquet table of step and loss (a W&B or MLflow export).")],
    source: Annotated[list[str] | None, typer.Argument(
        metavar="SOURCE", help="The corpus the run trained on (PATHs, as plan takes them): "
        "its order is planned again as gpu-profiler plan plans it, with plan's options "
        "(--policy, --order, --seed, --bounds and the others), epoch after epoch from "
        "--epoch.")] = None,
    plan: Annotated[list[str] | None, typer.Option(
        "--plan", metavar="FILE", help="The batch order: the gpu-profiler plan file the run "
        "trained on (repeat it for each epoch, in order).")] = None,
    bucket_order: Annotated[str | None, typer.Option(
        "--bucket-order", metavar="FILE", help="The batch order as the bucket of every "
        "batch (--emit-order of plan or schedule: one per line, or .npy).")] = None,
    world_size: Annotated[int | None, typer.Option(
        "--world-size", metavar="N", help="Ranks: batches per plan step (default 1; a plan "
        "file says its own).")] = None,
    grad_accum: Annotated[int | None, typer.Option(
        "--grad-accum", metavar="N", help="Plan steps per optimizer step, as trained "
        "(default: what the plan file records, or plan would with SOURCE: 4 unless "
        "told; 1 with --bucket-order).")] = None,
    rank: Annotated[int | None, typer.Option(
        "--rank", metavar="N", help="The loss logged is this rank's (default: the mean "
        "over the ranks).")] = None,
    tag: Annotated[str | None, typer.Option(
        "--tag", metavar="NAME", help="The loss series: a TensorBoard scalar tag or a "
        "table column (default: the one named like a training loss).")] = None,
    step_column: Annotated[str | None, typer.Option(
        "--step-column", metavar="NAME", help="Tables: the step column (default: step, "
        "_step, global_step or iteration; else the row number).")] = None,
    log_format: Annotated[str | None, typer.Option(
        "--log-format", metavar="[tensorboard|csv|jsonl|parquet]",
        help="The log's format (default: from the path).")] = None,
    logged: Annotated[str, typer.Option(
        "--logged", metavar="[auto|sample|mean]", help="A logged value is the loss of its "
        "step (sample) or the mean since the last one (mean); auto: the better fit to the "
        "order.")] = "auto",
    step_offset: Annotated[int | None, typer.Option(
        "--step-offset", metavar="N", help="Logged step S is optimizer step S-N, counted "
        "from 0 (default: the best fit of -2..2).")] = None,
    window: Annotated[int, typer.Option(
        "--window", metavar="N", help="Steps per reading window: the curve is judged as "
        "means over this many steps (at least one logged point).")] = 10,
    trend_window: Annotated[int | None, typer.Option(
        "--trend-window", metavar="N", help="Logged points per trend fit (default: 101, or "
        "a tenth of the points when more).")] = None,
    skip: Annotated[int, typer.Option(
        "--skip", metavar="N", help="Leave out the steps before N (warm-up).")] = 0,
    debanded: Annotated[str | None, typer.Option(
        "--debanded", metavar="FILE", help="Also write every point's step, loss, trend, "
        "de-banded loss, band and bucket to FILE (CSV).")] = None,
    plot: a.Plot = None,
    fail_if: o.FailIf = None,
    output_format: o.OutFormat = o.OutputFormat.table,
    output: o.Output = None,
    width: o.Width = None,
    *,
    opts: o.ScanOptions,
    sampling: a.PlanOptions,
) -> None:
    """Read a training loss log and say whether batch composition bands its curve.

    From the loss alone: its bands (modes, shares, levels), period and ladders. With the
    batch order (--plan, --bucket-order, or the SOURCE with plan's options): how much of
    the detrended loss each point's buckets (and batch lengths) explain (R^2), the
    de-banded curve, and what the stride order would leave.
    """
    from gpu_profiler.analysis.diagnose import diagnose
    from gpu_profiler.errors import ProfilerError
    from gpu_profiler.losslog import read_loss_log
    from gpu_profiler.render import diagnose as r
    from gpu_profiler.render import plots

    conditions = gates("diagnose", fail_if)
    unused = [f"--{f.name.replace('_', '-')}" for given in (opts, sampling)
              for f in fields(given) if getattr(given, f.name) != f.default]
    if unused and not source:
        raise ProfilerError(f"{', '.join(unused)}: options of planning a SOURCE, and none "
                            "was given (gpu-profiler diagnose LOG SOURCE ...)")
    guard({"-o": output, "--plot": plot, "--debanded": debanded}, log, *(plan or ()),
          bucket_order, *(source or ()))
    loss = read_loss_log(log, series=tag, step_column=step_column, format=log_format)
    sampler = sampling.sampler(opts) if source else {}
    result = diagnose(loss, plan=plan or None, buckets=bucket_order,
                      source=opts.source(source) if source else None, world_size=world_size,
                      grad_accum=grad_accum, rank=rank, logged=logged, step_offset=step_offset,
                      window=window, trend_window=trend_window, skip=skip,
                      epoch=sampling.epoch,
                      **sampler)
    if debanded:
        from gpu_profiler.io.output import write_atomic

        write_atomic(debanded, r.curve_csv(result))
    if plot:
        plots.save_figure(plots.diagnose_figure(result, plots.titled(
            log, f"loss curve ({result.series})")), plot)
    show(result, output_format, output, r.print_diagnose, r.diagnose_markdown, r.diagnose_csv,
         width)
    enforce(conditions, result)

