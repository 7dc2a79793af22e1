"""A Parquet file's length column counted by the kernel (`readers/parquet/pages.py`): files
written by pyarrow with every option that changes their bytes give pyarrow's numbers bit
for bit, or are left to pyarrow (row group by row group); hostile files end in pyarrow's
numbers or one line, never in other numbers; the buffers a thread keeps never carry one
batch's counts into the next."""

from __future__ import annotations

import collections
import io
import itertools
import os
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_parquet_many import OPTIONS, lengths, mutants, pyarrow_read, write

import gpu_profiler as gp
from gpu_profiler import LengthHistogram, ProfilerError, runs
from gpu_profiler.backends import get_backend
from gpu_profiler.chunk import Chunk
from gpu_profiler.readers import parquet
from gpu_profiler.readers.parquet import many as parquet_many
from gpu_profiler.readers.parquet import pages
from gpu_profiler.runs import Runs, RunTally

APACHE = Path(__file__).with_name("data") / "apache" / "parquet-testing" / "data"


@pytest.fixture(autouse=True)
def every_file(monkeypatch):
    """Every file's column counted by the kernel, however few its rows (`MIN_ROWS`)."""
    monkeypatch.setattr(pages, "MIN_ROWS", 0)


def counted(path: Path, column: str = "length") -> list[list[Chunk | Runs] | None]:
    """Each row group's `pages.decode`, or None for all when the kernel leaves the file."""
    fd = os.open(path, os.O_RDONLY)
    schema = pq.read_schema(path)
    known = pages.open_pages(fd, os.fstat(fd).st_size, column,
                             pages.WIDTHS.get(str(schema.field(column).type)))
    if known is None:
        return [None]
    try:
        return [pages.decode(known, [g]) for g in range(len(known.table))]
    finally:
        known.close()


def histogram_of(items: list[Chunk | Runs], cap: int | None) -> LengthHistogram:
    """numpy's histogram of what the kernel handed over."""
    tally = RunTally()
    chunks = []
    for item in items:
        if isinstance(item, Runs):
            tally.add(item)
        else:
            chunks.append(item)
    numpy = get_backend("numpy")
    hists = [numpy.runs(tally, cap)]
    if chunks:
        hists.append(numpy.histogram(chunks, cap))
    return gp.merge(hists) if len(hists) > 1 else hists[0]


def pyarrow_histogram(data: bytes | Path, cap: int | None, group: int | None = None
                      ) -> LengthHistogram | None:
    """numpy's histogram of pyarrow's values (of one row group), None if pyarrow refuses."""
    try:
        pf = pq.ParquetFile(io.BytesIO(data) if isinstance(data, bytes) else data)
        t = pf.read(columns=["length"]) if group is None else \
            pf.read_row_group(group, columns=["length"])
        col = t.column(0)
    except Exception:
        return None
    values = col.fill_null(0).to_numpy().astype(np.int64)
    valid = col.is_valid().to_numpy(zero_copy_only=False)
    return get_backend("numpy").histogram([Chunk(values, valid)], cap)


def assert_values(items: list[Chunk | Runs], col: pa.ChunkedArray) -> None:
    """What the kernel handed over holds ``col``'s values, each as often, and its nulls."""
    tally: collections.Counter[int] = collections.Counter()
    for item in items:
        pairs = zip(item.values.tolist(), item.counts.tolist(), strict=True) \
            if isinstance(item, Runs) else ((v, 1) for v in item.data.tolist())
        for v, c in pairs:
            tally[v] += c
    assert tally == collections.Counter(col.drop_null().to_pylist())
    assert sum(i.nulls for i in items if isinstance(i, Runs)) == col.null_count


def same(a: LengthHistogram | None, b: LengthHistogram | None) -> bool:
    """Equal, the above-cap token sums compared mod 2**64 (a backend's wraps there; a scan
    makes it exact, and the kernel's runs add it exactly)."""
    if a is None or b is None:
        return a is b
    return replace(a, above_tokens=a.above_tokens % 2**64) == \
        replace(b, above_tokens=b.above_tokens % 2**64)


