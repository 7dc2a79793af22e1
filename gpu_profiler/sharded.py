"""A scan shard by shard: on a Dask cluster (``client``), one slice of the shard list
(``part``), resumable (``cache_dir``), or going past bad shards (``skip_bad_shards``).
Without any of these it is the plain `gpu_profiler.engine.scan`, which imports none of
them (nor dask)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from gpu_profiler import engine
from gpu_profiler.engine import Scan, ShardReport
from gpu_profiler.histogram import LengthHistogram, merge
from gpu_profiler.progress import ScanProgress
from gpu_profiler.readers import SourceOptions
from gpu_profiler.tasks import Job, Outcome, run


def scan(source: Any, *, column: str | None = None, offsets_of: str | None = None,
         format: str | None = None, split: str | None = None, backend: str = "auto",
         cap: int | None = None, progress: bool = False, backend_options: Any = None,
         source_options: SourceOptions | None = None, client: Any = None,
         cache_dir: str | Path | None = None, part: str | None = None,
         skip_bad_shards: bool = False) -> Scan:
    """Histogram every split of ``source`` (arguments as in :func:`gpu_profiler.histogram`
    and :func:`gpu_profiler.profile`)."""
    common: dict[str, Any] = dict(column=column, offsets_of=offsets_of, format=format,
                                  split=split, backend=backend, cap=cap,
                                  backend_options=backend_options,
                                  source_options=source_options)
    if client is None and cache_dir is None and part is None and not skip_bad_shards:
        return engine.scan(source, progress=progress, **common)
    slice_of = None
    if part is not None:  # a bad --part fails before the source is opened
        from gpu_profiler import slices

        slice_of = slices.parse_part(part)
    planned = engine.prepare(source, skip_bad=skip_bad_shards, **common)
    reading = planned.reading
    if reading is None:
        return planned.empty(cap, column, offsets_of)
    items = [(name, p) for name, ps in planned.splits.items() for p in ps]
    provenance = None
    if slice_of is not None:
        provenance = slices.provenance(items, reading.spec.describe(), cap, *slice_of,
                                       source=reading.source)
        items = slices.select(items, *slice_of)
    job = Job(reading, planned.backend.name, backend_options, cap, planned.like,
              None if cache_dir is None else str(cache_dir), skip_bad_shards)
    done: dict[str, list[Outcome]] = {name: [] for name in planned.splits}
    with ScanProgress(len(items), progress) as bar:
        if client is None:
            for name in planned.splits:
                ps = [p for n, p in items if n == name]
                if ps:
                    done[name].append(run(ps, job, bar))
        else:
            from gpu_profiler import cluster

            tasks = cluster.groups(items, cluster.threads(client), reading)
            for i, outcome in cluster.outcomes(client, [ps for _, ps in tasks], job):
                name, ps = tasks[i]
                done[name].append(outcome)
                bar.update(samples=outcome.histogram.total if outcome.histogram else 0,
                           nbytes=sum(p.nbytes for p in ps), parts=len(ps))
    every = [o for os in done.values() for o in os]
    report = ShardReport(
        cache=None if cache_dir is None else {
            "reused": sum(o.reused for o in every), "scanned": sum(o.scanned for o in every),
            "rejected": [r for o in every for r in o.rejected]},
        skipped=tuple(s for o in every for s in o.skipped), provenance=provenance)
    hists = {name: _sum(os, cap) for name, os in done.items()}
    return Scan(hists, reading.spec, planned.backend.name,
                time.perf_counter() - planned.started, report)


def _sum(outcomes: list[Outcome], cap: int | None) -> LengthHistogram:
    """The histograms of ``outcomes`` summed (zeros when none has one)."""
    hists = [o.histogram for o in outcomes if o.histogram is not None]
    return merge(hists) if hists else LengthHistogram.empty(cap or 0)
