"""One task of a sharded scan: a group of shards of one split -> one histogram, executed on
the engine's seam (`gpu_profiler.execute`), shard by shard when each one's histogram is
kept or a bad one may be skipped. The same function runs in the calling process and on
Dask workers (a `Job` and the parts pickle)."""

from __future__ import annotations

from typing import Any

from gpu_profiler import execute
from gpu_profiler.backends import get_backend
from gpu_profiler.engine import exact
from gpu_profiler.errors import ProfilerError, first_line, shard_error
from gpu_profiler.frozen import frozen
from gpu_profiler.histogram import LengthHistogram, merge
from gpu_profiler.progress import ScanProgress
from gpu_profiler.readers import Part, Reading


@frozen
class Job:
    """What every task of one scan shares: the reading plan, the backend (by name: each
    process gets its own), the cap, the label and schema every shard must match, and the
    cache directory and failure policy."""

    reading: Reading
    backend: str
    backend_options: Any
    cap: int | None
    like: tuple[str, Any]
    cache_dir: str | None = None
    skip_bad: bool = False

    @property
    def per_shard(self) -> bool:
        """Each shard is histogrammed on its own (to cache it, or to skip it alone)."""
        return self.cache_dir is not None or self.skip_bad


@frozen
class Outcome:
    """A task's result: the histogram of its shards (None when every one was skipped),
    how many it reused from the cache and scanned, the cache entries it rejected, and the
    shards it skipped with their errors."""

    histogram: LengthHistogram | None
    reused: int = 0
    scanned: int = 0
    rejected: tuple[str, ...] = ()
    skipped: tuple[tuple[str, str], ...] = ()


def run(parts: list[Part], job: Job, bar: ScanProgress | None = None) -> Outcome:
    """Histogram ``parts`` (one split's) under ``job``; ``bar`` follows them when given."""
    bar = bar or ScanProgress(len(parts), False)
    engine = get_backend(job.backend, job.backend_options)
    cache = None
    if job.cache_dir is not None:
        from gpu_profiler.cache import ShardCache

        cache = ShardCache(job.cache_dir, job.reading, job.cap)
    hists, rejected, reused = [], [], 0
    todo, keys = [], []  # the parts to read, and their cache keys (taken before reading)
    for part in parts:
        if cache is not None:
            key = cache.key(part)
            kept, problem = cache.get(key)
            rejected += [problem] if problem else []
            if kept is not None:
                hists.append(kept)
                reused += 1
                bar.update(samples=kept.total, nbytes=part.nbytes, parts=1)
                continue
            keys.append(key)
        todo.append(part)
    skipped: list[tuple[str, str]] = []

    def failed(task: list[int], exc: Exception) -> None:
        """A shard's error: skipped (``skip_bad``), or raised naming the shard."""
        part = todo[task[0]]
        if not shard_error(exc):
            raise exc
        if not job.skip_bad:
            raise _named(part, exc) from None
        skipped.append((part.label, first_line(exc)))

    for task, hist in execute.histograms(
            todo, job.reading, engine, job.cap, bar, 0 if job.per_shard else None,
            job.like, failed if job.per_shard else None):
        hist = exact(hist, [todo[i] for i in task], job.reading.spec)
        if cache is not None:
            cache.put(keys[task[0]], hist)
        hists.append(hist)
    return Outcome(merge(hists) if hists else None, reused, len(todo) - len(skipped),
                   tuple(rejected), tuple(skipped))


def _named(part: Part, exc: Exception) -> ProfilerError:
    """``exc`` as a one-line error that names the shard."""
    line = first_line(exc)
    return ProfilerError(line if part.label in line else f"{part.label}: {line}")