@pytest.mark.parametrize("nulls", [0.0, 0.2])
@pytest.mark.parametrize(("options", "read"), OPTIONS)
def test_write_options(tmp_path, options, read, nulls):
    read = read or options.get("compression") == "zstd"  # (decompressed here by pyarrow's)
    x = lengths(5000, seed=len(str(options)), nulls=nulls)
    path = write(tmp_path / "a.parquet", pa.table({"text": [str(v) for v in range(5000)],
                                                    "length": x}),
                 **{"row_group_size": 2000, **options})
    groups = counted(path)
    assert all(g is not None for g in groups) == read
    if read:
        for g, items in enumerate(groups):
            assert items is not None
            for cap in (None, 100):
                assert same(histogram_of(items, cap), pyarrow_histogram(path, cap, g))
    for cap in (None, 100):  # the whole scan, whichever way each row group is read
        assert same(gp.histogram(path, cap=cap), pyarrow_histogram(path, cap))


def test_a_batch_with_a_chunk_of_another_encoding_is_left_unread(tmp_path, monkeypatch):
    """A row group whose chunk lists an encoding the kernel does not decode (as a footer
    may for one row group of many) leaves its batch before any chunk is read; the others
    are counted."""
    reads = []
    real = pages._pread
    monkeypatch.setattr(pages, "_pread", lambda fd, into, at: reads.append(at) or
                        real(fd, into, at))
    path = write(tmp_path / "m.parquet", pa.table({"length": lengths(3000, 2)}),
                 row_group_size=1000)
    fd = os.open(path, os.O_RDONLY)
    known = pages.open_pages(fd, os.fstat(fd).st_size, "length", 64)
    assert known is not None
    try:
        known.table[1, 4] = 0  # (its encodings list BYTE_STREAM_SPLIT, say)
        reads.clear()
        assert pages.decode(known, [0, 1]) is None and not reads
        assert pages.decode(known, [1]) is None and not reads
        assert pages.decode(known, [0, 2]) is not None and reads
    finally:
        known.close()


def test_files_of_few_rows_are_pyarrows(tmp_path, monkeypatch):
    """Under `MIN_ROWS` rows (in the row groups to read), a file is pyarrow's: the kernel's
    own set-up costs more than it saves there."""
    calls = []
    monkeypatch.setattr(pages, "open_pages", lambda fd, *a: calls.append(fd) or os.close(fd))
    path = write(tmp_path / "f.parquet", pa.table({"length": lengths(3000, 1)}),
                 row_group_size=1000)
    for floor, used in ((3001, False), (3000, True)):
        calls.clear()
        monkeypatch.setattr(pages, "MIN_ROWS", floor)
        assert same(gp.histogram(path), pyarrow_histogram(path, None))
        assert bool(calls) == used


def test_dictionary_pages_hand_over_runs_not_values(tmp_path):
    """A dictionary-encoded column hands over its entries with their rows (no value
    array); a PLAIN one its values from 0 to `pages.DENSE` with their rows too, and only
    the others as values; one whose dictionary overflowed, both."""
    x = lengths(20000, seed=3, distinct=50)  # (-3 to 49)
    one = counted(write(tmp_path / "d.parquet", pa.table({"length": x})))[0]
    assert one is not None and [type(i) for i in one] == [Runs]
    assert one[0].values.size == 53 and one[0].samples == 20000
    plain = counted(write(tmp_path / "p.parquet", pa.table({"length": x}),
                          use_dictionary=False))[0]
    assert plain is not None and [type(i) for i in plain] == [Runs, Chunk]
    assert plain[0].values.tolist() == list(range(50))
    assert set(plain[1].data.tolist()) == {-3, -2, -1}
    assert plain[0].samples + plain[1].samples == 20000
    assert same(histogram_of(plain, None), pyarrow_histogram(tmp_path / "p.parquet", None))
    y = lengths(20000, seed=4, distinct=10**6)
    both = counted(write(tmp_path / "b.parquet", pa.table({"length": y}),
                         dictionary_pagesize_limit=4096))[0]
    assert both is not None and [type(i) for i in both] == [Runs, Chunk]
    assert same(histogram_of(both, None), pyarrow_histogram(tmp_path / "b.parquet", None))


@pytest.mark.parametrize("t", [pa.int8(), pa.int16(), pa.int32(), pa.int64()])
@pytest.mark.parametrize("version", ["1.0", "2.6"])
def test_signed_widths(tmp_path, t, version):
    path = write(tmp_path / "w.parquet", pa.table({"length": lengths(3000, 5, t, 0.1)}),
                 version=version)
    groups = counted(path)
    assert groups[0] is not None
    assert same(histogram_of(groups[0], None), pyarrow_histogram(path, None))


