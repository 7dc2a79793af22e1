"""Parquet footer statistics for ``--trust-statistics``, read in a helper process.

pyarrow's accessor of a column chunk's metadata (``RowGroupMetaData.column``) lets a C++
exception escape on some malformed footers ("ColumnMetaData type does not match
ColumnDescriptor physical type"), which aborts the whole process. The default scan never
calls it; a scan that trusts statistics calls it in one worker process (forkserver: it
inherits no threads), started on first use and reused for every file, so a footer that
aborts pyarrow costs the worker, and the scan stops with one line naming the file.
"""

from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import pyarrow.parquet as pq

from gpu_profiler.errors import ProfilerError
from gpu_profiler.runs import Run

_pool: ProcessPoolExecutor | None = None


def runs(path: Path, leaf: int) -> list[Run | None]:
    """Per row group of ``path``, the `Run` its statistics prove (see `_run`), else None."""
    global _pool
    if _pool is None:
        _pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("forkserver"))
    try:
        return _pool.submit(_runs, str(path), leaf).result()
    except BrokenProcessPool:
        _pool = None
        raise ProfilerError(f"{path}: pyarrow aborted reading the footer's statistics (a "
                            "malformed footer); scan without --trust-statistics to read "
                            "the row groups instead") from None


def _runs(path: str, leaf: int) -> list[Run | None]:
    """In the worker: every row group's `_run`."""
    md = pq.ParquetFile(path, memory_map=False).metadata
    return [_run(md.row_group(i), leaf) for i in range(md.num_row_groups)]


def _run(rg: pq.RowGroupMetaData, leaf: int) -> Run | None:
    """A `Run` when the statistics alone give this row group's histogram exactly: every
    non-null value equal (min == max) or every value null, with the null count known and
    consistent with the row count. Otherwise None (the row group is decoded)."""
    if not rg.num_rows:
        return None
    col = rg.column(leaf)
    stats = col.statistics
    if stats is None or not stats.has_null_count or col.physical_type not in ("INT32", "INT64"):
        return None
    nulls, values = stats.null_count, stats.num_values
    if nulls < 0 or values < 0 or nulls + values != rg.num_rows:
        return None
    if values == 0:
        return Run(0, 0, nulls)
    if not stats.has_min_max:
        return None
    lo, hi = stats.min, stats.max
    if not isinstance(lo, int) or lo != hi:
        return None
    return Run(lo, values, nulls)
