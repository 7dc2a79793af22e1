"""Printing a result in the chosen format, or writing it atomically to ``--output``."""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

import typer

from gpu_profiler.cli import options as o
from gpu_profiler.cli import printable


def gates(command: str, exprs: list[str] | None) -> list[Any]:
    """The ``--fail-if`` conditions of ``command``, checked before any work is done."""
    if not exprs:
        return []
    from gpu_profiler.gates import METRICS, parse_gates

    return parse_gates(exprs, METRICS[command])


def guard(outputs: dict[str, str | None], *inputs: str | None) -> None:
    """Before any scan: refuse an output that would replace an input or another output
    (`gpu_profiler.io.output.check_outputs`: one line, exit 2), say on stderr how each PATH
    whose name exists and whose glob would match other files is read (as itself), then
    refuse a ``--plot`` file that cannot be written (`gpu_profiler.render.plots.check_plot`)."""
    from gpu_profiler.io.output import check_outputs
    from gpu_profiler.readers import glob_also_matches, named_paths

    given = [p for p in inputs if p]
    check_outputs(outputs, given, named_paths)
    for path in given:
        others = glob_also_matches(path)
        if others:
            n = len(others)
            typer.echo(printable(f"gpu-profiler: note: {path} exists and is read as itself, "
                                 f"not as a glob (which would also match {n} other "
                                 f"file{'s' * (n > 1)}: {others[0]}{', ...' * (n > 1)})"),
                       err=True)
    plot = outputs.get("--plot")
    if plot:
        from gpu_profiler.render.plots import check_plot

        check_plot(plot)


def enforce(conditions: list[Any], result: Any) -> None:
    """After the output is written: print each condition that holds, and exit 1 if any."""
    if not conditions:
        return
    from gpu_profiler.gates import failures, metrics

    failed = failures(conditions, metrics(result.to_dict()))
    for line in failed:
        typer.echo(line, err=True)
    if failed:
        raise typer.Exit(1)


def emit(text: str, output: str | None) -> None:
    """Print ``text`` or write it atomically to ``output``."""
    if output:
        from gpu_profiler.io.output import write_atomic

        write_atomic(output, text)
    else:
        typer.echo(text, nl=False)


def show(result: Any, fmt: o.OutputFormat, output: str | None,
         table: Callable[[Any, Any], None], markdown: Callable[[Any], str],
         csv: Callable[[Any], str], width: int | None = None) -> None:
    """Print (or write atomically to ``output``) ``result`` as a rich table (``width``:
    see `gpu_profiler.render.fit`), JSON, Markdown or CSV."""
    if fmt is o.OutputFormat.table:
        from gpu_profiler.render.fit import console

        if output:
            recorder = console(width, file=io.StringIO(), record=True)
            table(result, recorder)
            emit(recorder.export_text(), output)
        else:
            table(result, console(width))
        return
    if fmt is o.OutputFormat.json:
        from gpu_profiler.render.formats import to_json

        emit(to_json(result), output)
    else:
        emit((markdown if fmt is o.OutputFormat.markdown else csv)(result), output)