@pytest.mark.parametrize("t", [pa.uint8(), pa.uint32(), pa.uint64(), pa.date32()])
def test_unsigned_and_logical_types_are_pyarrows(tmp_path, t):
    x = pa.array(np.arange(100, dtype=np.int32) % 7, pa.int32()).cast(t)
    path = write(tmp_path / "u.parquet", pa.table({"length": x}))
    assert counted(path) == [None]


def test_empty_row_groups_and_many_row_groups(tmp_path, monkeypatch):
    """More row groups than the first table holds (1,024), a footer past the first tail
    read, row groups of no rows: all read, as pyarrow reads them."""
    monkeypatch.setattr(pages, "TAIL", 64)
    x = lengths(3000, 8, nulls=0.05)
    path = write(tmp_path / "m.parquet", pa.table({"length": x}), row_group_size=2)
    assert len(counted(path)) == 1500
    with pq.ParquetWriter(tmp_path / "e.parquet", pa.schema([("length", pa.int64())])) as w:
        w.write_table(pa.table({"length": pa.array([], pa.int64())}))
        w.write_table(pa.table({"length": x}))
    for p in (path, tmp_path / "e.parquet"):
        assert same(gp.histogram(p), pyarrow_histogram(p, None))


def test_room_beyond_the_first_guess_and_past_the_most(tmp_path, monkeypatch):
    """A page larger than the first scratch is read again with room for it; larger than
    `MOST_PAGE`, and a batch of more than `MOST_ROWS` rows, are pyarrow's."""
    x = lengths(30000, 6, distinct=10**6)
    path = write(tmp_path / "r.parquet", pa.table({"length": x}), use_dictionary=False)
    want = pyarrow_histogram(path, None)
    monkeypatch.setattr(pages, "PAGE_BYTES", 1024)
    monkeypatch.setattr(pages, "_buffers", pages._Buffers())
    groups = counted(path)
    assert groups[0] is not None and same(histogram_of(groups[0], None), want)
    monkeypatch.setattr(pages, "MOST_PAGE", 4096)
    monkeypatch.setattr(pages, "_buffers", pages._Buffers())
    assert counted(path) == [None]
    assert same(gp.histogram(path), want)
    monkeypatch.setattr(pages, "MOST_PAGE", 1 << 28)
    monkeypatch.setattr(pages, "MOST_ROWS", 1000)
    assert counted(path) == [None]
    assert same(gp.histogram(path), want)
    monkeypatch.setattr(pages, "MOST_ROWS", 1 << 22)
    monkeypatch.setattr(pages, "MOST_BYTES", 1000)  # (a footer may claim chunks of any size)
    assert counted(path) == [None]
    assert same(gp.histogram(path), want)


def test_many_small_row_groups_in_one_batch(tmp_path):
    """Row groups joined into one batch (up to `BATCH_ROWS`) hold their pairs in room sized
    by their rows, not by their dictionaries' room."""
    x = lengths(20000, 12, nulls=0.1)
    path = write(tmp_path / "s.parquet", pa.table({"length": x}), row_group_size=7)
    fd = os.open(path, os.O_RDONLY)
    known = pages.open_pages(fd, os.fstat(fd).st_size, "length", 64)
    assert known is not None
    try:
        items = pages.decode(known, list(range(len(known.table))))
    finally:
        known.close()
    assert items is not None and same(histogram_of(items, None), pyarrow_histogram(path, None))
    assert same(gp.histogram(path), pyarrow_histogram(path, None))


def test_row_groups_decode_in_parallel_as_pyarrow(tmp_path, monkeypatch):
    """A file of many batches, decoded by the worker threads (each with its buffers), and
    a directory of such files: the kernel counts every batch, and the numbers are
    pyarrow's, with the kernel on or off."""
    calls = []
    real = pages.decode

    def spy(known, groups):
        out = real(known, groups)
        calls.append(out is not None)
        return out

    monkeypatch.setattr(pages, "decode", spy)
    monkeypatch.setattr(parquet, "BATCH_ROWS", 3000)  # a batch per row group: workers
    monkeypatch.setattr(parquet_many, "MOST_BYTES", 0)  # no file read whole with others
    for k in range(3):
        write(tmp_path / f"{k}.parquet", pa.table({"length": lengths(40000, k, nulls=0.01)}),
              row_group_size=3000)
    for source in (tmp_path / "0.parquet", tmp_path):
        for cap in (None, 64):
            calls.clear()
            got = gp.histogram(source, cap=cap)
            assert calls and all(calls)
            monkeypatch.setattr(pages, "ENABLED", False)
            assert gp.histogram(source, cap=cap) == got
            monkeypatch.setattr(pages, "ENABLED", True)
            paths = [source] if source.is_file() else sorted(source.glob("*.parquet"))
            values = pa.concat_arrays([pq.read_table(p).column(0).combine_chunks()
                                       for p in paths])
            want = get_backend("numpy").histogram([Chunk(
                values.fill_null(0).to_numpy().astype(np.int64),
                values.is_valid().to_numpy(zero_copy_only=False))], cap)
            assert same(got, want)


