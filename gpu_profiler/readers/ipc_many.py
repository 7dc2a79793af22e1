"""Many small Arrow IPC streams (the shards of a Hugging Face ``save_to_disk`` dir) read
together (`gpu_profiler.readers.base.Together`). Where `Reading.counted` (the numba
backend) and the column is one the CPU kernel reads, they are *counted* as they are read
(`count`): one kernel call reads each file into a small buffer, walks and checks it, and
tallies its lengths while they are in cache. Otherwise they are *gathered*: each file is
read whole, with one positioned read, into one buffer; one kernel call walks every
stream's messages (`walk_streams`), one checks their length-column buffers, and the
selective reader's assembler hands the column over where it lies in the buffer (or
gathers it). Either way a small shard costs a read and a few microseconds of kernel, not
a reader of its own.

A stream is read here only if its framed schema message is byte for byte the first
stream's (whose schema is checked against the scan's). Anything else is left to the
stream's own reader (`ipc.chunks`), so both ways give the same numbers or the same error:
a file (not a stream: its footer decides what it holds), another schema, a
dictionary-encoded or compressed length column, damage of any kind, a read that fails."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from gpu_profiler import native
from gpu_profiler.chunk import Chunk
from gpu_profiler.errors import ProfilerError
from gpu_profiler.histogram import LengthHistogram
from gpu_profiler.io import files
from gpu_profiler.io.pread import OPEN_FLAGS, Fetched, read_whole, whole_buffer
from gpu_profiler.kernels import ipc_format as fmt
from gpu_profiler.readers import counted
from gpu_profiler.readers import ipc_format as parsers
from gpu_profiler.readers.base import Reading, same_schema
from gpu_profiler.readers.ipc_layout import column_layout
from gpu_profiler.readers.ipc_selective import Assembler, Column

if TYPE_CHECKING:
    from gpu_profiler.readers.ipc import IpcPart


def together(parts: list[IpcPart], reading: Reading, like: tuple[str, pa.Schema] | None,
             cap: int | None) -> tuple[list[int], Iterator[Chunk | LengthHistogram]]:
    """See `Together`: the streams among ``parts`` read at once (those that `IpcPart.joins`
    such a scan); counted as they are read (`count`) where `Reading.counted` and the column
    is one the kernel counts, else gathered into chunks."""
    every = list(range(len(parts)))
    streams = [i for i in every if parts[i].joins(reading)]
    if not streams:
        return every, iter(())
    sizes = np.array([parts[i].nbytes for i in streams], np.int64)
    paths = [parts[i].at for i in streams]
    n = 1 if reading.counted else len(paths)
    buf, starts, unread = read_whole(paths[:n], sizes[:n])
    first = streams[0]
    if unread[0]:  # its bytes are not there to be the reference
        return every, iter(())
    try:
        schema, framed = _reference(buf, 0, int(sizes[0]))
        if like is not None and parts[first].label != like[0]:
            same_schema(parts[first].label, schema, like, reading.spec)
        col, layout = _column(schema, reading)
    except _Leave:
        return every, iter(())
    if reading.counted and col.item in _COUNTED:
        hist, left = count(paths, sizes, framed, layout, col, cap)
        done = {streams[i] for i in np.flatnonzero(left == 0)}
        return [i for i in every if i not in done], iter([hist] if done else [])
    if reading.counted:
        buf, starts, unread = read_whole(paths, sizes)
    ends = starts + sizes
    left = unread.astype(np.int8)
    recs = _checked(*_walk(buf, starts, ends, framed, layout, left), col, left)
    done = {streams[i] for i in np.flatnonzero(left == 0)}
    try:  # assembled here: list offsets are checked as they are gathered
        chunks = list(_chunks(buf, recs, col, reading)) if done else []
    except ProfilerError:  # offsets out of order or range: only a stream's own reader
        return every, iter(())  # can say which stream, and where
    return [i for i in every if i not in done], iter(chunks)


#: Messages a stream may hold to be counted as it is read (`count`; one with more is left
#: to its own reader).
MESSAGES = 4096
#: The integers `count` counts (as the CPU kernel reads them: uint64 as int64), list
#: offsets included (int32 or int64); any other is gathered for the backend.
_COUNTED = (np.dtype(np.int32), np.dtype(np.int64), np.dtype(np.uint64))


def count(paths: Sequence[str | Path], sizes: np.ndarray, framed: np.ndarray,
          layout: np.ndarray, col: Column, cap: int | None
          ) -> tuple[LengthHistogram, np.ndarray]:
    """``(histogram, left)``: the streams ``paths`` (of ``sizes`` bytes, each opening with
    the ``framed`` schema message) read one by one into a small buffer and counted there
    (`count_streams`, `counted.tally`: binned up to ``cap``); ``left[i]`` for each stream
    left to its own reader."""
    blob, at = files.names(paths)
    buf = whole_buffer(int(sizes.max()) + 1)
    recs = np.empty((MESSAGES, fmt.NREC), np.int64)
    ranges = np.empty((MESSAGES, 4), np.int64)
    left = np.zeros(len(paths), np.int8)
    kernel = native.kernel("count_streams")

    def call(bins: int, grow: bool, fold_after: int, row: np.ndarray, st: np.ndarray,
             state: np.ndarray) -> tuple[int, ...]:
        return kernel(blob, at, sizes, OPEN_FLAGS, buf, framed, recs, ranges, layout,
                      col.offsets, col.item.itemsize, bins, grow, fold_after, row, st, left,
                      state)

    return counted.tally(call, len(paths), cap), left


class _Leave(Exception):
    """Every stream of the run goes to its own reader."""


def _reference(buf: np.ndarray, start: int, end: int) -> tuple[pa.Schema, np.ndarray]:
    """The first stream's schema and its framed schema message with its body (the bytes
    every other stream must open with)."""
    data = buf[start:end]
    try:
        pre, m = parsers.frame(data, 0)
        if m <= 0 or pre + m > data.size:
            raise _Leave
        big, fields, _, body = parsers.schema_info(data[pre:pre + m], -1)
    except fmt.Corrupt:
        raise _Leave from None
    if big or pre + m + body > data.size:
        raise _Leave
    schema = _schema(bytes(data[:pre + m]))
    if len(schema) != fields:  # pyarrow and the kernels must see the same fields
        raise _Leave
    return schema, data[:pre + m + body].copy()


@lru_cache(maxsize=8)
def _schema(framed: bytes) -> pa.Schema:
    """The schema in a framed schema message (little-endian), parsed once for all the
    runs of a scan (their first streams' messages are the same bytes); `_Leave` if it is
    bad (the stream's own reader says why)."""
    try:
        return parsers.arrow_schema(framed)
    except parsers.SCHEMA_ERRORS:
        raise _Leave from None


def _column(schema: pa.Schema, reading: Reading) -> tuple[Column, np.ndarray]:
    """The length column of ``schema`` and its layout; `_Leave` unless it is one integer
    column (or list column, for offsets) of that name (the streams' own readers then read
    it, or say what is wrong)."""
    index = schema.get_field_index(reading.spec.name)
    if index < 0:
        raise _Leave
    t = schema.field(index).type
    offsets = reading.spec.offsets
    if not (pa.types.is_list(t) or pa.types.is_large_list(t) if offsets
            else pa.types.is_integer(t)):
        raise _Leave
    col = Column(t, offsets, -1)
    return col, column_layout(schema, index).vector()


def _walk(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, framed: np.ndarray,
          layout: np.ndarray, left: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(records, their streams)``: every record batch of every stream not left; streams
    holding dictionary batches or compressed buffers are left."""
    rows = min(1 << 16, int(ends[-1]) // 2048 + 4 * len(starts))
    out = np.empty((rows, fmt.NREC), np.int64)
    owner = np.empty(rows, np.int64)
    state = np.array([0, -1, 0, 0], np.int64)
    parts = []
    while state[0] < len(starts):
        k = parsers.walk_streams(buf, starts, ends, framed, out, owner, layout, state, left)[0]
        parts.append((out[:k].copy(), owner[:k].copy()) if state[0] < len(starts) else
                     (out[:k], owner[:k]))
    recs, of = (np.concatenate(x) for x in zip(*parts, strict=True)) if len(parts) > 1 else parts[0]
    odd = (recs[:, fmt.R_TYPE] != fmt.RECORD_BATCH) | (recs[:, fmt.R_CODEC] >= 0)
    left[of[odd]] = 1
    keep = left[of] == 0
    return recs[keep], of[keep]


def _checked(recs: np.ndarray, of: np.ndarray, col: Column, left: np.ndarray
             ) -> np.ndarray:
    """``recs`` (of streams ``of``) whose buffers lie inside their bodies (`parsers.check`); a
    stream with one that does not is left, with all its records."""
    ranges = np.empty((len(recs), 4), np.int64)
    while len(recs):
        bad, _ = parsers.check(recs, -1, col.offsets, col.item.itemsize, col.dtype.itemsize,
                               ranges)
        if bad < 0:
            break
        left[of[bad]] = 1
        keep = left[of] == 0
        recs, of = recs[keep], of[keep]
    return recs


def _chunks(buf: np.ndarray, recs: np.ndarray, col: Column, reading: Reading
            ) -> Iterator[Chunk]:
    """The length column of ``recs``, assembled as the selective reader assembles one
    file's (in place where the backend takes segments)."""
    fetched = Fetched(buf, np.zeros(1, np.int64), np.array([buf.size], np.int64),
                      np.zeros(1, np.int64))
    out = Assembler(_Run(buf.size), col, reading.segmented)
    yield from out.add(recs, fetched)
    yield from out.finish()


class _Run:
    """What the assembler asks of its reader, for a run of streams in one buffer: its
    errors (list offsets out of order or range) are caught by `together`, which then
    leaves every stream to its own reader."""

    def __init__(self, size: int) -> None:
        self.file_size = size

    def error(self, offset: int, reason: str) -> ProfilerError:
        return ProfilerError(reason)

