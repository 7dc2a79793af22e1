"""Execute a scan's plan: parts into histograms, one per *task* (consecutive parts grouped
by bytes, or one part a task for whoever needs each shard's own: a cache, a scan that
skips bad shards, `gpu_profiler.tasks`). When the plan reads parts `inline` and the backend
allows (`Backend.per_part`), tasks run at once on worker threads, each part read in its
worker's thread: many small shards keep every core busy and cost no thread start-up or
wait of their own. Otherwise tasks run one after another, each part with its readers' own
threads. The engine (or a sharded scan's task) sums the histograms."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from gpu_profiler.backends import Backend
from gpu_profiler.chunk import Chunk
from gpu_profiler.histogram import LengthHistogram, merge
from gpu_profiler.prefetch import prefetched
from gpu_profiler.progress import ScanProgress
from gpu_profiler.readers import Part, Reading
from gpu_profiler.readers.arrow import coalesce
from gpu_profiler.readers.base import (
    SMALL_BYTES,
    Leave,
    Together,
    planning_schema,
    same_schema,
    together_of,
    unlike,
)
from gpu_profiler.runs import Run, Runs, RunTally

if TYPE_CHECKING:  # (the pool's module is imported where tasks run on one: ~3 ms)
    from concurrent.futures import Future

#: Bytes of a task, at least and at most: consecutive parts run together until they hold
#: about ``total / (TASKS_PER_WORKER x workers)`` bytes, so that thousands of small shards
#: make tens of tasks a worker, each one histogram (a task costs ~0.5 ms of its own:
#: bench/results/shards.md), and a task read into one buffer stays bounded.
MIN_TASK_BYTES, TASK_BYTES = 4 << 20, 32 << 20
TASKS_PER_WORKER = 8
#: Tasks queued per worker beyond those running (bounds results waiting to be summed).
AHEAD = 2

#: What `histograms` calls with a task's indices and the error it raised, instead of
#: raising it: the task then yields nothing (the callback raises to stop the scan).
OnError = Callable[[list[int], Exception], None]


def histograms(parts: list[Part], reading: Reading, backend: Backend, cap: int | None,
               bar: ScanProgress, task_bytes: int | None = None,
               like: tuple[str, Any] | None = None, on_error: OnError | None = None,
               checked: bool = False) -> Iterator[tuple[list[int], LengthHistogram]]:
    """``(indices in parts, their histogram)`` for every task (consecutive parts grouped up
    to ``task_bytes``; None: sized by `task_size`; 0: one part a task), as each
    finishes. ``like``: a label and the schema every part must have, checked as each is
    read (for a scan that did not check them all first; ``checked``: the parts that do
    not `reads_together` were checked before the scan, and are not again); ``on_error``:
    see `OnError` (by default a task's error is raised)."""
    split = backend.per_part() if reading.inline else None
    if task_bytes is None:
        task_bytes = task_size(parts, 1 if split is None else split[0])
    tasks = _tasks(parts, task_bytes)
    if split is None:
        for task in tasks:
            try:
                hist = tasks_histogram([parts[i] for i in task], reading, backend, cap, bar,
                                       like, checked)
            except Exception as exc:
                if on_error is None:
                    raise
                on_error(task, exc)
                continue
            yield task, hist
        return
    from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

    workers, each = split
    running: dict[Future, list[int]] = {}
    with ThreadPoolExecutor(workers, thread_name_prefix="gpu-profiler-part") as pool:
        try:
            while True:
                for task in itertools.islice(tasks, workers * (1 + AHEAD) - len(running)):
                    running[pool.submit(tasks_histogram, [parts[i] for i in task], reading,
                                        each, cap, None, like, checked)] = task
                if not running:
                    return
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in done:
                    task = running.pop(future)
                    try:
                        hist = future.result()
                    except Exception as exc:
                        if on_error is None:
                            raise
                        on_error(task, exc)
                        continue
                    bar.update(samples=hist.total if bar.enabled else 0,  # (a sum of bins)
                               nbytes=sum(parts[i].nbytes for i in task), parts=len(task))
                    yield task, hist
        finally:
            for future in running:
                future.cancel()


def tasks_histogram(parts: list[Part], reading: Reading, backend: Backend, cap: int | None,
                    bar: ScanProgress | None = None, like: tuple[str, Any] | None = None,
                    checked: bool = False) -> LengthHistogram:
    """The histogram of some parts: their chunks coalesced (small parts together cost one
    kernel call), their `Run` s (lengths known from metadata) counted apart. Parts read
    ahead (not inline) are read in a background thread beside the backend. ``like`` and
    ``checked``: as in `histograms`."""
    runs = RunTally()
    chunks = coalesce(_chunks(parts, reading, backend, cap, runs, bar, like, checked),
                      backend.chunk_rows)
    counter = backend
    if not reading.inline and any(p.read_ahead for p in parts):
        chunks, counter = prefetched(chunks), backend.beside_reader()
    elif reading.inline:  # read here, so the first chunk tells whether there is any: a
        first = next(chunks, None)  # task of parts counted as they were read has none
        if first is None:
            return backend.runs(runs, cap)
        chunks = itertools.chain([first], chunks)
    hist = counter.histogram(chunks, cap)
    return merge([hist, backend.runs(runs, cap)]) if runs else hist


def task_size(parts: list[Part], workers: int) -> int:
    """Bytes of a task of ``parts`` run by ``workers`` (see `TASK_BYTES`)."""
    each = sum(p.nbytes for p in parts) // (TASKS_PER_WORKER * workers)
    return min(max(each, MIN_TASK_BYTES), TASK_BYTES)


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


def _chunks(parts: list[Part], reading: Reading, backend: Backend, cap: int | None,
            runs: RunTally, bar: ScanProgress | None, like: tuple[str, Any] | None,
            checked: bool) -> Iterator[Chunk]:
    """The parts' chunks: runs of small parts read together where their class can
    (`Together`: counted by ``backend`` at ``cap`` where it counts as it reads, else
    gathered), the others (and those a run leaves) each by its own reader, its schema
    first checked against ``like`` (if any, and unless ``checked`` before the scan); `Run`
    s and counted histograms go to ``runs``; ``bar`` (if any) counts as they come."""
    for read, group in _groups(parts, reading):
        if read is None:  # its schema was checked before the scan if ``checked``
            yield from _alone(group[0], reading, runs, bar, None if checked else like)
            continue
        joined = read(group, reading, like) if len(group) > 1 else Leave(1)
        work = joined.counting() if backend.counts else None
        if work is not None:
            hist = backend.count(work, cap)
            runs.counted.append(hist)
            if bar is not None:
                bar.update(samples=hist.total)
        else:
            for chunk in joined.chunks():
                yield chunk
                if bar is not None:
                    bar.update(samples=chunk.samples)
        left = joined.left()
        if bar is not None:
            kept = set(left)
            bar.update(nbytes=sum(p.nbytes for i, p in enumerate(group) if i not in kept),
                       parts=len(group) - len(kept))
        for i in left:
            yield from _alone(group[i], reading, runs, bar, like)


def _groups(parts: list[Part], reading: Reading
            ) -> Iterator[tuple[Together | None, list[Part]]]:
    """``parts`` as runs of consecutive parts of one class that `reads_together`, with that
    class's `Together` (a run may be of one part), and single parts that do not (None)."""
    run: list[Part] = []
    read: Together | None = None
    for part in parts:
        mine = _together(part, reading)
        if run and (mine is None or type(run[0]) is not type(part)):
            yield read, run
            run = []
        if mine is None:
            yield None, [part]
        else:
            run.append(part)
            read = mine
    if run:
        yield read, run


def reads_together(part: Part, reading: Reading) -> bool:
    """Whether ``part`` is read together with its neighbours (its schema is then checked
    there, not before the scan): see `_together`."""
    return _together(part, reading) is not None


def _together(part: Part, reading: Reading) -> Together | None:
    """The `Together` that reads ``part`` with its neighbours: for a small part whose
    class's reader takes it in this scan (`together_of`), in a scan that is not ordered."""
    if reading.ordered or part.nbytes > SMALL_BYTES:
        return None
    return together_of(part, reading)


def _alone(part: Part, reading: Reading, runs: RunTally, bar: ScanProgress | None,
           like: tuple[str, Any] | None) -> Iterator[Chunk]:
    """One part's chunks, read by its own reader."""
    if like is not None and unlike(part, like):
        same_schema(part.label, planning_schema(part), like, reading.spec)
    for chunk in part.chunks(reading):
        if bar is not None:
            bar.update(samples=chunk.samples)
        if isinstance(chunk, (Run, Runs)):
            runs.add(chunk)
        else:
            yield chunk
    if bar is not None:
        bar.update(nbytes=part.nbytes, parts=1)
