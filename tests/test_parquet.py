"""The Parquet reader: parallel row groups, statistics shortcut, list offsets and corrupt
files, all checked against histograms computed directly from the generating arrays."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpu_profiler import ProfilerError, histogram
from gpu_profiler.cli import main
from gpu_profiler.readers import arrow, parquet
from gpu_profiler.readers.base import LengthSpec
from gpu_profiler.runs import Run

INT_TYPES = [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint16(),
             pa.uint32(), pa.uint64()]


def expected(values, valid, cap):
    """Reference histogram fields from the raw values (read as int64, like the kernels)."""
    v = np.asarray(values).astype(np.int64)  # uint64 >= 2**63 wraps negative: invalid
    valid = np.ones(v.size, bool) if valid is None else np.asarray(valid, bool)
    v = v[valid]
    ok = v[v >= 0]
    cap = int(ok.max(initial=0)) if cap is None else cap
    above = ok[ok > cap]
    return {"counts": np.bincount(ok[ok <= cap], minlength=cap + 1).tolist(),
            "above_count": above.size, "above_tokens": sum(int(a) for a in above),  # exact
            "above_min": int(above.min()) if above.size else -1,
            "above_max": int(above.max()) if above.size else -1,
            "null_count": int((~valid).sum()), "invalid_count": int((v < 0).sum())}


def fields(h):
    return {"counts": h.counts.tolist(), "above_count": h.above_count,
            "above_tokens": h.above_tokens, "above_min": h.above_min, "above_max": h.above_max,
            "null_count": h.null_count, "invalid_count": h.invalid_count}


@pytest.fixture
def small_batches(monkeypatch):
    """Tiny chunks and batches, so a few thousand rows span many batches and workers."""
    monkeypatch.setattr(arrow, "CHUNK_ROWS", 256)
    monkeypatch.setattr(parquet, "BATCH_ROWS", 256)
    monkeypatch.setattr(parquet, "BATCH_BYTES", 1024)


@st.composite
def columns(draw):
    """Random lengths in a random integer type, some row groups constant or all null."""
    t = draw(st.sampled_from(INT_TYPES))
    info = np.iinfo(t.to_pandas_dtype())
    groups = draw(st.integers(1, 6))
    rg_rows = draw(st.integers(1, 400))
    parts, masks = [], []
    for _ in range(groups):
        kind = draw(st.sampled_from(["random", "constant", "all-null", "extreme"]))
        n = rg_rows
        rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
        if kind == "extreme":
            x = rng.choice(np.array([info.min, info.max, 0, 1], dtype=t.to_pandas_dtype()), n)
        elif kind == "constant":
            x = np.full(n, draw(st.integers(int(info.min), int(info.max))),
                        t.to_pandas_dtype())
        else:
            x = rng.integers(max(int(info.min), -50), min(int(info.max), 300), n,
                             dtype=t.to_pandas_dtype(), endpoint=True)
        null = rng.random(n) < draw(st.sampled_from([0.0, 0.1, 1.0 if kind == "all-null"
                                                     else 0.3]))
        parts.append(x)
        masks.append(null)
    return t, np.concatenate(parts), np.concatenate(masks), rg_rows


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(col=columns(), cap=st.sampled_from([None, 0, 100, 255]),
       compression=st.sampled_from(["none", "snappy", "zstd"]),
       dictionary=st.booleans(), stats=st.booleans(), threads=st.sampled_from([1, 2, 4]))
def test_matches_reference(tmp_path, monkeypatch, small_batches, col, cap, compression,
                           dictionary, stats, threads):
    t, x, null, rg_rows = col
    path = tmp_path / "l.parquet"
    pq.write_table(pa.table({"other": pa.array(np.arange(x.size)),
                             "length": pa.array(x, type=t, mask=null)}), path,
                   row_group_size=rg_rows, compression=compression, use_dictionary=dictionary,
                   write_statistics=stats)
    monkeypatch.setattr(parquet, "THREADS", threads)
    top = int(x.astype(np.int64)[~null].max(initial=0))
    huge = cap is None and top > 1 << 16
    want = expected(x, ~null, min(top, 1 << 10) if huge else cap)
    n, lo, hi = want["above_count"], want["above_min"], want["above_max"]
    with monkeypatch.context() as m:  # undone after this example, not after the test
        if huge:  # auto-capped at MAX_AUTO_CAP, made small here
            m.setattr(sys.modules["gpu_profiler.histogram"], "MAX_AUTO_CAP", 1 << 10)
        if n and n * (hi - lo) >= 1 << 64:  # too spread to recover the exact sum: refused
            for backend in ("numpy", "numba"):
                with pytest.raises(ProfilerError, match="counted exactly"):
                    histogram(path, cap=cap, backend=backend)
            return
        for backend in ("numpy", "numba"):
            assert fields(histogram(path, cap=cap, backend=backend)) == want


def test_many_row_groups_and_files_in_parallel(tmp_path, small_batches):
    rng = np.random.default_rng(5)
    xs, nulls = [], []
    for k in range(5):
        x = rng.integers(-3, 3000, 20_000 + k).astype(np.int32)
        null = rng.random(x.size) < 0.05
        pq.write_table(pa.table({"length": pa.array(x, mask=null)}), tmp_path / f"{k}.parquet",
                       row_group_size=700 + 97 * k)
        xs.append(x)
        nulls.append(null)
    want = expected(np.concatenate(xs), ~np.concatenate(nulls), 2048)
    assert fields(histogram(str(tmp_path), cap=2048, backend="numba")) == want


def test_small_row_groups_decode_as_one_batch(tmp_path, monkeypatch):
    x = np.arange(10_000, dtype=np.int32) % 977
    path = tmp_path / "l.parquet"
    pq.write_table(pa.table({"length": x}), path, row_group_size=100)
    monkeypatch.setattr(parquet, "BATCH_ROWS", 2500)
    sizes = [c.samples for c in parquet.chunks(path, LengthSpec("length"))]
    assert sorted(sizes) == [2500] * 4  # 25 row groups per batch, no concatenation
    assert fields(histogram(path, cap=1000, backend="numpy")) == expected(x, None, 1000)


# ------------------------------------------------------------------ statistics shortcut
def test_constant_row_groups_are_counted_from_statistics(tmp_path, monkeypatch):
    x = np.concatenate([np.full(1000, 512), np.full(1000, 9000), np.full(1000, -4),
                        np.arange(1000) % 300]).astype(np.int64)
    null = np.zeros(x.size, bool)
    null[100:150] = True  # a constant row group with nulls
    null[2000:3000] = True  # an all-null row group (no min/max at all)
    path = tmp_path / "l.parquet"
    pq.write_table(pa.table({"length": pa.array(x, mask=null)}), path, row_group_size=1000)
    items = list(parquet.chunks(path, LengthSpec("length"), trust_statistics=True))
    runs = [i for i in items if isinstance(i, Run)]
    assert sorted((r.value, r.count, r.nulls) for r in runs) == [(0, 0, 1000), (512, 950, 50),
                                                                (9000, 1000, 0)]
    assert sum(i.samples for i in items) == x.size  # only the mixed row group was decoded
    for cap in (None, 600, 8192, 10_000):
        for backend in ("numpy", "numba"):
            for trust in (False, True):
                assert fields(histogram(path, cap=cap, backend=backend,
                                        trust_statistics=trust)) == \
                    expected(x, ~null, cap), (cap, backend)


def test_shortcut_reads_no_page(tmp_path, monkeypatch):
    path = tmp_path / "l.parquet"
    pq.write_table(pa.table({"length": np.full(5000, 77, np.int32)}), path,
                   row_group_size=1000)
    monkeypatch.setattr(parquet, "_decode_parallel", None)  # any decode would fail
    assert fields(histogram(path, cap=100, backend="numpy", trust_statistics=True)) == \
        expected(np.full(5000, 77), None, 100)


def _lying_footer(path: Path) -> np.ndarray:
    """A file whose footer statistics say every length is 100 while its pages hold
    0..9990 (the int32 values patched in place after writing), and those lengths."""
    n = 1000
    pq.write_table(pa.table({"length": np.full(n, 100, np.int32)}), path,
                   use_dictionary=False, compression="none")
    data = path.read_bytes()
    old = np.full(n, 100, np.int32).tobytes()
    real = np.arange(n, dtype=np.int32) * 10
    assert data.count(old) == 1
    path.write_bytes(data.replace(old, real.tobytes()))
    return real


def test_lying_statistics_are_not_trusted_by_default(tmp_path, capsys):
    path = tmp_path / "lie.parquet"
    real = _lying_footer(path)
    for backend in ("numpy", "numba"):
        assert fields(histogram(path, cap=None, backend=backend)) == expected(real, None, None)
    trusted = histogram(path, cap=None, backend="numpy", trust_statistics=True)
    assert trusted.tokens == 100 * real.size != int(real.sum())  # what the footer says
    for flag, tokens in (([], int(real.sum())), (["--trust-statistics"], 100 * real.size)):
        with pytest.raises(SystemExit) as done:
            main(["profile", str(path), "-q", "-f", "json", "--max-seq-len", "10000", *flag])
        assert done.value.code == 0
        assert json.loads(capsys.readouterr().out)["total_tokens"] == tokens


def test_trust_statistics_is_parquet_only(tmp_path, capsys):
    path = tmp_path / "l.arrow"
    with pa.ipc.new_file(str(path), pa.schema([("length", pa.int32())])) as w:
        w.write_table(pa.table({"length": pa.array([1, 2], pa.int32())}))
    with pytest.raises(SystemExit) as done:
        main(["profile", str(path), "-q", "--trust-statistics"])
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert "--trust-statistics" in err and "Parquet" in err and len(err.splitlines()) == 1


def test_huge_uint64_constant_is_invalid(tmp_path):
    x = np.full(10, 2**63 + 5, np.uint64)
    path = tmp_path / "l.parquet"
    pq.write_table(pa.table({"length": x}), path)
    assert [type(i) for i in parquet.chunks(path, LengthSpec("length"),
                                            trust_statistics=True)] == [Run]
    h = histogram(path, backend="numpy")
    assert (h.invalid_count, h.valid) == (10, 0)


def test_without_statistics_rows_are_decoded(tmp_path):
    path = tmp_path / "l.parquet"
    pq.write_table(pa.table({"length": np.full(3000, 9, np.int32)}), path,
                   row_group_size=1000, write_statistics=False)
    assert not any(isinstance(i, Run) for i in parquet.chunks(path, LengthSpec("length")))
    assert histogram(path, backend="numpy").counts[9] == 3000


# ------------------------------------------------------------------ list offsets
@pytest.mark.parametrize("large", [False, True])
def test_offsets_of_list_column(tmp_path, small_batches, large):
    rng = np.random.default_rng(11)
    lens = rng.integers(0, 60, 5000)
    null = rng.random(lens.size) < 0.1
    lists = [None if n else rng.integers(0, 50_000, k).tolist()
             for k, n in zip(lens, null, strict=True)]
    typ = pa.large_list(pa.int32()) if large else pa.list_(pa.int32())
    path = tmp_path / "ids.parquet"
    pq.write_table(pa.table({"input_ids": pa.array(lists, type=typ),
                             "length": pa.array(np.full(lens.size, 1))}), path,
                   row_group_size=333)
    got = histogram(path, offsets_of="input_ids", cap=40, backend="numba")
    assert fields(got) == expected(lens, ~null, 40)


def test_offsets_batches_follow_list_width(tmp_path, monkeypatch):
    lists = [[1] * 100] * 20_000
    path = tmp_path / "ids.parquet"
    pq.write_table(pa.table({"ids": lists}), path, row_group_size=20_000, use_dictionary=False)
    monkeypatch.setattr(parquet, "BATCH_BYTES", 100 * 8 * 2000)  # ~2000 rows of 100 int64
    sizes = [c.samples for c in parquet.chunks(path, LengthSpec("ids", offsets=True))]
    assert sum(sizes) == 20_000 and max(sizes) <= 2000 and len(sizes) >= 10


# ------------------------------------------------------------------ bad files
@pytest.fixture
def good_file(tmp_path):
    rng = np.random.default_rng(2)
    path = tmp_path / "good.parquet"
    pq.write_table(pa.table({"length": rng.integers(0, 5000, 20_000).astype(np.int32),
                             "ids": pa.array([[1, 2, 3]] * 20_000)}), path,
                   row_group_size=2000, use_dictionary=False, compression="snappy")
    return path


def test_truncated_files_name_the_file(tmp_path, good_file):
    data = good_file.read_bytes()
    bad = tmp_path / "bad.parquet"
    for cut in [0, 3, 4, 100, len(data) // 2, len(data) - 9, len(data) - 1]:
        bad.write_bytes(data[:cut])
        with pytest.raises(ProfilerError, match=r"bad\.parquet"):
            histogram(bad, cap=8192, format="parquet")


def test_corrupt_bytes_give_a_clear_error_or_a_result(tmp_path, good_file):
    """Flipped bytes anywhere: a ProfilerError naming the file, or (when the damage only
    changes values) a result; never another exception or a crash."""
    data = bytearray(good_file.read_bytes())
    rng = np.random.default_rng(3)
    bad = tmp_path / "bad.parquet"
    errors = 0
    for pos in [*rng.integers(4, len(data) - 8, 60), len(data) - 8, len(data) - 6]:
        damaged = bytearray(data)
        damaged[pos] ^= 0xFF
        bad.write_bytes(bytes(damaged))
        try:
            histogram(bad, cap=8192, offsets_of="ids")
        except ProfilerError as exc:
            assert "bad.parquet" in str(exc)
            errors += 1
    assert errors > 0


def test_corrupt_page_in_a_worker(tmp_path, good_file):
    md = pq.ParquetFile(good_file).metadata
    col = md.row_group(7).column(0)
    data = bytearray(good_file.read_bytes())
    data[col.data_page_offset:col.data_page_offset + 16] = b"\xff" * 16  # page header
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(bytes(data))
    with pytest.raises(ProfilerError, match=r"bad\.parquet: corrupt .* row group"):
        histogram(bad, cap=8192)


def test_cli_exit_code_2(tmp_path, good_file, capsys):
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(good_file.read_bytes()[:-20])
    with pytest.raises(SystemExit) as info:
        main(["profile", str(bad), "--quiet"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "bad.parquet" in err and "Traceback" not in err and len(err.splitlines()) == 1


def test_input_is_not_modified(good_file):
    before = (good_file.read_bytes(), good_file.stat().st_mtime_ns)
    histogram(good_file, cap=100)
    assert (good_file.read_bytes(), good_file.stat().st_mtime_ns) == before


def test_abandoned_scan_stops_its_workers(good_file, monkeypatch):
    import threading

    monkeypatch.setattr(parquet, "BATCH_ROWS", 1000)
    gen = parquet.chunks(Path(good_file), LengthSpec("length"))
    next(gen)
    gen.close()
    assert not [t for t in threading.enumerate() if t.name.startswith("gpu-profiler-parquet")]


def _aborting_footer(path: Path) -> None:
    """A file whose last row group's ColumnMetaData names an unknown physical type (its
    compact-thrift ``type`` field, ``15 02``: INT32, made ``15 32``): pyarrow's accessor
    of that column chunk's statistics throws a C++ exception it does not catch (SIGABRT)."""
    x = pa.array([None if i % 7 == 0 else i % 50 for i in range(1000)], pa.int32())
    pq.write_table(pa.table({"length": x}), path, row_group_size=300, write_page_index=True)
    data = bytearray(path.read_bytes())
    (flen,) = np.frombuffer(bytes(data[-8:-4]), "<i4")
    footer = len(data) - 8 - int(flen)
    at = bytes(data).rfind(b"\x15\x02\x19", footer)  # type INT32, then the encodings list
    assert at > footer
    data[at + 1] = 0x32
    path.write_bytes(bytes(data))


