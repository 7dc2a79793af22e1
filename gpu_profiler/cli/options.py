"""Options shared by every command that scans a source (typer ``Annotated``), and
`scan_options`, which gives a command all of them as one `ScanOptions`."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import fields
from enum import Enum
from typing import Annotated, Any

import typer

from gpu_profiler.frozen import frozen
from gpu_profiler.params import BucketParams, parse_bounds


class OutputFormat(str, Enum):
    table = "table"
    json = "json"
    csv = "csv"
    markdown = "markdown"


_PATH_HELP = ("HF save_to_disk dir (Dataset or DatasetDict), Parquet/Arrow IPC/JSONL file, "
              "Megatron-LM .idx or prefix, token stream .bin/.npy, a directory or glob of "
              "shards")
Path_ = Annotated[str, typer.Argument(metavar="PATH", help=f"{_PATH_HELP}.")]
Paths_ = Annotated[list[str], typer.Argument(
    metavar="PATH...", help=f"{_PATH_HELP}; several PATHs are read together (each file once).")]


def one(paths: list[str]) -> str:
    """How several PATHs are named in titles and messages."""
    return paths[0] if len(paths) == 1 else f"{paths[0]} (and {len(paths) - 1} more)"


Column = Annotated[str | None, typer.Option(
    "--column", "-c", metavar="COLUMN",
    help="Integer length column (default: 'length', else the only integer column).")]
OffsetsOf = Annotated[str | None, typer.Option(
    "--offsets-of", metavar="COLUMN",
    help="Derive lengths from this list column's offsets (e.g. input_ids) "
    "without reading its values.")]
Format = Annotated[str | None, typer.Option(
    "--format", metavar="[hf|parquet|ipc|ipc-stream|jsonl|megatron|tokens]",
    help="Force the input format: hf, parquet, ipc (file), ipc-stream, jsonl, "
    "megatron, tokens.")]
Split = Annotated[str | None, typer.Option(
    "--split", metavar="NAME",
    help="Only this split of a DatasetDict (default: profile's table has every "
    "split and the total; suggest, schedule and --policy analyse train, or the only split).")]
Unit = Annotated[str | None, typer.Option(
    "--unit", metavar="[sequence|document]",
    help="Megatron-LM datasets: a sample is a sequence (default) or a document "
    "(its sequences summed).")]
Eot = Annotated[int | None, typer.Option(
    "--eot", metavar="ID",
    help="Token streams (.bin, .npy): the end-of-text token id that separates "
    "documents (required; e.g. 50256 for GPT-2).")]
EotPosition = Annotated[str | None, typer.Option(
    "--eot-position", metavar="[end|start]",
    help="Token streams: end (default, nanoGPT: each EOT closes the "
    "document before it) or start (llm.c: each EOT opens the document after it).")]
TokenDtype = Annotated[str | None, typer.Option(
    "--token-dtype", metavar="[uint16|uint32]",
    help="Raw .bin token streams: uint16 (default) or uint32 (llm.c and "
    ".npy headers say it themselves).")]
TrustStatistics = Annotated[bool, typer.Option(
    "--trust-statistics", help="Parquet: count a row group whose footer statistics say "
    "every length is equal from them, unread (fast; wrong if the footer lies).")]
Backend = Annotated[str, typer.Option(
    "--backend", "-b", metavar="[auto|numpy|numba|cuda]",
    help="auto | numpy | numba | cuda.")]
Device = Annotated[int | None, typer.Option(
    "--device", metavar="N", help="GPU for the cuda backend (default 0).")]
Devices = Annotated[str | None, typer.Option(
    "--devices", metavar="IDS", help="Several GPUs, e.g. 0,1,2,3: chunks are split across "
    "them in one process and the histograms summed (cuda backend).")]
Quiet = Annotated[bool, typer.Option(
    "--quiet", "-q", metavar="", help="No progress bar.")]

Bounds = Annotated[str, typer.Option(
    "--bounds", metavar="EDGES", help="Strictly increasing bucket edges.")]
MaxSeqLen = Annotated[int, typer.Option(
    "--max-seq-len", metavar="N", help="Lengths are clipped to this.")]
TokenBudget = Annotated[int, typer.Option(
    "--token-budget", metavar="N", help="Tokens per batch (rows x longest).")]
MaxBatchSize = Annotated[int, typer.Option(
    "--max-batch-size", metavar="N", help="Rows per batch at most.")]
AttentionWeight = Annotated[float, typer.Option(
    "--attention-weight", metavar="A",
    help="Cost a batch as rows x (longest + A x longest^2): padded attention, every row "
    "over the batch's longest (default 0: rows x longest). With --cost-budget, or under "
    "--token-budget.")]
CostCurve = Annotated[str | None, typer.Option(
    "--cost-curve", metavar="FILE",
    help="Cost a batch as rows x curve(longest): a measured table, CSV 'length,<unit>' "
    "lines or JSON, of one row's cost (seconds, bytes) at a padded length, linear in "
    "between; needs --cost-budget.")]
VarlenAttention = Annotated[bool, typer.Option(
    "--varlen-attention", metavar="",
    help="With --attention-weight A: the attention is variable-length (FlashAttention "
    "varlen): a batch costs rows x longest + A x the sum of its samples' length^2. sorted "
    "batches fill under that; fixed sizes stay the worst case.")]
CostBudget = Annotated[float | None, typer.Option(
    "--cost-budget", metavar="X",
    help="The most a batch may cost, in the cost model's unit (default: --token-budget).")]
GradAccum = Annotated[int, typer.Option(
    "--grad-accum", metavar="N", help="Micro-batches per optimizer step.")]
WorldSize = Annotated[int, typer.Option(
    "--world-size", metavar="N", help="Data-parallel ranks.")]

OutFormat = Annotated[OutputFormat, typer.Option(
    "--output-format", "-f", metavar="[table|json|csv|markdown]",
    help="How to print the result.", case_sensitive=False)]
Width = Annotated[int | None, typer.Option(
    "--width", metavar="N", help="Table width in columns (default: the terminal's; piped "
    "or to a file: each table's natural width). Tables too wide for it are stacked.")]
Output = Annotated[str | None, typer.Option(
    "--output", "-o", metavar="FILE", help="Write to this file (atomically) instead of stdout.")]

FailIf = Annotated[list[str] | None, typer.Option(
    "--fail-if", metavar="EXPR", help="Exit 1 when this condition on a number of the JSON "
    "output holds, e.g. p99>8192 (repeatable; names: README, CI gates).")]

#: Every bucket default comes from `BucketParams`, the one source of them.
DEFAULT_BOUNDS_TEXT = ",".join(map(str, BucketParams.bounds))


def gpu_options(backend: str, device: int | None, devices: str | None) -> Any:
    """The cuda backend's `CudaOptions` from ``--device`` / ``--devices`` (None when neither
    is given; without a usable cuda backend, the scan refuses them and says why)."""
    from gpu_profiler.backends.options import CudaOptions
    from gpu_profiler.errors import ProfilerError

    if device is None and devices is None:
        return None
    if backend not in ("auto", "cuda"):
        raise ProfilerError(f"--device/--devices need the cuda backend, not {backend!r}")
    if device is not None and devices is not None:
        raise ProfilerError("give --device or --devices, not both")
    if device is not None:
        if device < 0:
            raise ProfilerError(f"--device must be a GPU id >= 0, got {device}")
        return CudaOptions(devices=(device,))
    try:
        ids = [int(d) for d in str(devices).split(",") if d.strip()]
    except ValueError:
        ids = []
    if not ids or min(ids) < 0:
        raise ProfilerError(f"--devices must list GPU ids like 0,1,2, got {devices!r}")
    return CudaOptions(devices=tuple(ids))


@frozen
class ScanOptions:
    """The source, bucket and output options of a scanning command."""

    column: Column = None
    offsets_of: OffsetsOf = None
    format: Format = None
    split: Split = None
    unit: Unit = None
    eot: Eot = None
    eot_position: EotPosition = None
    token_dtype: TokenDtype = None
    trust_statistics: TrustStatistics = False
    backend: Backend = "auto"
    device: Device = None
    devices: Devices = None
    quiet: Quiet = False
    bounds: Bounds = DEFAULT_BOUNDS_TEXT
    max_seq_len: MaxSeqLen = BucketParams.max_seq_len
    token_budget: TokenBudget = BucketParams.token_budget
    max_batch_size: MaxBatchSize = BucketParams.max_batch_size
    attention_weight: AttentionWeight = 0.0
    cost_curve: CostCurve = None
    cost_budget: CostBudget = None
    varlen_attention: VarlenAttention = False
    grad_accum: GradAccum = BucketParams.grad_accum
    world_size: WorldSize = BucketParams.world_size
    output_format: OutFormat = OutputFormat.table
    output: Output = None
    width: Width = None

    def source(self, paths: str | list[str]) -> Any:
        """The `Source` these options read at ``paths`` (one PATH, or several together)."""
        from gpu_profiler.request import Source

        path = paths if isinstance(paths, str) else paths[0] if len(paths) == 1 else paths
        return Source(path, self.column, self.offsets_of, self.format, self.split, self.unit,
                      self.eot, self.eot_position, self.token_dtype, self.trust_statistics)

    def execution(self, cap: int | None = None) -> Any:
        """The `Execution` of these options, binning up to ``cap``."""
        from gpu_profiler.request import Execution

        return Execution(self.backend, gpu_options(self.backend, self.device, self.devices),
                         cap, not self.quiet)

    def bucketing(self) -> dict[str, Any]:
        """Keyword arguments of ``profile`` for the buckets and batches."""
        return {"bounds": self.bounds, "max_seq_len": self.max_seq_len,
                "token_budget": self.token_budget, "max_batch_size": self.max_batch_size,
                "grad_accum": self.grad_accum, "world_size": self.world_size,
                "cost": self.cost()}

    def cost(self) -> Any:
        """The `CostModel` of ``--attention-weight``, ``--cost-curve``, ``--cost-budget``
        and ``--varlen-attention`` (the curve file read and checked)."""
        from gpu_profiler.cost import cost_model

        return cost_model(self.attention_weight, self.cost_curve, self.cost_budget,
                          varlen=self.varlen_attention)

    def params(self) -> Any:
        """The `BucketParams` (bounds parsed and checked)."""
        return BucketParams(**{**self.bucketing(), "bounds": parse_bounds(self.bounds)})


def scan_options_except(*names: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Add every `ScanOptions` field but ``names`` (they keep their defaults: ``report`` has
    no ``--output-format`` or ``--width``) to a command's options; the command receives
    them as one keyword argument ``opts``."""
    return functools.partial(with_options, cls=ScanOptions, name="opts", without=names)


def with_options(command: Callable[..., None], cls: type, name: str,
                 without: tuple[str, ...] = ()) -> Callable[..., None]:
    """Add the fields of the dataclass ``cls`` (but ``without``) to ``command``'s options;
    the command receives them as one ``cls`` in its keyword argument ``name``."""
    own = [p for p in inspect.signature(command, eval_str=True).parameters.values()
           if p.name != name]
    hints = inspect.get_annotations(cls, eval_str=True)
    names = [f.name for f in fields(cls) if f.name not in without]
    shared = [inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default,
                                annotation=hints[f.name]) for f in fields(cls) if f.name in names]

    @functools.wraps(command)
    def run(*args: Any, **kwargs: Any) -> None:
        given = cls(**{n: kwargs.pop(n) for n in names if n in kwargs})
        command(*args, **{name: given}, **kwargs)

    run.__signature__ = inspect.Signature(own + shared)  # type: ignore[attr-defined]
    return run


#: Every `ScanOptions` field as a command's options, received as ``opts``.
scan_options = scan_options_except()
