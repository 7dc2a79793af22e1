"""``profile``'s options for scans beyond one process: a Dask cluster, a slice of the
shard list, a resumable cache, bad shards skipped (exit code 3 when any was)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any

import typer

Workers = Annotated[int | None, typer.Option(
    "--workers", metavar="N", help="Start a local Dask cluster of N worker processes for the "
    "run (with --backend cuda: dask-cuda, one worker per GPU).")]
Dask = Annotated[str | None, typer.Option(
    "--dask", metavar="ADDRESS",
    help="Run the scan's tasks on this running Dask scheduler (e.g. tcp://host:8786).")]
PartOf = Annotated[str | None, typer.Option(
    "--part", metavar="I/N", help="Scan only slice I of N (I/N, 0 <= I < N) of the shard list, "
    "balanced by bytes; save it with --save-hist and sum the slices with `gpu-profiler merge`.")]
CacheDir = Annotated[str | None, typer.Option(
    "--cache-dir", metavar="DIR", help="Keep each finished shard's histogram here: a rerun of a "
    "killed scan rescans only the unfinished shards.")]
SkipBad = Annotated[bool, typer.Option(
    "--skip-bad-shards", metavar="", help="Count every other shard when one cannot be read; "
    "name the skipped ones and exit with code 3.")]


@contextmanager
def client(workers: int | None, address: str | None, opts: Any) -> Iterator[Any]:
    """The Dask client ``--workers`` / ``--dask`` ask for, or None (dask not imported).
    ``--device`` / ``--devices`` choose GPUs for one process: on a cluster each worker
    has its own GPU, so they are refused there."""
    if workers is None and address is None:
        yield None
        return
    if opts.device is not None or opts.devices is not None:
        from gpu_profiler.errors import ProfilerError

        raise ProfilerError("--device/--devices pick GPUs for one process; with --workers "
                            "or --dask each worker uses its own GPU (dask-cuda)")
    from gpu_profiler.cluster import client_for

    with client_for(workers, address, opts.backend) as c:
        yield c


def name_skipped(report: Any) -> bool:
    """Name each shard ``--skip-bad-shards`` left out on stderr; whether there was one
    (``profile`` then exits with code 3)."""
    for shard, error in report.skipped:
        named = error if shard in error else f"{shard}: {error}"
        print(f"gpu-profiler: skipped {named}", file=sys.stderr)
    return bool(report.skipped)
