"""``gpu-profiler plan``: one epoch's batches of sample indices, for training loops that
load a precomputed order."""

from __future__ import annotations

from typing import Annotated

import typer

from gpu_profiler.cli import analysis as a
from gpu_profiler.cli import options as o
from gpu_profiler.cli.output import guard, show


@o.scan_options
def plan(
    paths: o.Paths_,
    policy: Annotated[str, typer.Option(
        "--policy", metavar="[fixed|sorted|packed]",
        help="fixed (the bucket table's batch size per bucket), sorted (filled under the "
        "token budget) or packed (rows of samples up to --max-seq-len, the rows profile "
        "--policy packed counts; a batch's rows are its samples cut greedily in order).")
    ] = "fixed",
    order: Annotated[str, typer.Option(
        "--order", metavar="[stride|random]",
        help="stride (the interleaving planner) or random (steps shuffled).")] = "stride",
    seed: Annotated[int, typer.Option("--seed", metavar="N", help="Seed of every shuffle.")] = 0,
    epoch: Annotated[int, typer.Option("--epoch", metavar="N",
                                       help="Which epoch's plan (with the seed, "
                                       "decides it).")] = 0,
    drop_last: a.DropLast = False,
    max_run: a.MaxRun = None,
    mixed_steps: Annotated[bool, typer.Option(
        "--mixed-steps", metavar="", help="Let one step's micro-batches (one per rank) come from "
        "different buckets (default: one bucket per step, so no rank waits on another).")] = False,
    drop_outside: Annotated[bool, typer.Option(
        "--drop-outside", metavar="", help="Plan without the samples no bucket holds (null, "
        "negative, or outside the bounds once clipped); by default they are an error "
        "that says how many.")] = False,
    emit_order: Annotated[str | None, typer.Option(
        "--emit-order", metavar="FILE",
        help="Also write the bucket of every batch to FILE (one per line, or "
        "numpy .npy).", show_default=False)] = None,
    *,
    opts: o.ScanOptions,
) -> None:
    """Write one epoch's batches to -o FILE.npz: `indices` (every sample index in batch
    order), `offsets` (batch boundaries), `bucket` (per batch) and `params`; print the
    plan's summary (batches, steps, longest run, padding).

    Batches s*W .. s*W+W-1 make step s, one per rank (W = --world-size). A DatasetDict's
    train split is planned unless --split names another (as suggest and schedule do).
    """
    from gpu_profiler import engine
    from gpu_profiler.analysis.schedule import write_order
    from gpu_profiler.errors import ProfilerError
    from gpu_profiler.histogram import LengthHistogram
    from gpu_profiler.lengths import ROW_ORDER, of_plan
    from gpu_profiler.plan_file import save_plan
    from gpu_profiler.render import plan as r
    from gpu_profiler.sampler import BucketBatchSampler, summarize

    if not opts.output:
        raise ProfilerError("plan writes its batches to a file: pass -o FILE.npz")
    guard({"-o": opts.output, "--emit-order": emit_order}, *paths)
    params = opts.params()
    saved = next((p for p in paths if LengthHistogram.is_saved(p)), None)
    if saved:
        raise ProfilerError(f"{saved}: a saved histogram has no per-sample lengths; plan "
                            "reads the corpus itself")
    planned = engine.plan(opts.source(paths), ROW_ORDER)  # listed once
    split = planned.analysed_split()
    x = of_plan(planned.only(split))
    sampler = BucketBatchSampler(x, bounds=params.bounds, max_seq_len=params.max_seq_len,
                                 token_budget=params.token_budget,
                                 max_batch_size=params.max_batch_size, policy=policy,
                                 order=order, seed=seed, world_size=params.world_size,
                                 drop_last=drop_last, max_run=max_run,
                                 align_ranks=not mixed_steps, drop_outside=drop_outside)
    sampler.set_epoch(epoch)
    indexed = sampler.plan().indices()  # every sample index in batch order, gathered once
    summary = summarize(sampler, split, indexed)
    save_plan(opts.output, *indexed, sampler.plan().bucket, summary.to_dict())
    if emit_order:
        write_order(emit_order, sampler.plan().bucket)
    show(summary, opts.output_format, None, r.print_plan, r.plan_markdown, r.plan_csv, opts.width)
