"""Small Arrow IPC streams read together (`gpu_profiler.readers.ipc_many`): the numbers of
each stream read alone, whatever the streams hold (nulls, list offsets, other columns),
through native kernels and the JIT, mapped and read; streams it must not read (another
schema, compression, a dictionary, the file format, damage) left to their own readers,
so that a scan gives the same numbers, or the same error, either way."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

import gpu_profiler as gp
from gpu_profiler.errors import ProfilerError
from gpu_profiler.readers import ipc_many
from gpu_profiler.readers.ipc import IpcPart


@pytest.fixture
def spy(monkeypatch):
    """How many parts each together-read was given, and how many it left."""
    calls: list[tuple[int, int]] = []
    real = ipc_many.together

    def together(parts, reading, like):
        left, chunks = real(parts, reading, like)
        calls.append((len(parts), len(left)))
        return left, chunks

    monkeypatch.setattr(ipc_many, "together", together)
    return calls


def _alone(path, **kw):
    """The scan with every stream read by its own reader."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(IpcPart, "together", None)
        return _outcome(path, **kw)


def _outcome(path, **kw):
    try:
        h = gp.histogram(str(path), cap=kw.pop("cap", 300), **kw)
    except ProfilerError as exc:
        return str(exc)
    return h.counts.tolist(), h.above_count, h.above_tokens, h.null_count


def _write(path, table, batch=97, compression=None):
    options = pa.ipc.IpcWriteOptions(compression=compression)
    with pa.OSFile(str(path), "wb") as f, pa.ipc.new_stream(f, table.schema, options=options) as w:
        for b in table.to_batches(max_chunksize=batch):
            w.write_batch(b)


def _tables(n_shards, rng, nulls=False, lists=False, width=np.int64):
    for _ in range(n_shards):
        n = int(rng.integers(0, 700))
        x = rng.integers(0, 400, n).astype(width)
        cols = {"text": pa.array([f"t{i}" for i in range(n)]),
                "length": pa.array(x, mask=rng.random(n) < 0.1 if nulls else None)}
        if lists:
            cols["ids"] = pa.array([list(range(int(k))) for k in x], pa.list_(pa.int32()))
        yield pa.table(cols), x


@pytest.mark.parametrize("io", ["auto", "buffered"])
@pytest.mark.parametrize("case", ["int64", "int32 with nulls", "list offsets"])
def test_streams_read_together_count_as_each_read_alone(case, io, kernels, spy, tmp_path,
                                                        monkeypatch):
    monkeypatch.setenv("GPU_PROFILER_IO", io)
    rng = np.random.default_rng(len(case))
    lists = case == "list offsets"
    width = np.int32 if "int32" in case else np.int64
    every = []
    for i, (t, x) in enumerate(_tables(12, rng, nulls="nulls" in case, lists=lists,
                                       width=width)):
        _write(tmp_path / f"s{i:02d}.arrows", t, batch=int(rng.integers(1, 300)))
        every.append(x)
    kw = {"offsets_of": "ids"} if lists else {"column": "length"}
    got = _outcome(tmp_path, **kw)
    assert spy and all(left == 0 for _, left in spy)  # every stream was read together
    assert got == _alone(tmp_path, **kw)
    if not lists and "nulls" not in case:
        x = np.concatenate(every)
        assert got[0] == np.bincount(np.minimum(x, 301), minlength=302)[:301].tolist()


def test_a_datasets_dir_is_read_together(spy, tmp_path):
    datasets = pytest.importorskip("datasets")
    rng = np.random.default_rng(3)
    x = rng.integers(1, 5000, 9000)
    ds = datasets.Dataset.from_dict({"length": x.tolist(),
                                     "ids": [[1] * int(k % 50) for k in x]})
    ds.save_to_disk(str(tmp_path / "ds"), num_shards=9)
    h = gp.histogram(str(tmp_path / "ds"), cap=8192)
    assert spy == [(9, 0)]
    assert h.counts.tolist() == np.bincount(x, minlength=8193).tolist()
    o = gp.histogram(str(tmp_path / "ds"), offsets_of="ids", cap=64)
    assert o.counts.tolist() == np.bincount(x % 50, minlength=65).tolist()


