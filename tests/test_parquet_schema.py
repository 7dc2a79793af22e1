"""A Parquet file's schema told without pyarrow (`readers.parquet.schema`): every type it
tells is named as pyarrow names it, for the files of pyarrow (with and without its
``ARROW:schema``, in both list layouts and format versions), polars and duckdb; what it
cannot name it leaves to pyarrow (None); forged or damaged schemas never raise; and a
scan of a dictionary-encoded file counted by the kernel never loads pyarrow."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gpu_profiler.errors import ProfilerError
from gpu_profiler.kernels import parquet_format as fmt
from gpu_profiler.readers.base import LengthSpec, Reading
from gpu_profiler.readers.parquet import ParquetPart, pages, row_group_ranges, schema

COLUMNS = {
    "i8": pa.array([1, 2], pa.int8()), "i16": pa.array([1, 2], pa.int16()),
    "i32": pa.array([1, 2], pa.int32()), "u8": pa.array([1, 2], pa.uint8()),
    "u16": pa.array([1, 2], pa.uint16()), "u32": pa.array([1, 2], pa.uint32()),
    "u64": pa.array([1, 2], pa.uint64()), "s": pa.array(["a", None]),
    "ls": pa.array(["a", "b"], pa.large_string()), "b": pa.array([b"a", b"b"]),
    "lb": pa.array([b"a", b"b"], pa.large_binary()), "bo": pa.array([True, False]),
    "f": pa.array([1, 2], pa.float32()), "d": pa.array([1, 2], pa.float64()),
    "l": pa.array([[1], None], pa.list_(pa.int32())),
    "ll": pa.array([[1], [2]], pa.large_list(pa.int64())),
    "lnn": pa.array([[1], [2]], pa.list_(pa.field("x", pa.int32(), nullable=False))),
    "lls": pa.array([["a"], ["b"]], pa.list_(pa.large_string())),
    # not told here (pyarrow's): a dictionary is read as pyarrow's own, not as written
    "ds": pa.array(["a", "b"]).dictionary_encode(), "di": pa.array([1, 2]).dictionary_encode(),
    "dur": pa.array([1, 2], pa.duration("s")), "ts": pa.array([1, 2], pa.timestamp("ms")),
    "date": pa.array([1, 2], pa.date32()), "st": pa.array([{"a": 1}, {"a": 2}]),
    "nl": pa.array([[[1]], [[2]]]), "dec": pa.array([1, 2], pa.decimal128(5, 2)),
    "null": pa.array([None, None]), "h": pa.array(np.array([1, 2], np.float16)),
    "fsl": pa.array([[1], [2]], pa.list_(pa.int32(), 1)),
    "map": pa.array([[("a", 1)], [("b", 2)]], pa.map_(pa.string(), pa.int32())),
}
#: Columns told whatever the writer's options (``u32`` in format 1.0 is written as INT64,
#: which pyarrow then reads as int64 against its ARROW:schema: left to it).
TOLD = {"i8", "i16", "i32", "u8", "u16", "u64", "s", "ls", "b", "lb", "bo", "f", "d", "l",
        "ll", "lnn", "lls"}
OPTIONS = [{}, {"store_schema": False}, {"use_compliant_nested_type": False},
           {"version": "1.0"}]


def told(path: Path) -> schema.Fields | None:
    fd = os.open(path, os.O_RDONLY)
    try:
        found = pages.footer(fd, os.fstat(fd).st_size)
    finally:
        os.close(fd)
    assert found is not None, "the kernel left a good file's footer"
    tail, info = found
    return schema.told(tail[info[fmt.I_SCHEMA]:info[fmt.I_SCHEMA_END]].tobytes(),
                       tail[info[fmt.I_ARROW]:info[fmt.I_ARROW_END]].tobytes())


def pyarrows(path: Path) -> list[tuple[str, str]]:
    return [(f.name, str(f.type)) for f in pq.read_schema(path)]


def same(got: schema.Fields | None, path: Path) -> bool:
    return [(f.name, f.type) for f in got or ()] == pyarrows(path)


@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: ",".join(o) or "default")
def test_types_told_are_named_as_pyarrow_names_them(tmp_path, options):
    for name, values in COLUMNS.items():
        path = tmp_path / f"{name}.parquet"
        pq.write_table(pa.table({"length": pa.array([1, 2], pa.int64()), name: values}),
                       path, **options)
        got = told(path)
        if got is not None:
            assert same(got, path), (name, got, pyarrows(path))
        elif name in TOLD and not (name == "u64" and options.get("version") == "1.0"):
            pytest.fail(f"{name} ({pyarrows(path)[1][1]}) not told with {options}")


def test_other_writers(tmp_path):
    polars = pytest.importorskip("polars")
    duckdb = pytest.importorskip("duckdb")
    pl_path, dd_path = tmp_path / "pl.parquet", tmp_path / "dd.parquet"
    polars.DataFrame({"length": [1, 2], "text": ["a", "b"], "ids": [[1], [2]],
                      "n": polars.Series([1, 2], dtype=polars.Int32)}).write_parquet(pl_path)
    duckdb.sql(f"COPY (SELECT 1::BIGINT length, 2::INTEGER n, 'x' text, [1, 2] ids, "
               f"3::UTINYINT u, 1.5::DOUBLE d, true b) TO '{dd_path}'")
    for path in (pl_path, dd_path):
        got = told(path)
        assert got is not None and same(got, path), (path.name, got, pyarrows(path))


def _forged(tmp_path: Path, arrow: bytes) -> Path:
    """A good file (an int64 ``length`` and a string ``text``) whose ARROW:schema is
    ``arrow``: written beside pyarrow's own under a key of the same length, the two keys
    then swapped in the footer."""
    t = pa.table({"length": pa.array([3, 4], pa.int64()), "text": ["a", "b"]})
    path = tmp_path / "forged.parquet"
    pq.write_table(t.replace_schema_metadata({b"ARROW:schemX": arrow}), path)
    data = path.read_bytes()
    assert data.count(b"ARROW:schema") == 1 and data.count(b"ARROW:schemX") == 1
    path.write_bytes(data.replace(b"ARROW:schema", b"ARROW:schemY")
                     .replace(b"ARROW:schemX", b"ARROW:schema"))
    return path


def _arrow_schema(s: pa.Schema) -> bytes:
    return base64.b64encode(s.serialize().to_pybytes())


@pytest.mark.parametrize("arrow", [
    b"not base64 at all!",
    base64.b64encode(b"\xff\xff\xff\xff\x10\x00\x00\x00" + bytes(16)),
    base64.b64encode(bytes(range(256)) * 4),
    _arrow_schema(pa.schema([("other", pa.int64()), ("text", pa.string())])),  # other names
    _arrow_schema(pa.schema([("length", pa.int64())])),  # fewer fields
    _arrow_schema(pa.schema([("length", pa.string()), ("text", pa.string())])),  # unfit
    _arrow_schema(pa.schema([("length", pa.int64()), ("text", pa.string())]))[:-12],
], ids=["text", "zeros", "noise", "names", "fewer", "unfit", "cut"])
def test_a_forged_arrow_schema_is_left_to_pyarrow(tmp_path, arrow):
    """An ARROW:schema that is no schema, or does not fit the Parquet schema, tells
    nothing (pyarrow then reads the schema, and says what it makes of it)."""
    assert told(_forged(tmp_path, arrow)) is None


def test_a_fitting_arrow_schema_refines_the_types(tmp_path):
    path = _forged(tmp_path, _arrow_schema(pa.schema([("length", pa.int64()),
                                                      ("text", pa.large_string())])))
    got = told(path)
    assert got is not None and got.field("text").type == "large_string" and same(got, path)


def test_damaged_schema_bytes_never_raise():
    """Every prefix of a schema and ARROW:schema, and bytes flipped anywhere in them,
    come back as fields or None: never an exception, never a hang."""
    t = pa.table({"length": pa.array([1], pa.int64()), "ids": pa.array([[1]]),
                  "text": ["a"]})
    sink = pa.BufferOutputStream()
    pq.write_table(t, sink)
    buf = sink.getvalue().to_pybytes()
    tail = np.frombuffer(buf, np.uint8)  # (the ranges as the kernel finds them)
    info = np.zeros((1, fmt.NINFO), np.int64)
    status = pages.parsers.row_groups(tail, tail.size, np.zeros(0, np.uint8), 0,
                                      np.empty((0, 5), np.int64), info,
                                      np.zeros(pages.parsers.WORK, np.int64))[0]
    assert status == fmt.READ
    s = buf[info[0, fmt.I_SCHEMA]:info[0, fmt.I_SCHEMA_END]]
    a = buf[info[0, fmt.I_ARROW]:info[0, fmt.I_ARROW_END]]
    assert schema.told(s, a) is not None
    rng = np.random.default_rng(7)
    for k in range(len(s)):
        schema.told(s[:k], a)
    for k in range(0, len(a), 3):
        schema.told(s, a[:k])
    raw = base64.b64decode(a)
    for _ in range(3000):
        bs, br = bytearray(s), bytearray(raw)
        for _ in range(rng.integers(1, 4)):
            if rng.random() < 0.5:
                bs[rng.integers(len(bs))] = rng.integers(256)
            else:
                br[rng.integers(len(br))] = rng.integers(256)
        got = schema.told(bytes(bs), base64.b64encode(bytes(br)))
        assert got is None or isinstance(got, schema.Fields)


def test_an_arrow_schema_of_shared_children_is_refused_quickly():
    """Flatbuffer tables may share children: 9 levels of 200 children each, all the same
    table, is a tree of 200**8 fields in 7 KB. It is refused once the reader has done
    a few times the work the buffer's size allows, not walked."""
    import struct
    levels, n = 9, 200
    vtable = struct.pack("<HH6H", 16, 8, 0, 0, 0, 0, 0, 4)  # (only field 5: children)
    out = bytearray(vtable)
    for k in range(levels):
        table = len(out)
        vector = table + 8
        out += struct.pack("<iI", table, vector - (table + 4))
        nxt = vector + 4 + 4 * n
        entries = [nxt - (vector + 4 + 4 * i) for i in range(n)] if k < levels - 1 else []
        out += struct.pack(f"<I{len(entries)}I", len(entries), *entries)
    f = schema._Flat(bytes(out))
    with pytest.raises(schema.Malformed):
        schema._arrow(f, len(vtable), 0)
    assert f.work < 0


