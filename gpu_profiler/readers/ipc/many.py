"""Many small Arrow IPC shards (the streams of a Hugging Face ``save_to_disk`` dir, or IPC
files) read together (`gpu_profiler.readers.base.Together`). Where the backend counts as
it reads (`Backend.count`) and the column is one the CPU kernel reads, streams are
*counted* as they are read (`Shards.counting`): one kernel call reads each into a small
buffer, walks and checks it, and tallies its lengths while they are in cache. Otherwise
they are *gathered* (`Shards.chunks`): each shard is read whole, with one positioned read,
into one buffer; one kernel call walks every stream's messages (`walk_streams`) or every
file's footer Blocks (`walk_files`), one checks their length-column buffers, and the
selective reader's assembler hands the column over where it lies in the buffer (or
gathers it). Either way a small shard costs a read and a few microseconds of kernel, not
a reader of its own.

A shard is read here only if it is of the run's first shard's kind (file or stream) and
its framed schema message is byte for byte the first one's (whose schema is checked
against the scan's). Anything else is left to the shard's own reader (`ipc.chunks`), so
both ways give the same numbers or the same error: another schema, dictionary batches, a
compressed length column, damage of any kind, a read that fails."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from gpu_profiler import native
from gpu_profiler.chunk import Chunk, Counting
from gpu_profiler.errors import ProfilerError
from gpu_profiler.io import files
from gpu_profiler.io.pread import OPEN_FLAGS, Fetched, read_whole, whole_buffer
from gpu_profiler.kernels import ipc_format as fmt
from gpu_profiler.readers.base import Joined, Leave, Reading, same_schema
from gpu_profiler.readers.ipc import metadata as parsers
from gpu_profiler.readers.ipc.layout import column_layout
from gpu_profiler.readers.ipc.selective import Assembler, Column

if TYPE_CHECKING:
    from gpu_profiler.readers.ipc import IpcPart


def together(parts: list[IpcPart], reading: Reading, like: tuple[str, Any] | None
             ) -> Joined:
    """See `Together`: the shards among ``parts`` of the first one's kind (`Shards`)."""
    kind = parts[0].kind
    mine = [i for i, p in enumerate(parts) if p.kind == kind]
    sizes = np.array([parts[i].nbytes for i in mine], np.int64)
    paths = [parts[i].at for i in mine]
    try:
        schema, framed = _first(paths[0], int(sizes[0]), 8 if kind == "file" else 0)
        if like is not None and parts[0].label != like[0]:
            same_schema(parts[0].label, schema, like, reading.spec)
        col, layout = _column(schema, reading)
    except _Leave:
        return Leave(len(parts))
    return Shards(kind, len(parts), mine, paths, sizes, framed, layout, col, reading.segmented)


class Shards:
    """A run of IPC shards of one ``kind`` that open with the ``framed`` schema message (the
    `Joined` of `together`): ``mine`` are their indices among ``parts`` parts, at ``paths``
    of ``sizes`` bytes, their length column ``col`` laid out as ``layout`` says."""

    def __init__(self, kind: str, parts: int, mine: list[int], paths: Sequence[str | Path],
                 sizes: np.ndarray, framed: np.ndarray, layout: np.ndarray, col: Column,
                 segmented: bool) -> None:
        self._kind, self._parts, self._mine, self._paths = kind, parts, mine, paths
        self._sizes, self._framed, self._layout = sizes, framed, layout
        self._col, self._segmented = col, segmented
        self._left = np.ones(len(mine), np.int8)  # until read

    def counting(self) -> Counting | None:
        """Each stream read into a small buffer and counted there (`count_streams`), where
        the column is one it counts; a stream it does not read is left. (Files are
        gathered: their footers say where their batches are.)"""
        if self._kind != "stream" or self._col.item not in _COUNTED:
            return None
        blob, at = files.names(self._paths)
        buf = whole_buffer(int(self._sizes.max()) + 1)
        recs = np.empty((MESSAGES, fmt.NREC), np.int64)
        ranges = np.empty((MESSAGES, 4), np.int64)
        left = self._left
        left[:] = 0
        kernel, col = native.kernel("count_streams"), self._col

        def call(bins: int, grow: bool, fold_after: int, row: np.ndarray, st: np.ndarray,
                 state: np.ndarray) -> tuple[int, ...]:
            return kernel(blob, at, self._sizes, OPEN_FLAGS, buf, self._framed, recs, ranges,
                          self._layout, col.offsets, col.item.itemsize, bins, grow,
                          fold_after, row, st, left, state)

        return Counting(len(self._paths), call)

    def chunks(self) -> Iterator[Chunk]:
        """Every shard read whole into one buffer, walked and checked by one kernel call
        each, its length column assembled as the selective reader assembles one file's."""
        buf, starts, unread = read_whole(self._paths, self._sizes)
        left = unread.astype(np.int8)
        walk = parsers.walk_streams if self._kind == "stream" else parsers.walk_files
        recs = _checked(*_walk(walk, buf, starts, starts + self._sizes, self._framed,
                               self._layout, left), self._col, left)
        if not (left == 0).any():
            return iter(())
        try:  # assembled here: list offsets are checked as they are gathered
            chunks = list(_chunks(buf, recs, self._col, self._segmented))
        except ProfilerError:  # offsets out of order or range: only a stream's own reader
            return iter(())  # can say which stream, and where
        self._left = left
        return iter(chunks)

    def left(self) -> list[int]:
        done = {self._mine[i] for i in np.flatnonzero(self._left == 0)}
        return [i for i in range(self._parts) if i not in done]


