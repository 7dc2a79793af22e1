"""``gpu-profiler merge``: sum the partial histograms of a ``--part I/N`` scan."""

from __future__ import annotations

from typing import Annotated

import typer

from gpu_profiler.cli import options as o


def merge(
    parts: Annotated[list[str], typer.Argument(
        metavar="FILES", help="The partial histograms (profile --part I/N --save-hist "
        "FILE), every slice once.")],
    output: o.Output = None,
) -> None:
    """Sum the slices of one scan into one histogram, after checking that they come from
    the same source listing, length column, cap and slicing, and that every slice is there
    once. Every command takes the result as PATH."""
    from gpu_profiler.cli.output import emit, guard
    from gpu_profiler.slices import merge_partials

    guard({"-o": output}, *parts)
    hist, provenance, groups = merge_partials(parts)
    emit(hist.to_json(provenance, groups), output)