def test_streams_it_must_not_read_are_left_to_their_own_readers(spy, tmp_path):
    rng = np.random.default_rng(5)
    tables = [t for t, _ in _tables(8, rng)]
    for i, t in enumerate(tables[:4]):
        _write(tmp_path / f"a{i}.arrows", t)
    _write(tmp_path / "b-lz4.arrows", tables[4], compression="lz4")  # compressed
    _write(tmp_path / "c-meta.arrows", tables[5].replace_schema_metadata({"k": "v"}))
    with pa.OSFile(str(tmp_path / "d-file.arrow"), "wb") as f, \
            pa.ipc.new_file(f, tables[6].schema) as w:  # the file format, with a footer
        w.write_table(tables[6])
    _write(tmp_path / "e-empty.arrows", tables[7].slice(0, 0))
    got = _outcome(tmp_path, column="length")
    assert got == _alone(tmp_path, column="length")
    # the four a* (b and c are left; the file is never given to it, so the empty stream
    # after it stands alone)
    assert sum(n - left for n, left in spy) == 4
    x = np.concatenate([t.column("length").to_numpy() for t in tables[:7]])
    assert got[0] == np.bincount(np.minimum(x, 301), minlength=302)[:301].tolist()


def test_another_schema_is_the_same_error_together_and_alone(tmp_path):
    rng = np.random.default_rng(6)
    for i, (t, _) in enumerate(_tables(5, rng)):
        if i == 3:
            t = t.set_column(1, "length", t.column("length").cast(pa.int32()))
        _write(tmp_path / f"s{i}.arrows", t)
    together = _outcome(tmp_path, column="length")
    assert "schema differs" in together and "s3.arrows" in together
    assert together == _alone(tmp_path, column="length")


def _mutations(data: bytes, rng):
    n = len(data)
    for cut in sorted({0, 4, 8, n // 3, n // 2, n - 9, n - 8, n - 1}):
        yield f"cut {cut}", data[:cut]
    for k in range(24):
        b = bytearray(data)
        at = int(rng.integers(0, min(n, 1200))) if k % 2 else int(rng.integers(0, n))
        b[at] ^= 1 << int(rng.integers(0, 8))
        yield f"flip {at}", bytes(b)
    for _ in range(8):
        b = bytearray(data)
        at = int(rng.integers(0, min(n - 8, 1200)))
        b[at:at + 8] = rng.choice([2 ** 62, -1, 2 ** 31, n * 8]).astype("<i8").tobytes()
        yield f"word {at}", bytes(b)


@pytest.mark.parametrize("dense", [True, False])
def test_a_damaged_stream_gives_the_same_numbers_or_error_together_and_alone(dense, tmp_path):
    """Alone, a dense stream (only lengths) is read by pyarrow, which validates more than
    the selective reader; other streams by the selective reader."""
    rng = np.random.default_rng(7)
    tables = [t.select(["length"]) if dense else t
              for t, _ in _tables(4, rng, nulls=True, lists=not dense)]
    for i, t in enumerate(tables):
        _write(tmp_path / f"s{i}.arrows", t, batch=50)
    victim = tmp_path / "s2.arrows"
    good = victim.read_bytes()
    outcomes = set()
    for what, data in _mutations(good, rng):
        victim.write_bytes(data)
        for kw in ({"column": "length"}, *([] if dense else [{"offsets_of": "ids"}])):
            together = _outcome(tmp_path, **kw)
            assert together == _alone(tmp_path, **kw), (what, kw)
            outcomes.add(isinstance(together, str))
    assert outcomes == {True, False}  # some damage is fatal, some is outside the column


@pytest.mark.parametrize("offsets", [[0, 3, 1, 4], [0, 1, 2, 9], [-2, 0, 1, 2]])
def test_bad_list_offsets_give_the_same_error_together_and_alone(offsets, tmp_path):
    """Offsets out of order or range pass the buffer checks; only gathering them finds
    them, and then only the stream's own reader can say which stream it is, and where.
    (pyarrow writes no such offsets: they are patched into the file.)"""
    lists = pa.array([[1], [2], [3, 4]], pa.list_(pa.int32()))
    for i in range(3):
        _write(tmp_path / f"s{i}.arrows", pa.table({"ids": lists}))
    victim = tmp_path / "s1.arrows"
    raw = victim.read_bytes()
    ok = np.array([0, 1, 2, 4], np.int32).tobytes()
    assert raw.count(ok) == 1
    victim.write_bytes(raw.replace(ok, np.array(offsets, np.int32).tobytes()))
    together = _outcome(tmp_path, offsets_of="ids")
    assert isinstance(together, str) and "s1.arrows" in together
    assert together == _alone(tmp_path, offsets_of="ids")