def test_a_footer_that_aborts_pyarrow_is_one_line(tmp_path, capsys):
    path = tmp_path / "abort.parquet"
    _aborting_footer(path)
    probe = subprocess.run([sys.executable, "-c", "import pyarrow.parquet as pq, sys; "
                            "md = pq.ParquetFile(sys.argv[1]).metadata; "
                            "md.row_group(md.num_row_groups - 1).column(0).statistics",
                            str(path)],
                           capture_output=True)
    assert probe.returncode < 0  # what a direct call does: the process is aborted
    with pytest.raises(SystemExit) as done:  # read, never asked for that metadata
        main(["profile", str(path), "-q", "-f", "json"])
    assert done.value.code == 0
    capsys.readouterr()
    with pytest.raises(SystemExit) as done:  # statistics read by a worker, which dies
        main(["profile", str(path), "-q", "--trust-statistics"])
    err = capsys.readouterr().err
    assert done.value.code == 2 and len(err.splitlines()) == 1
    assert str(path) in err and "--trust-statistics" in err
    good = tmp_path / "good.parquet"  # and the next file gets a fresh worker
    pq.write_table(pa.table({"length": np.full(600, 7, np.int32)}), good, row_group_size=300)
    assert histogram(good, cap=10, backend="numpy", trust_statistics=True).counts[7] == 600


