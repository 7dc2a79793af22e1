"""The typer application: thin commands that parse options, call the API, render."""

from __future__ import annotations

import copy
import functools
import importlib
from typing import Annotated, Any

import typer

from gpu_profiler.cli import analysis as analysis_opts
from gpu_profiler.cli import options as o
from gpu_profiler.cli import sharding
from gpu_profiler.cli.output import enforce, gates, guard, show


def _plain_arguments() -> None:
    """Name arguments in the usage line as click does, ``PATH``: typer (0.26 and later)
    writes a required one ``{PATH}``."""
    from typer.core import TyperArgument

    def usage(self: TyperArgument, ctx: Any) -> list[str]:
        metavar = self.make_metavar(ctx)
        return [metavar if self.required else f"[{metavar}]"]

    TyperArgument.get_usage_pieces = usage  # type: ignore[method-assign]


_plain_arguments()
app = typer.Typer(
    name="gpu-profiler", add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
    rich_markup_mode=None,
    help="Exact length histograms of LLM training corpora, and the bucket / batch / padding "
         "statistics they decide.")


def _version(value: bool) -> None:
    if value:
        from gpu_profiler import __version__

        typer.echo(f"gpu-profiler {__version__}")
        raise typer.Exit()


@app.callback()
def _main(version: Annotated[bool, typer.Option(
        "--version", metavar="",
        callback=_version, is_eager=True, help="Print the version.")] = False,
) -> None:
    """gpu-profiler: profile the length distribution of a training corpus."""


def render(result: Any, fmt: o.OutputFormat, output: str | None,
           width: int | None = None) -> None:
    """Render a ProfileResult in the chosen format."""
    from gpu_profiler.render import formats
    from gpu_profiler.render.table import print_profile

    show(result, fmt, output, print_profile, formats.to_markdown, formats.to_csv, width)


@app.command()
@o.scan_options
def profile(
    paths: o.Paths_,
    save_hist: Annotated[str | None, typer.Option(
        "--save-hist", metavar="FILE",
        help="Also save the exact histogram (JSON) for later re-analysis.")] = None,
    policy: analysis_opts.Policy = None,
    drop_last: analysis_opts.DropLast = False,
    group_by: analysis_opts.GroupBy = None,
    sft: analysis_opts.Sft = None,
    dpo: analysis_opts.Dpo = None,
    sft_labels: analysis_opts.SftLabels = None,
    sft_mask: analysis_opts.SftMask = None,
    plot: analysis_opts.Plot = None,
    fail_if: o.FailIf = None,
    workers: sharding.Workers = None,
    dask: sharding.Dask = None,
    part: sharding.PartOf = None,
    cache_dir: sharding.CacheDir = None,
    skip_bad_shards: sharding.SkipBad = False,
    *,
    opts: o.ScanOptions,
) -> None:
    """Scan PATH once and print the per-bucket batch table."""
    from gpu_profiler.api import profile as run_profile
    from gpu_profiler.request import Sharding

    conditions = gates("profile", fail_if)
    shape = analysis_opts.shape(sft, dpo, sft_labels, sft_mask)
    guard({"-o": opts.output, "--save-hist": save_hist, "--plot": plot}, *paths)
    with sharding.client(workers, dask, opts) as client:
        result = run_profile(opts.source(paths), **opts.bucketing(), policies=policy or (),
                             drop_last=drop_last, group_by=group_by, shape=shape,
                             execution=opts.execution(),
                             sharding=Sharding(client, cache_dir, part, skip_bad_shards))
    if save_hist:
        result.histogram.save(save_hist, result.report.provenance,
                              (result.mixture.by, result.group_histograms)
                              if result.mixture else None)
    if plot:
        from gpu_profiler.render import plots

        plots.save_figure(plots.mixture_figure(result) if result.mixture else
                          plots.shape_figure(result) if result.shape else
                          plots.profile_figure(result.histogram, result.table, result.source,
                                               drop_last=drop_last), plot)
    render(result, opts.output_format, opts.output, opts.width)
    skipped = sharding.name_skipped(result.report)
    enforce(conditions, result)  # a condition that holds exits 1, before a skip's 3
    if skipped:
        raise typer.Exit(3)


