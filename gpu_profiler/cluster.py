"""Dask: a sharded scan's tasks on a cluster (``--workers N``: a local one started for the
run; ``--dask ADDRESS``: a running scheduler; ``--backend cuda``: dask-cuda's
``LocalCUDACluster``, one worker per GPU). Tasks are groups of shards sized by bytes; their
histograms are summed as they complete (no shuffle), and dask reruns the tasks of a worker
that dies. A shard larger than a task is cut into runs of its row groups (Parquet) or
record batches (Arrow IPC, HF shards). Only this module imports dask (the ``[dask]`` and
``[dask-cuda]`` extras)."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from gpu_profiler.errors import ProfilerError
from gpu_profiler.readers import Part, Reading, ipc, parquet
from gpu_profiler.tasks import Job, Outcome, run

#: A task reads at most this many bytes (unless one shard is larger): 100k shards of 2 MiB
#: make ~3,000 tasks, each ~0.1 s of reading, so the scheduler's per-task cost (~1 ms) stays
#: out of the way while the tasks still balance (and a dead worker's are few to redo).
TASK_BYTES = 64 << 20
#: ... and a small corpus makes about this many tasks per worker thread, to balance them.
TASKS_PER_THREAD = 4


@contextmanager
def client_for(workers: int | None, address: str | None, backend: str) -> Iterator[Any]:
    """A Dask client for the run: connected to ``address``, or to a local cluster of
    ``workers`` processes (one per GPU with dask-cuda for ``backend == "cuda"``; all GPUs
    when ``workers`` is None), closed afterwards."""
    if workers is not None and address is not None:
        raise ProfilerError("give --workers or --dask, not both")
    if workers is not None and workers < 1:
        raise ProfilerError(f"--workers must be at least 1, got {workers}")
    try:
        import distributed
    except ImportError:
        raise ProfilerError("--workers and --dask need Dask: pip install "
                            "'gpu-profiler[dask]'") from None
    if address is not None:
        try:
            client = distributed.Client(address, timeout="10s")
        except (OSError, TimeoutError, ValueError) as exc:
            raise ProfilerError(f"--dask {address}: cannot reach the scheduler "
                                f"({type(exc).__name__}: {exc})") from None
        with client:
            yield client
        return
    if backend == "cuda":
        try:
            from dask_cuda import LocalCUDACluster
        except ImportError:
            raise ProfilerError("--workers with --backend cuda needs dask-cuda (one worker "
                                "per GPU): pip install 'gpu-profiler[dask-cuda]'") from None
        cluster = LocalCUDACluster(n_workers=workers, dashboard_address=":0",
                                   silence_logs=logging.ERROR)
    else:
        cluster = distributed.LocalCluster(n_workers=workers, threads_per_worker=1,
                                           processes=True, dashboard_address=":0",
                                           silence_logs=logging.ERROR)
    with cluster, distributed.Client(cluster) as client:
        yield client


def groups(items: Sequence[tuple[str, Part]], threads: int, reading: Reading
           ) -> list[tuple[str, list[Part]]]:
    """``items`` (split name, part) cut into tasks: runs of consecutive shards of one split
    of about ``min(TASK_BYTES, total / (TASKS_PER_THREAD x threads))`` bytes each; a shard
    larger than that is cut by `_ranges`."""
    total = sum(p.nbytes for _, p in items)
    target = max(1, min(TASK_BYTES, total // (TASKS_PER_THREAD * max(threads, 1))))
    items = [(name, r) for name, p in items
             for r in (_ranges(p, target, reading) if p.nbytes > target else [p])]
    out: list[tuple[str, list[Part]]] = []
    size = 0
    for name, part in items:
        if not out or out[-1][0] != name or size >= target:
            out.append((name, []))
            size = 0
        out[-1][1].append(part)
        size += part.nbytes
    return out


def _ranges(part: Part, target: int, reading: Reading) -> list[Part]:
    """A large shard as runs of about ``target`` bytes: a Parquet shard's row groups (read
    on the CPU: not when the GPU decodes Parquet), an IPC shard's record batches (read
    by the selective reader); any other shard whole."""
    if isinstance(part, parquet.ParquetPart) and not reading.gpu_parquet:
        return list(parquet.row_group_ranges(part, target))
    if isinstance(part, ipc.IpcPart):
        return list(ipc.batch_ranges(part, target, reading.spec))
    return [part]


def outcomes(client: Any, tasks: Sequence[list[Part]], job: Job
             ) -> Iterator[tuple[int, Outcome]]:
    """Run every task on ``client``'s cluster: (task index, outcome) as each completes. A
    task's error is raised here, and the tasks not yet run are cancelled."""
    from distributed import as_completed

    futures = [client.submit(run, parts, job, pure=False) for parts in tasks]
    index = {f.key: i for i, f in enumerate(futures)}
    try:
        for future in as_completed(futures):
            yield index[future.key], future.result()
    finally:
        client.cancel(futures)


def threads(client: Any) -> int:
    """Worker threads on ``client``'s cluster."""
    return sum(client.nthreads().values())
