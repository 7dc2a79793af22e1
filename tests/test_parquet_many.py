"""Small Parquet shards read together (`parquet_many`, the kernel in kernels/parquet.py):
files written by pyarrow with every option that changes their bytes give pyarrow's numbers
bit for bit, or are left to pyarrow; hostile files are left, never crash the kernel, and
whenever the kernel reads one its numbers are pyarrow's."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import gpu_profiler as gp
from gpu_profiler import LengthHistogram, ProfilerError, native
from gpu_profiler.backends import get_backend
from gpu_profiler.backends.numba_backend import NumbaBackend
from gpu_profiler.chunk import Chunk
from gpu_profiler.kernels import parquet_format as fmt
from gpu_profiler.readers.base import LengthSpec, Reading, SourceOptions
from gpu_profiler.readers.parquet import ParquetPart, RowGroups
from gpu_profiler.readers.parquet import many as parquet_many
from gpu_profiler.readers.parquet import metadata as parsers

CAP = 512


def lengths(n: int, seed: int, t: pa.DataType | None = None, nulls: float = 0.0,
            distinct: int = 3000) -> pa.Array:
    t = t or pa.int64()
    rng = np.random.default_rng(seed)
    hi = min(distinct, np.iinfo(t.to_pandas_dtype()).max)
    x = rng.integers(-3 if pa.types.is_signed_integer(t) else 0, hi, n)
    mask = rng.random(n) < nulls if nulls else None
    return pa.array(x.astype(t.to_pandas_dtype()), type=t, mask=mask)


def write(path: Path, table: pa.Table, **options) -> Path:
    pq.write_table(table, path, **options)
    return path


def read_together(paths: list[Path], column: str = "length", like=None,
                  reading: Reading | None = None, room: bool = False
                  ) -> tuple[list[int], np.ndarray, np.ndarray]:
    """``(left, values, valid)`` of one together call (valid all True without nulls), the
    files gathered into chunks. Counted as they are read instead (`Backend.count`), at
    two caps, the same files are left, and the others give the histogram of pyarrow's
    values; unless ``room`` games are played (the two ways bound rows and pages apart:
    `test_counted_files_that_need_more_room_are_left`)."""
    reading = reading or Reading(LengthSpec(column))
    joined = parquet_many.together([ParquetPart(p) for p in paths], reading, like)
    chunks = list(joined.chunks())
    left = joined.left()
    values = np.concatenate([c.data for c in chunks]) if chunks else np.zeros(0, np.int64)
    valid = np.concatenate([np.ones(c.samples, bool) if c.valid is None else c.valid
                            for c in chunks]) if chunks else np.zeros(0, bool)
    for cap in (None, 100):
        counted_left, hist = count_together(paths, column, like, reading, cap)
        assert room or left == counted_left
        read = [p for i, p in enumerate(paths) if i not in set(counted_left)]
        assert hist == (pyarrow_histogram(read, column, cap) if read else None)
    return left, values, valid


def count_together(paths: list[Path], column: str = "length", like=None,
                   reading: Reading | None = None, cap: int | None = None
                   ) -> tuple[list[int], LengthHistogram | None]:
    """``(left, histogram of the others or None)`` of one together call that counts (or,
    where it does not, zstd files: its chunks binned, as a scan does)."""
    joined = parquet_many.together([ParquetPart(p) for p in paths],
                                   reading or Reading(LengthSpec(column)), like)
    work = joined.counting()
    hist = NumbaBackend().count(work, cap) if work is not None else \
        NumbaBackend().histogram(joined.chunks(), cap)
    left = joined.left()
    return left, hist if len(left) < len(paths) else None


def pyarrow_histogram(paths: list[Path], column: str = "length",
                      cap: int | None = None) -> LengthHistogram:
    """numpy's histogram of pyarrow's values (nulls counted as such)."""
    values, valid = pyarrow_values(paths, column)
    return get_backend("numpy").histogram([Chunk(values, valid)], cap)


def pyarrow_values(paths: list[Path], column: str = "length") -> tuple[np.ndarray, np.ndarray]:
    arrays = [pq.read_table(p, columns=[column]).column(0) for p in paths]
    col = pa.chunked_array([c for a in arrays for c in a.chunks], type=arrays[0].type) \
        if arrays else pa.chunked_array([], pa.int64())
    valid = col.is_valid().to_numpy(zero_copy_only=False)
    values = col.fill_null(0).to_numpy().astype(np.int64)
    return values, valid


def assert_same_as_pyarrow(paths: list[Path], left: list[int], values: np.ndarray,
                           valid: np.ndarray, column: str = "length") -> None:
    read = [p for i, p in enumerate(paths) if i not in set(left)]
    want, want_valid = pyarrow_values(read, column)
    assert values.dtype == np.int64
    np.testing.assert_array_equal(valid, want_valid)
    np.testing.assert_array_equal(np.where(valid, values, 0), want)


@pytest.fixture(scope="module", autouse=True)
def built() -> None:
    """The scans below run the native kernels (never silently the JIT)."""
    assert native.library() is not None, native.status()


#: write_table options that change the bytes the kernel reads; ``read``: whether it reads
#: such files itself (else they are left to pyarrow).
OPTIONS = [
    ({}, True),
    ({"compression": "none"}, True),
    ({"compression": "snappy", "use_dictionary": False}, True),
    ({"compression": "none", "use_dictionary": False, "data_page_version": "2.0"}, True),
    ({"compression": "snappy", "data_page_version": "2.0"}, True),
    ({"data_page_size": 512, "write_batch_size": 64}, True),  # many pages
    ({"data_page_size": 256, "data_page_version": "2.0", "write_batch_size": 50}, True),
    ({"row_group_size": 700}, True),
    ({"dictionary_pagesize_limit": 1024, "write_batch_size": 100}, True),  # falls back to plain
    ({"max_rows_per_page": 100, "write_page_index": True, "write_page_checksum": True}, True),
    ({"compression": "zstd"}, True),  # (its pages decompressed by pyarrow's codec)
    ({"compression": "zstd", "compression_level": 19, "data_page_version": "2.0"}, True),
    ({"compression": "gzip"}, False),
    ({"compression": "lz4"}, False),
    ({"column_encoding": {"length": "DELTA_BINARY_PACKED"}, "use_dictionary": False}, True),
    ({"column_encoding": {"length": "DELTA_BINARY_PACKED"}, "use_dictionary": False,
      "data_page_version": "2.0", "data_page_size": 300, "write_batch_size": 50}, True),
    ({"column_encoding": {"length": "BYTE_STREAM_SPLIT"}, "use_dictionary": False}, False),
]


@pytest.mark.parametrize("nulls", [0.0, 0.2])
@pytest.mark.parametrize(("options", "read"), OPTIONS)
def test_write_options(tmp_path, options, read, nulls):
    paths = [write(tmp_path / f"{i}.parquet",
                   pa.table({"length": lengths(3000, i, nulls=nulls)}), **options)
             for i in range(3)]
    left, values, valid = read_together(paths)
    assert left == ([] if read else [0, 1, 2])
    assert_same_as_pyarrow(paths, left, values, valid)


@pytest.mark.parametrize("t", [pa.int8(), pa.int16(), pa.int32(), pa.int64()])
@pytest.mark.parametrize("version", ["1.0", "2.6"])
def test_signed_widths(tmp_path, t, version):
    paths = [write(tmp_path / f"{i}.parquet", pa.table({"length": lengths(2000, i, t, 0.1)}),
                   version=version) for i in range(2)]
    left, values, valid = read_together(paths)
    assert left == []
    assert_same_as_pyarrow(paths, left, values, valid)


@pytest.mark.parametrize("t", [pa.uint8(), pa.uint32(), pa.uint64(), pa.date32()])
def test_unsigned_and_logical_types_are_left(tmp_path, t):
    x = pa.array(np.arange(100), pa.int32()).cast(t) if t == pa.date32() else lengths(100, 0, t)
    paths = [write(tmp_path / f"{i}.parquet", pa.table({"length": x})) for i in range(2)]
    assert read_together(paths)[0] == [0, 1]


def other_columns(n: int, seed: int) -> pa.Table:
    """Text, floats, lists, structs and three int columns around the chosen one."""
    rng = np.random.default_rng(seed)
    return pa.table({
        "text": pa.array([f"row {i}" * (i % 5) for i in range(n)]),
        "tokens": pa.array([list(range(i % 7)) for i in range(n)], pa.list_(pa.int32())),
        "meta": pa.array([{"a": i, "b": [i, i]} for i in range(n)],
                         pa.struct([("a", pa.int64()), ("b", pa.list_(pa.int64()))])),
        "score": rng.random(n),
        "a": lengths(n, seed, pa.int32(), 0.1),
        "length": lengths(n, seed + 1, pa.int64(), 0.05),
        "b": lengths(n, seed + 2, pa.int16()),
    })


@pytest.mark.parametrize("column", ["a", "length", "b"])
def test_column_among_others(tmp_path, column):
    paths = [write(tmp_path / f"{i}.parquet", other_columns(1500, i), row_group_size=600)
             for i in range(3)]
    left, values, valid = read_together(paths, column)
    assert left == []
    assert_same_as_pyarrow(paths, left, values, valid, column)


def test_empty_files_and_row_groups(tmp_path):
    empty = pa.table({"length": pa.array([], pa.int64())})
    paths = [write(tmp_path / "0.parquet", pa.table({"length": lengths(500, 0)})),
             write(tmp_path / "1.parquet", empty)]
    with pq.ParquetWriter(tmp_path / "2.parquet", empty.schema) as w:
        w.write_table(empty)  # a row group of no rows between two others
        w.write_table(pa.table({"length": lengths(300, 2)}))
        w.write_table(empty)
        w.write_table(pa.table({"length": lengths(200, 3)}))
    paths.append(tmp_path / "2.parquet")
    left, values, valid = read_together(paths)
    assert left == []
    assert values.size == 1000
    assert_same_as_pyarrow(paths, left, values, valid)


def test_schemas_unlike_the_first_are_left(tmp_path):
    x = lengths(400, 0)
    paths = [write(tmp_path / "0.parquet", pa.table({"length": x})),
             write(tmp_path / "1.parquet", pa.table({"length": x, "extra": x})),
             write(tmp_path / "2.parquet", pa.table({"length": x}).replace_schema_metadata(
                 {"k": "v"})),  # other metadata: its ARROW:schema differs too
             write(tmp_path / "3.parquet", pa.table({"length": x}), compression="gzip"),
             write(tmp_path / "4.parquet", pa.table({"length": x}))]
    left, values, valid = read_together(paths)
    assert left == [1, 2, 3]
    assert_same_as_pyarrow(paths, left, values, valid)
    # the scan's first part may differ where it does not matter (an int32 length column)
    like = ("other.parquet", pa.schema([("length", pa.int32()), ("extra", pa.int8())]))
    assert read_together(paths, like=like)[0] == [1, 2, 3]


def test_what_the_scan_needs_otherwise_leaves_everything(tmp_path):
    paths = [write(tmp_path / f"{i}.parquet", pa.table({"length": lengths(100, i)}))
             for i in range(2)]
    for reading in (Reading(LengthSpec("length"), gpu_parquet=True),
                    Reading(LengthSpec("length"), source=SourceOptions(trust_statistics=True))):
        assert read_together(paths, reading=reading)[0] == [0, 1]
    assert RowGroups.together is None


def test_room_beyond_the_first_guess(tmp_path, monkeypatch):
    """More rows than bytes (long RLE runs) and pages over the first scratch: read in a
    second call, with the first file again as the reference."""
    monkeypatch.setattr(parquet_many, "PAGE_BYTES", 4096)
    same = pa.array(np.full(200_000, 7), pa.int64())
    paths = [write(tmp_path / "0.parquet", pa.table({"length": lengths(3000, 0)}),
                   compression="none", use_dictionary=False),
             write(tmp_path / "1.parquet", pa.table({"length": same})),
             write(tmp_path / "2.parquet", pa.table({"length": lengths(3000, 2, nulls=0.5)}))]
    left, values, valid = read_together(paths, room=True)
    assert left == []
    assert values.size == 206_000
    assert_same_as_pyarrow(paths, left, values, valid)


def test_counted_files_that_need_more_room_are_left(tmp_path, monkeypatch):
    """Counted as they are read, a file with a page over PAGE_BYTES, or more rows than a
    call holds (CHUNK_ROWS), is left to pyarrow (no second call)."""
    monkeypatch.setattr(parquet_many, "PAGE_BYTES", 4096)
    monkeypatch.setattr(parquet_many.arrow, "CHUNK_ROWS", 150_000)
    same = pa.array(np.full(200_000, 7), pa.int64())
    paths = [write(tmp_path / "0.parquet", pa.table({"length": lengths(3000, 0)}),
                   compression="none", use_dictionary=False, data_page_size=1024),
             write(tmp_path / "1.parquet", pa.table({"length": same})),
             write(tmp_path / "2.parquet", pa.table({"length": lengths(3000, 2, nulls=0.5)}),
                   data_page_size=1 << 20)]
    left, hist = count_together(paths, cap=50)
    assert left == [1, 2]
    assert hist == pyarrow_histogram(paths[:1], cap=50)


def test_the_second_call_holds_a_bounded_number_of_rows(tmp_path, monkeypatch):
    """A footer may claim any row count: the files the second call takes hold at most
    MOST_ROWS rows together; the others are left to pyarrow (which decodes in batches)."""
    monkeypatch.setattr(parquet_many, "MOST_ROWS", 450_000)
    same = pa.table({"length": pa.array(np.full(200_000, 7), pa.int64())})
    paths = [write(tmp_path / "0.parquet", pa.table({"length": lengths(3000, 0)})),
             *(write(tmp_path / f"{i}.parquet", same) for i in (1, 2, 3))]
    left, values, valid = read_together(paths, room=True)
    assert left == [3]
    assert_same_as_pyarrow(paths, left, values, valid)


def test_a_file_not_its_listed_size_is_left(tmp_path):
    paths = [write(tmp_path / f"{i}.parquet", pa.table({"length": lengths(500, i)}))
             for i in range(3)]
    parts = [ParquetPart(p) for p in paths]
    [p.nbytes for p in parts]  # listed  # noqa: B018
    with open(paths[1], "ab") as f:
        f.write(b"grown")
    joined = parquet_many.together(parts, Reading(LengthSpec("length")), None)
    assert sum(c.samples for c in joined.chunks()) == 1000 and joined.left() == [1]


def test_histograms_match_the_per_part_path_and_numpy(tmp_path, monkeypatch):
    """A directory of shards, some read together and some left (zstd, another width),
    profiled: the same histogram as each part read by pyarrow, and as numpy's."""
    xs = [lengths(2000, i, nulls=0.1, distinct=CAP + 50) for i in range(12)]
    for i, x in enumerate(xs):
        write(tmp_path / f"{i:02d}.parquet", pa.table({"length": x}),
              compression="zstd" if i % 5 == 4 else "snappy")
    got = gp.histogram(tmp_path, cap=CAP)
    monkeypatch.setattr(ParquetPart, "together", None)
    alone = gp.histogram(tmp_path, cap=CAP, backend="numpy")
    assert got.to_dict() == alone.to_dict()
    x = pa.chunked_array(xs).to_numpy(zero_copy_only=False)
    ok = x[~np.isnan(x)].astype(np.int64)
    assert got.null_count == int(np.isnan(x).sum())
    assert got.counts.tolist() == np.bincount(ok[(ok >= 0) & (ok <= CAP)],
                                              minlength=CAP + 1).tolist()