#: Messages a stream may hold to be counted as it is read (`Shards.counting`; one with
#: more is left to its own reader).
MESSAGES = 4096
#: The integers `count_streams` counts (as the CPU kernel reads them: uint64 as int64), list
#: offsets included (int32 or int64); any other is gathered for the backend.
_COUNTED = (np.dtype(np.int32), np.dtype(np.int64), np.dtype(np.uint64))


class _Leave(Exception):
    """Every stream of the run goes to its own reader."""


#: Bytes read at the head of a run's first shard for its schema message (HF shards' are
#: a few KiB, their features' JSON included).
SCHEMA_HEAD = 64 << 10


def _first(path: str | Path, size: int, start: int) -> tuple[pa.Schema, np.ndarray]:
    """`_reference` of the run's first shard, from its first `SCHEMA_HEAD` bytes (the
    whole shard is read with the others, not twice), or from all of it when its schema
    message runs past them; `_Leave` when it cannot be read."""
    try:
        fd = os.open(path, OPEN_FLAGS)
        try:
            head = np.frombuffer(os.pread(fd, min(size, SCHEMA_HEAD), 0), np.uint8)
        finally:
            os.close(fd)
        try:
            return _reference(head, start, head.size)
        except _Leave:
            if head.size >= size:
                raise
        buf, _, unread = read_whole([path], np.array([size], np.int64))
    except OSError:
        raise _Leave from None
    if unread[0]:  # its bytes are not there to be the reference
        raise _Leave
    return _reference(buf, start, size)


def _reference(buf: np.ndarray, start: int, end: int) -> tuple[pa.Schema, np.ndarray]:
    """The first shard's schema and its framed schema message with its body (at ``start``:
    the bytes every other shard must hold there)."""
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


def _walk(walk: Callable[..., tuple[int, ...]], buf: np.ndarray, starts: np.ndarray,
          ends: np.ndarray, framed: np.ndarray, layout: np.ndarray, left: np.ndarray
          ) -> tuple[np.ndarray, np.ndarray]:
    """``(records, their shards)``: every record batch of every shard not left, by ``walk``
    (`walk_streams` or `walk_files`); shards holding dictionary batches or compressed
    buffers are left."""
    rows = min(1 << 16, int(ends[-1]) // 2048 + 4 * len(starts))
    out = np.empty((rows, fmt.NREC), np.int64)
    owner = np.empty(rows, np.int64)
    state = np.array([0, -1, 0, 0], np.int64)
    parts = []
    while state[0] < len(starts):
        k = walk(buf, starts, ends, framed, out, owner, layout, state, left)[0]
        parts.append((out[:k].copy(), owner[:k].copy()) if state[0] < len(starts) else
                     (out[:k], owner[:k]))
    recs, of = (np.concatenate(x) for x in zip(*parts, strict=True)) if len(parts) > 1 else parts[0]
    odd = (recs[:, fmt.R_TYPE] != fmt.RECORD_BATCH) | (recs[:, fmt.R_CODEC] >= 0)
    left[of[odd]] = 1
    keep = left[of] == 0
    return recs[keep], of[keep]


def _checked(recs: np.ndarray, of: np.ndarray, col: Column, left: np.ndarray
             ) -> np.ndarray:
    """``recs`` (of shards ``of``) whose buffers lie inside their bodies (`parsers.check`); a
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


def _chunks(buf: np.ndarray, recs: np.ndarray, col: Column, segmented: bool
            ) -> Iterator[Chunk]:
    """The length column of ``recs``, assembled as the selective reader assembles one
    file's (in place where the backend takes segments)."""
    fetched = Fetched(buf, np.zeros(1, np.int64), np.array([buf.size], np.int64),
                      np.zeros(1, np.int64))
    out = Assembler(_Run(buf.size), col, segmented)
    yield from out.add(recs, fetched)
    yield from out.finish()


class _Run:
    """What the assembler asks of its reader, for a run of shards in one buffer: its
    errors (list offsets out of order or range) are caught by `Shards.chunks`, which then
    leaves every stream to its own reader."""

    def __init__(self, size: int) -> None:
        self.file_size = size

    def error(self, offset: int, reason: str) -> ProfilerError:
        return ProfilerError(reason)

