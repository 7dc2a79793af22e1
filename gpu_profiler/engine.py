"""The scan, planned once (`prepare`), then executed: source -> parts -> one reading plan
(`plan`: readers, backend, parts at once or one after another) -> schemas checked (in
parallel) -> one histogram per task of parts (`gpu_profiler.execute`) -> their sum per
split. A sharded scan (`gpu_profiler.sharded`) plans the same way and executes its own
tasks (`gpu_profiler.tasks`) on the same seam."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa

from gpu_profiler import execute
from gpu_profiler.backends import Backend, get_backend
from gpu_profiler.backends.numba_backend import cores
from gpu_profiler.errors import ProfilerError
from gpu_profiler.histogram import LengthHistogram, Sum, merge
from gpu_profiler.progress import ScanProgress
from gpu_profiler.readers import (
    LengthSpec,
    Part,
    Reading,
    SourceOptions,
    given_options,
    ipc,
    open_source,
    resolve_spec,
)
from gpu_profiler.readers.base import same_schema

#: A scan of at most this many input bytes is *small*: ``auto`` runs it on the CPU (numba's
#: native kernels), not a GPU. Measured in bench/bench_core.py.
SMALL_SCAN_BYTES = 256 << 20
#: A scan with at least this many parts per worker thread runs them at once, each read
#: inline (`gpu_profiler.execute`); fewer, larger parts are read one after another, each
#: with its readers' own threads.
PARTS_PER_WORKER = 2


@dataclass(frozen=True)
class ShardReport:
    """What a sharded scan (`gpu_profiler.sharded`) says besides its histograms.

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


@dataclass(frozen=True)
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


@dataclass(frozen=True)
class Planned:
    """A source opened and its scan planned, before any part is read: its splits, the
    backend, the reading plan (None when there are no parts) and the first part's label and
    schema, which every other part must have."""

    splits: dict[str, list[Part]]
    backend: Backend
    reading: Reading | None
    like: tuple[str, Any]
    started: float

    @property
    def parts(self) -> list[Part]:
        """Every part of every split, in order."""
        return [p for ps in self.splits.values() for p in ps]

    def empty(self, cap: int | None, column: str | None, offsets_of: str | None) -> Scan:
        """The scan of a source with no parts (e.g. an empty HF dataset): zeros."""
        spec = LengthSpec(offsets_of or column or "length", offsets=bool(offsets_of))
        empty = LengthHistogram.empty(cap or 0)
        return Scan({name: empty for name in self.splits}, spec, self.backend.name,
                    time.perf_counter() - self.started)


def prepare(source: Any, *, column: str | None = None, offsets_of: str | None = None,
            format: str | None = None, split: str | None = None, backend: str = "auto",
            cap: int | None = None, backend_options: Any = None,
            source_options: SourceOptions | None = None, skip_bad: bool = False) -> Planned:
    """Open ``source`` and plan its scan once (see :func:`scan`); ``skip_bad``: the plan
    follows the first shard that can be read, not the first one."""
    t0 = time.perf_counter()
    if cap is not None and (isinstance(cap, bool) or cap < 0):
        raise ProfilerError(f"cap must be a non-negative integer, got {cap!r}")
    # A named backend is checked before the input is touched; auto is resolved after.
    engine = None if backend == "auto" else get_backend(backend, backend_options)
    source_options = source_options or SourceOptions()
    splits = open_source(source, format, split,
                         given_options(column, offsets_of, source_options))
    parts = [p for ps in splits.values() for p in ps]
    if engine is None:
        engine = get_backend("numba" if not backend_options and _small(parts) else "auto",
                             backend_options)
    if not parts:
        return Planned(splits, engine, None, ("", None), t0)
    label, first = _reference(parts, skip_bad)
    reading = plan(parts, resolve_spec(first, column, offsets_of, label), engine,
                   source_options)
    return Planned(splits, engine, reading, (label, first), t0)


#: What reading a bad shard raises (a sharded scan may skip it: `gpu_profiler.tasks`).
SHARD_ERRORS = (ProfilerError, OSError, pa.ArrowException)


def _reference(parts: list[Part], skip_bad: bool) -> tuple[str, Any]:
    """The label and schema of the first part, which every other part must match (with
    ``skip_bad``: of the first part whose schema can be read)."""
    candidates = parts if skip_bad else parts[:1]
    for part in candidates[:-1]:
        try:
            return part.label, part.schema()
        except SHARD_ERRORS:
            continue
    return candidates[-1].label, candidates[-1].schema()


def scan(source: Any, *, column: str | None = None, offsets_of: str | None = None,
         format: str | None = None, split: str | None = None, backend: str = "auto",
         cap: int | None = None, progress: bool = False,
         backend_options: Any = None, source_options: SourceOptions | None = None) -> Scan:
    """Histogram every split of ``source``. See :func:`gpu_profiler.histogram` for arguments;
    ``source_options`` holds the options of the formats that take them."""
    planned = prepare(source, column=column, offsets_of=offsets_of, format=format,
                      split=split, backend=backend, cap=cap, backend_options=backend_options,
                      source_options=source_options)
    reading = planned.reading
    if reading is None:  # e.g. an empty HF dataset (no shards): zeros, not an error
        return planned.empty(cap, column, offsets_of)
    _check_schemas([p for p in planned.parts if not execute.reads_together(p, reading)],
                   planned.like)
    hists = {}
    with ScanProgress(len(planned.parts), progress) as bar:
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


def plan(parts: list[Part], spec: LengthSpec, backend: Backend,
         source: SourceOptions | None = None) -> Reading:
    """How this scan reads every part, decided once: segmented chunks for a backend that
    takes them, Parquet decoded on the GPU
    for cuda (with cudf), an IPC reader forced by ``$GPU_PROFILER_IPC_READER``, the
    options of the formats that take them (``source``). Parts in GPU memory need the cuda
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
    return Reading(spec, segmented=backend.segmented, counted=backend.counted,
                   gpu_parquet=gpu_parquet,
                   ipc_reader=ipc.forced_reader(), inline=_many(parts, backend),
                   source=source or SourceOptions())


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


def _check_schemas(parts: list[Part], like: tuple[str, Any]) -> None:
    """Every part's schema is ``like`` 's (the first part's label and schema), read in
    parallel: a footer or schema message each, before any part is read (the parts read
    together are checked as they are read: see `execute.reads_together`)."""
    parts = [p for p in parts if p.label != like[0]]
    if not parts:
        return
    with ThreadPoolExecutor(cores(), thread_name_prefix="gpu-profiler-plan") as pool:
        schemas = pool.map(lambda p: p.schema(), parts)
        for part, schema in zip(parts, schemas, strict=True):
            same_schema(part.label, schema, like)
