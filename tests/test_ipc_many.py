"""Small Arrow IPC streams read together (`gpu_profiler.readers.ipc.many`): the numbers of
each stream read alone, whatever the streams hold (nulls, list offsets, other columns),
through native kernels and the JIT, mapped and read; streams it must not read (another
schema, compression, a dictionary, the file format, damage) left to their own readers,
so that a scan gives the same numbers, or the same error, either way."""

from __future__ import annotations

import importlib

import numpy as np
import pyarrow as pa
import pytest

import gpu_profiler as gp
from gpu_profiler.backends import numba_backend
from gpu_profiler.backends.numba_backend import NumbaBackend
from gpu_profiler.errors import ProfilerError
from gpu_profiler.kernels import stats
from gpu_profiler.readers.ipc import IpcPart
from gpu_profiler.readers.ipc import many as ipc_many


@pytest.fixture
def spy(monkeypatch):
    """How many parts each together-read was given, and how many it left."""
    calls: list[tuple[int, int]] = []
    real = ipc_many.together

    class Spied:
        def __init__(self, joined, n):
            self.joined, self.n = joined, n
            self.counting, self.chunks = joined.counting, joined.chunks

        def left(self):
            left = self.joined.left()
            calls.append((self.n, len(left)))
            return left

    def together(parts, reading, like):
        return Spied(real(parts, reading, like), len(parts))

    monkeypatch.setattr(ipc_many, "together", together)
    return calls


@pytest.fixture(params=["counted", "gathered"])
def way(request, monkeypatch):
    """Streams read together are counted as they are read (the numba backend's way), or
    gathered into chunks for the backend (any other's)."""
    if request.param == "gathered":
        monkeypatch.setattr(NumbaBackend, "counts", False)
    return request.param


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


def _write(path, table, batch=97, compression=None, kind="stream"):
    options = pa.ipc.IpcWriteOptions(compression=compression)
    new = pa.ipc.new_stream if kind == "stream" else pa.ipc.new_file
    with pa.OSFile(str(path), "wb") as f, new(f, table.schema, options=options) as w:
        for b in table.to_batches(max_chunksize=batch):
            w.write_batch(b)


def _tables(n_shards, rng, nulls=False, lists=False, width=np.int64):
    for _ in range(n_shards):
        n = int(rng.integers(0, 700))
        x = rng.integers(0, 400, n).astype(width)
        cols = {"text": pa.array([f"t{i}" for i in range(n)]),
                "length": pa.array(x, mask=rng.random(n) < 0.1 if nulls else None)}
        if lists:
            cols["ids"] = pa.array([None if nulls and rng.random() < 0.1 else list(range(int(k)))
                                    for k in x], pa.list_(pa.int32()))
        yield pa.table(cols), x


@pytest.mark.parametrize("kind", ["stream", "file"])
@pytest.mark.parametrize("io", ["auto", "buffered"])
@pytest.mark.parametrize("case", ["int64", "int32 with nulls", "list offsets",
                                  "list offsets with nulls", "uint32", "int16"])
def test_shards_read_together_count_as_each_read_alone(case, io, kind, kernels, way, spy,
                                                       tmp_path, monkeypatch):
    """Streams, counted as read where the kernel reads the integers as the backend does,
    else gathered; IPC files (a footer says where their batches are) always gathered: the
    same numbers as each read alone, and as pyarrow's."""
    monkeypatch.setenv("GPU_PROFILER_IO", io)
    rng = np.random.default_rng(len(case) + (kind == "file"))
    lists = case.startswith("list offsets")
    width = {"int32 with nulls": np.int32, "uint32": np.uint32, "int16": np.int16}.get(
        case, np.int64)
    every = []
    for i, (t, x) in enumerate(_tables(12, rng, nulls="nulls" in case, lists=lists,
                                       width=width)):
        _write(tmp_path / f"s{i:02d}.arrow{'s' if kind == 'stream' else ''}", t,
               batch=int(rng.integers(1, 300)), kind=kind)
        every.append(x)
    kw = {"offsets_of": "ids"} if lists else {"column": "length"}
    calls = []
    real = ipc_many.Shards.counting
    monkeypatch.setattr(ipc_many.Shards, "counting",
                        lambda self: (lambda w: (w is not None and calls.append(1)) or w)(
                            real(self)))
    got = _outcome(tmp_path, **kw)
    assert spy and all(left == 0 for _, left in spy)  # every shard was read together
    assert bool(calls) == (kind == "stream" and way == "counted"
                           and case not in ("uint32", "int16"))
    assert got == _alone(tmp_path, **kw)
    if not lists and "nulls" not in case:
        x = np.concatenate(every)
        assert got[0] == np.bincount(np.minimum(x, 301), minlength=302)[:301].tolist()


