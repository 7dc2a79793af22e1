"""Arrow IPC files (``.arrow``/``.feather``) and streams (what Hugging Face ``save_to_disk``
writes): one reader, :mod:`.selective`, which reads only the length column's bytes (never
token values) and parses metadata natively; runs of small shards are read together
(:mod:`.many`). :mod:`.metadata` holds the parsers as the readers call them and names a
damaged file; :mod:`.layout` says where a column's buffers lie in a record batch.

A schema costs two small positioned reads, parsed by pyarrow after the native check for
big-endian files.
"""

from __future__ import annotations

import itertools
import os
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from gpu_profiler.chunk import Chunk
from gpu_profiler.errors import ProfilerError, first_line
from gpu_profiler.frozen import frozen
from gpu_profiler.readers.base import ARROW_MAGIC, FileShard, Joined, LengthSpec, Reading
from gpu_profiler.readers.ipc.metadata import checked_schema, corrupt, what

_MAX_SCHEMA = 64 << 20  # a larger schema message is taken for corruption


@frozen
class IpcPart(FileShard):
    """An Arrow IPC shard: a file (``kind='file'``) or a stream (``'stream'``). Its schema,
    once read (a scan checks every part's first), is kept until the part is read."""

    kind: str

    on_device = False
    read_ahead = True  # the readers work in the scan's thread: a read-ahead thread pays

    def schema(self) -> pa.Schema:
        known = self.__dict__.get("_schema")  # (kept where a cached_property keeps its value)
        if known is None:
            known = self.__dict__["_schema"] = schema(self.path, self.kind)
        return known

    @staticmethod
    def together(parts: list[IpcPart], reading: Reading, like: tuple[str, Any] | None
                 ) -> Joined:
        """Small shards read at once (`many`)."""
        from gpu_profiler.readers.ipc import many

        return many.together(parts, reading, like)

    def joins(self, reading: Reading) -> bool:
        """Whether `together` takes this part in such a scan: always."""
        return True

    def chunks(self, reading: Reading) -> Iterator[Chunk]:
        self.__dict__.pop("_schema", None)
        return chunks(self.path, self.kind, reading.spec, reading.segmented)

    def batches(self, columns: list[str], codes: tuple[str, ...] = ()
                ) -> Iterator[pa.RecordBatch]:
        """The record batches of ``columns`` (as stored: ``codes`` are dictionaries only
        when written so), by pyarrow's reader over a memory map: for a scan that needs a
        column besides the lengths (`gpu_profiler.columns`)."""
        return _batches(self.path, self.kind, columns)


def _batches(path: Path, kind: str, columns: list[str], first: int = 0,
             stop: int | None = None) -> Iterator[pa.RecordBatch]:
    """Record batches ``first`` to ``stop - 1`` (None: all) of ``columns``, by pyarrow over
    a memory map (a stream's earlier batches are passed over, never copied), each checked
    in full (offsets within their buffers, UTF-8) before anything reads it: the file is
    hostile input."""
    try:
        source = pa.memory_map(str(path))
        if kind == "file":
            reader = pa.ipc.open_file(source)
            batches: Iterator[pa.RecordBatch] = (
                reader.get_batch(i)
                for i in range(first, reader.num_record_batches if stop is None else stop))
        else:
            batches = itertools.islice(pa.ipc.open_stream(source), first, stop)
        for batch in batches:
            batch = batch.select(columns)
            batch.validate(full=True)
            yield batch
    except (OSError, pa.ArrowException) as exc:
        raise ProfilerError(f"{path}: corrupt or truncated {what(kind)}: "
                            f"{first_line(exc)}") from None


@frozen
class BatchRange(FileShard):
    """Record batches ``first`` to ``stop - 1`` of an IPC file or stream (``kind``, as in
    `IpcPart`): those whose messages start at byte ``start`` or later, before ``end`` (its
    share of the file, the bytes from its first batch's message to the next range's): a
    task's share of a shard too large for one (`batch_ranges`). In a stream whose length column
    is dictionary-encoded, the messages at ``dictionaries`` hold the dictionary its first
    batch uses. Always read by the selective reader, and never together with neighbours
    (it has no ``together``: a range is part of one file)."""

    kind: str
    first: int = 0
    stop: int = 0
    start: int = 0
    end: int = 0
    dictionaries: tuple[int, ...] = ()

    on_device = False
    read_ahead = True  # as IpcPart's

    @property
    def label(self) -> str:
        return f"{self.path} (record batches {self.first}..{self.stop - 1})"

    @property
    def nbytes(self) -> int:
        return self.end - self.start

    @property
    def span(self) -> tuple[str, int, int]:
        return "record batches", self.first, self.stop

    def schema(self) -> pa.Schema:
        return schema(self.path, self.kind)

    def chunks(self, reading: Reading) -> Iterator[Chunk]:
        return chunks(self.path, self.kind, reading.spec, reading.segmented,
                      (self.start, self.end), self.dictionaries)

    def batches(self, columns: list[str], codes: tuple[str, ...] = ()
                ) -> Iterator[pa.RecordBatch]:
        """Its record batches of ``columns``, as `IpcPart.batches` reads them."""
        return _batches(self.path, self.kind, columns, self.first, self.stop)


