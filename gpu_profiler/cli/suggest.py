"""``gpu-profiler suggest``: bucket bounds proposals for K buckets."""

from __future__ import annotations

from typing import Annotated

import typer

from gpu_profiler.cli import analysis as a
from gpu_profiler.cli import options as o
from gpu_profiler.cli.output import show


def suggest(
    path: o.Path_,
    buckets: Annotated[int, typer.Option(
        "--buckets", "-k", help="Number of buckets to propose.", rich_help_panel=a._ANA)],
    balance: Annotated[float, typer.Option(
        "--balance", help="Also propose 'balanced' bounds minimizing padded/real tokens + "
        "BALANCE x the largest bucket's batch share.", rich_help_panel=a._ANA)] = 0.0,
    drop_last: a.DropLast = False,
    column: o.Column = None,
    offsets_of: o.OffsetsOf = None,
    format: o.Format = None,
    split: o.Split = None,
    backend: o.Backend = "auto",
    device: o.Device = None,
    devices: o.Devices = None,
    quiet: o.Quiet = False,
    bounds: o.Bounds = o.DEFAULT_BOUNDS_TEXT,
    max_seq_len: o.MaxSeqLen = 8192,
    token_budget: o.TokenBudget = 49152,
    max_batch_size: o.MaxBatchSize = 64,
    grad_accum: o.GradAccum = 4,
    world_size: o.WorldSize = 1,
    output_format: o.OutFormat = o.OutputFormat.table,
    output: o.Output = None,
) -> None:
    """Propose bounds for K buckets and compare them with the current ones.

    Proposals: equal samples, equal tokens, equal batches, minimum expected padding (and
    balanced, with --balance), each printed as a full table next to the current bounds.
    PATH may also be a histogram saved with --save-hist.
    """
    from gpu_profiler.analysis.bounds import suggest_bounds
    from gpu_profiler.params import BucketParams, parse_bounds
    from gpu_profiler.render import analysis as r
    from gpu_profiler.render.output import check_writable

    params = BucketParams(parse_bounds(bounds), max_seq_len, token_budget, max_batch_size,
                          grad_accum, world_size)
    if output:
        check_writable(output)
    hist = a.load_histogram(path, column=column, offsets_of=offsets_of, format=format,
                            split=split, backend=backend, device=device, devices=devices,
                            quiet=quiet, max_seq_len=max_seq_len)
    result = suggest_bounds(hist, buckets, params, balance=balance, drop_last=drop_last)
    show(result, output_format, output, r.print_suggestion, r.suggestion_markdown,
           r.suggestion_csv)
