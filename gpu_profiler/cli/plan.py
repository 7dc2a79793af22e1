"""``gpu-profiler plan``: one epoch's batches of sample indices, for training loops that
load a precomputed order."""

from __future__ import annotations

from typing import Annotated

import typer

from gpu_profiler.cli import analysis as a
from gpu_profiler.cli import options as o
from gpu_profiler.cli.output import guard, show


@o.scan_options
@a.plan_options
def plan(
    paths: o.Paths_,
    emit_order: Annotated[str | None, typer.Option(
        "--emit-order", metavar="FILE",
        help="Also write the bucket of every batch to FILE (one per line, or "
        "numpy .npy).")] = None,
    *,
    opts: o.ScanOptions,
    sampling: a.PlanOptions,
) -> None:
    """Write one epoch's batches to -o FILE.npz: `indices` (every sample index in batch
    order), `offsets` (batch boundaries), `bucket` and `tokens` (per batch) and `params`;
    print the plan's summary (batches, steps, longest run, padding).

    Batches s*W .. s*W+W-1 make step s, one per rank (W = --world-size). A DatasetDict's
    train split is planned unless --split names another (as suggest and schedule do).
    """
    from gpu_profiler.analysis.schedule import plan_mix, write_order
    from gpu_profiler.errors import ProfilerError
    from gpu_profiler.plan_file import save_plan
    from gpu_profiler.render import plan as r
    from gpu_profiler.sampler import batch_tokens, planned_sampler, summarize

    if not opts.output:
        raise ProfilerError("plan writes its batches to a file: pass -o FILE.npz")
    guard({"-o": opts.output, "--emit-order": emit_order}, *paths)
    sampler, split = planned_sampler(opts.source(paths), sampling.epoch,
                                     world_size=opts.world_size, **sampling.sampler(opts))
    indexed = sampler.plan().indices()  # every sample index in batch order, gathered once
    summary = summarize(sampler, split, indexed, opts.grad_accum)
    if sampler.groups is not None:
        from dataclasses import replace

        summary = replace(summary, group_by=sampling.group_by, groups=plan_mix(
            *indexed, opts.world_size, sampler.groups, sampler.group_names))
    save_plan(opts.output, *indexed, sampler.plan().bucket, summary.to_dict(),
              batch_tokens(sampler, indexed))
    if emit_order:
        write_order(emit_order, sampler.plan().bucket)
    show(summary, opts.output_format, None, r.print_plan, r.plan_markdown, r.plan_csv, opts.width)
