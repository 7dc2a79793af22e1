"""A Parquet file's integer length column counted by the kernel
(`gpu_profiler.kernels.parquet`), a batch of row groups at a time: the footer parsed once by
the kernel (each row group's column chunk: where, how large, which codec; pyarrow's
column-chunk accessor is never asked, see `gpu_profiler.readers.parquet`), then each batch's
column chunks read with positioned reads into one buffer and counted by one kernel call
without decoding: a dictionary-encoded page's indices are counted per dictionary entry (a
run of one index is one addition), a PLAIN or DELTA page's values per value (`DENSE` of
them, each one addition), and what the reader hands over is each value with its rows
(`Runs`; the values past `DENSE`, if any, as a `Chunk`). No value array and no Arrow
memory is made (bench/results/layouts.md).

The reader hands it the files whose length column's chunks list only encodings the kernel
decodes (PLAIN, DELTA_BINARY_PACKED, dictionary; a BYTE_STREAM_SPLIT column is pyarrow's,
unread here). zstd pages (polars' and duckdb's default) are decompressed by pyarrow's own
codec (`metadata.Unzstd`) and counted by the kernel as the others. What the kernel does not
decode (another codec; another encoding; a nested, unsigned or logical-typed column; a batch
of more than `MOST_ROWS` rows; damage) it leaves, and so does this module: `decode` returns
None and the caller hands those row groups to pyarrow, which reads them or gives the file's
one-line error. The kernel's numbers are pyarrow's, bit for bit
(tests/test_parquet_pages.py)."""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from gpu_profiler.chunk import Chunk
from gpu_profiler.kernels import parquet_format as fmt
from gpu_profiler.readers.parquet import metadata as parsers
from gpu_profiler.runs import Runs

if TYPE_CHECKING:
    from gpu_profiler.readers.base import LengthSpec

#: Bits of the Arrow integer types (as pyarrow names them) whose columns the kernel decodes.
WIDTHS = {"int8": 8, "int16": 16, "int32": 32, "int64": 64}
#: Whether a file's length column is decoded here when it can be (False: always pyarrow;
#: the tests compare both).
ENABLED = True
#: Fewer rows than this in a file (or its share) are pyarrow's: the kernel saves ~2 ns a
#: row, and costs ~0.6 ms a file more (its own footer parse and reads, and the runs summed
#: in Python): 400 shards of 15,000 rows took 2x pyarrow's time (the mid corpora of
#: bench/bench_parquet_decoder.py, run with every file counted).
MIN_ROWS = 1 << 19
#: Codecs the kernel decodes (zstd: its pages decompressed first, `parsers.Unzstd`).
CODECS = (fmt.UNCOMPRESSED, fmt.SNAPPY, fmt.ZSTD)
#: Bytes of the file's end first read for its footer (read again, whole, when larger).
TAIL = 64 << 10
#: Most footer bytes read (a larger footer's file is pyarrow's).
MOST_FOOTER = 64 << 20
#: Most rows counted in one call: room for a batch's pairs and PLAIN values is held whole (a
#: larger row group is pyarrow's, which decodes it in bounded batches).
MOST_ROWS = 1 << 22
#: Most bytes of column chunks read for one call (a batch's chunks may be larger only in a
#: file whose footer lies, or one that is no length column: pyarrow's, which streams them).
MOST_BYTES = 256 << 20
#: Bytes of decompressed page the kernel is first given (pyarrow writes pages of 1 MiB),
#: and the most it is given after it asks for more.
PAGE_BYTES, MOST_PAGE = 1 << 20, 1 << 28
#: PLAIN and DELTA values below this are counted by the kernel (a thread's counts: 1 MiB, which
#: stays in its cache), the rest handed over as values.
DENSE = 1 << 17


def width(schema: Any, spec: LengthSpec) -> int | None:
    """Bits of the length column in ``schema`` (a ``pa.Schema`` or `Fields`) where the
    kernel counts it (a signed integer column, not offsets), else None."""
    if spec.offsets or schema.names.count(spec.name) != 1:
        return None
    return WIDTHS.get(str(schema.field(spec.name).type))


@dataclass
class Pages:
    """One open file's row groups as the kernel found them: ``table[g]`` = (rows, where the
    length column's chunk starts, its bytes, codec, 1 if it lists only encodings the kernel
    decodes)."""

    fd: int
    table: np.ndarray
    phys: int
    max_def: int
    width: int

    def close(self) -> None:
        os.close(self.fd)


def _pread(fd: int, into: memoryview, offset: int) -> bool:
    """Fill ``into`` from ``offset``: False if the file ends first or cannot be read."""
    while len(into):
        try:
            got = os.preadv(fd, [into], offset)
        except OSError:
            return False
        if got <= 0:
            return False
        into, offset = into[got:], offset + got
    return True


def open_pages(fd: int, size: int, name: str, width: int | None) -> Pages | None:
    """The kernel's reading of the file open as ``fd`` (``size`` bytes) for the signed
    integer column ``name`` of ``width`` bits; None (``fd`` then closed) where it does not
    read that file's column."""
    parsed = _parsed(fd, size, name, width) if ENABLED and width else None
    if parsed is None:
        os.close(fd)
        return None
    _, table, _, phys, max_def = parsed
    return Pages(fd, table, phys, max_def, width or 0)


