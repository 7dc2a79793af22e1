"""Parquet decoded in numba: the kernel in `gpu_profiler.kernels.parquet` as the readers
call it (native, see `gpu_profiler.native`): many small shards at once (`parquet_many`),
a file's footer and its row groups' column chunks (`pages`). The kernel never raises on a
file: it *leaves* it, with one of the reasons in `gpu_profiler.kernels.parquet_format`
(which names the columns of ``info`` too), and pyarrow then reads it (or gives its
error)."""

from __future__ import annotations

import numpy as np

from gpu_profiler import native

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
    key = np.frombuffer(name, np.uint8) if name else np.zeros(0, np.uint8)
    return native.kernel("parquet_count")(names, name_at, sizes, flags, buf, second, key, width,
                                          scratch, dictionary, values, valid, info, work, cap,
                                          grow, fold_after, row, st, state)


def lengths(buf: np.ndarray, starts: np.ndarray, sizes: np.ndarray, name: bytes, width: int,
            scratch: np.ndarray, dictionary: np.ndarray, values: np.ndarray,
            valid: np.ndarray, info: np.ndarray) -> tuple[int, int]:
    """Decode the ``name`` column (signed, ``width`` bits) of the whole Parquet files at
    ``buf[starts[f]:+sizes[f]]`` into ``values`` (and ``valid``), the files read back to
    back: ``(values written, nulls among them)``; ``info`` (files x `NINFO`) says per file.
    ``scratch`` holds one decompressed page, ``dictionary`` one dictionary page's values."""
    work = np.zeros(WORK, np.int64)
    key = np.frombuffer(name, np.uint8) if name else np.zeros(0, np.uint8)
    written, nulls = native.kernel("parquet_lengths")(
        buf, starts, sizes, key, width, scratch, dictionary, values, valid, info, work)
    return written, nulls


def row_groups(tail: np.ndarray, size: int, name: np.ndarray, width: int, table: np.ndarray,
               info: np.ndarray, work: np.ndarray) -> tuple[int, ...]:
    """Parse the footer in ``tail``, the last bytes of a file of ``size`` (see
    `gpu_profiler.kernels.parquet.row_groups`): ``(status, row groups, physical type,
    maximum definition level)``."""
    return native.kernel("parquet_row_groups")(tail, size, name, width, table, info, work)


def chunks(buf: np.ndarray, starts: np.ndarray, rows: np.ndarray, codecs: np.ndarray,
           phys: int, max_def: int, width: int, scratch: np.ndarray, dictionary: np.ndarray,
           tallies: np.ndarray, values: np.ndarray, pairs: np.ndarray, zpages: np.ndarray,
           first: np.ndarray, unpacked: np.ndarray, work: np.ndarray) -> tuple[int, ...]:
    """Count the column chunks back to back in ``buf`` (see
    `gpu_profiler.kernels.parquet.chunks`): ``(status, values written, pairs written,
    nulls)``."""
    return native.kernel("parquet_chunks")(buf, starts, rows, codecs, phys, max_def, width,
                                           scratch, dictionary, tallies, values, pairs,
                                           zpages, first, unpacked, work)


def zstd_pages(buf: np.ndarray, starts: np.ndarray, codecs: np.ndarray, zpages: np.ndarray,
               first: np.ndarray, work: np.ndarray) -> int:
    """List the zstd chunks' pages to decompress (see
    `gpu_profiler.kernels.parquet.zstd_pages`): their rows, or -1 (``zpages`` too small)."""
    return native.kernel("parquet_zstd_pages")(buf, starts, codecs, zpages, first, work)[0]
