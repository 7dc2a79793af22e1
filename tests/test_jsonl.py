"""JSON Lines shards (readers/jsonl/): histograms and per-sample lengths equal pyarrow's JSON
reader's column (and Python's json, line by line) on random files, plain and zstd; a bad
line is one error line naming the file and the line, exit 2; memory stays bounded."""

from __future__ import annotations

import hashlib
import json
import os
import re
import struct
import subprocess
import sys
import tempfile
import tracemalloc
from pathlib import Path
from unittest import mock

import numpy as np
import pyarrow as pa
import pyarrow.json as pj
import pyarrow.parquet as pq
import pytest
from conftest import run_cli
from hypothesis import given, settings
from hypothesis import strategies as st

import gpu_profiler as gp
from gpu_profiler import ProfilerError
from gpu_profiler.readers import FORMATS, LengthSpec, Reading, jsonl, open_source, sniff
from gpu_profiler.readers.base import Fields

ZSTD = "zstd"


def write_zstd(path: Path, data: bytes) -> None:
    with pa.CompressedOutputStream(str(path), ZSTD) as f:
        f.write(data)


def pyarrow_column(path: Path, name: str) -> pa.ChunkedArray:
    """The reference: pyarrow's JSON reader, the whole file as one block, for ``name``."""
    parse = pj.ParseOptions(explicit_schema=pa.schema([(name, pa.int64())]),
                            unexpected_field_behavior="ignore")
    read = pj.ReadOptions(block_size=max(path.stat().st_size, 1 << 20))
    with pa.input_stream(str(path), compression=ZSTD if path.suffix == ".zst" else None) as f:
        return pj.read_json(f, read_options=read, parse_options=parse).column(name)


def python_lengths(text: bytes, name: str) -> list[int | None]:
    """A second reference, independent of pyarrow: ``json.loads`` line by line."""
    out = []
    for line in text.decode().split("\n"):
        if line.strip(" \t\r"):
            value = json.loads(line).get(name)
            assert value is None or type(value) is int
            out.append(value)
    return out


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ------------------------------------------------------------------ random files vs pyarrow
NAMES = ["n", "num_tokens", "length", "länge", 'a"b', "a\\b", "n n"]
scalars = (st.none() | st.booleans() | st.integers(-2**63, 2**63 - 1)
           | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=12))
values = st.recursive(scalars, lambda kids: st.lists(kids, max_size=3)
                      | st.dictionaries(st.sampled_from(NAMES) | st.text(max_size=5), kids,
                                        max_size=3), max_leaves=8)


@st.composite
def jsonl_files(draw, name: str | None = None):
    """(file bytes, field name, or ``name``): objects with the field an int, null or
    absent, among random extra fields (nested values, strings holding the name or ``"name":
    1``, unicode) in random order, written compact or spaced, ASCII or UTF-8, with blank
    lines, LF or CRLF, with or without a final newline."""
    name = name or draw(st.sampled_from(NAMES))
    extra = st.text(max_size=6).filter(lambda k: k != name)
    decoy = st.sampled_from([name, f'"{name}": 7', f"{{{json.dumps(name)}: 8}}"])
    lines = []
    for i in range(draw(st.integers(1, 40))):
        if i and draw(st.integers(0, 9)) == 0:
            lines.append(draw(st.sampled_from(["", " ", "\t", " \r"])))
            continue
        fields = list(draw(st.dictionaries(extra, values | decoy, max_size=4)).items())
        # the first object has the field: a field is found in the file's first objects
        length = draw(st.sampled_from(["int", "int", "int", "null"] + ["absent"] * bool(i)))
        if length != "absent":
            fields.append((name, draw(st.integers(-3, 3000)) if length == "int" else None))
        fields = draw(st.permutations(fields))
        sep = draw(st.sampled_from([(",", ":"), (", ", ": ")]))
        lines.append(json.dumps(dict(fields), separators=sep,
                                ensure_ascii=draw(st.booleans()), allow_nan=False))
    newline = draw(st.sampled_from(["\n", "\r\n"]))
    text = newline.join(lines) + draw(st.sampled_from(["", newline]))
    return text.encode(), name


#: How a file's text reaches the parse: mapped (a plain file the page cache holds), read
#: into buffers (any other plain file), or decompressed (zstd); and the I/O mode for it.
ROUTES = ("mapped", "read", "zstd")
IO = {"mapped": "auto", "read": "buffered", "zstd": "auto"}

SIZES = st.fixed_dictionaries({"BLOCK": st.sampled_from([64, 200, 4096, 16 << 20]),
                               "PARSE_BLOCK": st.sampled_from([64, 1000, 1 << 20]),
                               "SCHEMA_BYTES": st.sampled_from([64, 64 << 10]),
                               "PIECE_BYTES": st.sampled_from([1, 1 << 20])})