# ------------------------------------------------------------- a shard replaced mid-scan
@pytest.mark.parametrize("how", ["whole", "range", "worker"])
def test_a_shard_replaced_after_its_footer_was_read_is_named(tmp_path, monkeypatch, how):
    """The footer a scan read (for the schema check, or to cut row-group ranges) and the
    pages it then reads come from one version of the file: a shard replaced in between
    (an upstream job's atomic rewrite) is one line naming it, never decoded as old footer
    over new pages (which pyarrow calls corrupt, or reads short)."""
    path = tmp_path / "s.parquet"
    x = np.arange(4000, dtype=np.int32) % 977
    pq.write_table(pa.table({"length": x}), path, row_group_size=500)
    part = parquet.ParquetPart(path)
    part.schema()  # the footer is read and kept
    if how == "range":
        part = parquet.row_group_ranges(part, 1)[3]
    if how == "worker":  # the calling thread opens the kept version; a worker the new one
        monkeypatch.setattr(parquet, "BATCH_ROWS", 500)
        real = parquet._open
        seen = []

        def replace_after_first(*args, **kwargs):
            opened = real(*args, **kwargs)
            if not seen:
                seen.append(1)
                _replace(path, x)
            return opened
        monkeypatch.setattr(parquet, "_open", replace_after_first)
    else:
        _replace(path, x)
    reading = _reading()
    with pytest.raises(ProfilerError, match=r"s\.parquet: changed while the scan ran"):
        list(part.chunks(reading))
    fresh = parquet.ParquetPart(path)  # the new version, listed anew, reads whole
    assert sum(c.samples for c in fresh.chunks(reading)) == x.size // 2


