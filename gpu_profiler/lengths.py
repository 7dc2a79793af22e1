"""`lengths`: every sample's length, in the source's row order (what a batch sampler needs;
the histogram forgets the order)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from gpu_profiler.chunk import Chunk
from gpu_profiler.errors import ProfilerError
from gpu_profiler.readers import FilePart, open_source, resolve_spec
from gpu_profiler.readers.arrow import LengthSpec, arrays_to_chunks

#: What a null length reads as: like any negative length, it fits no bucket.
NULL = -1


def lengths(source: Any, *, column: str | None = None, offsets_of: str | None = None,
            format: str | None = None, split: str | None = None) -> np.ndarray:
    """The length of every sample of ``source`` as int64, in row order (row ``i`` of the
    dataset is entry ``i``); null lengths read as :data:`NULL`.

    ``source`` and the options are those of :func:`gpu_profiler.histogram`; a source with
    several splits needs ``split`` (row indices are per split). Read with the project's
    readers (the selective IPC reader for HF dirs and IPC files; Parquet row groups in
    order), never through Python lists.
    """
    splits = open_source(source, format, split)
    if len(splits) > 1:
        names = ", ".join(repr(s) for s in splits)
        raise ProfilerError(f"the source has splits {names}: pass split= (row indices are "
                            "per split)")
    parts = next(iter(splits.values()), [])
    if not parts:
        return np.zeros(0, np.int64)
    spec = resolve_spec(parts[0].schema(), column, offsets_of, parts[0].label)
    out = [lengths_of(c) for p in parts for c in _ordered_chunks(p, spec)]
    return np.concatenate(out) if out else np.zeros(0, np.int64)


def lengths_of(chunk: Chunk) -> np.ndarray:
    """One chunk's lengths as int64, nulls as :data:`NULL`."""
    chunk = chunk.gathered()
    data = chunk.data
    if not isinstance(data, np.ndarray):  # a device array (cupy): bring it to the host
        data = data.get()
    v = data.astype(np.int64)  # a copy: chunks may be views of buffers reused later
    if chunk.offsets:
        v = np.diff(v)
    if chunk.valid is not None:
        valid = chunk.valid if isinstance(chunk.valid, np.ndarray) else chunk.valid.get()
        v[~np.asarray(valid, dtype=bool)] = NULL
    return v


def _ordered_chunks(part: Any, spec: LengthSpec) -> Iterator[Chunk]:
    """The part's chunks in row order (the scan's Parquet reader yields them as they finish
    and counts some row groups from statistics, so Parquet is read row group by row
    group here)."""
    if isinstance(part, FilePart) and part.format == "parquet":
        import pyarrow.parquet as pq

        try:
            pf = pq.ParquetFile(part.path)
            for i in range(pf.metadata.num_row_groups):
                table = pf.read_row_group(i, columns=[spec.name])
                yield from arrays_to_chunks(table.column(0).chunks, spec)
        except (OSError, ValueError, TypeError, IndexError, KeyError) as exc:
            raise ProfilerError(f"{part.label}: cannot read the Parquet file "
                                f"({str(exc).splitlines()[0] if str(exc) else exc})") from None
        return
    for chunk in part.chunks(spec):
        if not isinstance(chunk, Chunk):  # a Run has lengths but no row order
            raise ProfilerError(f"{part.label}: its reader gives no row order")
        yield chunk