def test_an_arrow_schema_of_shared_metadata_is_refused_quickly():
    """Many fields sharing one custom-metadata vector of many entries: read once each,
    that is N x M work in a buffer of 4(N + M) bytes."""
    import struct
    m = 5000
    out = bytearray(struct.pack("<HH7H2x", 18, 8, 0, 0, 0, 0, 0, 0, 4))  # field 6 only
    field = len(out)
    out += struct.pack("<iI", field, 4)  # the Field, its metadata vector right after
    kv_vtable = field + 12 + 4 * m
    kv = kv_vtable + 8
    out += struct.pack(f"<I{m}I", m, *[kv - (field + 12 + 4 * i) for i in range(m)])
    out += struct.pack("<HHH2x", 6, 8, 4)  # a KeyValue's vtable: its key at 4
    out += struct.pack("<iII4s", kv - kv_vtable, 4, 1, b"k\0\0\0")
    f = schema._Flat(bytes(out))
    one = schema._arrow(f, field, 0)
    assert not one.extension and f.work > 0
    with pytest.raises(schema.Malformed, match="shared"):
        for _ in range(m):  # (as m top-level fields pointing at this one would)
            schema._arrow(f, field, 0)


def _compact(*elements: dict) -> bytes:
    """A Thrift compact list of SchemaElement structs, each ``{field id: value}`` with
    values: int (i32), str (binary), or a list of ``(id, struct bytes)`` (a union)."""
    def varint(v: int) -> bytes:
        out = bytearray()
        while True:
            if v < 0x80:
                return bytes(out + bytes([v]))
            out.append(v & 0x7F | 0x80)
            v >>= 7

    def struct_(fields: list[tuple[int, int, bytes]]) -> bytes:
        out, last = bytearray(), 0
        for fid, t, value in fields:
            delta = fid - last
            out += (bytes([delta << 4 | t]) if 0 < delta <= 15 else
                    bytes([t]) + varint((fid << 1) ^ (fid >> 15))) + value
            last = fid
        return bytes(out + b"\0")

    body = bytearray([len(elements) << 4 | 12])
    for e in elements:
        fields = []
        for fid, v in e.items() if isinstance(e, dict) else e:
            if isinstance(v, int):
                fields.append((fid, 5, varint((v << 1) ^ (v >> 63))))
            elif isinstance(v, str):
                fields.append((fid, 8, varint(len(v)) + v.encode()))
            else:
                fields.append((fid, 12, v))
        body += struct_(fields)
    return bytes(body)


