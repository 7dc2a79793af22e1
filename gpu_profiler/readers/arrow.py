"""Arrow helpers shared by every reader: choose the length column, turn Arrow arrays into
`Chunk`s without copying, and coalesce small record batches into large chunks."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pyarrow as pa

from gpu_profiler.chunk import Chunk
from gpu_profiler.errors import ProfilerError

#: Rows per chunk handed to a backend (small record batches are concatenated up to this).
CHUNK_ROWS = 1 << 22


@dataclass(frozen=True)
class LengthSpec:
    """Where lengths come from: an integer column, or the offsets of a list column; for a
    format whose lengths are no column of the user's (a Megatron-LM index, a flat token
    stream: the ``length`` field of its schema is the reader's), ``about`` says what they
    are (`described_by`)."""

    name: str
    offsets: bool = False
    about: str | None = None

    def describe(self) -> str:
        """What the lengths are, as ``length_source`` says it: ``column 'length'``,
        ``offsets of 'input_ids'``, ``Megatron-LM index: sequence lengths``, ``token
        stream: documents split at EOT 50256``."""
        if self.about:
            return self.about
        return f"offsets of {self.name!r}" if self.offsets else f"column {self.name!r}"

    def described_by(self, part: Any, options: Any) -> LengthSpec:
        """This spec, saying what ``part``'s format makes its lengths of under the source
        ``options`` (a `SourceOptions`), when the part's class has a ``length_source``
        (`gpu_profiler.readers.megatron.MegatronPart`,
        `gpu_profiler.readers.tokens.TokenPart`); itself otherwise."""
        about = getattr(part, "length_source", None)
        return replace(self, about=about(options)) if about is not None else self


def _is_int(t: pa.DataType) -> bool:
    if pa.types.is_dictionary(t):
        t = t.value_type
    return pa.types.is_integer(t)


def _columns_listing(schema: pa.Schema) -> str:
    return ", ".join(f"{f.name} ({f.type})" for f in schema) or "none"


def _only_one(names: list[str], name: str, where: str) -> None:
    """A name that several fields carry does not say which one holds the lengths."""
    if names.count(name) > 1:
        raise ProfilerError(f"{where}: {names.count(name)} fields are named {name!r}; which "
                            "one holds the lengths is ambiguous")


def resolve_spec(schema: pa.Schema, column: str | None, offsets_of: str | None,
                 where: str, list_offsets: bool = True) -> LengthSpec:
    """Pick and check the length source in ``schema``; ``where`` names the input in errors;
    ``list_offsets``: whether its format can give lengths as a list column's offsets (the
    fix an error offers)."""
    if column and offsets_of:
        raise ProfilerError("give either --column or --offsets-of, not both")
    names = schema.names
    if offsets_of:
        if offsets_of not in names:
            raise ProfilerError(f"{where}: no column {offsets_of!r}; columns: "
                                f"{_columns_listing(schema)}")
        _only_one(names, offsets_of, where)
        t = schema.field(offsets_of).type
        if not (pa.types.is_list(t) or pa.types.is_large_list(t)):
            raise ProfilerError(f"{where}: --offsets-of needs a list column, {offsets_of!r} "
                                f"has type {t}")
        return LengthSpec(offsets_of, offsets=True)
    if column is None:
        ints = [f.name for f in schema if _is_int(f.type)]
        if "length" in names:
            column = "length"
        elif len(ints) == 1:
            column = ints[0]
        else:
            what = "several integer columns" if ints else "no integer column"
            fix = "--column or --offsets-of" if list_offsets else "--column"
            raise ProfilerError(f"{where}: no 'length' column and {what}; pick one with "
                                f"{fix}; columns: {_columns_listing(schema)}")
    if column not in names:
        raise ProfilerError(f"{where}: no column {column!r}; columns: "
                            f"{_columns_listing(schema)}")
    _only_one(names, column, where)
    t = schema.field(column).type
    if not _is_int(t):
        hint = " (use --offsets-of for a list column)" if list_offsets and (
            pa.types.is_list(t) or pa.types.is_large_list(t)) else ""
        raise ProfilerError(f"{where}: column {column!r} has type {t}; lengths must be "
                            f"integers{hint}")
    return LengthSpec(column)


def array_to_chunk(arr: pa.Array, spec: LengthSpec) -> Chunk:
    """Zero-copy view of an Arrow array's values (or list offsets) as a `Chunk`."""
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