def test_lengths_above_the_dense_range_and_invalid_ones(tmp_path):
    """Entries at and past `runs.DENSE`, negative ones, and above the cap: counted as the
    chunks of those values are."""
    x = pa.array([-5, -5, 0, 7, 1 << 22, (1 << 22) + 1, 2**62, 2**62, 7, None], pa.int64())
    path = write(tmp_path / "big.parquet", pa.table({"length": x}))
    for cap in (None, 8, 1 << 23):
        got = gp.histogram(path, cap=cap)
        assert same(got, pyarrow_histogram(path, cap))
        assert got.above_tokens == 2 * 2**62 + (cap == 8) * (2 * (1 << 22) + 1)


CAP = 1000  # (garbage lengths would bin up to 2**24 without one)
BASES = [
    {},
    {"data_page_version": "2.0", "data_page_size": 2000, "write_batch_size": 100},
    {"use_dictionary": False, "compression": "none", "row_group_size": 300},
    {"compression": "zstd", "data_page_size": 2000, "write_batch_size": 100},
    {"compression": "zstd", "data_page_version": "2.0", "use_dictionary": False},
    {"column_encoding": {"length": "DELTA_BINARY_PACKED"}, "use_dictionary": False,
     "data_page_size": 2000, "write_batch_size": 100},
]


@pytest.mark.parametrize("options", BASES)
def test_hostile_files_end_in_pyarrows_numbers_or_one_line(tmp_path, options):
    """Truncated, flipped and crafted files: a row group the kernel counts has pyarrow's
    numbers for that row group; the buffers the thread keeps give the next file its own
    numbers (tallies left mid-chunk are cleared); a whole scan gives pyarrow's histogram or
    one line."""
    t = pa.table({"text": [str(i) for i in range(1000)], "length": lengths(1000, 9, nulls=0.1)})
    base_path = write(tmp_path / "base.parquet", t, **{"row_group_size": 400, **options})
    base = base_path.read_bytes()
    want_base = pyarrow_histogram(base, CAP)
    read = 0
    for i, data in enumerate(mutants(base, 150, seed=len(options) + 11)):
        path = tmp_path / f"m{i:03d}.parquet"
        path.write_bytes(data)
        try:
            groups = counted(path)
        except Exception as exc:  # only pyarrow's schema reading may refuse it here
            assert pyarrow_read(data) is None, exc
            continue
        for g, items in enumerate(groups):
            if items is not None:
                read += 1
                assert same(histogram_of(items, CAP), pyarrow_histogram(data, CAP, g))
        assert histogram_of([i for items in counted(base_path) for i in items or []],
                            CAP) == want_base
        try:
            got = gp.histogram(path, cap=CAP)
        except ProfilerError as exc:
            assert "\n" not in str(exc)
            continue
        assert same(got, pyarrow_histogram(data, CAP))
    assert read > 100


def test_runs_add_up_as_chunks_of_their_lengths():
    """`Runs` (repeated, negative, past `runs.DENSE`, near 2**63) binned by `Backend.runs`
    as a chunk of the same lengths is; the dense array never grows past `DENSE`."""
    rng = np.random.default_rng(5)
    tally, every = RunTally(), []
    for top in (3000, 3_000_000, 3_100_000, 1 << 23, 2**62):
        values = rng.integers(-3, top, 200).astype(np.int64)
        counts = rng.integers(1, 4, 200).astype(np.int64)
        tally.add(Runs(values, counts, nulls=2))
        every.append(np.repeat(values, counts))
    assert tally.dense.size <= runs.DENSE
    numpy = get_backend("numpy")
    x = np.concatenate(every)
    for cap in (100, runs.DENSE + 5):  # (None bins to 2**24 here: see the test above)
        want = numpy.histogram([Chunk(np.append(x, [0] * 10), np.append(
            np.ones(x.size, bool), np.zeros(10, bool)))], cap)
        assert same(numpy.runs(tally, cap), want)


