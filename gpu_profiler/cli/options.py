"""Option definitions shared by every command that scans a source (typer ``Annotated``)."""

from __future__ import annotations

from enum import Enum
from typing import Annotated

import typer

from gpu_profiler.params import DEFAULT_BOUNDS

_SRC = "Source"
_BKT = "Buckets and batching"


class OutputFormat(str, Enum):
    table = "table"
    json = "json"
    csv = "csv"
    markdown = "markdown"


Path_ = Annotated[str, typer.Argument(
    help="HF save_to_disk dir (Dataset or DatasetDict), Parquet/Arrow IPC file, a directory "
         "or glob of shards.", show_default=False)]
Column = Annotated[str | None, typer.Option(
    "--column", "-c", help="Integer length column (default: 'length', else the only integer "
    "column).", rich_help_panel=_SRC, show_default=False)]
OffsetsOf = Annotated[str | None, typer.Option(
    "--offsets-of", help="Derive lengths from this list column's offsets (e.g. input_ids) "
    "without reading its values.", rich_help_panel=_SRC, show_default=False)]
Format = Annotated[str | None, typer.Option(
    "--format", help="Force the input format: hf, parquet, ipc (file), ipc-stream.",
    rich_help_panel=_SRC, show_default=False)]
Split = Annotated[str | None, typer.Option(
    "--split", help="Only this split of a DatasetDict (default: every split, and the total).",
    rich_help_panel=_SRC, show_default=False)]
Backend = Annotated[str, typer.Option(
    "--backend", "-b", help="auto | numpy | numba | cuda.", rich_help_panel=_SRC)]
Device = Annotated[int | None, typer.Option(
    "--device", help="GPU for the cuda backend (default 0).", rich_help_panel=_SRC,
    show_default=False)]
Devices = Annotated[str | None, typer.Option(
    "--devices", help="Several GPUs, e.g. 0,1,2,3: chunks are split across them in one "
    "process and the histograms summed (cuda backend).", rich_help_panel=_SRC,
    show_default=False)]
Quiet = Annotated[bool, typer.Option(
    "--quiet", "-q", help="No progress bar.", rich_help_panel=_SRC)]

Bounds = Annotated[str, typer.Option(
    "--bounds", help="Strictly increasing bucket edges.", rich_help_panel=_BKT)]
MaxSeqLen = Annotated[int, typer.Option(
    "--max-seq-len", help="Lengths are clipped to this.", rich_help_panel=_BKT)]
TokenBudget = Annotated[int, typer.Option(
    "--token-budget", help="Tokens per batch (rows x longest).", rich_help_panel=_BKT)]
MaxBatchSize = Annotated[int, typer.Option(
    "--max-batch-size", help="Rows per batch at most.", rich_help_panel=_BKT)]
GradAccum = Annotated[int, typer.Option(
    "--grad-accum", help="Micro-batches per optimizer step.", rich_help_panel=_BKT)]
WorldSize = Annotated[int, typer.Option(
    "--world-size", help="Data-parallel ranks.", rich_help_panel=_BKT)]

OutFormat = Annotated[OutputFormat, typer.Option(
    "--output-format", "-f", help="How to print the result.", case_sensitive=False)]
Output = Annotated[str | None, typer.Option(
    "--output", "-o", help="Write to this file (atomically) instead of stdout.",
    show_default=False)]

DEFAULT_BOUNDS_TEXT = ",".join(map(str, DEFAULT_BOUNDS))


def gpu_options(backend: str, device: int | None, devices: str | None) -> dict | None:
    """cuda backend options from ``--device`` / ``--devices`` (None when neither is given)."""
    from gpu_profiler.errors import ProfilerError

    if device is None and devices is None:
        return None
    if backend not in ("auto", "cuda"):
        raise ProfilerError(f"--device/--devices need the cuda backend, not {backend!r}")
    opts: dict = {}
    if device is not None:
        if device < 0:
            raise ProfilerError(f"--device must be a GPU id >= 0, got {device}")
        opts["device"] = device
    if devices is not None:
        try:
            ids = [int(d) for d in devices.split(",") if d.strip()]
        except ValueError:
            ids = []
        if not ids or min(ids) < 0:
            raise ProfilerError(f"--devices must list GPU ids like 0,1,2, got {devices!r}")
        opts["devices"] = ids
    return opts