@pytest.mark.slow  # 80 random files, ~10 s (the native parse is checked at random by default)
@settings(max_examples=80, deadline=None)
@given(file=jsonl_files(), sizes=SIZES, route=st.sampled_from(ROUTES))
def test_random_files_equal_pyarrow_and_python_json(file, sizes, route):
    """Small blocks cut lines at every place and make pyarrow's threads straddle lines."""
    text, name = file
    zstd = route == "zstd"
    with tempfile.TemporaryDirectory() as tmp, mock.patch.multiple(jsonl, **sizes), \
            mock.patch.dict(os.environ, {"GPU_PROFILER_IO": IO[route]}):
        path = Path(tmp) / ("data.jsonl.zst" if zstd else "data.jsonl")
        if zstd:
            write_zstd(path, text)
        else:
            path.write_bytes(text)
        before = digest(path)
        ref = pyarrow_column(path, name)
        assert ref.to_pylist() == python_lengths(text, name)
        got = gp.lengths(str(path), column=name)
        want = ref.fill_null(-1).to_numpy()
        np.testing.assert_array_equal(got, want)
        for cap in (100, 5000):
            assert gp.histogram(str(path), column=name, backend="numpy", cap=cap) == \
                gp.histogram(ref, backend="numpy", cap=cap)
        assert digest(path) == before


def test_a_corpus_of_shards_plain_and_zstd(tmp_path):
    """A directory of .jsonl and .jsonl.zst shards (the zstd one written as several frames,
    as `cat a.zst b.zst` makes): one histogram, lengths in file order."""
    rng = np.random.default_rng(0)
    parts = [rng.integers(0, 9000, n) for n in (1000, 2500, 10)]
    texts = [b"".join(b'{"text": "%s", "num_tokens": %d, "meta": {"num_tokens": "x"}}\n'
                      % (b"w" * int(v % 50), v) for v in p) for p in parts]
    (tmp_path / "a.jsonl").write_bytes(texts[0])
    write_zstd(tmp_path / "b1.jsonl.zst", texts[1][:20000])
    write_zstd(tmp_path / "b2.jsonl.zst", texts[1][20000:])
    (tmp_path / "b.jsonl.zst").write_bytes((tmp_path / "b1.jsonl.zst").read_bytes()
                                          + (tmp_path / "b2.jsonl.zst").read_bytes())
    (tmp_path / "b1.jsonl.zst").unlink()
    (tmp_path / "b2.jsonl.zst").unlink()
    (tmp_path / "c.jsonl").write_bytes(texts[2])
    (tmp_path / "notes.txt").write_text("not a shard")
    every = np.concatenate(parts)
    got = gp.lengths(str(tmp_path), column="num_tokens")
    np.testing.assert_array_equal(got, every)
    assert gp.histogram(str(tmp_path), backend="numpy", cap=8192) == \
        gp.histogram(every, backend="numpy", cap=8192)
    assert gp.histogram(str(tmp_path / "*.jsonl*"), column="num_tokens", backend="numpy",
                        cap=8192) == gp.histogram(every, backend="numpy", cap=8192)


def test_a_small_shard_takes_a_small_buffer_and_one_piece(tmp_path):
    """A plain shard's blocks are read into buffers no larger than the file (2,000 shards of
    5 KB took 8.5 s and 316 MB, each zeroing two 16 MiB buffers); a block under
    `PIECE_BYTES` is one piece and a shard under it is read without a read-ahead thread,
    and pieces or the thread give the same lengths."""
    rng = np.random.default_rng(3)
    values = rng.integers(0, 5000, 300)
    path = tmp_path / "s.jsonl"
    path.write_bytes(b"".join(b'{"t": "%s", "length": %d}\n' % (b"x" * int(v % 9), v)
                              for v in values))
    sizes = [len(block.obj) for block, _, _ in jsonl._blocks(path, jsonl.BLOCK, buffers=3)]
    assert sizes and max(sizes) <= path.stat().st_size + 1
    np.testing.assert_array_equal(gp.lengths(str(path)), values)
    with mock.patch.object(jsonl, "PIECE_BYTES", 1):  # pieces, and a read-ahead thread
        np.testing.assert_array_equal(gp.lengths(str(path)), values)
    for ahead in (False, True):
        got = list(jsonl.chunks(path, LengthSpec("length"), ahead=ahead))
        np.testing.assert_array_equal(np.concatenate([c.data for c in got]), values)
    zpath = tmp_path / "s.jsonl.zst"
    write_zstd(zpath, path.read_bytes())  # its size unknown until read: a block's buffer
    np.testing.assert_array_equal(gp.lengths(str(zpath)), values)