def test_schema_error_as_the_per_part_path(tmp_path, monkeypatch):
    for i in range(4):
        x = lengths(100, i)
        write(tmp_path / f"{i}.parquet", pa.table({"length": x.cast(pa.float64()) if i == 2
                                                   else x}))
    errors = []
    for alone in (False, True):
        if alone:
            monkeypatch.setattr(ParquetPart, "together", None)
        with pytest.raises(ProfilerError) as exc:
            gp.histogram(tmp_path)
        errors.append(str(exc.value))
    assert errors[0] == errors[1]
    assert "2.parquet: schema differs" in errors[0]


# --- hostile files ------------------------------------------------------------------------

#: Crafted sizes: the largest int32, a 5-byte varint past 32 bits, an overlong varint,
#: zeros, the largest varint.
WORDS = [b"\xff\xff\xff\x7f", b"\xfe\xff\xff\xff\x0f", b"\x80\x80\x80\x80\x80\x01",
         b"\x00\x00\x00\x00", b"\xff\xff\xff\xff\xff\xff\xff\xff\x7f"]


def mutants(data: bytes, n: int, seed: int) -> list[bytes]:
    """Truncations, flipped bytes (footer and pages) and crafted sizes of one file."""
    rng = np.random.default_rng(seed)
    size = len(data)
    footer = size - 8 - int.from_bytes(data[-8:-4], "little")
    out = []
    for k in range(n):
        b = bytearray(data)
        kind = k % 5
        if kind == 0:  # truncated (the tail kept: a footer that points past the start)
            cut = int(rng.integers(1, size - 12))
            b = b[:4] + b[cut:] if k % 2 else b[:cut] + b[-8:]
        elif kind == 1:  # bytes flipped in the footer
            for _ in range(int(rng.integers(1, 4))):
                b[int(rng.integers(footer, size - 8))] ^= int(rng.integers(1, 256))
        elif kind == 2:  # bytes flipped in the pages
            for _ in range(int(rng.integers(1, 4))):
                b[int(rng.integers(4, footer))] ^= int(rng.integers(1, 256))
        elif kind == 3:  # a crafted size or count: a large varint or word somewhere
            at = int(rng.integers(4, size - 12))
            word = WORDS[int(rng.integers(len(WORDS)))]
            b[at:at + len(word)] = word
        else:  # the footer's length
            b[-8:-4] = int(rng.choice([0, 1, footer + 7, size, size - 12, 2**32 - 1])) \
                .to_bytes(4, "little")
        out.append(bytes(b))
    return out