LOGICAL_DATE = bytes([0x6C, 0x00, 0x00])  # union field 6, an empty struct
LOGICAL_INT32 = bytes([0xAC, 0x13, 0x20, 0x11, 0x00, 0x00])  # field 10: {1: i8 32, 2: true}


@pytest.mark.parametrize("leaf,told_as", [
    ([(1, 1), (3, 0), (4, "n"), (10, LOGICAL_INT32)], "int32"),
    ([(1, 1), (3, 0), (4, "n"), (10, LOGICAL_DATE), (10, LOGICAL_INT32)], None),  # twice
    ([(1, 1), (3, 0), (4, "n"), (10, LOGICAL_INT32), (6, 15)], None),  # int8 beside int32
    ([(1, 1), (3, 0), (4, "n"), (10, LOGICAL_INT32), (6, 17)], "int32"),
], ids=["int32", "logical-twice", "disagreeing", "agreeing"])
def test_a_leaf_is_told_only_when_its_types_agree(leaf, told_as):
    got = schema.told(_compact({4: "schema", 5: 1}, leaf), b"")
    assert (got.field("n").type if got else None) == told_as


def test_a_list_whose_middle_group_is_annotated_is_not_told():
    def elements(middle: dict) -> bytes:
        return _compact({4: "schema", 5: 1}, {3: 1, 4: "l", 5: 1, 6: 3}, middle,
                        {1: 1, 3: 1, 4: "element"})
    plain = schema.told(elements({3: 2, 4: "list", 5: 1}), b"")
    assert plain is not None and plain.field("l").type == "list<element: int32>"
    assert schema.told(elements({3: 2, 4: "list", 5: 1, 6: 3}), b"") is None


