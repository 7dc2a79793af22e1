"""Parquet decoded in numba: the kernel in `gpu_profiler.kernels.parquet` as the readers
call it (native, see `gpu_profiler.native`): many small shards at once (`parquet_many`),
a file's footer and its row groups' column chunks (`pages`). The kernel never raises on a
file: it *leaves* it, with one of the reasons in `gpu_profiler.kernels.parquet_format`
(which names the columns of ``info`` too), and pyarrow then reads it (or gives its
error)."""

from __future__ import annotations

import numpy as np

from gpu_profiler import native
from gpu_profiler.kernels.parquet_format import NINFO, ZSTD

#: Size of the kernel's int64 work array (its reason, a needed size, its stacks and
#: struct fields, and every leaf column's levels: a file of more leaves is left).
WORK = 4096


def count(names: np.ndarray, name_at: np.ndarray, sizes: np.ndarray, flags: int,
          buf: np.ndarray, second: int, name: bytes, width: int, scratch: np.ndarray,
          dictionary: np.ndarray, values: np.ndarray, valid: np.ndarray, info: np.ndarray,
          cap: int, grow: bool, fold_after: int, row: np.ndarray, st: np.ndarray,
          state: np.ndarray) -> tuple[int, ...]:
    """Read the files named in ``names`` one by one and count their ``name`` column as it is
    decoded (see `gpu_profiler.kernels.parquet.count_files`): ``(outcome,)``."""
    work = np.zeros(WORK, np.int64)
    return native.kernel("parquet_count")(names, name_at, sizes, flags, buf, second, _key(name),
                                          width, scratch, dictionary, values, valid, info, work,
                                          cap, grow, fold_after, row, st, state)


def lengths(buf: np.ndarray, starts: np.ndarray, sizes: np.ndarray, name: bytes, width: int,
            scratch: np.ndarray, dictionary: np.ndarray, values: np.ndarray,
            valid: np.ndarray, info: np.ndarray, unzstd: Unzstd | None = None
            ) -> tuple[int, int]:
    """Decode the ``name`` column (signed, ``width`` bits) of the whole Parquet files at
    ``buf[starts[f]:+sizes[f]]`` into ``values`` (and ``valid``), the files read back to
    back: ``(values written, nulls among them)``; ``info`` (files x `NINFO`) says per file.
    ``scratch`` holds one decompressed page, ``dictionary`` one dictionary page's values;
    ``unzstd``: the files' zstd pages, decompressed (`Unzstd.load_files`; else zstd is
    left)."""
    work = np.zeros(WORK, np.int64)
    z = unzstd or NONE
    written, nulls = native.kernel("parquet_lengths")(
        buf, starts, sizes, _key(name), width, scratch, dictionary, values, valid, info,
        z.zpages, z.first, z.first_file, z.unpacked, work)
    return written, nulls


def _file_chunks(buf: np.ndarray, starts: np.ndarray, sizes: np.ndarray, name: bytes,
                 width: int) -> tuple[np.ndarray, np.ndarray]:
    """The length column's chunks of the whole files at ``buf[starts[f]:+sizes[f]]``, as
    `lengths` visits them (see `gpu_profiler.kernels.parquet.file_chunks`): ``(table of
    (start, end, codec), each file's first row of it)``."""
    work = np.zeros(WORK, np.int64)
    info = np.zeros((starts.size, NINFO), np.int64)
    first_file = np.zeros(starts.size + 1, np.int64)
    table = np.empty((starts.size * 4, 3), np.int64)
    while (n := native.kernel("parquet_file_chunks")(buf, starts, sizes, _key(name), width,
                                                    info, table, first_file, work)[0]) < 0:
        table = np.empty((4 * table.shape[0], 3), np.int64)
    return table[:n], first_file


def _key(name: bytes) -> np.ndarray:
    return np.frombuffer(name, np.uint8) if name else np.zeros(0, np.uint8)


def row_groups(tail: np.ndarray, size: int, name: np.ndarray, width: int, table: np.ndarray,
               info: np.ndarray, work: np.ndarray) -> tuple[int, ...]:
    """Parse the footer in ``tail``, the last bytes of a file of ``size`` (see
    `gpu_profiler.kernels.parquet.row_groups`): ``(status, row groups, physical type,
    maximum definition level)``."""
    return native.kernel("parquet_row_groups")(tail, size, name, width, table, info, work)