def test_long_lines_and_a_long_first_line(tmp_path):
    """Lines far longer than a block (and than pyarrow's block) are read whole."""
    lines = [{"text": "x" * (3 << 20), "length": 5}, {"length": 6},
             {"text": "é" * (1 << 20), "length": 7}, {"length": 8}]
    path = tmp_path / "long.jsonl"
    path.write_text("\n".join(json.dumps(x, ensure_ascii=False) for x in lines) + "\n")
    with mock.patch.multiple(jsonl, BLOCK=1 << 16, SCHEMA_BYTES=1 << 10):
        np.testing.assert_array_equal(gp.lengths(str(path)), [5, 6, 7, 8])
        assert open_source(str(path))[""][0].schema().names == ["text", "length"]


# ------------------------------------------------------------------------------- schema
def test_schema_is_the_first_objects_fields_coarsely_typed(tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_text('{"id": "a", "ts": "2024-01-01", "score": 0.5, "ok": true, '
                    '"meta": {"x": 1}, "ids": [1, 2], "num_tokens": null, "note": null}\n'
                    '{"num_tokens": 12, "late": 3}\n')
    coarse = [("id", "string"), ("ts", "string"), ("score", "double"), ("ok", "bool"),
              ("meta", "struct<>"), ("ids", "list<item: null>"), ("num_tokens", "int64"),
              ("note", "int64"), ("late", "int64")]
    # planned without pyarrow (`fields`), read with its types (`schema`): named alike
    assert [(f.name, f.type) for f in jsonl.fields(path)] == coarse
    assert [(f.name, str(f.type)) for f in jsonl.JsonlPart(path).schema()] == coarse
    # the default column: 'length' if present, else the only integer field
    (tmp_path / "one.jsonl").write_text('{"text": "a", "num_tokens": 3, "x": 0.5}\n')
    np.testing.assert_array_equal(gp.lengths(str(tmp_path / "one.jsonl")), [3])
    (tmp_path / "len.jsonl").write_text('{"length": 4, "num_tokens": 3}\n')
    np.testing.assert_array_equal(gp.lengths(str(tmp_path / "len.jsonl")), [4])


def test_shards_whose_nested_values_differ_share_a_schema(tmp_path):
    (tmp_path / "a.jsonl").write_text('{"meta": {"url": "u"}, "ids": [1], "length": 1}\n')
    (tmp_path / "b.jsonl").write_text('{"meta": {"lang": 3}, "ids": ["x"], "length": 2}\n')
    np.testing.assert_array_equal(gp.lengths(str(tmp_path)), [1, 2])
    assert gp.histogram(str(tmp_path), backend="numpy").total == 2


def test_a_file_without_objects_has_no_fields(tmp_path):
    (tmp_path / "e.jsonl").write_bytes(b"")
    (tmp_path / "b.jsonl").write_bytes(b"\n  \n\r\n")
    for name in ("e.jsonl", "b.jsonl"):
        assert jsonl.fields(tmp_path / name) == Fields(())
        assert jsonl.JsonlPart(tmp_path / name).schema() == pa.schema([])
        with pytest.raises(ProfilerError, match="no column 'n'; columns: none"):
            gp.histogram(str(tmp_path / name), column="n")


def test_lines_the_native_parse_takes_are_planned_and_read_without_pyarrow(tmp_path):
    """Planned by `fields`, read by Python's file object (~30 ms of a process, and ~25 MiB,
    saved): one file, shards read together, and the CLI; a line the native parse leaves
    (an escaped key) is pyarrow's, and loads it."""
    lines = "".join(json.dumps({"n": k, "t": "日本 \"x\"", "m": {"a": [1, 2.5, None]}},
                               ensure_ascii=k % 2 == 0) + "\n" for k in range(200))
    (tmp_path / "one.jsonl").write_text(lines)
    (tmp_path / "shards").mkdir()
    for k in range(3):
        (tmp_path / "shards" / f"{k}.jsonl").write_text(lines)
    (tmp_path / "escaped.jsonl").write_text('{"\\u006e": 4}\n' + lines)

    def loaded(code: str, path: Path) -> list[str]:
        out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True,
                             text=True, timeout=300)
        return out.stdout.split() + out.stderr.split()

    api = ("import sys, gpu_profiler as gp; h = gp.histogram(sys.argv[1], column='n'); "
           "print(h.total, 'pyarrow' in sys.modules)")
    assert loaded(api, tmp_path / "one.jsonl") == ["200", "False"]
    assert loaded(api, tmp_path / "shards") == ["600", "False"]
    assert loaded(api, tmp_path / "escaped.jsonl") == ["201", "True"]
    cli = ("import sys; from gpu_profiler.cli import main\ntry:\n    main(['profile', "
           "sys.argv[1], '-q', '-f', 'csv', '-c', 'n'])\nexcept SystemExit:\n"
           "    print('pyarrow' in sys.modules, file=sys.stderr)")
    assert loaded(cli, tmp_path / "one.jsonl")[-1] == "False"


