"""``gpu-profiler compare``: two corpora, two runs, or one corpus under two bucketings."""

from __future__ import annotations

from typing import Annotated

import typer

from gpu_profiler.cli import analysis as a
from gpu_profiler.cli import options as o
from gpu_profiler.cli.output import enforce, gates, guard, show

Other = Annotated[str | None, typer.Argument(
    metavar="OTHER", help="The source to compare with PATH (a dataset or a saved "
    "histogram; default: PATH itself, under --bounds-b).")]
BoundsB = Annotated[str | None, typer.Option(
    "--bounds-b", metavar="EDGES", help="Bucket edges for OTHER (default: --bounds).")]
ColumnB = Annotated[str | None, typer.Option(
    "--column-b", metavar="COLUMN", help="OTHER's integer length column (default: PATH's "
    "length source).")]
OffsetsOfB = Annotated[str | None, typer.Option(
    "--offsets-of-b", metavar="COLUMN", help="OTHER's lengths from this list column's "
    "offsets (default: PATH's length source).")]
FormatB = Annotated[str | None, typer.Option(
    "--format-b", metavar="FORMAT", help="Force OTHER's input format (default: --format).")]
SplitB = Annotated[str | None, typer.Option(
    "--split-b", metavar="NAME", help="OTHER's split (default: --split, else train or the "
    "only one).")]


@o.scan_options
def compare(
    path: o.Path_,
    other: Other = None,
    bounds_b: BoundsB = None,
    column_b: ColumnB = None,
    offsets_of_b: OffsetsOfB = None,
    format_b: FormatB = None,
    split_b: SplitB = None,
    drop_last: a.DropLast = False,
    group_by: a.GroupBy = None,
    plot: a.Plot = None,
    fail_if: o.FailIf = None,
    *,
    opts: o.ScanOptions,
) -> None:
    """Compare OTHER (B) with PATH (A): per-bucket deltas, percentile shifts, and the
    distances between their lengths (ks, tv, w1).

    OTHER is read with PATH's source options unless a -b option names its own (e.g. an HF
    dir's --offsets-of input_ids against a JSONL file's --column-b length); of a
    DatasetDict, the train split is compared unless --split (--split-b) names another.
    Every delta is B - A.
    """
    from dataclasses import replace

    from gpu_profiler.analysis.compare import compare as run_compare
    from gpu_profiler.errors import ProfilerError
    from gpu_profiler.params import parse_bounds
    from gpu_profiler.render import compare as r
    from gpu_profiler.render import plots

    conditions = gates("compare", fail_if)
    params_a = opts.params()
    params_b = params_a if bounds_b is None else replace(params_a,
                                                         bounds=parse_bounds(bounds_b))
    guard({"-o": opts.output, "--plot": plot}, path, other)
    opts_b = replace(opts, format=format_b or opts.format, split=split_b or opts.split)
    if column_b or offsets_of_b:
        opts_b = replace(opts_b, column=column_b, offsets_of=offsets_of_b)
    if other is None and opts_b != opts:
        raise ProfilerError("--column-b, --offsets-of-b, --format-b and --split-b read OTHER: "
                            "name it")
    hist_a, _, groups_a = a.load_groups(path, opts, group_by, whole=True)
    hist_b, _, groups_b = (hist_a, None, groups_a) if other is None else \
        a.load_groups(other, opts_b, group_by, whole=True)
    result = run_compare(hist_a, hist_b, params_a, params_b, source_a=path,
                         source_b=path if other is None else other, drop_last=drop_last,
                         groups=None if group_by is None else
                         (group_by, groups_a[1], groups_b[1]))
    if plot:
        plots.save_figure(plots.compare_figure(hist_a, hist_b, result, plots.titled(
            " vs ".join(n.split(": ", 1)[1] for n in r.side_names(result)),
            "two length distributions")), plot)
    show(result, opts.output_format, opts.output, r.print_compare, r.compare_markdown,
         r.compare_csv, opts.width)
    enforce(conditions, result)