def test_files_other_writers_write_are_counted_as_pyarrow_reads_them(tmp_path, monkeypatch):
    """Parquet as duckdb and polars write it (their layouts, encodings, row groups and page
    sizes; nulls): the kernel counts every one whose length column's chunks list only
    encodings it decodes (dictionary, PLAIN or DELTA pages; snappy, uncompressed, zstd), and
    leaves to pyarrow, unread, one that lists another (BYTE_STREAM_SPLIT); the numbers
    are pyarrow's."""
    import duckdb
    import polars as pl

    calls = []
    real = pages.decode
    monkeypatch.setattr(pages, "decode", lambda k, g: calls.append(real(k, g)) or calls[-1])
    x = lengths(30000, 21, nulls=0.02, distinct=5000)
    ref = write(tmp_path / "ref.parquet", pa.table({
        "length": x, "text": pa.array([f"w{i % 97}" for i in range(30000)])}))
    con = duckdb.connect()
    for name, options in (("duck", "ROW_GROUP_SIZE 4096"), ("duck_u", "COMPRESSION uncompressed"),
                          ("duck_z", "COMPRESSION zstd")):
        con.execute(f"COPY (SELECT * FROM read_parquet('{ref}')) TO "
                    f"'{tmp_path / name}.parquet' (FORMAT PARQUET, {options})")
    df = pl.read_parquet(ref)
    df.write_parquet(tmp_path / "pl.parquet", compression="snappy", row_group_size=7000)
    df.write_parquet(tmp_path / "pl_u.parquet", compression="uncompressed")
    df.write_parquet(tmp_path / "pl_z.parquet")  # zstd, polars' default
    df.with_columns(pl.col("length").cast(pl.Int32)).write_parquet(
        tmp_path / "pl_i32.parquet", compression="snappy", statistics=False,
        data_page_size=1024)
    con.execute(f"COPY (SELECT * FROM read_parquet('{ref}')) TO "  # (its DELTA, not ours)
                f"'{tmp_path / 'duck_v2'}.parquet' (FORMAT PARQUET, PARQUET_VERSION V2)")
    write(tmp_path / "delta.parquet", pa.table({"length": x}), use_dictionary=False,
          column_encoding={"length": "DELTA_BINARY_PACKED"})
    write(tmp_path / "split.parquet", pa.table({"length": x}), use_dictionary=False,
          column_encoding={"length": "BYTE_STREAM_SPLIT"})
    decoded = {"PLAIN", "PLAIN_DICTIONARY", "RLE", "RLE_DICTIONARY", "BIT_PACKED",
               "DELTA_BINARY_PACKED"}
    kernel = []
    for path in sorted(tmp_path.glob("*.parquet")):
        calls.clear()
        assert same(gp.histogram(path, cap=4000), pyarrow_histogram(path, 4000)), path.name
        md = pq.ParquetFile(path).metadata
        leaf = md.schema.names.index("length")
        if any(set(md.row_group(g).column(leaf).encodings) <= decoded
               for g in range(md.num_row_groups)):
            assert calls and all(c is not None for c in calls), path.name
            kernel.append(path.stem)
        else:
            assert not calls, path.name  # pyarrow's
    assert set(kernel) == {"ref", "duck", "duck_u", "duck_z", "duck_v2", "pl", "pl_u", "pl_z",
                           "pl_i32", "delta"}


@pytest.mark.parametrize("use_dictionary", [True, False])
def test_values_outside_the_width_leave_the_batch(tmp_path, monkeypatch, use_dictionary):
    """A length the column's width cannot hold (as a footer's logical type may claim), in a
    dictionary entry or a PLAIN page, leaves the batch (to pyarrow, which names it); within
    the width, it is counted."""
    from gpu_profiler.kernels import parquet_format as fmt

    seen: list[tuple[int, ...]] = []
    real = pages.parsers.chunks
    monkeypatch.setattr(pages.parsers, "chunks", lambda *a: seen.append(real(*a)) or seen[-1])
    for top, want in ((127, fmt.READ), (128, fmt.L_RANGE)):
        x = pa.array(np.arange(top - 50, top + 1, dtype=np.int32))
        path = write(tmp_path / f"r{top}.parquet", pa.table({"length": x}),
                     use_dictionary=use_dictionary)
        fd = os.open(path, os.O_RDONLY)
        known = pages.open_pages(fd, os.fstat(fd).st_size, "length", 32)
        assert known is not None
        try:
            known.width = 8  # as an INT_8 footer would say
            seen.clear()
            assert (pages.decode(known, [0]) is None) == (want != fmt.READ)
            assert seen[0][0] == want
        finally:
            known.close()


