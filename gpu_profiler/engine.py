"""The scan, planned once, then executed: source -> parts -> schemas checked (in parallel)
-> one reading plan (`plan`: readers, backend, parts at once or one after another) -> one
histogram per part (`gpu_profiler.execute`) -> their sum per split."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

from gpu_profiler import execute, native
from gpu_profiler.backends import Backend, get_backend
from gpu_profiler.backends.numba_backend import cores
from gpu_profiler.errors import ProfilerError
from gpu_profiler.histogram import LengthHistogram, merge
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

#: A scan of at most this many input bytes is *small*: ``auto`` runs it on the CPU (numba's
#: native kernels), not a GPU. Until those kernels are built on this machine (5-15 s, once;
#: see `gpu_profiler.native`) it is also *light*: numpy histograms it and pyarrow reads
#: dense IPC files, so that a first small scan of those does not wait for the build;
#: ``--backend numpy`` scans are light whenever small. Measured in bench/bench_core.py.
LIGHT_BYTES = 256 << 20
#: A scan with at least this many parts per worker thread runs them at once, each read
#: inline (`gpu_profiler.execute`); fewer, larger parts are read one after another, each
#: with its readers' own threads.
PARTS_PER_WORKER = 2


@dataclass(frozen=True)
class Scan:
    """What one scan produced."""

    histograms: dict[str, LengthHistogram]
    spec: LengthSpec
    backend: str
    seconds: float

    @property
    def total(self) -> LengthHistogram:
        """All splits together."""
        return merge(self.histograms.values())


def scan(source: Any, *, column: str | None = None, offsets_of: str | None = None,
         format: str | None = None, split: str | None = None, backend: str = "auto",
         cap: int | None = None, progress: bool = False,
         backend_options: Any = None, source_options: SourceOptions | None = None) -> Scan:
    """Histogram every split of ``source``. See :func:`gpu_profiler.histogram` for arguments;
    ``source_options`` holds the options of the formats that take them."""
    t0 = time.perf_counter()
    if cap is not None and (isinstance(cap, bool) or cap < 0):
        raise ProfilerError(f"cap must be a non-negative integer, got {cap!r}")
    # A named backend is checked before the input is touched; auto is resolved after.
    engine = None if backend == "auto" else get_backend(backend, backend_options)
    source_options = source_options or SourceOptions()
    splits = open_source(source, format, split,
                         given_options(column, offsets_of, source_options))
    parts = [p for ps in splits.values() for p in ps]
    small = backend in ("auto", "numpy") and not backend_options and _small(parts)
    light = small and (backend == "numpy" or not native.ready())
    if engine is None:
        engine = get_backend("numpy" if light else "numba" if small else "auto",
                             backend_options)
    if not parts:  # e.g. an empty HF dataset (no shards): zeros, not an error
        spec = LengthSpec(offsets_of or column or "length", offsets=bool(offsets_of))
        empty = LengthHistogram.empty(cap or 0)
        return Scan({name: empty for name in splits}, spec, engine.name,
                    time.perf_counter() - t0)
    first = parts[0].schema()
    _check_schemas(parts, first)
    reading = plan(parts, resolve_spec(first, column, offsets_of, parts[0].label), engine,
                   light, source_options)
    hists = {}
    with ScanProgress(len(parts), progress) as bar:
        for name, ps in splits.items():
            total = LengthHistogram.empty(cap or 0)
            for _, h in execute.histograms(ps, reading, engine, cap, bar):
                total = merge([total, h])  # a running sum: memory stays O(cap)
            hists[name] = _exact(total, ps, reading.spec)
    return Scan(hists, reading.spec, engine.name, time.perf_counter() - t0)


def _exact(hist: LengthHistogram, parts: list[Part], spec: LengthSpec) -> LengthHistogram:
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


def plan(parts: list[Part], spec: LengthSpec, backend: Backend, light: bool,
         source: SourceOptions | None = None) -> Reading:
    """How this scan reads every part, decided once: the readers that start fastest for a
    light scan, segmented chunks for a backend that takes them, Parquet decoded on the GPU
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
    return Reading(spec, light=light, segmented=backend.segmented, gpu_parquet=gpu_parquet,
                   ipc_reader=ipc.forced_reader(), inline=_many(parts, backend),
                   source=source or SourceOptions())


def _many(parts: list[Part], backend: Backend) -> bool:
    """Whether the scan runs its parts at once, each read inline by a worker: when the
    backend can (`Backend.per_part`) and there are at least `PARTS_PER_WORKER` parts a
    worker, so that the last ones leave few cores idle."""
    split = backend.per_part()
    return split is not None and len(parts) >= PARTS_PER_WORKER * split[0]


def _small(parts: list[Part]) -> bool:
    """Whether the scan is small (see `LIGHT_BYTES`)."""
    if any(p.on_device for p in parts):
        return False
    return sum(p.nbytes for p in parts) <= LIGHT_BYTES


def _check_schemas(parts: list[Part], first: Any) -> None:
    """Every part's schema is the first one's (read in parallel: a footer or schema
    message each, before any part is read)."""
    if len(parts) < 2:
        return
    with ThreadPoolExecutor(cores(), thread_name_prefix="gpu-profiler-plan") as pool:
        schemas = pool.map(lambda p: p.schema(), parts[1:])
        for part, schema in zip(parts[1:], schemas, strict=True):
            if not schema.equals(first, check_metadata=False):
                raise ProfilerError(f"{part.label}: schema differs from {parts[0].label}: "
                                    f"{_schema_diff(schema, first)}")


def _schema_diff(a: Any, b: Any) -> str:
    fa = {f.name: str(f.type) for f in a}
    fb = {f.name: str(f.type) for f in b}
    diffs = [f"{n}: {fa.get(n, 'missing')} vs {fb.get(n, 'missing')}"
             for n in dict.fromkeys([*fb, *fa]) if fa.get(n) != fb.get(n)]
    return "; ".join(diffs) or "field order or nullability"