@pytest.mark.parametrize("column, offsets_of", [
    (None, None), ("n", None), ("s", None), ("l", None), ("x", None), (None, "l"),
    (None, "n"), ("n", "l")])
@pytest.mark.parametrize("types", [
    {"n": "int64", "s": "string", "l": "list<item: null>", "d": "double"},
    {"s": "string", "m": "int64", "n": "int64"}, {"length": "bool", "b": "struct<>"}, {}])
def test_fields_are_checked_as_the_pyarrow_schema_they_name(types, column, offsets_of):
    """Planning a `Fields` (JSON Lines' light schema) says what planning the pyarrow schema
    of the same types says: the same length source, or the same error."""
    from gpu_profiler.readers.base import Field, resolve_spec

    light = Fields(tuple(Field(n, t) for n, t in types.items()))
    arrow = jsonl._arrow(light)
    assert [str(f.type) for f in arrow] == list(types.values())

    def said(schema: object) -> object:
        try:
            return resolve_spec(schema, column, offsets_of, "x.jsonl", list_offsets=False)
        except ProfilerError as exc:
            return str(exc)

    assert said(light) == said(arrow)


def test_json_lines_named_beside_parquet_are_checked_against_it(tmp_path):
    """A JSON Lines file's schema (`Fields`) and a Parquet file's (pyarrow's), named
    together in either order: the same length source is read from both, another is
    refused naming the fields."""
    (tmp_path / "a.jsonl").write_text('{"n": 3, "t": "x"}\n{"n": 9}\n')
    pq.write_table(pa.table({"n": pa.array([4, 5], pa.int32())}), tmp_path / "b.parquet")
    pq.write_table(pa.table({"m": [4, 5]}), tmp_path / "c.parquet")
    a, b, c = (str(tmp_path / f) for f in ("a.jsonl", "b.parquet", "c.parquet"))
    for paths in ([a, b], [b, a]):
        assert gp.histogram(paths, column="n").total == 4
    with pytest.raises(ProfilerError, match=r"c.parquet: schema differs from .*a.jsonl in "
                       r"its length source \(column 'n'\): n: missing vs int64; t: missing "
                       r"vs string; m: int64 vs missing"):
        gp.histogram([a, c], column="n")
    with pytest.raises(ProfilerError, match=r"a.jsonl: schema differs from .*c.parquet"):
        gp.histogram([c, a], column="m")


# ----------------------------------------------------------------------------- sniffing
def test_sniffing_by_name_and_zstd_magic(tmp_path):
    (tmp_path / "a.jsonl").write_text('{"length": 1}\n')
    write_zstd(tmp_path / "b.jsonl.zst", b'{"length": 2}\n')
    assert sniff(tmp_path / "a.jsonl") is FORMATS["jsonl"]
    assert sniff(tmp_path / "b.jsonl.zst") is FORMATS["jsonl"]
    # a .jsonl.zst that is not zstd is not taken for one
    (tmp_path / "c.jsonl.zst").write_text('{"length": 3}\n')
    with pytest.raises(ProfilerError, match="unrecognized magic bytes"):
        sniff(tmp_path / "c.jsonl.zst")
    # a Parquet file, whatever its name, is Parquet (its magic is sniffed first)
    pq.write_table(pa.table({"length": [4, 5]}), tmp_path / "d.jsonl")
    np.testing.assert_array_equal(gp.lengths(str(tmp_path / "d.jsonl")), [4, 5])
    # bytes an IPC stream opens with do not make a .jsonl one: it is bad JSON Lines
    (tmp_path / "e.jsonl").write_bytes(b"\xff\xff\xff\xff" + b"\x00" * 12)
    assert sniff(tmp_path / "e.jsonl") is FORMATS["jsonl"]
    names = list(FORMATS)
    assert names.index("jsonl") < names.index("ipc-stream")
    # --format jsonl reads any name; compression is told by the magic bytes
    write_zstd(tmp_path / "f.data", b'{"length": 6}\n')
    np.testing.assert_array_equal(gp.lengths(str(tmp_path / "f.data"), format="jsonl"), [6])
    os.replace(tmp_path / "f.data", tmp_path / "f.jsonl")
    np.testing.assert_array_equal(gp.lengths(str(tmp_path / "f.jsonl")), [6])