def pyarrow_read(data: bytes) -> tuple[np.ndarray, np.ndarray] | None:
    try:
        col = pq.read_table(io.BytesIO(data), columns=["length"]).column(0)
    except Exception:
        return None
    return (col.fill_null(0).to_numpy().astype(np.int64),
            col.is_valid().to_numpy(zero_copy_only=False))


BASES = [
    {},
    {"data_page_version": "2.0", "data_page_size": 2000, "write_batch_size": 100},
    {"use_dictionary": False, "compression": "none", "row_group_size": 300},
    {"compression": "zstd", "data_page_size": 2000, "write_batch_size": 100},
    {"compression": "zstd", "data_page_version": "2.0", "use_dictionary": False},
]


@pytest.mark.parametrize("options", BASES)
def test_hostile_files_are_left_or_read_as_pyarrow_reads_them(tmp_path, options):
    t = pa.table({"text": [str(i) for i in range(1000)], "length": lengths(1000, 9, nulls=0.1)})
    base = write(tmp_path / "base.parquet", t, **options).read_bytes()
    files = [base, *mutants(base, 400, seed=len(options))]
    buf = np.frombuffer(b"".join(files), np.uint8).copy()
    sizes = np.array([len(f) for f in files], np.int64)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    values = np.empty(len(files) * 1000 + 1, np.int64)
    valid = np.empty(values.size, bool)
    info = np.empty((len(files), fmt.NINFO), np.int64)
    unzstd = parsers.Unzstd()  # (zstd pages, decompressed by pyarrow's codec)
    unzstd.load_files(buf, starts, sizes, b"length", 64, 1 << 26)
    written, _ = parsers.lengths(buf, starts, sizes, b"length", 64,
                                 np.empty(1 << 16, np.uint8), np.empty((1 << 14) + 1, np.int64),
                                 values, valid, info, unzstd)
    status = info[:, fmt.I_STATUS]
    assert status[0] == fmt.READ
    assert set(status) <= {fmt.READ, *fmt.LEFT}
    at = 0
    for data, s, rows in zip(files, status, info[:, fmt.I_ROWS], strict=True):
        if s != fmt.READ:
            continue
        want = pyarrow_read(data)
        assert want is not None, "the kernel read a file pyarrow refuses"
        np.testing.assert_array_equal(valid[at:at + rows], want[1])
        np.testing.assert_array_equal(np.where(valid[at:at + rows], values[at:at + rows], 0),
                                      want[0])
        at += rows
    assert at == written
    assert (status != fmt.READ).sum() > 100  # most mutants are refused


