"""Arrow IPC files (``.arrow``/``.feather``) and streams (what Hugging Face ``save_to_disk``
writes): picks the reader for each file.

Two readers give identical chunks:

- the *selective* reader (:mod:`.ipc_selective`) reads only the length column's bytes,
  never token values, and parses metadata in numba: the default;
- pyarrow's IPC reader: the reference the tests check the selective reader against,
  and the reader of *dense* files (rows (almost) all length column, where reading
  selectively saves nothing) in scans that read many parts inline, since it starts
  faster. It reads only the length column (``included_fields``), opens only files whose
  framing `ipc_check` passed, and hands over to the selective reader where it fails, so
  both readers give the same numbers or the same error.

``GPU_PROFILER_IPC_READER=selective|pyarrow`` (read by the engine's plan) or ``reader=``
forces one. A schema costs two
small positioned reads, parsed by pyarrow after a Python check for big-endian files, so
neither opening nor checking a file starts numba.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from gpu_profiler.chunk import Chunk
from gpu_profiler.errors import ProfilerError, first_line
from gpu_profiler.histogram import LengthHistogram
from gpu_profiler.readers import ipc_check
from gpu_profiler.readers.arrow import CHUNK_ROWS, LengthSpec, arrays_to_chunks
from gpu_profiler.readers.base import SMALL_BYTES, FileShard, Reading, ShardFormat, suffix
from gpu_profiler.readers.ipc_format import (
    FILE_MAGIC,
    SCHEMA_ERRORS,
    arrow_schema,
    big_endian_error,
    corrupt,
    what,
)

#: Environment variable forcing the IPC reader: ``selective`` or ``pyarrow``.
READER_ENV = "GPU_PROFILER_IPC_READER"
READERS = ("selective", "pyarrow")
#: A file is "dense" when its other columns add at most this fraction of the length
#: column's bytes per row: reading it whole costs no more than reading the column alone.
DENSE_EXTRA = 1 / 8
#: A file of at most this many bytes is read by pyarrow in one call, not batch by batch.
WHOLE_BYTES = 16 << 20
_MAX_SCHEMA = 64 << 20  # a larger schema message is taken for corruption


@dataclass(frozen=True)
class IpcPart(FileShard):
    """An Arrow IPC shard: a file (``kind='file'``) or a stream (``'stream'``). Its schema,
    once read (a scan checks every part's first), is kept until the part is read.

    A scan that reads many parts inline reads small dense files (at most `SMALL_BYTES`)
    with pyarrow: it starts faster than the selective reader. Larger ones are read
    selectively, at memory speed (pyarrow plus `ipc_check`'s walk took 5.5x as long on a
    1e9-sample HF dir of 8 shards; 1.8x on 8 shards of 20 MB)."""

    kind: str

    on_device = False
    read_ahead = True  # the readers work in the scan's thread: a read-ahead thread pays

    def schema(self) -> pa.Schema:
        known = self.__dict__.get("_schema")  # (kept where a cached_property keeps its value)
        if known is None:
            known = self.__dict__["_schema"] = schema(self.path, self.kind)
        return known

    @staticmethod
    def together(parts: list[IpcPart], reading: Reading, like: tuple[str, pa.Schema] | None,
                 cap: int | None) -> tuple[list[int], Iterator[Chunk | LengthHistogram]]:
        """Small streams read at once (`ipc_many`)."""
        from gpu_profiler.readers import ipc_many

        return ipc_many.together(parts, reading, like, cap)

    def joins(self, reading: Reading) -> bool:
        """Whether `together` takes this part in such a scan: a stream, unless pyarrow's
        reader is forced."""
        return self.kind == "stream" and reading.ipc_reader != "pyarrow"

    def chunks(self, reading: Reading) -> Iterator[Chunk]:
        return chunks(self.path, self.kind, reading.spec, reading.ipc_reader,
                      dense_by_pyarrow=reading.inline and not reading.ordered
                      and self.nbytes <= SMALL_BYTES,
                      segmented=reading.segmented, known=self.__dict__.pop("_schema", None))


@dataclass(frozen=True)
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
        return _selective_chunks(self.path, self.kind, reading.spec, reading.segmented,
                                 (self.start, self.end), self.dictionaries)


def batch_ranges(part: IpcPart, target: int, spec: LengthSpec) -> list[IpcPart | BatchRange]:
    """``part`` cut into runs of consecutive record batches of about ``target`` bytes each
    (`BatchRange`), found from metadata only (`SelectiveReader.batch_spans`); ``part``
    itself when it makes one run or when its framing cannot be walked (its task then says
    why). A dictionary-encoded length column's dictionaries are in a file's footer, read
    by every range; in a stream, a range names the messages before it that hold its
    first batch's dictionary. The ranges' shares add up to the file's size."""
    from gpu_profiler.readers.ipc_selective import SelectiveReader

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


def _is_stream(head: bytes, path: str) -> bool:
    """A stream opens with a continuation marker (or, before format 0.15, a length)."""
    return head[:4] == b"\xff\xff\xff\xff" or (
        len(head) >= 4 and head[:4] != b"\x00\x00\x00\x00"
        and suffix(path) in (".arrow", ".arrows", ".ipc"))


FILE_FORMAT = ShardFormat("ipc", "Arrow IPC", (".arrow", ".feather", ".ipc"),
                          lambda head, path: head.startswith(FILE_MAGIC),
                          lambda path: IpcPart(path, "file"))
STREAM_FORMAT = ShardFormat("ipc-stream", "Arrow IPC", (".arrows",), _is_stream,
                            lambda path: IpcPart(path, "stream"))


def forced_reader() -> str | None:
    """The IPC reader ``$GPU_PROFILER_IPC_READER`` forces, if any (read once per scan, when
    the engine plans it)."""
    name = os.environ.get(READER_ENV) or None
    if name is not None and name not in READERS:
        raise ProfilerError(f"{READER_ENV}={name!r}: choose one of: {', '.join(READERS)}")
    return name


def schema(path: Path, kind: str, reader: str | None = None) -> pa.Schema:
    """The schema of an IPC file (``kind='file'``) or stream (``kind='stream'``).

    Raises:
        ProfilerError: unreadable, corrupt or big-endian file.
    """
    if reader == "selective":
        from gpu_profiler.readers.ipc_selective import SelectiveReader

        with SelectiveReader(path, kind) as r:
            return r.schema
    framed, meta = _schema_message(path, kind)
    if _big_endian(meta):
        raise big_endian_error(path)
    try:
        return arrow_schema(framed)
    except SCHEMA_ERRORS as exc:
        raise corrupt(path, kind, 8 if kind == "file" else 0,
                      f"schema message: {first_line(exc)}") from None


def chunks(path: Path, kind: str, spec: LengthSpec, reader: str | None = None,
           dense_by_pyarrow: bool = False, segmented: bool = False,
           known: pa.Schema | None = None) -> Iterator[Chunk]:
    """Chunks of the length column. ``reader`` forces ``selective`` or ``pyarrow``;
    otherwise dense files are read with pyarrow if ``dense_by_pyarrow`` and everything
    else is read selectively, in ``segmented`` chunks if asked. ``known``: the file's
    schema, if already read."""
    if reader is not None and reader not in READERS:
        raise ProfilerError(f"unknown IPC reader {reader!r}: choose one of: {', '.join(READERS)}")
    if reader is None and dense_by_pyarrow and dense(known or schema(path, kind), spec):
        return _handed_over(path, kind, spec, inflate=False, known=known)
    if reader == "pyarrow":
        return _handed_over(path, kind, spec, inflate=True, known=known)
    return _selective_chunks(path, kind, spec, segmented)


def _selective_chunks(path: Path, kind: str, spec: LengthSpec, segmented: bool = False,
                      between: tuple[int, int] | None = None,
                      dictionaries: tuple[int, ...] = ()) -> Iterator[Chunk]:
    from gpu_profiler.readers import ipc_selective

    return ipc_selective.chunks(path, kind, spec, segmented, between, dictionaries)


def _handed_over(path: Path, kind: str, spec: LengthSpec, inflate: bool,
                 known: pa.Schema | None = None) -> Iterator[Chunk]:
    """pyarrow's reader; should it fail, the selective reader takes over where it stopped,
    so a damaged file gives the selective reader's result or error (which names the byte
    offset) whichever reader started, and damage outside the length column (which only
    pyarrow reads) does not matter. A file that fails `ipc_check.check` is read
    selectively from the start, and so is a compressed one unless ``inflate`` (pyarrow's
    reader forced): the selective reader inflates in bounded steps where pyarrow inflates
    whole buffers. A small file is read once, for the check and for
    pyarrow (`WHOLE_BYTES`)."""
    data = None
    try:
        if os.path.getsize(path) <= WHOLE_BYTES:
            with open(path, "rb") as f:
                data = f.read()
        walked = ipc_check.check(path, kind, data)
    except (ProfilerError, OSError):
        walked = None
    if walked is None or (walked.compressed and not inflate):
        yield from _selective_chunks(path, kind, spec)
        return
    done = 0
    try:
        for chunk in _pyarrow_chunks(path, kind, spec, data, known):
            yield chunk
            done += chunk.samples
    except ProfilerError:
        for chunk in _selective_chunks(path, kind, spec):
            skip, done = min(done, chunk.samples), done - min(done, chunk.samples)
            if skip < chunk.samples:
                yield Chunk(chunk.data[skip:],
                            None if chunk.valid is None else chunk.valid[skip:])


def dense(schema: pa.Schema, spec: LengthSpec) -> bool:
    """Whether the length column is (almost) all of every row: fixed-width columns only,
    the others adding at most :data:`DENSE_EXTRA` of the column's width."""
    if spec.offsets:  # list offsets come with the list's values
        return False
    try:
        bits = {f.name: f.type.bit_width for f in schema
                if not pa.types.is_dictionary(f.type)}
    except (ValueError, TypeError, NotImplementedError):  # variable width: strings, lists
        return False
    if spec.name not in bits or len(bits) != len(schema):
        return False
    return sum(bits.values()) - bits[spec.name] <= DENSE_EXTRA * bits[spec.name]


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
        if kind == "file" and os.pread(fd, 6, 0) != FILE_MAGIC:
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


def _big_endian(meta: bytes) -> bool:
    """Whether a Schema message's flatbuffer declares big-endian data (Message.header ->
    Schema.endianness), read in Python so that checking a file needs no numba. Malformed
    metadata reads as False: pyarrow's verifying parser reports it next."""
    fb = ipc_check.Flat(meta)
    try:
        header = fb.table(fb.get("<I", 0), 2)
        if header is None:
            return False
        endianness = fb.field(header, 0)
        return endianness is not None and fb.get("<h", endianness) == 1
    except struct.error:
        return False


def _pyarrow_error(path: Path, kind: str, exc: Exception,
                   batch: int | None = None) -> ProfilerError:
    where = f" at record batch {batch}" if batch is not None else ""
    return ProfilerError(f"{path}: corrupt or truncated {what(kind)}{where}: "
                         f"{first_line(exc)}")


def _open(path: Path, kind: str, first: pa.Schema, index: int):
    """pyarrow's reader of field ``index`` (of ``first``, the schema message's schema) of
    an IPC file (positioned reads) or stream (1 MiB reads). Never a memory map: its pages
    would count as the process's resident memory."""
    try:
        options = pa.ipc.IpcReadOptions(included_fields=[index])
        if kind == "file":
            reader = pa.ipc.open_file(pa.OSFile(str(path)), options=options)
            if not reader.schema.field(0).equals(first.field(index)):
                raise corrupt(path, kind, 8, "the footer's schema differs from the schema "
                                             "message's")
            return reader
        return pa.ipc.open_stream(pa.input_stream(str(path), buffer_size=1 << 20),
                                  options=options)
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise _pyarrow_error(path, kind, exc) from None


def _pyarrow_chunks(path: Path, kind: str, spec: LengthSpec, data: bytes | None = None,
                    known: pa.Schema | None = None) -> Iterator[Chunk]:
    """pyarrow's reader of the length column (of a file `ipc_check.check` passed; ``data``:
    its bytes, when small, ``known``: its schema, when read already)."""
    first = known or schema(path, kind)
    index = first.get_field_index(spec.name)
    columns = None if data is None else _whole(data, kind, index, spec)
    if columns is None:
        columns = _columns(_open(path, kind, first, index), kind, path)
    return arrays_to_chunks(columns if spec.offsets else _grouped(columns), spec)


def _whole(data: bytes, kind: str, index: int, spec: LengthSpec
           ) -> Iterator[pa.Array] | None:
    """Column ``index`` of every record batch of a small file's bytes, read in one call
    (batch by batch costs more than its bytes) and checked as `_columns` checks them, as
    one array when it can be; None when that fails (the batch-by-batch read then says
    where)."""
    try:
        options = pa.ipc.IpcReadOptions(included_fields=[index])
        buf = pa.py_buffer(data)
        reader = pa.ipc.open_file(buf, options=options) if kind == "file" else \
            pa.ipc.open_stream(buf, options=options)
        column = reader.read_all().column(0)
        _validate(column)  # each batch's column, in one call
        if spec.offsets or pa.types.is_dictionary(column.type):
            return iter(column.chunks)
        return iter([column.combine_chunks()])
    except (pa.ArrowException, OSError, ValueError, ProfilerError):
        return None


def _validate(column: pa.Array | pa.ChunkedArray) -> None:
    """Check a column against its buffers, in full for lists (pyarrow's quick check lets
    decreasing offsets through)."""
    column.validate(full=pa.types.is_list(column.type) or pa.types.is_large_list(column.type))


def _columns(reader, kind: str, path: Path) -> Iterator[pa.Array]:
    """The length column of every record batch, each checked against its buffers (pyarrow's
    reader does not: a null count of -1 makes it count a missing validity bitmap)."""
    batch = 0
    try:
        batches = (reader.get_batch(i) for i in range(reader.num_record_batches)) \
            if kind == "file" else reader
        for rb in batches:
            column = rb.column(0)
            _validate(column)
            yield column
            batch += 1
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise _pyarrow_error(path, kind, exc, batch) from None


def _grouped(arrays: Iterator[pa.Array]) -> Iterator[pa.Array]:
    """Consecutive record-batch columns concatenated (by Arrow, one copy) into arrays of at
    least :data:`CHUNK_ROWS` rows, so a file of small batches costs no per-batch work later.
    (Not for list columns: concatenating those would copy their values.)"""
    group: list[pa.Array] = []
    rows = 0
    for arr in arrays:
        if pa.types.is_dictionary(arr.type):  # batches may carry different dictionaries
            arr = arr.dictionary_decode()
        group.append(arr)
        rows += len(arr)
        if rows >= CHUNK_ROWS:
            yield pa.concat_arrays(group)
            group, rows = [], 0
    if group:
        yield pa.concat_arrays(group)