# -------------------------------------------------------------------------- bad input
GOOD = '{"n": 1, "t": "a"}\n'
BAD_LINES = [
    ('{"n": 2.5}', r"line \d+: 'n' is 2.5: not an integer"),
    ('{"n": 1e3}', r"line \d+: 'n' is 1e3: not an integer"),
    ('{"n": "12"}', r"line \d+: 'n' is a string, not an integer"),
    ('{"n": true}', r"line \d+: 'n' is a boolean, not an integer"),
    ('{"n": {"v": 1}}', r"line \d+: 'n' is an object, not an integer"),
    ('{"n": [1]}', r"line \d+: 'n' is an array, not an integer"),
    ('{"n": 9223372036854775808}', r"line \d+: 'n' is 9223372036854775808: outside the int64"),
    ('{"n": 1, "n": 2}', r"line \d+: 'n' appears twice"),
    ('[1, 2]', r"line \d+: not a JSON object but an array"),
    ('7', r"line \d+: not a JSON object but a number"),
    ('{"n": 1,, "t": 2}', r"line \d+: invalid JSON: Missing a name for object member"),
    ('{"n": 01}', r"line \d+: invalid JSON"),
    ('{"n": 1} trailing', r"line \d+: invalid JSON"),
    ('{"n": 1}{"n": 2}', r"line \d+: holds 2 JSON values, not one object \(a missing newline"),
    ('  "text"', r"line \d+: not a JSON object but a string"),
    ('"n": 1}', r"line \d+: invalid JSON: Extra data"),
    ('{"n":', r"line \d+: invalid JSON"),
    ('{"t": "a\tb", "n": 1}', r"line \d+: invalid JSON"),  # a raw tab inside a string
    ('\x00', r"line \d+: invalid JSON"),
]


@pytest.mark.parametrize("block", [1 << 20, 256])
@pytest.mark.parametrize("bad, message", BAD_LINES, ids=[b for b, _ in BAD_LINES])
def test_a_bad_line_is_one_error_line_naming_it(bad, message, block, tmp_path, capsys):
    """Line 1502 of 3000 (after blank lines and lines that are fine), in one block or in
    one of many: one line on stderr naming the file and the line, exit 2."""
    path = tmp_path / "bad.jsonl"
    path.write_text(GOOD * 1000 + "\n" * 500 + GOOD + bad + "\n" + GOOD * 1498)
    before = digest(path)
    with mock.patch.object(jsonl, "BLOCK", block):
        rc, out, err = run_cli(["profile", path, "--column", "n", "--backend", "numpy"], capsys)
    assert (rc, out) == (2, "")
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"gpu-profiler: error: {path}: line 1502:")
    assert re.search(message, lines[0]), lines[0]
    assert "Traceback" not in err
    assert digest(path) == before
    with pytest.raises(ProfilerError, match="line 1502:"):
        gp.lengths(str(path), column="n")


@settings(max_examples=150, deadline=None)
@given(lines=st.lists(st.sampled_from([GOOD, "\n", ' {"n": 7}\r\n']), min_size=1,
                      max_size=300),
       bad=st.sampled_from(['{"n": 2.5}', '{"n": 1}{"n": 1}', "[1]", '  "x"', '{"n":']),
       at=st.integers(0, 299), block=st.sampled_from([64, 300, 1 << 20]),
       io=st.sampled_from(["auto", "buffered"]))
def test_the_bad_line_named_is_the_bad_line(lines, bad, at, block, io):
    """Wherever the bad line falls among blocks and bisection steps, its number is said,
    in a file mapped or read."""
    at = min(at, len(lines))
    lines = [GOOD, *lines[:at], bad + "\n", *lines[at:]]
    with tempfile.TemporaryDirectory() as tmp, mock.patch.object(jsonl, "BLOCK", block), \
            mock.patch.dict(os.environ, {"GPU_PROFILER_IO": io}):
        path = Path(tmp) / "bad.jsonl"
        path.write_text("".join(lines))
        with pytest.raises(ProfilerError, match=f"bad.jsonl: line {at + 2}: "):
            gp.lengths(str(path), column="n")


def test_a_bad_first_line_is_named_by_the_schema(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('\n\n{"n": 1,, "x": 2}\n' + GOOD)
    with pytest.raises(ProfilerError, match=r"bad.jsonl: line 3: invalid JSON"):
        gp.histogram(str(path))


def test_a_byte_order_mark_opens_a_file_as_pyarrow_takes_it(tmp_path):
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + b'{"n": 4, "t": "x"}\n{"n": 5}\n')
    assert jsonl.fields(path).names == ["n", "t"]
    np.testing.assert_array_equal(gp.lengths(str(path)), pyarrow_column(path, "n").to_numpy())
    path.write_bytes(b'{"n": 4}\n\xef\xbb\xbf{"n": 5}\n')  # only the file opens with one
    with pytest.raises(ProfilerError, match="line 2: invalid JSON"):
        gp.lengths(str(path))


def test_deep_nesting(tmp_path):
    """pyarrow reads any depth; Python's json (the schema's first objects) ~1000 levels."""
    deep = '{"a": ' + "[" * 5000 + "]" * 5000 + ', "n": %d}\n'
    path = tmp_path / "deep.jsonl"
    path.write_text('{"n": 1}\n' + deep % 2 + deep % 3)
    np.testing.assert_array_equal(gp.lengths(str(path), column="n"), [1, 2, 3])
    path.write_text(deep % 2 + '{"n": 1}\n')
    with pytest.raises(ProfilerError, match="deep.jsonl: line 1: nested too deeply to read "
                                            "its fields"):
        gp.lengths(str(path), column="n")