@pytest.mark.parametrize("options", BASES)
def test_hostile_files_counted_as_read_are_left_or_counted_as_pyarrow_reads_them(tmp_path,
                                                                                  options):
    t = pa.table({"text": [str(i) for i in range(1000)], "length": lengths(1000, 9, nulls=0.1)})
    base = write(tmp_path / "base.parquet", t, **options).read_bytes()
    paths = []
    for i, data in enumerate([base, *mutants(base, 300, seed=len(options) + 7)]):
        paths.append(tmp_path / f"m{i:03d}.parquet")
        paths[-1].write_bytes(data)
    parts = [ParquetPart(p) for p in paths]
    files = parquet_many.together(parts, Reading(LengthSpec("length")), None)
    work = files.counting()  # (None for zstd: its chunks then, as a scan takes them)
    hist = NumbaBackend().count(work, None) if work is not None else \
        NumbaBackend().histogram(files.chunks(), None)
    left = set(files.left())
    assert 0 not in left
    read = [p.read_bytes() for i, p in enumerate(paths) if i not in left]
    wants = [pyarrow_read(data) for data in read]
    assert all(w is not None for w in wants), "the kernel read a file pyarrow refuses"
    values = np.concatenate([w[0] for w in wants])
    valid = np.concatenate([w[1] for w in wants])
    assert hist == get_backend("numpy").histogram([Chunk(values, valid)], None)
    assert len(left) > 100


