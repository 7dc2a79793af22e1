"""The selective Arrow IPC reader (the project's one IPC reader) against pyarrow's IPC
reader (the reference: `pyarrow_chunks`), on files written by pyarrow and `datasets`; and
hostile files: truncated, flipped, crafted."""

from __future__ import annotations

import faulthandler
import re
import struct
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from conftest import jit_kernels
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gpu_profiler as gp
from gpu_profiler.backends import get_backend
from gpu_profiler.chunk import Chunk
from gpu_profiler.cli import main
from gpu_profiler.errors import ProfilerError
from gpu_profiler.io import pread
from gpu_profiler.readers import ipc
from gpu_profiler.readers.arrow import arrays_to_chunks
from gpu_profiler.readers.base import LengthSpec
from gpu_profiler.readers.ipc import selective as ipc_selective

INT_TYPES = [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint16(),
             pa.uint32(), pa.uint64()]
NUMPY = get_backend("numpy")
NUMBA = get_backend("numba")


@pytest.fixture(autouse=True)
def any_size_in_place(monkeypatch):
    """Batches are handed over in place (segmented chunks) however few rows they hold,
    so that the small files here exercise that path too."""
    monkeypatch.setattr(ipc_selective, "SEGMENTED_MIN", 1)


def write(path: Path, table: pa.Table | list[pa.RecordBatch], kind: str,
          batch: int | None = None, **options) -> Path:
    """Write ``table`` (or these record batches) as an IPC ``kind`` ('file'/'stream')."""
    schema = table.schema if isinstance(table, pa.Table) else table[0].schema
    opts = pa.ipc.IpcWriteOptions(**options)
    new = pa.ipc.new_file if kind == "file" else pa.ipc.new_stream
    with new(str(path), schema, options=opts) as w:
        if isinstance(table, pa.Table):
            w.write_table(table, max_chunksize=batch)
        else:
            for rb in table:
                w.write_batch(rb)
    return path


def flat(chunks) -> tuple[np.ndarray, np.ndarray]:
    """All lengths (as int64) and validity of a reader's chunks, concatenated."""
    values, valid = [np.zeros(0, np.int64)], [np.zeros(0, bool)]
    for c in chunks:
        c = c.gathered()
        d = np.asarray(c.data)
        values.append(np.diff(d.astype(np.int64)) if c.offsets else d.astype(np.int64))
        valid.append(np.ones(c.samples, bool) if c.valid is None else np.asarray(c.valid))
    return np.concatenate(values), np.concatenate(valid)


def pyarrow_chunks(path: Path, kind: str, spec: LengthSpec) -> Iterator[Chunk]:
    """pyarrow's reading of the length column (only it: ``included_fields``), each record
    batch's column validated in full: the reference."""
    first = (pa.ipc.open_file if kind == "file" else pa.ipc.open_stream)(str(path)).schema
    options = pa.ipc.IpcReadOptions(included_fields=[first.get_field_index(spec.name)])
    with pa.OSFile(str(path)) as f:
        reader = pa.ipc.open_file(f, options=options) if kind == "file" else \
            pa.ipc.open_stream(f, options=options)
        arrays = reader.read_all().column(0).chunks
    for a in arrays:
        a.validate(full=True)
    return arrays_to_chunks(iter(a.dictionary_decode() if pa.types.is_dictionary(a.type)
                                 else a for a in arrays), spec)


def assert_same(path: Path, kind: str, spec: LengthSpec) -> int:
    """The selective reader and pyarrow's agree on every length, null and histogram bin;
    returns the number of samples."""
    ref = list(pyarrow_chunks(path, kind, spec))
    got = list(ipc.chunks(path, kind, spec))
    (rv, rm), (gv, gm) = flat(ref), flat(got)
    np.testing.assert_array_equal(gm, rm)
    np.testing.assert_array_equal(gv[gm], rv[rm])
    assert NUMPY.histogram(iter(got), None) == NUMPY.histogram(iter(ref), None)
    # in place: every chunk is held until the end (a window reused too early would show),
    # batches without nulls come out ahead of the gathered rest, and numba reads them there
    seg = list(ipc.chunks(path, kind, spec, segmented=True))
    sv, sm = flat(seg)
    np.testing.assert_array_equal(np.sort(sv[sm]), np.sort(rv[rm]))
    assert np.count_nonzero(~sm) == np.count_nonzero(~rm)
    assert NUMBA.histogram(iter(seg), None) == NUMPY.histogram(iter(ref), None)
    with ipc_selective.SelectiveReader(path, kind) as r:
        assert r.schema == ipc.schema(path, kind)
    assert ipc.schema(path, kind).equals(
        (pa.ipc.open_file if kind == "file" else pa.ipc.open_stream)(str(path)).schema)
    return len(rv)