def chunks(buf: np.ndarray, starts: np.ndarray, rows: np.ndarray, codecs: np.ndarray,
           phys: int, max_def: int, width: int, scratch: np.ndarray, dictionary: np.ndarray,
           tallies: np.ndarray, dense: np.ndarray, values: np.ndarray, pairs: np.ndarray,
           unzstd: Unzstd, work: np.ndarray) -> tuple[int, ...]:
    """Count the column chunks back to back in ``buf`` (see
    `gpu_profiler.kernels.parquet.chunks`), their zstd pages decompressed in ``unzstd``:
    ``(status, values written, pairs written, nulls)``."""
    return native.kernel("parquet_chunks")(buf, starts, rows, codecs, phys, max_def, width,
                                           scratch, dictionary, tallies, dense, values, pairs,
                                           unzstd.zpages, unzstd.first, unzstd.unpacked, work)


class Unzstd:
    """zstd pages decompressed for the kernel by pyarrow's own codec (the library pyarrow
    reads them with, so the bytes are the reference's even for damaged pages, which a zstd
    of another version may decode otherwise): as `zstd_pages` lists them (``zpages``, each
    chunk's first row in ``first``; no rows: zstd is left), back to back in ``unpacked``.
    Its arrays are kept from call to call (fresh memory costs page faults)."""

    def __init__(self) -> None:
        self.zpages = self._rows = np.empty((0, 4), np.int64)
        self.first = self.first_file = np.zeros(1, np.int64)
        self.unpacked = self._bytes = np.empty(0, np.uint8)

    def load_files(self, buf: np.ndarray, starts: np.ndarray, sizes: np.ndarray, name: bytes,
                   width: int, most: int) -> None:
        """`load` for the whole files ``buf[starts[f]:+sizes[f]]`` as `lengths` reads
        them: their length column's chunks (`_file_chunks`), file f's from chunk
        ``first_file[f]``."""
        table, self.first_file = _file_chunks(buf, starts, sizes, name, width)
        self.load(buf, table[:, 0], table[:, 1], table[:, 2], most)

    def load(self, buf: np.ndarray, los: np.ndarray, his: np.ndarray, codecs: np.ndarray,
             most: int) -> None:
        """The pages of the zstd chunks ``buf[los[k]:his[k]]`` (codec ``codecs[k]``), at
        most ``most`` bytes decompressed (else none: the kernel leaves them). A page that
        is not one frame declaring its size, or that pyarrow fails to decompress, is marked
        (-1): the kernel leaves its chunk, to pyarrow's reader, which says what is wrong."""
        self.zpages = self._rows[:0]
        self.first = np.zeros(codecs.size + 1, np.int64)
        if not (codecs == ZSTD).any():
            return
        work = np.zeros(WORK, np.int64)
        if not self._rows.size:
            self._rows = np.empty((64, 4), np.int64)
        while (n := native.kernel("parquet_zstd_pages")(buf, los, his, codecs, self._rows,
                                                       self.first, work)[0]) < 0:
            if self._rows.shape[0] > most:  # (a page holds a byte or more: damage)
                return
            self._rows = np.empty((4 * self._rows.shape[0], 4), np.int64)
        zpages = self._rows[:n]
        sizes = zpages[:, 2]
        total = int(sizes[sizes > 0].sum())
        if total > most:  # (page headers claiming more: no room is made for them)
            return
        if total > self._bytes.size:
            self._bytes = np.empty(max(total, 2 * self._bytes.size), np.uint8)
        self.zpages, self.unpacked = zpages, self._bytes
        import pyarrow as pa  # (only for zstd: ~25 ms a process)

        codec, good = pa.Codec("zstd"), np.flatnonzero(sizes >= 0)
        at = np.concatenate([[0], np.cumsum(sizes[good])]).astype(np.int64)
        try:  # every frame at once (one call; each frame ends where its page does)
            frames = np.concatenate([buf[zpages[i, 0]:zpages[i, 1]] for i in good])
            out = codec.decompress(frames, decompressed_size=total)
            self._bytes[:total] = np.frombuffer(out, np.uint8)
            zpages[good, 3] = at[:-1]
            return
        except (pa.ArrowException, OSError, ValueError):  # damage: one frame at a time
            pass
        for k, i in enumerate(good):
            lo, hi, size = int(zpages[i, 0]), int(zpages[i, 1]), int(zpages[i, 2])
            try:
                out = codec.decompress(buf[lo:hi], decompressed_size=size)
            except (pa.ArrowException, OSError):  # (damage: pyarrow's reader names it)
                continue
            self._bytes[at[k]:at[k] + size] = np.frombuffer(out, np.uint8)
            zpages[i, 3] = at[k]


def unzstd_bytes(rows: int) -> int:
    """The most bytes of zstd pages decompressed for ``rows`` rows: a row's value (8 bytes
    at most), its dictionary entry and levels fit in 32, with 1 MiB to spare; page headers
    claiming more (a zstd bomb's) are left to pyarrow, which reads those row groups."""
    return 32 * rows + (1 << 20)


#: No zstd page: the kernel leaves zstd chunks.
NONE = Unzstd()
