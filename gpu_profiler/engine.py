"""The scan, planned once (`plan`), then executed: source -> its splits and parts, listed
once -> one reading plan (`_reading`: readers, backend, parts at once or one after
another) -> schemas checked (in parallel) -> one histogram per task of parts
(`gpu_profiler.execute`) -> their sum per split. `run_local` executes a plan in this
process; the driver (`gpu_profiler.driver`) chooses it or the per-shard tasks
(`gpu_profiler.tasks`) on the same seam."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from gpu_profiler import execute
from gpu_profiler.backends import Backend, get_backend
from gpu_profiler.backends.numba_backend import cores
from gpu_profiler.errors import ProfilerError, shard_error
from gpu_profiler.frozen import frozen
from gpu_profiler.histogram import LengthHistogram, Sum, merge
from gpu_profiler.progress import ScanProgress
from gpu_profiler.readers import (
    LengthSpec,
    Part,
    Reading,
    SourceOptions,
    given_options,
    open_source,
    resolve_spec,
)
from gpu_profiler.readers.base import FIXED, fixed, planning_schema, same_schema, unlike
from gpu_profiler.request import DEFAULT, Execution, Source

#: A scan of at most this many input bytes is *small*: ``auto`` runs it on the CPU (numba's
#: native kernels), not a GPU. Measured in bench/bench_core.py.
SMALL_SCAN_BYTES = 256 << 20
#: A scan with at least this many parts per worker thread runs them at once, each read
#: inline (`gpu_profiler.execute`); fewer, larger parts are read one after another, each
#: with its readers' own threads.
PARTS_PER_WORKER = 2


@frozen
class ShardReport:
    """What a per-shard scan (`gpu_profiler.driver`) says besides its histograms.

    Attributes:
        cache: with a cache directory, ``{"reused": R, "scanned": S, "rejected": [...]}``
            (the entries found corrupt or foreign, and rescanned).
        skipped: the shards ``skip_bad_shards`` left out, each with its error.
        provenance: of a ``part`` slice: what `gpu_profiler.slices` checks when the
            partial histograms are merged.
    """

    cache: dict[str, Any] | None = None
    skipped: tuple[tuple[str, str], ...] = ()
    provenance: dict[str, Any] | None = None


@frozen
class Scan:
    """What one scan produced."""

    histograms: dict[str, LengthHistogram]
    spec: LengthSpec
    backend: str
    seconds: float
    report: ShardReport = ShardReport()

    @property
    def total(self) -> LengthHistogram:
        """All splits together."""
        return merge(self.histograms.values())


@frozen
class Planned:
    """A source listed once and its scan planned, before any part is read: its splits, the
    backend, the reading plan (None when there are no parts) and the first part's label
    and schema, which every other part must have."""

    source: Source
    execution: Execution
    splits: dict[str, list[Part]]
    backend: Backend
    reading: Reading | None
    like: tuple[str, Any]
    started: float

    @property
    def parts(self) -> list[Part]:
        """Every part of every split, in order."""
        return [p for ps in self.splits.values() for p in ps]

    def empty(self) -> Scan:
        """The scan of a source with no parts (e.g. an empty HF dataset): zeros."""
        src = self.source
        spec = LengthSpec(src.offsets_of or src.column or "length",
                          offsets=bool(src.offsets_of))
        empty = LengthHistogram.empty(self.execution.cap or 0)
        return Scan({name: empty for name in self.splits}, spec, self.backend.name,
                    time.perf_counter() - self.started)

    def analysed_split(self) -> str | None:
        """The split an analysis covers (``suggest``, ``schedule``, ``plan``, ``profile
        --policy``): the source's ``split`` when given, else ``train`` when it has one, else
        its only split; None for an unsplit source. Several splits and none named ``train``
        is a `ProfilerError`: merging them would analyse batches no training run makes."""
        if self.source.split is not None:
            return self.source.split
        names = [name for name in self.splits if name]
        if "train" in names or len(names) < 2:
            return "train" if "train" in names else next(iter(names), None)
        raise ProfilerError(f"{self.source.label}: splits {', '.join(map(repr, names))} and "
                            "none is 'train': choose the one to analyse with --split (split= "
                            "in Python)")

    def regrouped(self, key: Callable[[Part], str]) -> Planned:
        """This plan with its parts as splits named by ``key`` (in the order each name is
        first met): a per-group scan (`gpu_profiler.groups`) runs each as a split."""
        groups: dict[str, list[Part]] = {}
        for part in self.parts:
            groups.setdefault(key(part), []).append(part)
        return replace(self, splits=groups)

    def only(self, split: str | None) -> Planned:
        """This plan narrowed to one split (``None``: itself), without listing again."""
        if split is None or list(self.splits) == [split]:
            return self
        if split not in self.splits:
            raise ProfilerError(f"{self.source.label}: no split {split!r} (it has "
                                f"{', '.join(map(repr, self.splits))})")
        return _planned(replace(self.source, split=split), self.execution,
                        {split: self.splits[split]}, self.started)


def plan(source: Source, execution: Execution = DEFAULT, skip_bad: bool = False
         ) -> Planned:
    """List ``source`` once and plan its scan; ``skip_bad``: the plan follows the first
    shard that can be read, not the first one."""
    t0 = time.perf_counter()
    if execution.backend != "auto":  # a named backend is checked before the input is touched
        get_backend(execution.backend, execution.backend_options)
    splits = open_source(source.data, source.format, source.split,
                         given_options(source.column, source.offsets_of, source.options))
    return _planned(source, execution, splits, t0, skip_bad)


def _planned(source: Source, execution: Execution, splits: dict[str, list[Part]],
             started: float, skip_bad: bool = False) -> Planned:
    """The plan of ``splits`` (already listed)."""
    backend, options = execution.backend, execution.backend_options
    parts = [p for ps in splits.values() for p in ps]
    engine = get_backend(backend if backend != "auto" else
                         "numba" if not options and _small(parts) else "auto", options)
    if not parts:
        return Planned(source, execution, splits, engine, None, ("", None), started)
    label, first = _reference(parts, skip_bad)
    spec = (FIXED if first is None else
            resolve_spec(first, source.column, source.offsets_of, label,
                         getattr(parts[0], "list_offsets", True))
            ).described_by(parts[0], source.options)
    reading = _reading(parts, spec, engine, source.options)
    return Planned(source, execution, splits, engine, reading, (label, first), started)


def _reference(parts: list[Part], skip_bad: bool) -> tuple[str, Any]:
    """The label and schema of the first part, which every other part must match (with
    ``skip_bad``: of the first part whose schema can be read); None for the schema of a
    `fixed` part (never built: see `gpu_profiler.readers.base.unlike`)."""
    def schema(part: Part) -> Any:
        return None if fixed(part) else planning_schema(part)

    candidates = parts if skip_bad else parts[:1]
    for part in candidates[:-1]:
        try:
            return part.label, schema(part)
        except Exception as exc:
            if not shard_error(exc):
                raise
    return candidates[-1].label, schema(candidates[-1])


def run_local(planned: Planned) -> Scan:
    """Histogram every split of a plan in this process, every part at once (the local
    strategy of `gpu_profiler.driver`)."""
    reading, cap = planned.reading, planned.execution.cap
    if reading is None:  # e.g. an empty HF dataset (no shards): zeros, not an error
        return planned.empty()
    check_schemas([p for p in planned.parts if not execute.reads_together(p, reading)],
                  planned.like, reading.spec)
    hists = {}
    with ScanProgress(len(planned.parts), planned.execution.progress) as bar:
        for name, ps in planned.splits.items():
            total = Sum(cap or 0)
            for _, h in execute.histograms(ps, reading, planned.backend, cap, bar,
                                           like=planned.like, checked=True):
                total.add(h)
            hists[name] = exact(total.histogram(), ps, reading.spec)
    return Scan(hists, reading.spec, planned.backend.name,
                time.perf_counter() - planned.started)


def exact(hist: LengthHistogram, parts: list[Part], spec: LengthSpec) -> LengthHistogram:
    """``hist`` with its above-cap token sum exact. Backends add those lengths in int64,
    which wraps past 2**63; but the true sum lies between count x shortest and count x
    longest, and when that span is under 2**64 exactly one value there has the wrapped
    sum's remainder mod 2**64. A wider span (no real corpus comes near it: such lengths
    are not token counts) stops the scan with one line rather than report a wrong total."""
    n, lo, hi = hist.above_count, hist.above_min, hist.above_max
    if not n or n * hi < 1 << 63:
        return hist
    if n * (hi - lo) >= 1 << 64:
        where = parts[0].label if len(parts) == 1 else f"{parts[0].label} and others"
        raise ProfilerError(
            f"{where}: {spec.describe()}: {n:,} lengths from {lo:,} to {hi:,} sum past what "
            "can be counted exactly; these do not look like token counts (choose the length "
            "column with --column or --offsets-of)")
    return replace(hist, above_tokens=n * lo + (hist.above_tokens - n * lo) % (1 << 64))


def _reading(parts: list[Part], spec: LengthSpec, backend: Backend,
             source: SourceOptions) -> Reading:
    """How this scan reads every part, decided once: segmented chunks for a backend that
    takes them, Parquet decoded on the GPU for cuda (with cudf), the options of the
    formats that take them (``source``). Parts in GPU memory need the cuda
    backend."""
    on_gpu = backend.name == "cuda"
    device_part = next((p for p in parts if p.on_device), None)
    if device_part is not None and not on_gpu:
        raise ProfilerError(f"{device_part.label} is in GPU memory: use the cuda backend, "
                            f"not {backend.name!r}")
    gpu_parquet = False
    if on_gpu:
        from gpu_profiler.readers import device

        gpu_parquet = device.cudf_available()
    return Reading(spec, segmented=backend.segmented,
                   gpu_parquet=gpu_parquet, inline=_many(parts, backend),
                   source=source)


def _many(parts: list[Part], backend: Backend) -> bool:
    """Whether the scan runs its parts at once, each read inline by a worker: when the
    backend can (`Backend.per_part`) and there are at least `PARTS_PER_WORKER` parts a
    worker, so that the last ones leave few cores idle."""
    split = backend.per_part()
    return split is not None and len(parts) >= PARTS_PER_WORKER * split[0]


def _small(parts: list[Part]) -> bool:
    """Whether the scan is small (see `SMALL_SCAN_BYTES`)."""
    if any(p.on_device for p in parts):
        return False
    return sum(p.nbytes for p in parts) <= SMALL_SCAN_BYTES


def check_schemas(parts: list[Part], like: tuple[str, Any], spec: LengthSpec) -> None:
    """Every part holds the length source ``spec`` as ``like`` does (the first part's label
    and schema: `same_schema`), the schemas read in parallel: a footer or schema message
    each, before any part is read (the parts read together are checked as they are read:
    see `execute.reads_together`)."""
    parts = [p for p in parts if unlike(p, like)]
    if not parts:
        return
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(cores(), thread_name_prefix="gpu-profiler-plan") as pool:
        schemas = pool.map(planning_schema, parts)
        for part, schema in zip(parts, schemas, strict=True):
            same_schema(part.label, schema, like, spec)