def test_the_field_missing_or_null_is_a_null_length(tmp_path):
    path = tmp_path / "n.jsonl"
    path.write_text('{"n": 5}\n{"m": 5}\n{"n": null}\n{"a": {"n": 9}}\n{"n": -2}\n')
    np.testing.assert_array_equal(gp.lengths(str(path), column="n"), [5, -1, -1, -1, -2])
    h = gp.histogram(str(path), column="n", backend="numpy")
    assert (h.valid, h.null_count, h.invalid_count) == (1, 3, 1)


def test_a_truncated_file_says_so(tmp_path, capsys):
    path = tmp_path / "cut.jsonl"
    path.write_text(GOOD * 10 + '{"n": 3, "t": "and then')
    rc, _, err = run_cli(["profile", path, "-c", "n"], capsys)
    assert rc == 2
    assert "cut.jsonl: line 11: invalid JSON: Missing a closing quotation mark in string " \
        "(the file ends inside this line: truncated?)" in err


@pytest.mark.parametrize("block", [1 << 20, 64])
def test_invalid_utf8_is_an_error_naming_the_line(block, tmp_path, capsys):
    """pyarrow skips the strings it does not keep unchecked; JSON is UTF-8, so we do not."""
    path = tmp_path / "latin1.jsonl"
    path.write_bytes(GOOD.encode() * 30 + '{"t": "café", "n": 2}\n'.encode("latin-1"))
    with mock.patch.object(jsonl, "BLOCK", block):
        rc, _, err = run_cli(["profile", path, "-c", "n"], capsys)
    assert rc == 2 and len(err.strip().splitlines()) == 1
    assert "latin1.jsonl: line 31: invalid UTF-8 (byte 0xe9 at byte 11 of the line)" in err


def test_an_offsets_of_request_is_refused(tmp_path, capsys):
    path = tmp_path / "ids.jsonl"
    path.write_text('{"input_ids": [1, 2, 3]}\n')
    rc, _, err = run_cli(["profile", path, "--offsets-of", "input_ids"], capsys)
    assert rc == 2 and f"--offsets-of does not apply to {path} (JSON Lines)" in err
    with pytest.raises(ProfilerError, match="JSON Lines lengths come from an integer field"):
        next(jsonl.JsonlPart(path).chunks(Reading(LengthSpec("input_ids", offsets=True))))


def test_column_errors_list_the_fields(tmp_path, capsys):
    path = tmp_path / "c.jsonl"
    path.write_text('{"text": "a", "num_tokens": 3, "meta": {"k": 1}}\n')
    rc, _, err = run_cli(["profile", path, "--column", "nope"], capsys)
    assert rc == 2 and "no column 'nope'; columns: text (string), num_tokens (int64), " \
        "meta (struct<>)" in err
    rc, _, err = run_cli(["profile", path, "--column", "text"], capsys)
    assert rc == 2 and "column 'text' has type string; lengths must be integers" in err


# ------------------------------------------------------------------- hostile, bounded
def test_a_line_without_end_is_refused_in_bounded_memory(tmp_path, capsys):
    """64 MiB with no newline (a zstd bomb of a few KiB) stops at MAX_LINE, holding about
    that much: the reader never buffers a line without bound."""
    path = tmp_path / "bomb.jsonl.zst"
    with pa.CompressedOutputStream(str(path), ZSTD) as f:
        f.write(b'{"n": 1, "t": "')
        for _ in range(64):
            f.write(b"a" * (1 << 20))
    assert path.stat().st_size < 64 << 10
    with mock.patch.multiple(jsonl, MAX_LINE=1 << 20, BLOCK=1 << 18):
        tracemalloc.start()
        try:
            rc, _, err = run_cli(["profile", path, "-c", "n"], capsys)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert rc == 2 and len(err.strip().splitlines()) == 1
    assert "bomb.jsonl.zst: line 1 runs over 1 MiB without a newline: not JSON Lines" in err
    assert peak < 8 << 20


