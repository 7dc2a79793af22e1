"""The checks pyarrow's IPC reader lacks, run before it reads a file.

pyarrow trusts the sizes a file states: a stream claiming a 4 TB body or a 2 GiB metadata
length makes it allocate them, and a compressed buffer inflates to whatever its prefix
declares. So, before pyarrow opens a file, :func:`check` walks its framing in Python with
the selective reader's rules: every message's metadata and body must lie inside the file
(a file's footer blocks too, and they must agree with the messages they point to), and a
record batch's compressed buffers may declare at most :data:`MAX_INFLATED` bytes in all.
It reads metadata and 8-byte buffer prefixes only, through one small window, never the
data. A file that fails (an error naming the file and byte offset, as the selective
reader's do) is read by the selective reader instead, which inflates in bounded steps
whatever a buffer declares.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path

from gpu_profiler.errors import ProfilerError
from gpu_profiler.kernels.ipc_format import DICTIONARY_BATCH, RECORD_BATCH, SCHEMA
from gpu_profiler.readers.ipc_format import FILE_MAGIC, corrupt

#: Decompressed bytes one record batch's buffers may declare for pyarrow to decode it.
MAX_INFLATED = 256 << 20
_WINDOW = 1 << 20


@dataclass(frozen=True)
class Walked:
    """What :func:`check` found: the batches, and whether any is compressed."""

    batches: int
    compressed: bool


class _Window:
    """Positioned reads through one cached window (metadata is small and sequential)."""

    def __init__(self, fd: int, size: int) -> None:
        self.fd, self.size = fd, size
        self.start, self.data = 0, b""

    def read(self, pos: int, n: int) -> bytes:
        if self.fd < 0:  # the whole file, given
            return self.data[pos:pos + n]
        if not (self.start <= pos and pos + n <= self.start + len(self.data)):
            self.start = pos
            self.data = os.pread(self.fd, max(n, _WINDOW), pos)
        at = pos - self.start
        return self.data[at:at + n]


class Flat:
    """Bounds-checked reads of one flatbuffer (a message's metadata or a file's footer)."""

    def __init__(self, buf: bytes) -> None:
        self.buf = buf

    def get(self, fmt: str, p: int) -> int:
        if p < 0:
            raise struct.error("negative offset")
        return struct.unpack_from(fmt, self.buf, p)[0]

    def field(self, table: int, i: int) -> int | None:
        """Position of field ``i`` of the table at ``table``, None when absent."""
        vtable = table - self.get("<i", table)
        slot = 4 + 2 * i
        at = self.get("<H", vtable + slot) if slot + 2 <= self.get("<H", vtable) else 0
        return table + at if at else None

    def table(self, table: int, i: int) -> int | None:
        at = self.field(table, i)
        return None if at is None else at + self.get("<I", at)

    def vector(self, table: int, i: int) -> tuple[int, int]:
        """``(first element, length)`` of vector field ``i`` (``(0, 0)`` when absent)."""
        at = self.field(table, i)
        if at is None:
            return 0, 0
        start = at + self.get("<I", at)
        n = self.get("<I", start)
        if start + 4 + n > len(self.buf):
            raise struct.error("vector runs past the buffer")
        return start + 4, n


def check(path: Path, kind: str, data: bytes | None = None) -> Walked:
    """Walk ``path`` (an IPC ``file`` or ``stream``; ``data``: its bytes, when read
    already) as described above.

    Raises:
        ProfilerError: a size or offset that lies outside the file, a footer that
            disagrees with its messages, or a batch inflating past :data:`MAX_INFLATED`.
    """
    if data is not None:
        w = _Window(-1, len(data))
        w.data = data  # every read falls inside it
        return _file(path, w) if kind == "file" else _stream(path, w, 0, w.size)
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as exc:
        raise ProfilerError(f"{path}: cannot open ({exc.strerror})") from None
    try:
        w = _Window(fd, os.fstat(fd).st_size)
        if kind == "file":
            return _file(path, w)
        return _stream(path, w, 0, w.size)
    except OSError as exc:
        raise ProfilerError(f"{path}: cannot read ({exc.strerror})") from None
    finally:
        os.close(fd)


def _stream(path: Path, w: _Window, pos: int, end: int) -> Walked:
    batches, compressed, first = 0, False, True
    while pos + 4 <= end:
        msg = _message(path, "stream", w, pos, end)
        if msg is None:
            break
        kind, size, squeezed = msg
        if first and kind != SCHEMA:
            raise corrupt(path, "stream", pos, "the stream does not open with its schema")
        first = False
        batches += kind == RECORD_BATCH
        compressed |= squeezed
        pos += size
    if first:
        raise corrupt(path, "stream", pos, "the file ends before its schema message")
    return Walked(batches, compressed)


def _file(path: Path, w: _Window) -> Walked:
    size = w.size
    if size < 18 or w.read(0, 6) != FILE_MAGIC or w.read(size - 6, 6) != FILE_MAGIC:
        raise corrupt(path, "file", 0, "no ARROW1 magic at both ends (not an Arrow IPC file)")
    (flen,) = struct.unpack("<i", w.read(size - 10, 4))
    start = size - 10 - flen
    if flen <= 0 or start < 8:
        raise corrupt(path, "file", size - 10, f"footer length {flen} does not fit the file")
    schema = _message(path, "file", w, 8, start)
    if schema is None or schema[0] != SCHEMA:
        raise corrupt(path, "file", 8, "the file does not open with its schema message")
    fb = Flat(w.read(start, flen))
    compressed, batches = False, 0
    try:
        footer = fb.get("<I", 0)
        for field, want in ((2, DICTIONARY_BATCH), (3, RECORD_BATCH)):
            first, n = fb.vector(footer, field)
            for k in range(n):
                offset, meta, body = struct.unpack_from("<qi4xq", fb.buf, first + 24 * k)
                if offset < 8 or meta <= 0 or body < 0 or offset + meta + body > start:
                    raise corrupt(path, "file", start + first + 24 * k,
                                  f"footer block ({offset}, {meta} + {body} bytes) lies "
                                  "outside the file")
                msg = _message(path, "file", w, offset, start)
                if msg is None or msg[0] != want or msg[1] != meta + body:
                    raise corrupt(path, "file", offset, "message disagrees with its footer "
                                                        "block")
                compressed |= msg[2]
                batches += want == RECORD_BATCH
    except struct.error as exc:
        raise corrupt(path, "file", start, f"malformed footer ({exc})") from None
    return Walked(batches, compressed)


def _message(path: Path, kind: str, w: _Window, pos: int, end: int
             ) -> tuple[int, int, bool] | None:
    """``(header type, framed size with body, compressed)`` of the message at ``pos``, or
    None at an end-of-stream marker."""
    marker, = struct.unpack("<i", w.read(pos, 4))
    prefix, length = 4, marker
    if marker == -1:
        if pos + 8 > end:
            raise corrupt(path, kind, pos, "the file ends inside a message's framing")
        prefix, (length,) = 8, struct.unpack("<i", w.read(pos + 4, 4))
    if length == 0:
        return None
    if length < 0 or pos + prefix + length > end:
        raise corrupt(path, kind, pos, f"message metadata of {length} bytes does not fit "
                                       "the file")
    fb = Flat(w.read(pos + prefix, length))
    try:
        root = fb.get("<I", 0)
        at = fb.field(root, 1)
        header = fb.get("<B", at) if at is not None else 0
        at = fb.field(root, 3)
        body = fb.get("<q", at) if at is not None else 0
        if body < 0 or pos + prefix + length + body > end:
            raise corrupt(path, kind, pos, f"message body of {body} bytes runs past the end "
                                           "of the file")
        squeezed = False
        if header in (RECORD_BATCH, DICTIONARY_BATCH):
            batch = fb.table(root, 2)
            if batch is not None and header == DICTIONARY_BATCH:
                batch = fb.table(batch, 1)
            if batch is not None and fb.field(batch, 3) is not None:
                squeezed = True
                _inflated(path, kind, w, fb, batch, pos + prefix + length, body, pos)
    except struct.error as exc:
        raise corrupt(path, kind, pos, f"malformed message metadata ({exc})") from None
    return header, prefix + length + body, squeezed


def _inflated(path: Path, kind: str, w: _Window, fb: Flat, batch: int, body_at: int,
              body: int, pos: int) -> None:
    """Refuse a compressed batch whose buffers declare more than :data:`MAX_INFLATED`."""
    first, n = fb.vector(batch, 2)
    total = 0
    for k in range(n):
        offset, length = struct.unpack_from("<qq", fb.buf, first + 16 * k)
        if offset < 0 or length < 0 or offset + length > body:
            raise corrupt(path, kind, pos, "buffer runs past the end of the message body")
        if length >= 8:
            (declared,) = struct.unpack("<q", w.read(body_at + offset, 8))
            total += max(declared, 0)
    if total > MAX_INFLATED:
        raise corrupt(path, kind, pos, f"compressed buffers declare {total:,} bytes, more "
                                       "than pyarrow's reader is given to inflate at once")
