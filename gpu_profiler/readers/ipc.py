"""Arrow IPC readers: the file format (``.arrow``/``.feather``) and the stream format
(what Hugging Face ``save_to_disk`` writes). Files are memory-mapped and only the length
column's buffers are touched."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa

from gpu_profiler.chunk import Chunk
from gpu_profiler.errors import ProfilerError
from gpu_profiler.readers.arrow import LengthSpec, arrays_to_chunks

FILE_MAGIC = b"ARROW1"


def _corrupt(path: Path, kind: str, exc: Exception, batch: int | None = None) -> ProfilerError:
    where = f" at record batch {batch}" if batch is not None else ""
    msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return ProfilerError(f"{path}: corrupt or truncated Arrow IPC {kind} file{where}: {msg}")


def _open(path: Path, kind: str):
    try:
        source = pa.memory_map(str(path))
        return pa.ipc.open_file(source) if kind == "file" else pa.ipc.open_stream(source)
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise _corrupt(path, kind, exc) from None


def schema(path: Path, kind: str) -> pa.Schema:
    """The schema of an IPC file (``kind='file'``) or stream (``kind='stream'``)."""
    return _open(path, kind).schema


def chunks(path: Path, kind: str, spec: LengthSpec) -> Iterator[Chunk]:
    """Chunks of the length column, one per record batch."""
    reader = _open(path, kind)
    index = reader.schema.get_field_index(spec.name)
    return arrays_to_chunks(_columns(reader, kind, index, path), spec)


def _columns(reader, kind: str, index: int, path: Path) -> Iterator[pa.Array]:
    batch = 0
    try:
        if kind == "file":
            for batch in range(reader.num_record_batches):
                yield reader.get_batch(batch).column(index)
        else:
            for rb in reader:
                yield rb.column(index)
                batch += 1
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise _corrupt(path, kind, exc, batch) from None
