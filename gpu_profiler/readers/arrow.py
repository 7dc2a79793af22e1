"""Arrow helpers shared by every reader: turn Arrow arrays into `Chunk`s without copying,
and coalesce small record batches into large chunks. Loads no pyarrow itself (an array
handed in has)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

import numpy as np

from gpu_profiler.chunk import Chunk

if TYPE_CHECKING:
    import pyarrow as pa

    from gpu_profiler.readers.base import LengthSpec

#: Rows per chunk handed to a backend (small record batches are concatenated up to this).
CHUNK_ROWS = 1 << 22


def array_to_chunk(arr: pa.Array, spec: LengthSpec) -> Chunk:
    """Zero-copy view of an Arrow array's values (or list offsets) as a `Chunk`."""
    import pyarrow as pa  # (loaded: ``arr`` is one of its arrays)

    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    n, off = len(arr), arr.offset
    valid = None
    if arr.null_count:
        valid = arr.is_valid().to_numpy(zero_copy_only=False)
    if spec.offsets:
        dtype = np.int64 if pa.types.is_large_list(arr.type) else np.int32
        buf = arr.buffers()[1]
        if buf is None:  # zero-length list array may carry no offsets buffer
            return Chunk(np.zeros(1, dtype=dtype), valid, offsets=True)
        data = np.frombuffer(buf, dtype=dtype, count=off + n + 1)[off:]
        return Chunk(data, valid, offsets=True)
    return Chunk(values(arr), valid)


def values(arr: pa.Array) -> np.ndarray:
    """A fixed-width Arrow array's values as numpy, without a copy (a null's slot holds
    whatever its buffer does)."""
    dtype = np.dtype(arr.type.to_pandas_dtype())
    buf = arr.buffers()[1]
    return np.zeros(0, dtype) if buf is None else \
        np.frombuffer(buf, dtype=dtype, count=arr.offset + len(arr))[arr.offset:]


def arrays_to_chunks(arrays: Iterable[pa.Array], spec: LengthSpec) -> Iterator[Chunk]:
    """Map Arrow arrays (record-batch columns, ChunkedArray chunks) to chunks."""
    for arr in arrays:
        if len(arr):
            yield array_to_chunk(arr, spec)


def coalesce(chunks: Iterable[Chunk], rows: int | None = None) -> Iterator[Chunk]:
    """Concatenate consecutive small chunks until each holds at least ``rows`` samples
    (default :data:`CHUNK_ROWS`, read at call time).

    Offsets are rebased so the concatenation is itself a valid offsets array; chunks of at
    least ``rows / 4`` samples already amortize a kernel launch and pass through untouched
    (no copy), as do chunks in GPU memory, segmented ones and token ids (each carries its
    place in its stream).
    """
    rows = CHUNK_ROWS if rows is None else rows
    pending: list[Chunk] = []
    count = 0
    for c in chunks:
        if pending and c.offsets != pending[0].offsets:  # lengths after offsets: a handover
            yield _concat(pending)
            pending, count = [], 0
        if (c.samples >= rows // 4 or not isinstance(c.data, np.ndarray)
                or c.segments is not None or c.docs is not None):
            if pending:
                yield _concat(pending)
                pending, count = [], 0
            yield c
            continue
        pending.append(c)
        count += c.samples
        if count >= rows:
            yield _concat(pending)
            pending, count = [], 0
    if pending:
        yield _concat(pending)


def _concat(chunks: list[Chunk]) -> Chunk:
    if len(chunks) == 1:
        return chunks[0]
    valid = None
    if any(c.valid is not None for c in chunks):
        valid = np.concatenate([np.ones(c.samples, bool) if c.valid is None else c.valid
                                for c in chunks])
    if not chunks[0].offsets:
        return Chunk(np.concatenate([c.data for c in chunks]), valid)
    dtype = np.result_type(*(c.data.dtype for c in chunks))
    total = sum(c.samples for c in chunks)
    out = np.empty(total + 1, dtype=np.int64 if dtype == np.int32 else dtype)
    out[0] = 0
    pos, base = 1, 0
    for c in chunks:
        d = c.data
        out[pos:pos + c.samples] = d[1:].astype(np.int64) - int(d[0]) + base
        base = int(out[pos + c.samples - 1]) if c.samples else base
        pos += c.samples
    return Chunk(out, valid, offsets=True)
