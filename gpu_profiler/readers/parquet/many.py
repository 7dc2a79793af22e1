"""Many small Parquet shards read together (`gpu_profiler.readers.base.Together`): a run of
them read into one buffer (one ``preadv`` each), their footers and length columns decoded
by one native kernel call (`gpu_profiler.kernels.parquet`), their lengths handed over as a
few large chunks (`Files.chunks`); or, where the backend counts as it reads
(`Backend.count`), each file read by that call itself and its lengths counted as they are
decoded (`Files.counting`). pyarrow's set-up per file (its
ParquetFile, footer, Thrift objects and threads: ~0.3-1 ms) costs more than decoding a
small shard, which the kernel does in tens of microseconds; a shard over `MOST_BYTES`, or
of a codec the kernel does not decode, is pyarrow's (bench/results/parquet_decoder.md).
zstd shards (polars' and duckdb's default) take two calls: the first lists their pages, which
pyarrow's codec decompresses between them (`metadata.Unzstd`), so they go the `chunks` way.

What the kernel does not read itself (another codec or encoding, a nested, unsigned or
logical-typed column, a footer or schema unlike the first file's, damage) it leaves, and
so does this module: those parts go to their own reader, which reads them or gives their
one-line error. Every part read here has the first part's schema, byte for byte (its
Parquet schema and its ``ARROW:schema``), and the first part's schema is checked against
the scan's (``like``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from gpu_profiler.chunk import Chunk, Counting
from gpu_profiler.errors import ProfilerError
from gpu_profiler.io import files
from gpu_profiler.io.pread import OPEN_FLAGS, WHOLE_ALIGN, read_whole, whole_buffer
from gpu_profiler.kernels import parquet_format as fmt
from gpu_profiler.readers import arrow
from gpu_profiler.readers.base import (
    Joined,
    Leave,
    LengthSpec,
    Reading,
    planning_schema,
    same_schema,
)
from gpu_profiler.readers.parquet import metadata as parsers
from gpu_profiler.readers.parquet import pages

if TYPE_CHECKING:
    from gpu_profiler.readers.parquet import ParquetPart

#: A shard larger than this is left to pyarrow, which reads only its footer and the length
#: column: reading such files whole costs more than pyarrow's set-up per file, which the
#: kernel saves (bench/results/parquet_decoder.md: 2.6-3x pyarrow's best on shards of 55-120
#: KiB, 0.45x on 2.2 MiB ones whose length column is 1.6% of the file).
MOST_BYTES = 256 << 10
#: Bytes of decompressed page the kernel is first given (pyarrow writes pages of 1 MiB).
PAGE_BYTES = 1 << 20
#: Files needing more rows (together, in the second call), or a larger page, than this are
#: left to pyarrow, which decodes them in bounded batches (a footer may claim any count).
MOST_ROWS, MOST_PAGE = 4 * arrow.CHUNK_ROWS, 1 << 28


def together(parts: list[ParquetPart], reading: Reading, like: tuple[str, Any] | None
             ) -> Joined:
    """See `Together`: the parts of at most `MOST_BYTES` (`Files`). The kernel reads whole
    files, which pays only for small ones: larger parts are left to pyarrow, which reads a
    footer and the length column; so is every part when the scan needs what this reader
    lacks (list offsets, statistics, the GPU decoder) or the first small part's column is
    not one the kernel decodes (another codec, such as gzip: learnt from that one file, not
    by reading every file whole)."""
    mine = [i for i, p in enumerate(parts) if p.nbytes <= MOST_BYTES]
    if not mine or not parts[mine[0]].joins(reading):
        return Leave(len(parts))
    width = _width(parts[mine[0]], reading.spec, like)
    name = reading.spec.name.encode()
    if width is None or (read := _decodes(parts[mine[0]], name, width)) is None:
        return Leave(len(parts))
    return Files(parts, mine, name, width, counts=read)


class Files:
    """The `Joined` of `together`: parts ``mine`` (indices among ``parts``) of a signed
    integer column ``name`` of ``width`` bits.

    Attributes:
        status: each of those parts' outcome once read (`fmt.READ`, or why the kernel left
            it: `fmt.LEFT`); -1 before, or where it could not be read.
    """

    def __init__(self, parts: list[ParquetPart], mine: list[int], name: bytes, width: int,
                 counts: bool = True) -> None:
        self._n, self._mine = len(parts), mine
        self._parts = [parts[i] for i in mine]
        self._name, self._width, self._counts = name, width, counts
        self.status = np.full(len(mine), -1, np.int64)

    def counting(self) -> Counting | None:
        """The files read one by one (the first kept, as the schema every other must have)
        and counted as they are decoded, in one kernel call (`count_files`). A file of more
        than `arrow.CHUNK_ROWS` rows, or with a page over `PAGE_BYTES`, is left (to
        pyarrow). None where the first file is zstd (its pages are decompressed by
        pyarrow's codec between two kernel calls: `chunks`)."""
        if not self._counts:
            return None
        sizes = np.array([p.nbytes for p in self._parts], np.int64)
        blob, at = files.names([p.at for p in self._parts])
        second = (int(sizes[0]) + WHOLE_ALIGN) // WHOLE_ALIGN * WHOLE_ALIGN  # past its extra
        buf = whole_buffer(second + int(sizes.max()) + 1)
        values = np.empty(arrow.CHUNK_ROWS, np.int64)  # (pages touched as far as a file goes)
        valid = np.empty(arrow.CHUNK_ROWS, bool)
        scratch = np.empty(PAGE_BYTES, np.uint8)
        dictionary = np.empty(PAGE_BYTES // 4 + 1, np.int64)
        info = np.empty((len(self._parts), fmt.NINFO), np.int64)
        info[:, fmt.I_STATUS] = -1  # (the kernel writes each file's as it goes)
        self.status = info[:, fmt.I_STATUS]
        name, width = self._name, self._width

        def call(bins: int, grow: bool, fold_after: int, row: np.ndarray, st: np.ndarray,
                 state: np.ndarray) -> tuple[int, ...]:
            return parsers.count(blob, at, sizes, OPEN_FLAGS, buf, second, name, width,
                                 scratch, dictionary, values, valid, info, bins, grow,
                                 fold_after, row, st, state)

        return Counting(len(self._parts), call)

    def chunks(self) -> Iterator[Chunk]:
        """Every file read whole into one buffer and decoded by one kernel call."""
        buf, starts, sizes, unread = _read(self._parts)
        info, values, valid, _ = _decode(buf, starts, sizes, self._name, self._width)
        self.status = info[:, fmt.I_STATUS].copy()
        self.status[list(unread)] = -1
        return _chunks(values, valid)

    def left(self) -> list[int]:
        done = {self._mine[i] for i in np.flatnonzero(self.status == fmt.READ)}
        return [i for i in range(self._n) if i not in done]


def _width(first: ParquetPart, spec: LengthSpec, like: tuple[str, Any] | None
           ) -> int | None:
    """Bits of the first part's length column, if it is a signed integer and the first
    part has the scan's schema (else None: its own reader then says what is wrong)."""
    try:
        schema = planning_schema(first)
    except ProfilerError:
        return None
    if like is not None and first.label != like[0]:
        try:
            same_schema(first.label, schema, like, spec)
        except ProfilerError:
            return None
    return pages.width(schema, spec)


def _decodes(first: ParquetPart, name: bytes, width: int) -> bool | None:
    """Whether the kernel reads the first part's column (its codec and encodings) by
    itself (True), or once its zstd pages are decompressed (False); None: it does not."""
    buf, starts, sizes, unread = _read([first])
    if unread:
        return None
    info, _, _, unzstd = _decode(buf, starts, sizes, name, width)
    return None if info[0, fmt.I_STATUS] != fmt.READ else unzstd is None


def _read(parts: list[ParquetPart]) -> tuple[np.ndarray, np.ndarray, np.ndarray, set[int]]:
    """The parts' whole files in this thread's buffer (`read_whole`): ``(buffer, starts,
    sizes, indices of the parts that could not be read as they were sized)``; those have
    size 0 (the kernel then leaves them: no footer)."""
    sizes = np.array([p.nbytes for p in parts], np.int64)
    buf, starts, unread = read_whole([p.at for p in parts], sizes)
    sizes[unread] = 0
    return buf, starts, sizes, set(np.flatnonzero(unread).tolist())


def _decode(buf: np.ndarray, starts: np.ndarray, sizes: np.ndarray, name: bytes, width: int
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, parsers.Unzstd | None]:
    """``(info, values, valid or None, the zstd pages decompressed, if any)`` of one kernel
    call over every file, and a second one over those that needed more room than guessed
    (more rows than bytes, or pages over `PAGE_BYTES`) or their zstd pages decompressed
    (by pyarrow's codec: `parsers.Unzstd`), with the first file again as their schema's
    reference."""
    info, values, valid = _call(buf, starts, sizes, name, width, _rows(int(sizes.sum())),
                                PAGE_BYTES)
    status = info[:, fmt.I_STATUS]
    room = np.flatnonzero((((status == fmt.L_ROOM) & (info[:, fmt.I_NEED] <= MOST_PAGE))
                           | (status == fmt.L_CODEC)) & (info[:, fmt.I_ROWS] <= MOST_ROWS))
    room = room[np.cumsum(info[room, fmt.I_ROWS]) <= MOST_ROWS - info[0, fmt.I_ROWS]]
    if not room.size:
        return info, values, valid, None
    again = room if room[0] == 0 else np.concatenate([[0], room])
    rows = int(info[again, fmt.I_ROWS].sum())
    page = max(PAGE_BYTES, int(info[again, fmt.I_NEED].max()))
    unzstd = None
    if (status[room] == fmt.L_CODEC).any():
        unzstd = parsers.Unzstd()
        unzstd.load_files(buf, starts[again], sizes[again], name, width,
                          parsers.unzstd_bytes(rows))
    info2, values2, valid2 = _call(buf, starts[again], sizes[again], name, width, rows, page,
                                   unzstd)
    skip = 0
    if room[0] != 0:  # the reference, read before: its values are there already
        skip = int(info2[0, fmt.I_ROWS]) if info2[0, fmt.I_STATUS] == fmt.READ else 0
        info2 = info2[1:]
    info[room] = info2
    values = np.concatenate([values, values2[skip:]])
    if valid is not None or valid2 is not None:
        valid = np.concatenate([
            np.ones(values.size - values2.size + skip, bool) if valid is None else valid,
            np.ones(values2.size - skip, bool) if valid2 is None else valid2[skip:]])
    return info, values, valid, unzstd


def _rows(nbytes: int) -> int:
    """Room for values the first call gets: a value per byte read (Parquet holds a length
    in a byte or two), at most `arrow.CHUNK_ROWS`: an array of that size is recycled by
    the allocator once freed, where a larger one is mapped afresh every time (and its
    pages faulted in, which costs more than decoding into them)."""
    return min(max(nbytes, 1 << 16), arrow.CHUNK_ROWS)


def _call(buf: np.ndarray, starts: np.ndarray, sizes: np.ndarray, name: bytes, width: int,
          rows: int, page: int, unzstd: parsers.Unzstd | None = None
          ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """One kernel call with room for ``rows`` values and pages of ``page`` bytes (and the
    zstd pages ``unzstd`` holds)."""
    info = np.empty((starts.size, fmt.NINFO), np.int64)
    values = np.empty(rows, np.int64)
    valid = np.empty(rows, bool)
    scratch = np.empty(page, np.uint8)
    dictionary = np.empty(page // 4 + 1, np.int64)
    n, nulls = parsers.lengths(buf, starts, sizes, name, width, scratch, dictionary, values,
                               valid, info, unzstd)
    return info, values[:n], valid[:n] if nulls else None


def _chunks(values: np.ndarray, valid: np.ndarray | None) -> Iterator[Chunk]:
    """The values in chunks of `arrow.CHUNK_ROWS`."""
    step = arrow.CHUNK_ROWS
    for lo in range(0, values.size, step):
        yield Chunk(values[lo:lo + step], None if valid is None else valid[lo:lo + step])
