"""Scans that read columns besides the lengths (``--group-by COLUMN``, ``--sft``,
``--dpo``): every part's record batches of those columns (``Part.batches``: IPC and HF
shards, Parquet, JSON Lines, tables in memory), the parts on the backend's worker
threads, in this process."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa

from gpu_profiler.backends import Backend
from gpu_profiler.engine import Planned
from gpu_profiler.errors import ProfilerError
from gpu_profiler.progress import ScanProgress
from gpu_profiler.readers import arrow

T = TypeVar("T")


def each_part(planned: Planned, what: str, work: Callable[[Any, Backend], tuple[T, int]]
              ) -> Iterator[T]:
    """``work(part, backend)`` of every part of ``planned`` (on the backend's workers, in
    order), which returns its result and the samples it read (for the progress bar);
    ``what`` says what the columns are for, in the error of a format without them."""
    unable = next((p for p in planned.parts if not hasattr(p, "batches")), None)
    if unable is not None:
        about = planned.reading.spec.describe() if planned.reading else "it"
        raise ProfilerError(f"{unable.label}: {about} has no columns {what}")
    split = planned.backend.per_part()
    workers, backend = split if split is not None else (1, planned.backend)
    parts = pieces(planned, workers)
    with ScanProgress(len(parts), planned.execution.progress) as bar, \
            ThreadPoolExecutor(workers, thread_name_prefix="gpu-profiler-columns") as pool:
        for part, (result, samples) in zip(parts, pool.map(lambda p: work(p, backend), parts),
                                           strict=True):
            bar.update(samples=samples, nbytes=part.nbytes, parts=1)
            yield result


def pieces(planned: Planned, workers: int) -> list[Any]:
    """The parts of ``planned``, a large Parquet shard or IPC file cut into runs of row
    groups or record batches (as a Dask task's share: `gpu_profiler.cluster.groups`), so
    that every worker has some even when the shards are few. An IPC stream stays whole:
    pyarrow reaches a stream's later batches only through the earlier ones."""
    from gpu_profiler import cluster

    if planned.reading is None or workers < 2:
        return planned.parts
    out: list[Any] = []
    for part in planned.parts:
        if getattr(part, "kind", None) == "stream":
            out.append(part)
            continue
        tasks = cluster.groups([("", part)], workers, planned.reading)
        out += [p for _, ps in tasks for p in ps]
    return out


def check_column(label: str, schema: pa.Schema, name: str, option: str,
                 takes: Callable[[pa.DataType], bool], kinds: str) -> None:
    """``name`` is one column of ``schema`` of a type ``takes`` (``kinds`` says which, in
    the error; ``option`` names the option that asked for it)."""
    if name not in schema.names:
        columns = ", ".join(f"{f.name} ({f.type})" for f in schema) or "none"
        raise ProfilerError(f"{label}: no column {name!r} for {option}; columns: {columns}")
    if schema.names.count(name) > 1:
        raise ProfilerError(f"{label}: {schema.names.count(name)} fields are named {name!r}; "
                            f"which one {option} means is ambiguous")
    t = schema.field(name).type
    if not takes(t):
        raise ProfilerError(f"{label}: column {name!r} has type {t}; {option} takes {kinds}")


def integers(arr: pa.Array) -> tuple[np.ndarray, np.ndarray | None]:
    """An integer array's values as int64 (0 where null) and its validity (None: no nulls),
    read from its buffers: no pyarrow scalar is made (the first imports pandas)."""
    n = len(arr)
    if arr.null_count == n:
        return np.zeros(n, np.int64), np.zeros(n, bool)
    values = arrow.values(arr).astype(np.int64)
    if not arr.null_count:
        return values, None
    valid = arr.is_valid().to_numpy(zero_copy_only=False)
    values[~valid] = 0
    return values, valid


#: Rows a batch of extra columns is gathered to before it is worked on (an HF shard's
#: record batches hold 1,000 rows: each would cost its own encoding and counting).
BATCH_ROWS = 1 << 20


def coalesced(batches: Iterable[pa.RecordBatch], rows: int | None = None
              ) -> Iterator[pa.RecordBatch]:
    """``batches`` gathered into batches of at least ``rows`` rows (default `BATCH_ROWS`,
    read at call time; the last may be fewer), dictionaries unified; larger ones pass
    untouched."""
    rows = BATCH_ROWS if rows is None else rows
    held: list[pa.RecordBatch] = []
    count = 0
    for batch in batches:
        if batch.num_rows >= rows and not held:
            yield batch
            continue
        held.append(batch)
        count += batch.num_rows
        if count >= rows:
            yield _joined(held)
            held, count = [], 0
    if held:
        yield _joined(held)


def _joined(batches: list[pa.RecordBatch]) -> pa.RecordBatch:
    if len(batches) == 1:
        return batches[0]
    table = pa.Table.from_batches(batches).unify_dictionaries().combine_chunks()
    return table.to_batches()[0]