def batch_ranges(part: IpcPart, target: int, spec: LengthSpec) -> list[IpcPart | BatchRange]:
    """``part`` cut into runs of consecutive record batches of about ``target`` bytes each
    (`BatchRange`), found from metadata only (`SelectiveReader.batch_spans`); ``part``
    itself when it makes one run or when its framing cannot be walked (its task then says
    why). A dictionary-encoded length column's dictionaries are in a file's footer, read
    by every range; in a stream, a range names the messages before it that hold its
    first batch's dictionary. The ranges' shares add up to the file's size."""
    from gpu_profiler.readers.ipc.selective import SelectiveReader

    cuts, firsts = [0], [0]  # where each range starts: byte, batch
    needs: list[tuple[int, ...]] = [()]  # ... and the dictionaries before it that it needs
    held: list[int] = []  # the dictionary messages so far: the last replacement, its deltas
    n = size = done = 0
    try:
        with SelectiveReader(part.path, part.kind) as r:
            for spans in r.batch_spans(spec):
                for start, end, dictionary in spans.tolist():
                    if start < done:  # a file's Blocks out of order: not cut by offsets
                        return [part]
                    done = end
                    if dictionary == 0:  # a stream's replacement dictionary...
                        held = [start]
                    elif dictionary > 0:  # ... or a delta to it
                        held.append(start)
                    else:  # a record batch
                        if size >= target:
                            cuts.append(start)
                            firsts.append(n)
                            needs.append(tuple(held))
                            size = 0
                        n += 1
                    size += end - start
            total = r.file_size
    except ProfilerError:
        return [part]
    if len(cuts) == 1:
        return [part]
    return [BatchRange(part.path, part.kind, first=a, stop=b, start=lo, end=hi,
                       dictionaries=need)
            for a, b, lo, hi, need in zip(firsts, firsts[1:] + [n], cuts, cuts[1:] + [total],
                                          needs, strict=True)]


def schema(path: Path, kind: str) -> pa.Schema:
    """The schema of an IPC file (``kind='file'``) or stream (``kind='stream'``).

    Raises:
        ProfilerError: unreadable, corrupt or big-endian file.
    """
    framed, meta = _schema_message(path, kind)
    return checked_schema(path, kind, 8 if kind == "file" else 0, framed,
                          np.frombuffer(meta, np.uint8))[0]


def chunks(path: Path, kind: str, spec: LengthSpec, segmented: bool = False,
           between: tuple[int, int] | None = None,
           dictionaries: tuple[int, ...] = ()) -> Iterator[Chunk]:
    """Chunks of the length column, read selectively (in ``segmented`` chunks if asked; of
    the record batches ``between`` two byte positions, after a stream's ``dictionaries``:
    see `selective.SelectiveReader`)."""
    from gpu_profiler.readers.ipc import selective

    return selective.chunks(path, kind, spec, segmented, between, dictionaries)


def _schema_message(path: Path, kind: str) -> tuple[bytes, bytes]:
    """The file's first message (its schema) as framed bytes and as its bare flatbuffer:
    two small positioned reads with readahead off, so a cold file costs a page or two."""
    start = 8 if kind == "file" else 0
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as exc:
        raise ProfilerError(f"{path}: cannot open ({exc.strerror})") from None
    try:
        if hasattr(os, "posix_fadvise"):
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
        if kind == "file" and os.pread(fd, 6, 0) != ARROW_MAGIC:
            raise corrupt(path, kind, 0, "no ARROW1 magic (not an Arrow IPC file)")
        head = os.pread(fd, 8, start)
        if len(head) == 8:
            marker, size = struct.unpack("<iI", head)
            prefix = 8
            if marker != -1:  # legacy framing: a bare int32 length
                prefix, size = 4, marker
            if 0 < size <= _MAX_SCHEMA and start + prefix + size <= os.fstat(fd).st_size:
                framed = head[:prefix] + os.pread(fd, size, start + prefix)
                return framed, framed[prefix:]
    except OSError as exc:
        raise ProfilerError(f"{path}: cannot read ({exc.strerror})") from None
    finally:
        os.close(fd)
    raise corrupt(path, kind, start, "the file ends before its schema message")
