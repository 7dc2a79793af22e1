"""Parquet reader: column projection, streamed row-group batches."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from gpu_profiler.chunk import Chunk
from gpu_profiler.errors import ProfilerError
from gpu_profiler.readers.arrow import CHUNK_ROWS, LengthSpec, arrays_to_chunks

MAGIC = b"PAR1"


def _corrupt(path: Path, exc: Exception) -> ProfilerError:
    msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return ProfilerError(f"{path}: corrupt or truncated Parquet file: {msg}")


def _open(path: Path) -> pq.ParquetFile:
    try:
        return pq.ParquetFile(str(path), memory_map=True)
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise _corrupt(path, exc) from None


def schema(path: Path) -> pa.Schema:
    """The Arrow schema of a Parquet file (from its footer)."""
    return _open(path).schema_arrow


def chunks(path: Path, spec: LengthSpec) -> Iterator[Chunk]:
    """Chunks of the length column; only that column's pages are read and decoded."""
    return arrays_to_chunks(_columns(_open(path), spec, path), spec)


def _columns(pf: pq.ParquetFile, spec: LengthSpec, path: Path) -> Iterator[pa.Array]:
    try:
        for rb in pf.iter_batches(batch_size=CHUNK_ROWS, columns=[spec.name]):
            yield rb.column(0)
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise _corrupt(path, exc) from None