@pytest.mark.parametrize("kw", [{"column": "length"}, {"offsets_of": "ids"}])
def test_counted_bins_widen_to_the_longest_length_and_fold_before_overflow(kw, spy, tmp_path,
                                                                           monkeypatch):
    """cap=None: a stream with a longer length than the bins reach stops the kernel, which
    goes on with wider bins; past MAX_AUTO_CAP, lengths are counted above it. The int32
    bins are folded into int64 whenever they could overflow (here after 500 lengths)."""
    histogram = importlib.import_module("gpu_profiler.histogram")

    monkeypatch.setattr(histogram, "MAX_AUTO_CAP", 3000)
    monkeypatch.setattr(numba_backend, "MAX_AUTO_CAP", 3000)
    monkeypatch.setattr(numba_backend, "FOLD_AFTER", 500)
    rng = np.random.default_rng(11)
    for i in range(10):
        n = int(rng.integers(1, 300))
        x = rng.integers(0, 60 * (i + 1) ** 2, n)  # the longest grows shard by shard
        x[rng.random(n) < 0.05] = -3  # invalid (a negative length)
        null = rng.random(n) < 0.1
        _write(tmp_path / f"s{i}.arrows", pa.table({
            "length": pa.array(x, mask=null),
            "ids": pa.array([None if m else [0] * max(int(k), 0)
                             for k, m in zip(x, null, strict=True)], pa.list_(pa.int8()))}))
    got = gp.histogram(str(tmp_path), cap=None, **kw)
    assert spy and all(left == 0 for _, left in spy)
    assert got.cap == 3000 and got.above_count > 0 and got.null_count > 0
    assert got == gp.histogram(str(tmp_path), cap=None, backend="numpy", **kw)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(IpcPart, "together", None)
        assert got == gp.histogram(str(tmp_path), cap=None, **kw)


def test_a_run_is_counted_in_one_kernel_call_unless_its_bins_must_widen_or_fold(
        spy, tmp_path, monkeypatch):
    from gpu_profiler import native

    rng = np.random.default_rng(13)
    for i, (t, _) in enumerate(_tables(8, rng)):
        _write(tmp_path / f"s{i}.arrows", t)
    outcomes = []
    real = native.kernel

    def kernel(name):
        k = real(name)

        def count_streams(*args):
            outcomes.append(k(*args))
            return outcomes[-1]

        return count_streams if name == "count_streams" else k

    monkeypatch.setattr(native, "kernel", kernel)
    gp.histogram(str(tmp_path), cap=300)
    assert len(spy) == 1 and outcomes == [(stats.COUNT_DONE,)]
    outcomes.clear()
    monkeypatch.setattr(numba_backend, "FOLD_AFTER", 1)
    gp.histogram(str(tmp_path), cap=300)
    assert outcomes == [(stats.COUNT_FOLD,)] * 7 + [(stats.COUNT_DONE,)]


def test_a_stream_of_more_messages_than_counted_at_once_is_left(spy, tmp_path, monkeypatch):
    monkeypatch.setattr(ipc_many, "MESSAGES", 4)
    rng = np.random.default_rng(12)
    for i, (t, _) in enumerate(_tables(6, rng)):
        _write(tmp_path / f"s{i}.arrows", t, batch=700 if i % 2 else 50)
    got = _outcome(tmp_path, column="length")
    assert got == _alone(tmp_path, column="length")
    assert sum(left for _, left in spy) >= 2  # the streams of many batches


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