def lengths_table(n: int, t: pa.DataType | None = None, seed: int = 0, nulls: float = 0.0,
                  tokens: int = 50) -> pa.Table:
    """``input_ids`` (list<int32>, lengths up to ``tokens``), ``text`` and ``length``
    (int64 unless ``t`` says otherwise)."""
    t = t or pa.int64()
    rng = np.random.default_rng(seed)
    x = rng.integers(0, tokens, n)
    mask = rng.random(n) < nulls if nulls else None
    ids = pa.ListArray.from_arrays(pa.array(np.r_[0, np.cumsum(x)].astype(np.int32)),
                                   pa.array(rng.integers(0, 50_000, int(x.sum()), np.int32)),
                                   mask=None if mask is None else pa.array(mask))
    info = np.iinfo(t.to_pandas_dtype())
    length = rng.integers(max(info.min, -5), min(info.max, 70_000), n, endpoint=True)
    return pa.table({"input_ids": ids, "text": pa.array([str(v) for v in x]),
                     "length": pa.array(length.astype(t.to_pandas_dtype()), t, mask=mask)})


# -- agreement with the reference reader --------------------------------------------------

@pytest.mark.parametrize("io", ["buffered", pytest.param("direct", marks=pytest.mark.slow),
                                "mapped"])  # pages, sectors, in place
@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kind=st.sampled_from(["stream", "file"]), t=st.sampled_from(INT_TYPES),
       n=st.integers(0, 2500), nulls=st.sampled_from([0.0, 0.3]), start=st.integers(0, 19),
       batch=st.sampled_from([1, 7, 64, 1000, None]),
       compression=st.sampled_from([None, "lz4", "zstd"]), legacy=st.booleans(),
       seed=st.integers(0, 2**16))
def test_selective_matches_pyarrow(tmp_path_factory, monkeypatch, io, kind, t, n, nulls,
                                   start, batch, compression, legacy, seed):
    monkeypatch.setenv(pread.IO_ENV, io)
    table = lengths_table(n + start, t, seed, nulls).slice(start)  # sliced: bit offsets
    path = write(tmp_path_factory.mktemp("h") / "x.arrow", table, kind, batch,
                 compression=compression, use_legacy_format=legacy)
    assert assert_same(path, kind, LengthSpec("length")) == n
    assert assert_same(path, kind, LengthSpec("input_ids", offsets=True)) == n
    with jit_kernels():  # the same kernels through numba's JIT
        assert assert_same(path, kind, LengthSpec("length")) == n