@app.command(short_help="Build the demo corpus (a real HF dir) and profile it.")
def demo(
    ctx: typer.Context,
    backend: o.Backend = "auto",
    output_format: o.OutFormat = o.OutputFormat.table,
    directory: Annotated[str | None, typer.Option(
        "--dir", metavar="DIR",
        help="Where to build the demo corpus (default: the user cache).")] = None,
    report: Annotated[str | None, typer.Option(
        "--report", metavar="FILE", help="Also write the demo's HTML report (gpu-profiler "
        "report) to FILE and print its path.")] = None,
) -> None:
    """Build the embedded demo corpus (a real HF save_to_disk dir) and profile it."""
    from gpu_profiler.api import profile as run_profile
    from gpu_profiler.demo import build_demo

    if report:
        from gpu_profiler.cli.report import command_line, write_report
        from gpu_profiler.io.output import check_writable
        from gpu_profiler.render import plots

        plots.require_matplotlib("--report")
        check_writable(report)
    path = build_demo(directory)
    guard({"--report": report}, str(path))
    if output_format is o.OutputFormat.table:
        typer.echo(f"demo corpus: {path}", err=True)
    render(run_profile(path, backend=backend), output_format, None)
    if report:
        write_report([str(path)], o.ScanOptions(backend=backend, quiet=True, output=report),
                     command=command_line(ctx))
        typer.echo(f"demo report: {report}", err=True)


@app.command(short_help="Say which histogram backends work here, and why.")
def backends() -> None:
    """Say which histogram backends work here, and why the others do not."""
    from gpu_profiler.backends import available_backends, get_backend

    auto = get_backend("auto").name
    for name, reason in available_backends().items():
        state = "available" if reason is None else f"unavailable: {reason}"
        typer.echo(f"{name:6} {state}{'  (auto)' if name == auto else ''}")
        if name == "cuda" and reason is None:
            from gpu_profiler.backends.cuda_backend import describe

            typer.echo(f"       {describe()}")
        if name == "numba" and reason is None:
            from gpu_profiler import native

            typer.echo(f"       kernels: {native.status()}")


#: The commands defined in modules of their own (``gpu_profiler.cli.NAME``, its function
#: ``NAME``), in the order help lists them after the three above, with their short help: a
#: module is imported only when its command runs, or help lists them all.
ELSEWHERE = {
    "suggest": "Propose bucket bounds and compare them with yours.",
    "schedule": "Simulate an epoch's batch order and its loss curve.",
    "plan": "Write one epoch's batches for training (-o FILE.npz).",
    "compare": "Compare two corpora, runs or bucketings (B - A).",
    "report": "Write one offline HTML page of every analysis.",
    "merge": "Sum the partial histograms of a --part I/N scan.",
    "diagnose": "Say whether batch composition bands a training loss log.",
    "blend": "Profile a Megatron-LM data blend as it trains (--data-path).",
}


@functools.cache
def _elsewhere(name: str) -> Any:
    """The typer command ``name`` of `ELSEWHERE`, its module imported."""
    function = getattr(importlib.import_module(f"gpu_profiler.cli.{name}"), name)
    # A negative weight (-0.3) is blend's argument, refused with its reason, not an option.
    settings = {"ignore_unknown_options": True} if name == "blend" else None
    scratch = typer.Typer()
    scratch.command(short_help=ELSEWHERE[name], context_settings=settings)(function)
    return scratch.registered_commands[0]


def command(args: list[str]) -> Any:
    """The click command that runs ``args``: the app with only the command they start with,
    when they name one (building every command's options would cost ~10 ms a run, and
    importing every command's module ~5), else with every command (its help,
    ``--version``, a mistyped name)."""
    name = args[0] if args and not args[0].startswith("-") else None
    here = [c for c in app.registered_commands if getattr(c.callback, "__name__", "") == name]
    one = copy.copy(app)
    one.registered_commands = here or ([_elsewhere(name)] if name in ELSEWHERE else
                                       [*app.registered_commands, *map(_elsewhere, ELSEWHERE)])
    return typer.main.get_command(one)