def footer(fd: int, size: int) -> tuple[np.ndarray, np.ndarray] | None:
    """The kernel's check of the footer of the file open as ``fd`` (``size`` bytes), no
    column sought: ``(the file's last bytes, the footer among them; its ``info`` row, which
    says where its schema and ``ARROW:schema`` lie in them)``, or None where it is left."""
    parsed = _parsed(fd, size, "", 0)
    return None if parsed is None else (parsed[0], parsed[2][0])


def _parsed(fd: int, size: int, name: str, width: int
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, int] | None:
    """``(tail, table, info, physical type, maximum definition level)`` of the kernel's
    parse of the footer (`parsers.row_groups`), reading more of the file where the footer
    is larger, or the row groups more, than first guessed; None where it leaves it."""
    key = np.frombuffer(name.encode(), np.uint8)
    tail_bytes, rows = min(size, TAIL), 1024 if width else 0
    work = np.zeros(parsers.WORK, np.int64)
    info = np.zeros((1, fmt.NINFO), np.int64)
    for _ in range(3):
        tail = np.empty(tail_bytes, np.uint8)
        table = np.empty((rows, 5), np.int64)
        if not _pread(fd, tail.data, size - tail_bytes):
            return None
        status, n, phys, max_def = parsers.row_groups(tail, size, key, width, table, info, work)
        if status == fmt.READ:
            return tail, table[:n], info, int(phys), int(max_def)
        need = int(work[fmt.W_NEED])
        if status != fmt.L_ROOM or need > MOST_FOOTER:
            return None
        if need > rows:  # (the footer was read whole: the table lacked rows)
            rows = need
        else:
            tail_bytes = need
    return None


class _Buffers(threading.local):
    """A decoding thread's buffers, kept from batch to batch (fresh memory costs page
    faults): what a batch hands over is copied out of them."""

    def __init__(self) -> None:
        self.page = 0
        self.rows = 0
        self.buf = np.empty(0, np.uint8)
        self.dense = np.zeros(0, np.int64)  # (zero between calls; made at the first)
        self.unzstd = parsers.Unzstd()

    def fit(self, nbytes: int, rows: int, page: int) -> None:
        """Room for ``nbytes`` of column chunks, ``rows`` rows and pages of ``page`` bytes."""
        if nbytes > self.buf.size:
            self.buf = np.empty(max(nbytes, 2 * self.buf.size), np.uint8)
        if rows > self.rows:
            self.rows = rows
            self.values = np.empty(rows, np.int64)
        if self.dense.size != DENSE:
            self.dense = np.zeros(DENSE, np.int64)
        if page > self.page:
            self.page = page
            self.scratch = np.empty(page, np.uint8)
            self.dictionary = np.empty(page // 4 + 1, np.int64)
            self.tallies = np.zeros(self.dictionary.size, np.int64)  # (zero between calls)
            self.pairs = np.empty((2, self.dictionary.size), np.int64)


_buffers = _Buffers()


def decode(pages: Pages, groups: list[int]) -> list[Chunk | Runs] | None:
    """Row groups ``groups``' lengths, counted by one kernel call: the `Runs` of their
    dictionaries' entries and of their PLAIN and DELTA values below `DENSE`, and the `Chunk`
    of their other values, if any (None: the kernel leaves them, or they hold more than
    `MOST_ROWS` rows or `MOST_BYTES`, or a chunk of a codec or encoding it does not decode;
    pyarrow's then)."""
    table = pages.table[groups]
    rows = table[:, 0]
    n = int(rows.sum())
    codecs = table[:, 3]
    if n > MOST_ROWS or not np.isin(codecs, CODECS).all() or not table[:, 4].all():
        return None  # (a chunk of another encoding, e.g. BYTE_STREAM_SPLIT: left unread)
    starts = np.zeros(len(groups) + 1, np.int64)
    np.cumsum(table[:, 2], out=starts[1:])
    if starts[-1] > MOST_BYTES:
        return None
    b = _buffers
    b.fit(int(starts[-1]) + 8, n, PAGE_BYTES)  # (8: the kernel's word loads end inside)
    for k in range(len(groups)):
        if not _pread(pages.fd, b.buf.data[int(starts[k]):int(starts[k + 1])],
                      int(table[k, 1])):
            return None
    work = np.zeros(parsers.WORK, np.int64)
    b.unzstd.load(b.buf, starts[:-1], starts[1:], codecs, parsers.unzstd_bytes(n))
    while True:
        room = min(n, len(groups) * b.dictionary.size)  # (a pair holds a row or more)
        pairs = b.pairs if room <= b.pairs.shape[1] else np.empty((2, room), np.int64)
        status, got, npairs, nulls = parsers.chunks(
            b.buf, starts, rows, codecs, pages.phys, pages.max_def, pages.width, b.scratch,
            b.dictionary, b.tallies, b.dense, b.values, pairs, b.unzstd, work)
        if status != fmt.READ:
            b.tallies[:] = 0  # (left mid-chunk: its counts stay)
            b.dense[:] = 0
        need = int(work[fmt.W_NEED])
        if status != fmt.L_ROOM or not b.page < need <= MOST_PAGE:
            break
        b.fit(0, 0, need)
    if status != fmt.READ:
        return None
    seen = np.flatnonzero(b.dense)
    out: list[Chunk | Runs] = [Runs(np.concatenate([pairs[0, :npairs], seen]),
                                    np.concatenate([pairs[1, :npairs], b.dense[seen]]),
                                    int(nulls))]
    b.dense[seen] = 0
    if got:
        out.append(Chunk(b.values[:got].copy()))
    return out
