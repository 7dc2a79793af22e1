"""The one scan driver: a `Source` is listed and planned once (`gpu_profiler.engine.plan`),
then run by one of two strategies: every part at once in this process
(`gpu_profiler.engine.run_local`), or shard by shard (`gpu_profiler.tasks`) when the
`Sharding` asks for it: on a Dask cluster (``client``), one slice of the shard list
(``part``), resumable (``cache_dir``), or going past bad shards (``skip_bad_shards``). The
local strategy imports none of those (nor dask)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from gpu_profiler import engine
from gpu_profiler.engine import Planned, Scan, ShardReport
from gpu_profiler.histogram import LengthHistogram, merge
from gpu_profiler.progress import ScanProgress
from gpu_profiler.request import DEFAULT, LOCAL, Execution, Sharding, Source

if TYPE_CHECKING:
    from gpu_profiler.tasks import Outcome


def scan(source: Source, execution: Execution = DEFAULT,
         sharding: Sharding = LOCAL) -> Scan:
    """Histogram every split of ``source``."""
    return run(engine.plan(source, execution, skip_bad=sharding.skip_bad_shards), sharding)


def run(planned: Planned, sharding: Sharding = LOCAL) -> Scan:
    """Histogram every split of a plan, by the strategy ``sharding`` asks for."""
    reading = planned.reading
    if sharding.local or reading is None:
        return engine.run_local(planned)
    from gpu_profiler.tasks import Job
    from gpu_profiler.tasks import run as run_task

    cap = planned.execution.cap
    items = [(name, p) for name, ps in planned.splits.items() for p in ps]
    provenance = None
    if sharding.part is not None:
        from gpu_profiler import slices

        slice_of = slices.parse_part(sharding.part)
        provenance = slices.provenance(items, reading.spec.describe(), cap, *slice_of,
                                       source=reading.source)
        items = slices.select(items, *slice_of)
    cache_dir = sharding.cache_dir
    job = Job(reading, planned.backend.name, planned.execution.backend_options, cap,
              planned.like, None if cache_dir is None else str(cache_dir),
              sharding.skip_bad_shards)
    done: dict[str, list[Outcome]] = {name: [] for name in planned.splits}
    with ScanProgress(len(items), planned.execution.progress) as bar:
        if sharding.client is None:
            for name in planned.splits:
                ps = [p for n, p in items if n == name]
                if ps:
                    done[name].append(run_task(ps, job, bar))
        else:
            from gpu_profiler import cluster

            client: Any = sharding.client
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
