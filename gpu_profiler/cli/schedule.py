"""``gpu-profiler schedule``: simulate batch orders over an epoch."""

from __future__ import annotations

from typing import Annotated

import typer

from gpu_profiler.cli import analysis as a
from gpu_profiler.cli import options as o
from gpu_profiler.cli.output import enforce, gates, guard, show


@o.scan_options
def schedule(
    paths: o.Paths_,
    order: Annotated[list[str] | None, typer.Option(
        "--order", metavar="[random|uniform-bucket|sequential|stride|all]",
        help="random, uniform-bucket, sequential, stride, or all (repeat or "
        "comma-separate) (default: random,stride).")] = None,
    trials: Annotated[int | None, typer.Option(
        "--trials", metavar="N",
        help="Seeds per random order for the expected longest run (default: 100, "
        "fewer, at least 10, past 20k batches an epoch; the count used is reported).")] = None,
    log_window: Annotated[int, typer.Option(
        "--log-window", metavar="N",
        help="Batches per logging window (for the windowed spread).")] = 50,
    seed: Annotated[int, typer.Option(
        "--seed", metavar="N", help="Seed of the random orders.")] = 0,
    policy: Annotated[str, typer.Option(
        "--policy", metavar="[fixed|sorted]",
        help="Batches per bucket from this policy: fixed or sorted.")] = "fixed",
    drop_last: a.DropLast = False,
    max_run: a.MaxRun = None,
    group_by: a.GroupBy = None,
    plot: a.Plot = None,
    fail_if: o.FailIf = None,
    emit_order: Annotated[list[str] | None, typer.Option(
        "--emit-order", metavar="[ORDER=]FILE",
        help="Write the bucket index of every batch to FILE (one per line, "
        "or numpy .npy): the interleaved (stride) order, or ORDER=FILE for another; "
        "repeatable.")] = None,
    *,
    opts: o.ScanOptions,
) -> None:
    """Simulate the order of an epoch's batches and what it does to the loss curve.

    Reports same-bucket runs, when each bucket runs out, the mix of the last 10%, and how
    much the mean batch length swings between logging windows. Of a DatasetDict, the train
    split is simulated unless --split names another. PATH may also be a histogram saved
    with --save-hist.
    """
    from dataclasses import replace

    from gpu_profiler.analysis.advice import advise, attach
    from gpu_profiler.analysis.schedule import parse_orders, simulate_schedule, write_order
    from gpu_profiler.render import analysis as r
    from gpu_profiler.render import plots

    conditions = gates("schedule", fail_if)
    params = opts.params()
    orders = parse_orders(order or ("random", "stride"))
    emits = [_emit_target(e, orders) for e in emit_order or ()]
    guard({"-o": opts.output, "--plot": plot,
           **{f"--emit-order {e}": f for e, (_, f) in zip(emit_order or (), emits, strict=True)}},
          *paths)
    hist, split, groups = a.load_groups(paths, opts, group_by)
    result = simulate_schedule(hist, orders, params, policy=policy, drop_last=drop_last,
                               trials=trials, log_window=log_window, seed=seed,
                               max_run=max_run, groups=groups)
    result = attach(replace(result, split=split), advise(hist, params, drop_last=drop_last))
    for name, target in emits:
        write_order(target, result.order(name))
    if plot:
        plots.save_figure(plots.schedule_figure(result, plots.titled(
            o.one(paths), "batch order over the epoch", split)), plot)
    show(result, opts.output_format, opts.output, r.print_schedule, r.schedule_markdown,
         r.schedule_csv, opts.width)
    enforce(conditions, result)


def _emit_target(spec: str, orders: tuple[str, ...]) -> tuple[str, str]:
    """``FILE`` (the stride order, or the one order simulated) or ``ORDER=FILE``."""
    from gpu_profiler.analysis.schedule import ORDERS
    from gpu_profiler.errors import ProfilerError

    name, sep, target = spec.partition("=")
    if sep and name in ORDERS:
        if name not in orders:
            raise ProfilerError(f"--emit-order {spec}: order {name!r} is not simulated "
                                f"(--order {','.join(orders)})")
        return name, target
    if "stride" in orders or len(orders) == 1:
        return ("stride" if "stride" in orders else orders[0]), spec
    raise ProfilerError(f"--emit-order {spec}: which order? {', '.join(orders)} are "
                        "simulated and none is stride: write ORDER=FILE")