@pytest.mark.parametrize("kind", ["stream", "file"])
@pytest.mark.parametrize("compression", [None, "zstd"])
def test_every_preceding_type_is_skipped(tmp_path, kind, compression):
    """Columns of every layout (nested, unions, views with variadic buffers, run-end
    encoded, dictionaries, nulls) before and after the length column."""
    n = 300
    rng = np.random.default_rng(3)
    ints = rng.integers(0, 9, n)
    words = [None if i % 7 == 0 else "w" * int(i) + "-long-enough-not-to-be-inlined"
             for i in ints]
    lists = [None if i % 5 == 0 else list(range(int(i))) for i in ints]
    struct_t = pa.struct([("a", pa.int16()), ("b", pa.list_(pa.string_view()))])
    cols = {
        "nothing": pa.nulls(n),
        "flag": pa.array(ints % 2 == 0),
        "half": pa.array(ints.astype(np.float16)),
        "money": pa.array([None] + [1] * (n - 1), pa.decimal128(10, 2)),
        "when": pa.array(ints, pa.int64()).cast(pa.timestamp("ms")),
        "fsb": pa.array([bytes([i]) * 3 for i in ints], pa.binary(3)),
        "s": pa.array(words),
        "lb": pa.array([w and w.encode() for w in words], pa.large_binary()),
        "sv": pa.array(words, pa.string_view()),
        "bv": pa.array([w and w.encode() for w in words], pa.binary_view()),
        "l": pa.array(lists, pa.list_(pa.int32())),
        "ll": pa.array([w and [w] for w in words], pa.large_list(pa.string())),
        "fsl": pa.array([[int(i), 1] for i in ints], pa.list_(pa.int8(), 2)),
        "lv": pa.array(lists, pa.list_view(pa.int32())),
        "llv": pa.array(lists, pa.large_list_view(pa.int64())),
        "st": pa.array([{"a": int(i), "b": [w, w]} for i, w in zip(ints, words, strict=True)],
                       struct_t),
        "m": pa.array([[("k", int(i))] for i in ints], pa.map_(pa.string(), pa.int32())),
        "su": pa.UnionArray.from_sparse(pa.array((ints % 2).astype(np.int8)),
                                        [pa.array(ints), pa.array(words)]),
        "du": pa.UnionArray.from_dense(pa.array((ints % 2).astype(np.int8)),
                                       pa.array(np.arange(n, dtype=np.int32) // 2),
                                       [pa.array(ints), pa.array(words)]),
        "ree": pa.RunEndEncodedArray.from_arrays(pa.array(np.arange(1, n + 1, dtype=np.int32)),
                                                 pa.array(ints)),
        "cat": pa.array(words).dictionary_encode(),
        "length": pa.array(rng.integers(0, 9000, n), mask=ints == 3),
        "after": pa.array(words, pa.string_view()),
        "ids": pa.array(lists, pa.large_list(pa.int32())),
    }
    path = write(tmp_path / "wide.arrow", pa.table(cols), kind, 64, compression=compression)
    assert assert_same(path, kind, LengthSpec("length")) == n
    assert assert_same(path, kind, LengthSpec("ids", offsets=True)) == n
    assert assert_same(path, kind, LengthSpec("l", offsets=True)) == n


def _dictionary_batches(value_type: pa.DataType):
    """Record batches whose dictionary-encoded length column extends its dictionary (a
    delta), then replaces it; a string dictionary column rides along."""
    dicts = [[5, 7, 9000], [5, 7, 9000, 11, None], [3, 1]]
    idx = [[0, 1, 2, 2, None], [4, 3, 0, None, 1], [1, 1, 0, None, 0]]
    out = []
    for d, i in zip(dicts, idx, strict=True):
        length = pa.DictionaryArray.from_arrays(pa.array(i, pa.int8()),
                                                pa.array(d, value_type))
        other = pa.array(["a", "b", "a", "c", None]).dictionary_encode()
        out.append(pa.record_batch({"other": other, "length": length}))
    return out


@pytest.mark.parametrize("value_type", [pa.int32(), pa.uint16()])
@pytest.mark.parametrize("compression", [None, "lz4"])
def test_dictionary_encoded_length_column(tmp_path, value_type, compression):
    batches = _dictionary_batches(value_type)
    for deltas in (False, True):
        path = write(tmp_path / f"d{deltas}.arrows", batches, "stream",
                     compression=compression, emit_dictionary_deltas=deltas)
        assert assert_same(path, "stream", LengthSpec("length")) == 15
    # the file format allows one dictionary per field, plus deltas
    path = write(tmp_path / "d.arrow", batches[:2], "file", compression=compression,
                 emit_dictionary_deltas=True)
    assert assert_same(path, "file", LengthSpec("length")) == 10


def test_other_dictionaries_are_skipped_unread(tmp_path):
    batches = [pa.record_batch({"cat": pa.array(["x" * 5000, "y" * 5000, "z"] * 3)
                                .dictionary_encode(), "length": pa.array(np.arange(9))})]
    path = write(tmp_path / "d.arrows", batches, "stream")
    assert assert_same(path, "stream", LengthSpec("length")) == 9
    with ipc_selective.SelectiveReader(path, "stream") as r:
        list(r.chunks(LengthSpec("length")))
        # the 10 KB dictionary body is skipped
        assert r.bytes_requested < 2 * ipc_selective.FIRST_READ


@pytest.mark.parametrize("kind", ["stream", "file"])
def test_empty_and_many_batches(tmp_path, kind):
    t = lengths_table(20, pa.int32())
    empty = t.slice(0, 0).to_batches() or [pa.record_batch(
        {c: pa.array([], t.schema.field(c).type) for c in t.column_names})]
    batches = empty + t.to_batches(max_chunksize=3) + empty + t.to_batches(max_chunksize=1)
    path = write(tmp_path / "e.arrow", batches, kind)
    assert assert_same(path, kind, LengthSpec("length")) == 40
    assert assert_same(path, kind, LengthSpec("input_ids", offsets=True)) == 40
    path = write(tmp_path / "none.arrow", t.slice(0, 0), kind)
    assert assert_same(path, kind, LengthSpec("length")) == 0


@pytest.mark.parametrize("kind", ["stream", "file"])
@pytest.mark.parametrize("tokens", [3, 3000])
@pytest.mark.parametrize("first", [True, False])
@pytest.mark.parametrize("io", ["buffered", "direct", "mapped"])
def test_small_windows_and_chunks(tmp_path, monkeypatch, kind, tokens, first, io):
    """Every window/chunk boundary case: tiny windows, chunks and message buffers force
    re-reads, sparse fetches, buffer growth and full message tables."""
    monkeypatch.setenv(pread.IO_ENV, io)
    monkeypatch.setattr(ipc_selective, "WINDOW", 5000)
    monkeypatch.setattr(ipc_selective, "FIRST_READ", 300)
    monkeypatch.setattr(ipc_selective, "SPARSE_SKIP", 2000)
    monkeypatch.setattr(ipc_selective, "SPARSE_BATCH", 3)
    monkeypatch.setattr(ipc_selective, "_MAX_MESSAGES", 4)
    monkeypatch.setattr(ipc_selective, "CHUNK_ROWS", 500)
    t = lengths_table(3000, pa.int16(), seed=4, nulls=0.1, tokens=tokens)
    if first:
        t = t.select(["length", "input_ids", "text"])
    batches = t.to_batches(max_chunksize=97) + t.to_batches(max_chunksize=1500)
    path = write(tmp_path / "w.arrow", batches, kind)
    assert assert_same(path, kind, LengthSpec("length")) == 6000
    assert assert_same(path, kind, LengthSpec("input_ids", offsets=True)) == 6000


@pytest.mark.parametrize("io", ["buffered", "mapped"])
def test_a_mapped_stream_of_sparse_messages_is_walked_in_one_call(tmp_path, monkeypatch, io):
    """Large messages whose column is a small part of them (a dataset's ``input_ids``
    offsets beside its token ids): read from the page cache, the rest of the stream is
    mapped and its metadata walked at once, not a window per message (0.35 s -> 0.03 s for
    2,000 batches); read with pread, a window a message. The same numbers either way."""
    monkeypatch.setenv(pread.IO_ENV, io)
    t = lengths_table(6000, pa.int32(), seed=9, tokens=400)
    path = write(tmp_path / "s.arrows", t, "stream", 50)  # 120 messages of ~40 KB
    monkeypatch.setattr(ipc_selective, "SPARSE_SKIP", 8 << 10)
    walks = []
    real = ipc_selective.parsers.walk
    monkeypatch.setattr(ipc_selective.parsers, "walk",
                        lambda *a: walks.append(1) or real(*a))
    assert assert_same(path, "stream", LengthSpec("input_ids", offsets=True)) == 6000
    per_scan = len(walks) / 2  # assert_same reads it twice (plain and segmented)
    assert per_scan <= 3 if io == "mapped" else per_scan >= 100


def test_stream_without_end_marker(tmp_path):
    t = lengths_table(100, pa.int32())
    path = write(tmp_path / "s.arrows", t, "stream", 30)
    path.write_bytes(path.read_bytes()[:-8])  # drop the end-of-stream marker
    assert assert_same(path, "stream", LengthSpec("length")) == 100


# -- Hugging Face datasets ------------------------------------------------------------------

def _hf_dir(tmp_path: Path, n: int, tokens: int, shards: int = 2, seed: int = 0) -> Path:
    import datasets

    rng = np.random.default_rng(seed)
    x = rng.integers(1, tokens, n)
    ids = pa.ListArray.from_arrays(pa.array(np.r_[0, np.cumsum(x)].astype(np.int32)),
                                   pa.array(rng.integers(0, 50_000, int(x.sum()), np.int32)))
    ds = datasets.Dataset(pa.table({"input_ids": ids, "length": pa.array(x)}))
    ds = ds.map(lambda b: {"n_tokens": [len(v) for v in b["input_ids"]]}, batched=True)
    path = tmp_path / "hf"
    ds.save_to_disk(str(path), num_shards=shards)
    return path


@pytest.mark.parametrize("io", ["buffered", "direct", "mapped"])
def test_hf_dir_matches_pyarrow(tmp_path, monkeypatch, io, kernels):
    monkeypatch.setenv(pread.IO_ENV, io)
    path = _hf_dir(tmp_path, 2600, 400)
    shards = sorted(path.glob("data-*.arrow"))
    for shard in shards:
        for spec in (LengthSpec("length"), LengthSpec("n_tokens"),
                     LengthSpec("input_ids", offsets=True)):
            assert_same(shard, "stream", spec)
    expect = gp.histogram(str(path), column="length", backend="numpy")
    assert gp.histogram(str(path), offsets_of="input_ids", backend="numba") == expect


def test_hf_shard_reads_about_the_length_column(tmp_path, monkeypatch):
    """An HF shard with token ids: the bytes requested are the length column's plus a page
    or so of metadata per 1000-row record batch, not the token ids. (Read with pread: a
    warm file's mapped windows are in the page cache already, and count whole.)"""
    monkeypatch.setenv(pread.IO_ENV, "buffered")
    path = _hf_dir(tmp_path, 20_000, 600, shards=1)
    (shard,) = path.glob("data-*.arrow")
    with ipc_selective.SelectiveReader(shard, "stream") as r:
        got = flat(r.chunks(LengthSpec("length")))
        requested = r.bytes_requested
    batches = sum(1 for _ in pa.ipc.open_stream(str(shard)))
    column = 20_000 * 8
    assert len(got[0]) == 20_000 and batches == 20
    assert requested <= column + batches * 8192 + 64 * 1024
    assert requested < shard.stat().st_size / 50


# -- hostile files --------------------------------------------------------------------------

@pytest.fixture
def bounded(tmp_path_factory):
    """Fail (instead of hanging) after 120 s, and check no allocation is huge (once the
    kernels are compiled or loaded: numba's own allocations are not the reader's)."""
    warm = tmp_path_factory.mktemp("warm")
    for kind in ("stream", "file"):
        path = write(warm / kind, lengths_table(50, pa.int32(), nulls=0.5), kind)
        assert_same(path, kind, LengthSpec("length"))
        path, data = _one_batch(warm, kind)  # a corrupt file: its error replays in the JIT
        path.write_bytes(_patch(data, *CRAFTED["node length huge"]))
        assert isinstance(outcome(path, kind), ProfilerError)
    faulthandler.dump_traceback_later(120, exit=True)
    tracemalloc.start()
    yield
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    faulthandler.cancel_dump_traceback_later()
    assert peak < 32 << 20, f"peak allocation {peak} bytes"


LENGTH = LengthSpec("length")


def outcome(path: Path, kind: str, spec: LengthSpec = LENGTH):
    """The selective reader's histogram, or its ProfilerError (which must name the file)."""
    try:
        return NUMPY.histogram(ipc.chunks(path, kind, spec), 1 << 16)
    except ProfilerError as exc:
        assert str(path) in str(exc) and "\n" not in str(exc)
        return exc


def reference(path: Path, kind: str, spec: LengthSpec = LENGTH):
    """pyarrow's histogram, or the exception it raised."""
    try:
        return NUMPY.histogram(pyarrow_chunks(path, kind, spec), 1 << 16)
    except (pa.ArrowException, OSError, ValueError, ProfilerError) as exc:
        return exc


@pytest.mark.slow  # every cut of four files: ~13 s (tests/test_ipc_many.py cuts some by default)
@pytest.mark.parametrize("kind", ["stream", "file"])
@pytest.mark.parametrize("compression", [None, "zstd"])
def test_truncated_anywhere(tmp_path, kind, compression, bounded):
    t = lengths_table(200, pa.int32(), nulls=0.1)
    data = write(tmp_path / "full.arrow", t, kind, 64, compression=compression).read_bytes()
    cut = tmp_path / "cut.arrow"
    errors = 0
    for size in sorted({*range(0, 400, 3), *range(0, len(data), 37), len(data) - 1}):
        cut.write_bytes(data[:size])
        got = outcome(cut, kind)
        if isinstance(got, ProfilerError):
            errors += 1
        else:  # a stream cut between messages is a valid, shorter stream
            assert kind == "stream" and got == reference(cut, kind)
    assert errors > 0


@pytest.mark.slow  # every metadata byte flipped, both kernels: make test-slow
@pytest.mark.parametrize("kind", ["stream", "file"])
@pytest.mark.parametrize("compression", [None, "lz4"])
def test_flipped_metadata_bytes(tmp_path, kind, compression, kernels, bounded):
    t = lengths_table(100, pa.int32(), nulls=0.1)
    data = write(tmp_path / "ok.arrow", t, kind, 50, compression=compression).read_bytes()
    bad = tmp_path / "bad.arrow"
    meta = _metadata_regions(data, kind)
    assert len(meta) >= 3
    step = 1 if kernels == "native" else 4  # the JIT runs the same code, 3x slower
    for lo, hi in meta:
        for i in range(lo, hi, step):
            b = bytearray(data)
            b[i] ^= 0xFF if i % 2 else 0x80
            bad.write_bytes(bytes(b))
            outcome(bad, kind)  # a ProfilerError or a result, nothing else


def _metadata_regions(data: bytes, kind: str) -> list[tuple[int, int]]:
    """Byte ranges of every message's framing + metadata (and the file footer)."""
    out, pos = [], 8 if kind == "file" else 0
    while pos + 8 <= len(data):
        (m,) = struct.unpack_from("<i", data, pos + 4)
        if m == 0:
            break
        out.append((pos, pos + 8 + m))
        msg = pa.ipc.read_message(pa.py_buffer(data[pos:]))
        pos += 8 + m + msg.body.size if msg.body is not None else 8 + m
    if kind == "file":
        (flen,) = struct.unpack_from("<i", data, len(data) - 10)
        out.append((len(data) - 10 - flen, len(data)))
    return out


def _one_batch(tmp_path: Path, kind: str, **options) -> tuple[Path, bytes]:
    """123 int32 lengths in one record batch: node (123, 0), buffers (0, 0) and (0, 492),
    body 496 bytes: values that each appear once in the metadata."""
    t = pa.table({"length": pa.array(np.arange(123, dtype=np.int32))})
    path = write(tmp_path / "one.arrow", t, kind, **options)
    return path, path.read_bytes()


def _patch(data: bytes, old: bytes, new: bytes) -> bytes:
    """Replace ``old`` (in the message, and in the file footer's Block if it is there)."""
    assert old in data, old
    return data.replace(old, new)


CRAFTED = {
    "node length huge": (struct.pack("<qq", 123, 0), struct.pack("<qq", 1 << 60, 0)),
    "negative null count": (struct.pack("<qq", 123, 0), struct.pack("<qq", 123, -1)),
    "buffer length huge": (struct.pack("<qq", 0, 492), struct.pack("<qq", 0, 1 << 62)),
    "buffer offset beyond the file": (struct.pack("<qq", 0, 492),
                                      struct.pack("<qq", 1 << 40, 492)),
    "buffer offset negative": (struct.pack("<qq", 0, 492), struct.pack("<qq", -8, 492)),
    "body length huge": (struct.pack("<q", 496), struct.pack("<q", (1 << 62) + 1)),
}


@pytest.mark.parametrize("kind", ["stream", "file"])
@pytest.mark.parametrize("case", sorted(CRAFTED))
def test_crafted_offsets_and_lengths(tmp_path, kind, case, kernels, bounded):
    path, data = _one_batch(tmp_path, kind)
    path.write_bytes(_patch(data, *CRAFTED[case]))
    assert isinstance(outcome(path, kind), ProfilerError)


@pytest.mark.parametrize("codec", ["lz4", "zstd"])
@pytest.mark.parametrize("declared", [1 << 50, 491, 10_000])
def test_crafted_decompressed_size(tmp_path, codec, declared, bounded):
    """The 8-byte uncompressed-size prefix of a compressed buffer lies."""
    t = pa.table({"length": pa.array(np.arange(123, dtype=np.int32))})
    path = write(tmp_path / "c.arrows", t, "stream", compression=codec)
    path.write_bytes(_patch(path.read_bytes(), struct.pack("<q", 492),
                            struct.pack("<q", declared)))
    got = outcome(path, "stream")
    assert isinstance(got, ProfilerError) and "byte" in str(got)


def test_crafted_framing_and_footer(tmp_path, kernels, bounded):
    path, data = _one_batch(tmp_path, "stream")
    (m,) = struct.unpack_from("<i", data, 4)
    for prefix in (struct.pack("<Ii", 0xFFFFFFFF, 0x7FFFFFF0), struct.pack("<Ii", 0xFFFFFFFF, -9),
                   struct.pack("<i", -2)):
        path.write_bytes(prefix + data[8:])
        assert isinstance(outcome(path, "stream"), ProfilerError)
    path, data = _one_batch(tmp_path, "file")
    (flen,) = struct.unpack_from("<i", data, len(data) - 10)
    for footer_len in (1 << 30, -5, 0, flen - 8):
        path.write_bytes(data[:-10] + struct.pack("<i", footer_len) + data[-6:])
        assert isinstance(outcome(path, "file"), ProfilerError)
    # the footer's record batch Block: (offset, metadata length, pad, body length)
    block = data.rfind(struct.pack("<q", 496)) - 16
    (offset, meta) = struct.unpack_from("<qi", data, block)
    for new in ((1 << 40, meta), (offset, meta + 8), (offset + 8, meta), (2, meta)):
        path.write_bytes(data[:block] + struct.pack("<qi", *new) + data[block + 12:])
        assert isinstance(outcome(path, "file"), ProfilerError)
    for junk in (b"", b"ARROW1", b"PAR1....", b"\x00" * 64):
        path.write_bytes(junk)
        assert isinstance(outcome(path, "file"), ProfilerError)
        assert isinstance(outcome(path, "stream"), ProfilerError)


def _big_endian_stream() -> bytes:
    """A stream whose schema message says Endianness=Big (pyarrow cannot write one):
    Message{version V5, header Schema{endianness Big}}, hand-assembled."""
    fb = bytearray(48)
    struct.pack_into("<I", fb, 0, 16)                 # root: Message table at 16
    struct.pack_into("<HHHHH", fb, 4, 10, 12, 4, 6, 8)  # Message vtable at 4
    struct.pack_into("<i", fb, 16, 16 - 4)            # Message table -> vtable
    struct.pack_into("<hBxI", fb, 20, 4, 1, 36 - 24)  # version V5, header Schema, -> 36
    struct.pack_into("<HHHH", fb, 28, 8, 8, 4, 0)     # Schema vtable at 28
    struct.pack_into("<ih", fb, 36, 36 - 28, 1)       # Schema table: endianness Big
    return struct.pack("<Ii", 0xFFFFFFFF, len(fb)) + bytes(fb) + struct.pack("<Ii", 0xFFFFFFFF, 0)


def test_big_endian_is_refused(tmp_path, capsys):
    stream = tmp_path / "be.arrows"
    stream.write_bytes(_big_endian_stream())
    file = tmp_path / "be.arrow"
    file.write_bytes(b"ARROW1\x00\x00" + _big_endian_stream() + b"\x00" * 10 + b"ARROW1")
    for path, kind in ((stream, "stream"), (file, "file")):
        with pytest.raises(ProfilerError, match=f"{path}: big-endian"):
            ipc.schema(path, kind)
    with pytest.raises(SystemExit) as exc:
        main(["profile", str(stream), "--format", "ipc-stream"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "big-endian" in err and str(stream) in err and "Traceback" not in err


@pytest.mark.parametrize("kind", ["file", "stream"])
def test_a_schema_pyarrow_reads_with_other_fields_than_its_flatbuffer_is_refused(
        kind, tmp_path, monkeypatch):
    """The fields a record batch's buffers belong to are counted by the flatbuffer: a
    schema message pyarrow reads with another count is refused before the scan (the
    pre-scan check) and by the reader, at the schema's byte."""
    from gpu_profiler.readers.ipc import metadata

    path, _ = _one_batch(tmp_path, kind)
    read = metadata.arrow_schema
    monkeypatch.setattr(metadata, "arrow_schema",
                        lambda framed: read(framed).append(pa.field("x", pa.int8())))
    at = 8 if kind == "file" else 0
    said = rf"corrupt or truncated Arrow IPC {kind} at byte {at}: schema message: field count"
    with pytest.raises(ProfilerError, match=said):
        ipc.schema(path, kind)
    with pytest.raises(ProfilerError, match=said), \
            ipc_selective.SelectiveReader(path, kind) as r:
        next(r.chunks(LengthSpec("length")))


def test_corrupt_file_exits_2_naming_file_and_byte(tmp_path, capsys):
    """The selective reader names the byte."""
    path, data = _one_batch(tmp_path, "stream")
    path.write_bytes(_patch(data, *CRAFTED["buffer offset beyond the file"]))
    with pytest.raises(SystemExit) as exc:
        main(["profile", str(path), "-q"])
    err = capsys.readouterr().err
    assert exc.value.code == 2
    assert f"{path}: corrupt or truncated" in err and "at byte" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_other_columns_do_not_fail_either_reader(tmp_path):
    """Another column's buffer points outside the file in batch 7 of 10: both readers read
    only the length column, so both give the whole file's numbers."""
    x = np.arange(1000)
    t = pa.table({"length": pa.array(x % 97), "flag": pa.array(x % 3 == 0)})
    data = write(tmp_path / "ok.arrows", t, "stream", 100).read_bytes()
    flag_values = struct.pack("<qq", 800, 13)  # (offset, length) in every batch's metadata
    at = [m.start() for m in re.finditer(re.escape(flag_values), data)][7]
    bad = tmp_path / "bad.arrows"
    bad.write_bytes(data[:at] + struct.pack("<qq", 800, 1 << 40) + data[at + 16:])
    want = reference(tmp_path / "ok.arrows", "stream")
    assert reference(bad, "stream") == outcome(bad, "stream")
    assert outcome(bad, "stream") == want and want.total == 1000


# -- repeated metadata and buffer reuse ------------------------------------------------------

def test_repeated_metadata_is_copied_not_misread(tmp_path):
    """A record copied from the previous message (identical metadata bytes) equals the
    record of that message parsed alone, batch sizes changing or not."""
    from gpu_profiler.kernels import ipc_format as fmt
    from gpu_profiler.readers.ipc import metadata as parsers
    from gpu_profiler.readers.ipc.layout import column_layout

    t = lengths_table(5000, pa.int32(), nulls=0.2, seed=9)
    batches = t.to_batches(max_chunksize=500) + t.to_batches(max_chunksize=70)
    path = write(tmp_path / "r.arrows", batches, "stream")
    b = np.fromfile(path, np.uint8)
    with ipc_selective.SelectiveReader(path, "stream") as r:
        start, schema = r._start, r.schema
    layout = column_layout(schema, schema.get_field_index("length"), -1).vector()
    out = np.empty((200, fmt.NREC), np.int64)
    k, _, status = parsers.walk(b, start, b.size, out, layout, np.zeros(2, np.int64))
    assert status == fmt.END and k == len(batches)
    one = np.empty((1, fmt.NREC), np.int64)
    for rec in out[:k]:
        parsers.walk(b, rec[fmt.R_MSG], b.size, one, layout, np.zeros(2, np.int64))
        np.testing.assert_array_equal(one[0], rec)


def test_buffers_are_reused_only_once_dropped():
    import weakref

    reuse = pread.Reuse(keep=3)
    a = reuse.take(100)
    first = weakref.ref(a)
    view = a[10:20]
    del a
    other = reuse.take(100)
    assert other is not first()  # a view of it is alive
    del view
    assert reuse.take(100) is first()  # nothing refers to it any more
    assert reuse.take(10, np.int64).dtype == np.int64


@pytest.mark.parametrize("kind", ["stream", "file"])
def test_one_huge_batch_is_read_in_bounded_pieces(tmp_path, monkeypatch, kind):
    """A single record batch far larger than a window (a 4 GB file can be one batch) is
    fetched in pieces of at most FETCH_BYTES, never whole, and counted exactly."""
    monkeypatch.setattr(ipc_selective, "WINDOW", 64 << 10)
    monkeypatch.setattr(ipc_selective, "FETCH_BYTES", 64 << 10)
    t = lengths_table(200_000, pa.int32(), nulls=0.01).select(["length"])
    path = write(tmp_path / "one.arrow", t, kind, 200_000)
    sizes = []
    window, fetch = ipc_selective.SelectiveReader._window, ipc_selective.PositionedFile.fetch

    def spy_window(self, pos, n):
        sizes.append(n)
        return window(self, pos, n)

    def spy_fetch(self, lo, hi, into=None):
        sizes.append(int((hi - lo).sum()))
        return fetch(self, lo, hi, into)

    monkeypatch.setattr(ipc_selective.SelectiveReader, "_window", spy_window)
    monkeypatch.setattr(ipc_selective.PositionedFile, "fetch", spy_fetch)
    assert outcome(path, kind) == reference(path, kind)
    assert max(sizes) <= 2 * (64 << 10) < path.stat().st_size // 4


@pytest.mark.parametrize("kind", ["stream", "file"])
@pytest.mark.parametrize(("compression", "offsets"), [
    (None, [-1, 2, 3, 6]), (None, [0, 2, 3, 7]), (None, [0, 2, 3, 0x7FFFFFFF]),
    (None, [0, 3, 2, 6]), ("zstd", [0, 3, 2, 6])])  # pyarrow writes only this one compressed
def test_list_offsets_outside_the_child_are_corrupt_in_both_readers(tmp_path, kind,
                                                                    compression, offsets):
    """Offsets that start below 0, end past the child array (6 values) or decrease break
    the Arrow format's own rules: both readers refuse them, whatever --offsets-of reads."""
    t = pa.table({"input_ids": pa.array([[1, 2], [3], [4, 5, 6]], pa.list_(pa.int32()))})
    path = write(tmp_path / "l.arrow", t, kind)
    good = np.array([0, 2, 3, 6], np.int32).tobytes()
    spec = LengthSpec("input_ids", offsets=True)
    if compression is None:
        data = path.read_bytes()
        assert data.count(good) == 1
        path.write_bytes(data.replace(good, np.array(offsets, np.int32).tobytes()))
    else:  # rewrite the batch compressed, around the bad offsets
        arr = pa.ListArray.from_buffers(pa.list_(pa.int32()), 3, [
            None, pa.py_buffer(np.array(offsets, np.int32).tobytes())],
            children=[pa.array([1, 2, 3, 4, 5, 6], pa.int32())])
        bad = pa.table({"input_ids": arr})
        path = write(tmp_path / "z.arrow", bad, kind, compression=compression)
    got, want = outcome(path, kind, spec), reference(path, kind, spec)
    assert isinstance(got, ProfilerError) and isinstance(want, Exception), (got, want)
    assert "offsets" in str(got)