@pytest.mark.parametrize("block", [256, 4096])
@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("piece", [1, 1 << 20])  # read ahead in a thread, in pieces; or not
def test_an_overlong_line_after_many_blocks_is_named(block, route, piece, tmp_path,
                                                     monkeypatch):
    """The reader of a plainly named field counts no lines (the parse does): an error of
    its own, blocks into the file, names its line all the same, as the checked read (of a
    name JSON escapes) names it."""
    monkeypatch.setenv("GPU_PROFILER_IO", IO[route])
    zstd = route == "zstd"
    good = '{"n": 1, "q\\"": 2, "t": "a"}\n'  # q": a name JSON escapes
    handed = '{"\\u006e": 4, "q\\"": 5}\n' * 20  # "n" escaped: parsed by pyarrow, 8 at once
    text = (good * 300 + "\n" * 7 + ' {"n": 2, "q\\"": 3}\r\n' * 9 + handed).encode() \
        + b'{"n": 1, "t": "' + b"y" * (9 << 10) + b'"}\n' + good.encode()
    path = tmp_path / ("long.jsonl.zst" if zstd else "long.jsonl")
    if zstd:
        write_zstd(path, text)
    else:
        path.write_bytes(text)
    said = []
    for column in ("n", 'q"'):  # fast, then checked (read alone: not with small shards)
        with mock.patch.multiple(jsonl, MAX_LINE=1 << 11, BLOCK=block, PIECE_BYTES=piece), \
                pytest.raises(ProfilerError) as exc:
            gp.lengths(str(path), column=column)
        said.append(str(exc.value))
    assert said[0] == f"{path}: line 337 runs over 0.00195312 MiB without a newline: not " \
        "JSON Lines"
    assert said[0] == said[1]


@pytest.mark.parametrize("fast", [True, False])
def test_a_file_the_page_cache_holds_is_mapped_not_copied(fast, tmp_path, monkeypatch):
    """A warm plain file's blocks are read-only views of its mapping, any other's views of
    writable buffers; both give the same lengths and name the same line, past whitespace
    runs longer than a line may be, lines longer than a block, and a last line without a
    newline."""
    path = tmp_path / "warm.jsonl"
    name = "n" if fast else 'q"'  # a name JSON escapes: the checked read (lines counted)
    text = (GOOD + " " * 1500 + '{"n": 3, "q\\"": 4}\n' + "\t\r\n" * 300
            + '{"n": 9, "q\\"": 1, "t": "' + "z" * 900 + '"}\n' + GOOD * 5
            + '{"n": 2, "q\\"": 6}')
    path.write_text(text)
    want = [json.loads(x).get(name, -1) for x in text.splitlines() if x.strip()]
    got = {}
    for io in ("auto", "buffered"):
        monkeypatch.setenv("GPU_PROFILER_IO", io)
        with mock.patch.multiple(jsonl, BLOCK=256, MAX_LINE=1024):
            blocks = [(b.readonly, b.tobytes())  # (a read buffer is reused: copied here)
                      for b, _, _ in jsonl._blocks(path, 256, checked=not fast, mapped=True)]
            got[io] = gp.lengths(str(path), column=name).tolist()
        assert {readonly for readonly, _ in blocks} == {io == "auto"}
        assert b"".join(b for _, b in blocks).replace(b" ", b"") == \
            text.encode().replace(b" ", b"")  # (leading whitespace runs may be dropped)
    assert got["auto"] == got["buffered"] == want
    path.write_text(text + "\n" + GOOD * 3 + '{"n": ]}\n')
    for io in ("auto", "buffered"):
        monkeypatch.setenv("GPU_PROFILER_IO", io)
        with mock.patch.multiple(jsonl, BLOCK=256, MAX_LINE=1024), \
                pytest.raises(ProfilerError, match=r"warm.jsonl: line 313: invalid JSON"):
            gp.lengths(str(path), column=name)


