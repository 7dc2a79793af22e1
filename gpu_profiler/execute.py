"""Execute a scan's plan: parts into histograms, one per *task* (consecutive parts grouped
by bytes, or one part a task for whoever needs each shard's own). When the plan reads
parts `inline` and the backend allows (`Backend.per_part`), tasks run at once on worker
threads, each part read in its worker's thread: many small shards keep every core busy
and cost no thread start-up or wait of their own. Otherwise tasks run one after another,
each part with its readers' own threads. The engine sums the histograms."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait

from gpu_profiler.backends import Backend
from gpu_profiler.chunk import Chunk
from gpu_profiler.histogram import LengthHistogram, merge
from gpu_profiler.prefetch import prefetched
from gpu_profiler.progress import ScanProgress
from gpu_profiler.readers import Part, Reading
from gpu_profiler.readers.arrow import coalesce
from gpu_profiler.runs import Run, RunTally

#: Bytes of a task: consecutive parts run together until they hold this many, so that
#: thousands of small shards make hundreds of tasks, each one histogram.
TASK_BYTES = 8 << 20
#: Tasks queued per worker beyond those running (bounds results waiting to be summed).
AHEAD = 2


def histograms(parts: list[Part], reading: Reading, backend: Backend, cap: int | None,
               bar: ScanProgress, task_bytes: int = TASK_BYTES
               ) -> Iterator[tuple[list[int], LengthHistogram]]:
    """``(indices in parts, their histogram)`` for every task (consecutive parts grouped up
    to ``task_bytes``; 0: one part a task), as each finishes."""
    tasks = _tasks(parts, task_bytes)
    split = backend.per_part() if reading.inline else None
    if split is None:
        for task in tasks:
            yield task, tasks_histogram([parts[i] for i in task], reading, backend, cap, bar)
        return
    workers, each = split
    running: dict[Future, list[int]] = {}
    with ThreadPoolExecutor(workers, thread_name_prefix="gpu-profiler-part") as pool:
        try:
            while True:
                for task in itertools.islice(tasks, workers * (1 + AHEAD) - len(running)):
                    running[pool.submit(tasks_histogram, [parts[i] for i in task], reading,
                                        each, cap)] = task
                if not running:
                    return
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in done:
                    task, hist = running.pop(future), future.result()
                    bar.update(samples=hist.total, nbytes=sum(parts[i].nbytes for i in task),
                               parts=len(task))
                    yield task, hist
        finally:
            for future in running:
                future.cancel()


def tasks_histogram(parts: list[Part], reading: Reading, backend: Backend, cap: int | None,
                    bar: ScanProgress | None = None) -> LengthHistogram:
    """The histogram of some parts: their chunks coalesced (small parts together cost one
    kernel call), their `Run` s (lengths known from metadata) counted apart. Parts read
    ahead (not inline) are read in a background thread beside the backend."""
    runs = RunTally()
    chunks = coalesce(_chunks(parts, reading, runs, bar))
    counter = backend
    if not reading.inline and any(p.read_ahead for p in parts):
        chunks, counter = prefetched(chunks), backend.beside_reader()
    hist = counter.histogram(chunks, cap)
    return merge([hist, runs.histogram(cap)]) if runs else hist


def _tasks(parts: list[Part], task_bytes: int) -> Iterator[list[int]]:
    """Indices of consecutive parts, grouped up to ``task_bytes``."""
    task: list[int] = []
    size = 0
    for i, part in enumerate(parts):
        task.append(i)
        size += part.nbytes
        if size >= task_bytes:
            yield task
            task, size = [], 0
    if task:
        yield task


def _chunks(parts: list[Part], reading: Reading, runs: RunTally,
            bar: ScanProgress | None) -> Iterator[Chunk]:
    """The parts' chunks; `Run` s go to ``runs``; ``bar`` (if any) counts as they come."""
    for part in parts:
        for chunk in part.chunks(reading):
            if bar is not None:
                bar.update(samples=chunk.samples)
            if isinstance(chunk, Run):
                runs.add(chunk)
            else:
                yield chunk
        if bar is not None:
            bar.update(nbytes=part.nbytes, parts=1)