def _uleb(v: int) -> bytes:
    out = bytearray()
    while True:
        out.append((v & 0x7F) | (0x80 if v >> 7 else 0))
        v >>= 7
        if not v:
            return bytes(out)


def _zigzag(v: int) -> int:
    return ((v << 1) ^ (v >> 63)) & (2**64 - 1)


def delta_section(values: list[int], per_block: int = 256, minis: int = 4,
                  total: int | None = None, unused_width: int = 0,
                  first: bytes | None = None, width: int | None = None) -> bytes:
    """``values`` DELTA_BINARY_PACKED with the header given (``total``: the count it claims;
    ``unused_width``: the width byte of the last block's miniblocks that hold no value;
    ``first``: the first value's bytes instead of its own; ``width``: the first
    miniblock's width byte instead of its own), as the spec lays them out (and pyarrow
    writes them: blocks of 256 values in 4 miniblocks)."""
    out = _uleb(per_block) + _uleb(minis) + _uleb(len(values) if total is None else total)
    out += first if first is not None else _uleb(_zigzag(values[0]))
    per_mini = per_block // minis
    deltas = [b - a for a, b in itertools.pairwise(values)]
    for s in range(0, len(deltas), per_mini * minis):
        block = deltas[s:s + per_mini * minis]
        least = min(block)
        groups = [[d - least for d in block[i:i + per_mini]]
                  for i in range(0, len(block), per_mini)]
        widths = [max(g).bit_length() for g in groups]
        said = [width] + widths[1:] if width is not None and not s else widths
        out += _uleb(_zigzag(least)) + bytes(said + [unused_width] * (minis - len(groups)))
        for g, w in zip(groups, widths, strict=True):
            bits = sum(v << (w * k) for k, v in enumerate(g))  # (padded with zeros)
            out += bits.to_bytes((per_mini * w + 7) // 8, "little")
    return out


@pytest.mark.parametrize("t", [pa.int8(), pa.int16(), pa.int32(), pa.int64()])
@pytest.mark.parametrize("version", ["1.0", "2.0"])
def test_delta_pages_are_counted_as_pyarrow_decodes_them(tmp_path, t, version):
    """DELTA_BINARY_PACKED pages (int32 and int64, and the narrower types stored in them):
    small lengths, the type's extremes (deltas that wrap), nulls, many small pages, v1 and
    v2 pages: counted as pyarrow decodes them, value for value."""
    info = np.iinfo(t.to_pandas_dtype())
    rng = np.random.default_rng(len(str(t)))
    n = 9000
    for x in (rng.integers(-3, 5000, n), rng.choice([info.min, info.max, 0, -1, 1, 7], n),
              rng.integers(info.min, info.max, n, endpoint=True)):
        for nulls in (None, rng.random(n) < 0.1):
            path = write(tmp_path / "d.parquet", pa.table({"length": pa.array(
                x.astype(t.to_pandas_dtype()), t, mask=nulls)}), use_dictionary=False,
                column_encoding={"length": "DELTA_BINARY_PACKED"}, row_group_size=4000,
                data_page_version=version, data_page_size=2000, write_batch_size=300)
            pf = pq.ParquetFile(path)
            for g, items in enumerate(counted(path)):
                assert items is not None
                assert_values(items, pf.read_row_group(g).column(0))


def test_forged_delta_headers_end_in_pyarrows_numbers_or_one_line(tmp_path):
    """A DELTA page's header as arrow's decoder checks it: block sizes the spec allows but
    pyarrow does not write (blocks of 128 values in 4 miniblocks, parquet-mr's; 256 in 8;
    35 miniblocks of 32 in a block of 1,152) read as pyarrow reads them, and so is a wild
    width in a miniblock no value uses; sizes it refuses (no values a block, not a multiple
    of 128; no miniblocks, miniblocks not a multiple of 32), a width past 64 bits, a value
    count unlike the page's and a first value past 64 bits are left, and give pyarrow's
    refusal or numbers. (Each page is a PLAIN page pyarrow wrote, its encoding byte made
    DELTA's and its values replaced, with room to spare: both decoders ignore the rest.)"""
    rng = np.random.default_rng(8)
    steps = rng.integers(0, 50, 3000) * (np.arange(3000) // 32 % 2 == 0)
    values = [int(v) for v in 100 + np.cumsum(steps)]  # (32 steps, then 32 repeats)
    path = write(tmp_path / "base.parquet", pa.table({"length": pa.array(values, pa.int64())},
                 schema=pa.schema([pa.field("length", pa.int64(), nullable=False)])),
                 use_dictionary=False, compression="none", data_page_size=1 << 20)
    data = bytearray(path.read_bytes())
    col = pq.ParquetFile(path).metadata.row_group(0).column(0)
    end = col.data_page_offset + col.total_compressed_size
    start = end - 8 * len(values)  # the PLAIN values: the page's last bytes
    plain = data.index(b"\x15" + _uleb(_zigzag(len(values))) + b"\x15\x00",
                       col.data_page_offset) + 4  # (num_values, then encoding: PLAIN)
    assert data[plain] == 0 and plain < start
    data[plain] = _zigzag(5)  # DELTA_BINARY_PACKED
    forged = {
        "as pyarrow writes": delta_section(values), "128 in 4": delta_section(values, 128, 4),
        "256 in 8": delta_section(values, 256, 8), "1152 in 35": delta_section(values, 1152, 35),
        "wild unused width": delta_section(values, unused_width=200),
        "no values a block": _uleb(0) + delta_section(values)[len(_uleb(256)):],
        "64 a block": delta_section(values, 64, 2), "no miniblocks": delta_section(values, 128, 1)
        .replace(_uleb(128) + _uleb(1), _uleb(128) + _uleb(0), 1),
        "42 a miniblock": delta_section(values, 128, 3),
        "width 65": delta_section(values, width=65),
        "count - 1": delta_section(values, total=2999),
        "count + 1": delta_section(values, total=3001),
        "first past 64 bits": delta_section(values, first=b"\x80" * 9 + b"\x02"),
    }
    assert len(set(forged.values())) == len(forged)
    read = set()
    for name, section in forged.items():
        f = tmp_path / "f.parquet"
        f.write_bytes(bytes(data[:start] + section.ljust(end - start, b"\0") + data[end:]))
        want = pyarrow_histogram(f, None)
        items = counted(f)[0]
        if items is not None:
            read.add(name)
            assert same(histogram_of(items, None), want), name
        try:
            assert same(gp.histogram(f), want), name
        except ProfilerError as exc:
            assert want is None and "\n" not in str(exc), name
    assert read == {"as pyarrow writes", "128 in 4", "256 in 8", "1152 in 35",
                    "wild unused width"}


def test_apache_files_are_counted_as_pyarrow_reads_them():
    """Every integer column of parquet-testing's flat files (tests/data/apache: DELTA with
    widths up to 64 bits, v1 and v2 pages, nulls, checksums, empty pages, other writers)
    counted by the kernel row group by row group, value for value as pyarrow decodes it;
    only the codecs (gzip, LZ4) and the encoding (BYTE_STREAM_SPLIT) it does not decode are
    left."""
    left, read = set(), 0
    for path in sorted(APACHE.glob("*.parquet")):
        try:
            pf = pq.ParquetFile(path)
        except Exception:  # (files pyarrow refuses: the fuzz tests' business)
            continue
        if any(pa.types.is_nested(f.type) for f in pf.schema_arrow):
            continue  # (a nested schema is pyarrow's: tests/test_fuzz.py reads those)
        for field in pf.schema_arrow:
            width = pages.WIDTHS.get(str(field.type))
            if not width or pf.schema_arrow.names.count(field.name) != 1:
                continue
            for g, items in enumerate(counted(path, field.name)):
                chunk = pf.metadata.row_group(g).column(
                    pf.schema_arrow.get_field_index(field.name))
                if items is None:
                    left.add((path.name, chunk.compression in ("UNCOMPRESSED", "SNAPPY",
                                                               "ZSTD")
                              and "BYTE_STREAM_SPLIT" not in chunk.encodings))
                    continue
                assert_values(items, pf.read_row_group(g, columns=[field.name]).column(0))
                read += 1
    assert read > 100 and left and not any(decoded for _, decoded in left), left