@pytest.mark.parametrize("head", [8, ipc_many.SCHEMA_HEAD])
def test_the_first_shard_gives_the_reference_from_its_head_or_whole(head, spy, monkeypatch,
                                                                   tmp_path):
    """The run's first shard is read for its schema message from its head (the whole shard
    is read with the others), or whole when the message runs past it: the same run, the
    same numbers."""
    monkeypatch.setattr(ipc_many, "SCHEMA_HEAD", head)
    reads = []
    real = ipc_many.read_whole
    monkeypatch.setattr(ipc_many, "read_whole", lambda p, s: (reads.append(len(p)),
                                                              real(p, s))[1])
    rng = np.random.default_rng(8)
    want = []
    for k, (table, x) in enumerate(_tables(6, rng)):
        _write(tmp_path / f"s{k}.arrow", table, kind="file")
        want.append(x)
    h = gp.histogram(str(tmp_path), cap=400)
    assert spy == [(6, 0)]
    assert h.counts.tolist() == np.bincount(np.concatenate(want), minlength=401).tolist()
    assert reads == ([1, 6] if head == 8 else [6])


def test_streams_it_must_not_read_are_left_to_their_own_readers(spy, way, tmp_path):
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
    # the four a* and the empty stream (b and c are left; so is the file: a run is of its
    # first shard's kind)
    assert sum(n - left for n, left in spy) == 5
    x = np.concatenate([t.column("length").to_numpy() for t in tables[:7]])
    assert got[0] == np.bincount(np.minimum(x, 301), minlength=302)[:301].tolist()


def test_another_schema_is_the_same_error_together_and_alone(tmp_path):
    rng = np.random.default_rng(6)
    for i, (t, _) in enumerate(_tables(5, rng)):
        if i == 3:
            t = t.set_column(1, "length", t.column("length").cast(pa.float64()))
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


@pytest.mark.parametrize("kind", ["stream", "file"])
@pytest.mark.parametrize("dense", [True, False])
def test_a_damaged_shard_gives_the_same_numbers_or_error_together_and_alone(dense, kind, way,
                                                                           tmp_path):
    """A stream, or a file (its footer, Blocks and messages), damaged anywhere: read with
    its neighbours or by its own reader, the same numbers or the same one-line error."""
    rng = np.random.default_rng(7)
    tables = [t.select(["length"]) if dense else t
              for t, _ in _tables(4, rng, nulls=True, lists=not dense)]
    suffix = ".arrows" if kind == "stream" else ".arrow"
    for i, t in enumerate(tables):
        _write(tmp_path / f"s{i}{suffix}", t, batch=50, kind=kind)
    victim = tmp_path / f"s2{suffix}"
    good = victim.read_bytes()
    outcomes = set()
    for what, data in _mutations(good, rng):
        victim.write_bytes(data)
        for kw in ({"column": "length"}, *([] if dense else [{"offsets_of": "ids"}])):
            together = _outcome(tmp_path, **kw)
            assert together == _alone(tmp_path, **kw), (what, kw)
            outcomes.add(isinstance(together, str))
    assert outcomes == {True, False}  # some damage is fatal, some is outside the column


def test_a_row_count_near_int64s_limit_is_refused_together_and_alone(way, tmp_path):
    """A batch claiming 2**63 - 1 rows of a list column (and as many child values) must
    fail the buffer checks, whose sums must not overflow: it passed them once, and the
    counting kernel read past the file, the gathering path raised numpy's error and the
    selective reader never returned."""
    lists = pa.array([[]] * 1000, pa.list_(pa.int32()))
    for i in range(3):
        _write(tmp_path / f"s{i}.arrows", pa.table({"ids": lists}), batch=1000)
    victim = tmp_path / "s1.arrows"
    b = bytearray(victim.read_bytes())
    count, big = np.int64(1000).tobytes(), np.int64(2**63 - 1).tobytes()
    at = 0
    while 0 <= (at := b.find(count, at)) < 400:  # the batch's length and its field node's
        if b[at + 8:at + 32] == bytes(24):  # the field node (1000, 0), then its child's
            b[at + 16:at + 24] = big
        b[at:at + 8] = big
        at += 8
    victim.write_bytes(bytes(b))
    together = _outcome(tmp_path, offsets_of="ids")
    assert isinstance(together, str) and "s1.arrows" in together
    assert together == _alone(tmp_path, offsets_of="ids")


@pytest.mark.parametrize("offsets", [[0, 3, 1, 4], [0, 1, 2, 9], [-2, 0, 1, 2]])
def test_bad_list_offsets_give_the_same_error_together_and_alone(offsets, way, tmp_path):
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