def _replace(path: Path, x: np.ndarray) -> None:
    tmp = path.with_suffix(".tmp")
    pq.write_table(pa.table({"length": x[: x.size // 2]}), tmp, row_group_size=300)
    tmp.replace(path)


def _reading():
    from gpu_profiler.readers.base import Reading, SourceOptions

    return Reading(spec=LengthSpec("length"), source=SourceOptions())


APACHE_DATA = Path(__file__).with_name("data") / "apache" / "parquet-testing" / "data"


@pytest.mark.parametrize("name", ["uniform_encryption.parquet.encrypted",
                                  "encrypt_columns_and_footer.parquet.encrypted"])
@pytest.mark.parametrize("fmt", [None, "parquet"])
def test_an_encrypted_file_is_named_so(tmp_path, name, fmt):
    """parquet-testing's encrypted files (magic PARE): one line that says encrypted, not
    "corrupt" nor "unrecognized", sniffed or forced, alone or among shards."""
    src = APACHE_DATA / name
    with pytest.raises(ProfilerError, match=r"an encrypted Parquet file .*decrypt it first"):
        histogram(src, format=fmt)
    (tmp_path / "a.parquet").write_bytes(src.read_bytes())
    pq.write_table(pa.table({"length": [1, 2]}), tmp_path / "b.parquet")
    with pytest.raises(ProfilerError, match=r"a\.parquet: an encrypted Parquet file"):
        histogram(tmp_path)