def test_large_shards_are_pyarrows(tmp_path, monkeypatch):
    """A shard over MOST_BYTES is left (pyarrow reads its footer and length column; the
    kernel would read it whole: 0.45x on 2.2 MiB shards); the small ones are read."""
    monkeypatch.setattr(parquet_many, "MOST_BYTES", 4096)
    paths = [write(tmp_path / "0.parquet", pa.table({"length": lengths(3000, 0)})),
             write(tmp_path / "1.parquet", pa.table({"length": lengths(100, 1)})),
             write(tmp_path / "2.parquet", pa.table({"length": lengths(100, 2)}))]
    assert paths[0].stat().st_size > 4096 >= max(p.stat().st_size for p in paths[1:])
    left, values, valid = read_together(paths)
    assert left == [0]
    assert_same_as_pyarrow(paths, left, values, valid)


def test_a_codec_the_kernel_lacks_is_learnt_from_the_first_file(tmp_path, monkeypatch):
    """gzip (as pandas or Spark may write): the first file says so, and no other file is
    read whole for nothing (that cost 1.4-1.7x the pyarrow path alone)."""
    paths = [write(tmp_path / f"{i}.parquet", pa.table({"length": lengths(100, i)}),
                   compression="gzip") for i in range(5)]
    reads = []
    real = parquet_many.read_whole
    monkeypatch.setattr(parquet_many, "read_whole",
                        lambda ps, sizes: reads.append(len(ps)) or real(ps, sizes))
    assert read_together(paths)[0] == [0, 1, 2, 3, 4]
    assert reads and max(reads) == 1