def test_streaming_holds_a_block_not_the_file(tmp_path):
    """A file of 40 blocks is read with Python-side buffers of about one block."""
    path = tmp_path / "big.jsonl"
    line = b'{"t": "%s", "n": 7}\n' % (b"x" * 80)
    path.write_bytes(line * ((40 << 20) // len(line)))
    with mock.patch.object(jsonl, "BLOCK", 1 << 20):
        tracemalloc.start()
        try:
            h = gp.histogram(str(path), column="n", backend="numpy")
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert h.total == (40 << 20) // len(line)
    assert peak < 24 << 20


ZSTD_HOSTILE = {
    # a frame header claiming 2 GiB of content (and a window as large) in a tiny file
    "claim": b"\x28\xb5\x2f\xfd" + bytes([0xA0]) + struct.pack("<I", 2**31) + b"\x00" * 16,
    "garbage": b"\x28\xb5\x2f\xfd" + b"not a zstd frame at all" * 4,
}


@pytest.mark.parametrize("kind", [*ZSTD_HOSTILE, "truncated", "trailing junk"])
def test_hostile_zstd_is_one_line(kind, tmp_path, capsys):
    path = tmp_path / "h.jsonl.zst"
    if kind in ZSTD_HOSTILE:
        path.write_bytes(ZSTD_HOSTILE[kind])
    else:
        write_zstd(path, (GOOD * 5000).encode())
        data = path.read_bytes()
        path.write_bytes(data[:len(data) // 2] if kind == "truncated" else data + b"junk")
    before = digest(path)
    rc, out, err = run_cli(["profile", path, "-c", "n"], capsys)
    assert (rc, out) == (2, "")
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"gpu-profiler: error: {path}: corrupt or truncated zstd "
                               "stream at line "), lines[0]
    assert digest(path) == before


def test_random_bytes_named_jsonl_are_one_line(tmp_path, capsys):
    rng = np.random.default_rng(3)
    for i in range(20):
        path = tmp_path / f"r{i}.jsonl"
        path.write_bytes(rng.integers(0, 256, int(rng.integers(1, 5000)), np.uint8).tobytes())
        rc, out, err = run_cli(["profile", path, "-c", "n"], capsys)
        assert (rc, out) == (2, ""), err
        assert len(err.strip().splitlines()) == 1 and str(path) in err and \
            "Traceback" not in err


@pytest.mark.parametrize("text", ["null\n" + GOOD, "\n  null\n", GOOD + "null\n" + GOOD,
                                  GOOD * 3 + '{"n": 2.5}\nnull\n', GOOD + '{"n": 1} null\n',
                                  "\ufeffnull\n"])
def test_a_null_line_is_an_error_not_a_crash(text, tmp_path):
    """pyarrow 26 crashes (SIGSEGV) on a buffer whose first value is null: such a line must
    never reach it. Run in a child process, so a crash fails this test, not the session."""
    path = tmp_path / "null.jsonl"
    path.write_text(text)
    for block in (64, 1 << 20):
        code = ("import sys; from gpu_profiler.cli import main; from gpu_profiler.readers "
                f"import jsonl; jsonl.BLOCK = {block}; main(sys.argv[1:])")
        done = subprocess.run([sys.executable, "-c", code, "profile", str(path), "-c", "n"],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 2, (done.returncode, done.stderr)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and re.search(r"null.jsonl: line \d+: (not a JSON object but "
                                             r"null|'n' is 2.5|holds 2 JSON values)", lines[0])


def test_no_integer_field_is_told_only_the_fix_jsonl_takes(tmp_path, capsys):
    """A JSONL file with no integer field was told to try --offsets-of, which JSONL does
    not take."""
    from conftest import run_cli

    path = tmp_path / "t.jsonl"
    path.write_text('{"text": "a"}\n{"text": "b"}\n')
    code, _, err = run_cli(["profile", path, "-q"], capsys)
    assert code == 2 and "pick one with --column;" in err and "--offsets-of" not in err


def test_a_bad_line_is_named_before_a_later_block_fails_to_read(tmp_path, capsys):
    """Blocks are parsed a block ahead (the next one's pieces start before the last is
    finished): a bad line is still the error, not a later block's failure to be read."""
    path = tmp_path / "two.jsonl"
    good = b'{"t": "%s", "n": 7}\n' % (b"x" * 80)
    path.write_bytes(good * 600 + b'{"n": "seven"}\n' + b'{"n": 1, "t": "' + b"a" * (1 << 20))
    with mock.patch.multiple(jsonl, MAX_LINE=1 << 18, BLOCK=1 << 16, PIECE_BYTES=1):
        rc, _, err = run_cli(["profile", path, "-c", "n"], capsys)
    assert rc == 2 and len(err.strip().splitlines()) == 1
    assert "two.jsonl: line 601" in err, err


def test_a_line_the_native_parse_does_not_take_costs_pyarrow_that_line(tmp_path):
    """A valid line the native parse leaves (an escaped key) is parsed alone by pyarrow and
    the native parse goes on after it; from the `HANDED`-th such line of a block, pyarrow
    parses the rest of the block in one call. Every value as pyarrow reads the file."""
    good = b'{"t": "%s", "n": %d}\n'
    left = b'{"\\u0074": "escaped key", "n": %d}\n'
    for every in (200, 3):  # 5 lines of 1,000 left; a third of them (past HANDED)
        lines = [left % k if k % every == every // 2 else good % (b"x" * (k % 50), k)
                 for k in range(1000)]
        path = tmp_path / f"every-{every}.jsonl"
        path.write_bytes(b"".join(lines))
        parsed: list[int] = []

        def spy(block, *args, parse=jsonl._parse, parsed=parsed):
            parsed.append(len(block))
            return parse(block, *args)

        with mock.patch.object(jsonl, "_parse", spy):
            got = gp.lengths(str(path), column="n")
        np.testing.assert_array_equal(got, np.arange(1000))
        handed = [len(x) for x in lines[every // 2::every]]
        if every == 200:
            assert parsed == handed
        else:
            assert parsed[:jsonl.HANDED - 1] == handed[:jsonl.HANDED - 1]
            assert len(parsed) == jsonl.HANDED
            assert parsed[-1] == sum(map(len, lines[every // 2 + every * (jsonl.HANDED - 1):]))