def test_an_arrow_schema_of_old_metadata_is_left_to_pyarrow(tmp_path):
    raw = bytearray(pa.schema([("length", pa.int64()), ("text", pa.string())])
                    .serialize().to_pybytes())
    f = schema._Flat(bytes(raw[8:]))
    at = f.slot(f._unpack("<I", 0), 0)  # the Message's version (V5 = 4)
    assert at and raw[8 + at] == 4
    raw[8 + at] = 2  # V3
    assert told(_forged(tmp_path, base64.b64encode(bytes(raw)))) is None


def _dictionary_file(path: Path, rows: int = 1 << 20) -> np.ndarray:
    x = (np.arange(rows, dtype=np.int64) * 7919) % 3001
    pq.write_table(pa.table({"length": x, "text": pa.array(["t"] * rows)}), path,
                   row_group_size=rows // 4)
    return x


def test_a_counted_scan_never_loads_pyarrow(tmp_path):
    """The route of the bench's Parquet rows: planned, counted and reported without
    pyarrow, in numbers equal to the column's."""
    path = tmp_path / "d.parquet"
    x = _dictionary_file(path)
    code = ("import json, sys; from gpu_profiler import api; "
            f"h = api.histogram({str(path)!r}, cap=4096); "
            "print(json.dumps([h.counts.tolist(), 'pyarrow' in sys.modules]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    counts, loaded = json.loads(out.stdout)
    assert counts == np.bincount(x, minlength=4097).tolist()
    assert not loaded, "pyarrow was loaded"


def test_a_file_with_types_not_told_is_still_counted_by_the_kernel(tmp_path, monkeypatch):
    """A timestamp beside the lengths: the schema is pyarrow's, the column the kernel's."""
    path = tmp_path / "ts.parquet"
    x = np.arange(1 << 20, dtype=np.int64) % 500
    pq.write_table(pa.table({"length": x, "at": pa.array(x, pa.timestamp("ms"))}), path,
                   row_group_size=1 << 18)
    part = ParquetPart(path)
    assert part.fields() is None
    calls = []
    real = pages.decode
    monkeypatch.setattr(pages, "decode", lambda *a: calls.append(1) or real(*a))
    from gpu_profiler.api import histogram
    assert histogram(path, cap=600).counts.tolist() == np.bincount(x, minlength=601).tolist()
    assert calls


@pytest.mark.parametrize("how", ["whole", "ranges"])
def test_a_shard_replaced_after_its_schema_was_told_is_named(tmp_path, how):
    """Told, then cut into row-group ranges (a cluster's tasks) or read whole: the file
    read is the version told, or the scan says it changed."""
    path = tmp_path / "s.parquet"
    x = _dictionary_file(path)
    part = ParquetPart(path)
    assert part.fields() is not None  # its footer read, and its version kept
    tmp = tmp_path / "new.parquet"
    pq.write_table(pa.table({"length": x[::-1].copy(), "text": pa.array(["t"] * x.size)}),
                   tmp, row_group_size=x.size // 4)
    os.replace(tmp, path)
    parts = [part] if how == "whole" else row_group_ranges(part, 1)
    with pytest.raises(ProfilerError, match=r"s\.parquet: changed while the scan ran"):
        for p in parts:
            list(p.chunks(Reading(LengthSpec("length"))))
