"""Shared by the analysis commands (``suggest``, ``schedule``, ``profile --policy``): their
options and loading the histogram of one split (a scan, or a histogram saved with
``--save-hist``)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from gpu_profiler.cli import options as o

Policy = Annotated[list[str] | None, typer.Option(
    "--policy", metavar="[estimate|fixed|sorted|packed|packed-ffd|all]",
    help="Add exact batching policies: estimate, fixed, sorted, packed, "
    "packed-ffd, or all (repeat the option or separate with commas).",
    show_default=False)]
DropLast = Annotated[bool, typer.Option(
    "--drop-last", metavar="",
    help="Drop each bucket's incomplete last batch; steps per epoch round down.")]

MaxRun = Annotated[int | None, typer.Option(
    "--max-run", metavar="N",
    help="Hard cap on same-bucket batches back to back in the interleaved "
    "(stride) order (default: the least possible; an infeasible cap names the minimum).",
    show_default=False)]

Plot = Annotated[str | None, typer.Option(
    "--plot", metavar="FILE", help="Also draw the result to FILE: .png, .svg or .pdf "
    "(needs matplotlib: pip install 'gpu-profiler[plot]').", show_default=False)]


def load_histogram(paths: str | list[str], opts: o.ScanOptions,
                   whole: bool = False) -> tuple[Any, str | None]:
    """The exact histogram to analyse and the split it is of: read back when ``paths`` is
    a saved histogram (JSON; no splits), else scanned (capped at ``--max-seq-len``, or
    binning every length when ``whole``): the ``--split``, else the ``train`` split, else
    the only one (see `gpu_profiler.engine.Planned.analysed_split`), the source listed
    once."""
    from gpu_profiler.api import analysed_histogram

    return analysed_histogram(opts.source(paths),
                              opts.execution(None if whole else opts.max_seq_len))
