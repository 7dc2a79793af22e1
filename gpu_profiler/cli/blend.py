"""``gpu-profiler blend``: a Megatron-LM data blend as trained (weights, samples drawn,
epochs, token shares, and the bucket table of the blend)."""

from __future__ import annotations

from typing import Annotated

import typer

from gpu_profiler.analysis.blend import WARN_EPOCHS, number
from gpu_profiler.cli import options as o
from gpu_profiler.cli.output import enforce, gates, guard, show

DataPath = Annotated[list[str] | None, typer.Argument(
    metavar="[WEIGHT] PATH...", help="The blend as Megatron-LM's --data-path takes it: "
    "WEIGHT PATH pairs, or paths alone (weighted by their samples).")]
DataArgsPath = Annotated[str | None, typer.Option(
    "--data-args-path", metavar="FILE", help="Read the blend from FILE (its words, as "
    "--data-path), as Megatron-LM's --data-args-path.")]
PerSplitDataArgsPath = Annotated[str | None, typer.Option(
    "--per-split-data-args-path", metavar="FILE", help="Read the blend from the JSON FILE of "
    "Megatron-LM's --per-split-data-args-path (train, valid and test keys), its --data-split.")]
DataSplit = Annotated[str, typer.Option(
    "--data-split", metavar="[train|valid|test]", help="The blend of "
    "--per-split-data-args-path to read, or the rows of --megatron-split.")]
TrainSamples = Annotated[int | None, typer.Option(
    "--train-samples", metavar="N", help="Samples to train on (Megatron-LM's "
    "--train-samples; default: every source's samples added up).")]
TrainTokens = Annotated[int | None, typer.Option(
    "--train-tokens", metavar="N", help="Tokens to train on instead: the fewest samples "
    "whose expected tokens at the blend's weights reach N.")]
TrainIters = Annotated[int | None, typer.Option(
    "--train-iters", metavar="N", help="Steps to train instead, with --global-batch-size: "
    "N x the batch size samples, as Megatron-LM counts them.")]
GlobalBatchSize = Annotated[int | None, typer.Option(
    "--global-batch-size", metavar="N", help="Samples per step, for --train-iters.")]
SeqLength = Annotated[int | None, typer.Option(
    "--seq-length", metavar="N", help="The samples are Megatron-LM GPTDataset windows of N "
    "tokens cut from each source's concatenated documents (its --seq-length), not the "
    "sources' own samples.")]
MegatronSplit = Annotated[str | None, typer.Option(
    "--megatron-split", metavar="RATIOS", help="Megatron-LM's --split (969,30,1): each source "
    "holds only the rows of --data-split (train by default), as Megatron-LM cuts them.")]
WarnEpochs = Annotated[float, typer.Option(
    "--warn-epochs", metavar="X", help="Warn when a source is repeated more than X epochs.")]


@o.scan_options
def blend(
    ctx: typer.Context,
    data_path: DataPath = None,
    data_args_path: DataArgsPath = None,
    per_split_data_args_path: PerSplitDataArgsPath = None,
    data_split: DataSplit = "train",
    train_samples: TrainSamples = None,
    train_tokens: TrainTokens = None,
    train_iters: TrainIters = None,
    global_batch_size: GlobalBatchSize = None,
    seq_length: SeqLength = None,
    megatron_split: MegatronSplit = None,
    warn_epochs: WarnEpochs = WARN_EPOCHS,
    report: Annotated[str | None, typer.Option(
        "--report", metavar="FILE", help="Also write the blend as one offline HTML page "
        "(as gpu-profiler report writes one), with its figures.")] = None,
    fail_if: o.FailIf = None,
    *,
    opts: o.ScanOptions,
) -> None:
    """Profile a Megatron-LM data blend as it trains: each source's configured weight,
    the samples the blend draws from it (Megatron-LM's own blending), the epochs that
    makes, its effective share of the tokens, and the bucket table of the blend.

    The blend is written as Megatron-LM's --data-path (WEIGHT PATH pairs, or paths
    alone), or read from --data-args-path or --per-split-data-args-path. A PATH is any
    source the other commands read (a Megatron-LM prefix, an HF dir, Parquet, JSON
    Lines) or a saved histogram; every scan option applies to each PATH. A weight that
    is not a positive number is refused, as Megatron-LM refuses it.
    """
    from gpu_profiler.api import blend as run_blend
    from gpu_profiler.errors import ProfilerError
    from gpu_profiler.render.blend import blend_csv, blend_html, blend_markdown, print_blend

    conditions = gates("blend", fail_if)
    for item in data_path or ():  # unknown options reach here as arguments (see app.py)
        if item.startswith("-") and number(item) is None:
            raise ProfilerError(f"no such option: {item}")
    opts.params()
    if (train_iters is None) != (global_batch_size is None):
        raise ProfilerError("--train-iters and --global-batch-size go together")
    if train_iters is not None and global_batch_size is not None:
        if train_iters <= 0 or global_batch_size <= 0:
            raise ProfilerError("--train-iters and --global-batch-size must be positive")
        if train_samples is not None or train_tokens is not None:
            raise ProfilerError("give --train-iters or --train-samples or --train-tokens")
        train_samples = train_iters * global_batch_size
    files = [f for f in (data_args_path, per_split_data_args_path) if f]
    guard({"-o": opts.output, "--report": report}, *(data_path or []), *files)
    if report:
        from gpu_profiler.io.output import check_writable
        from gpu_profiler.render import plots

        plots.require_matplotlib("--report")
        check_writable(report)
    scan = {k: getattr(opts, k) for k in ("column", "offsets_of", "format", "split", "unit",
                                         "eot", "eot_position", "token_dtype",
                                         "trust_statistics")}
    result = run_blend(data_path or None, data_args_path=data_args_path,
                       per_split_data_args_path=per_split_data_args_path,
                       data_split=data_split, train_samples=train_samples,
                       train_tokens=train_tokens, warn_epochs=warn_epochs,
                       seq_length=seq_length, megatron_split=megatron_split,
                       execution=opts.execution(None),
                       **{k: v for k, v in scan.items() if v not in (None, False)},
                       **opts.bucketing())
    show(result, opts.output_format, opts.output, print_blend, blend_markdown, blend_csv,
         opts.width)
    if report:
        from gpu_profiler.cli.report import command_line
        from gpu_profiler.io.output import write_atomic

        write_atomic(report, blend_html(result, command_line(ctx)))
    enforce(conditions, result)
