"""Small JSON Lines shards read together (readers/jsonl/many.py): a directory of random
shards gives the numbers (or the one-line error) each shard's own reader gives; a shard is
read together only when all of it parses and its first object holds the field as an
integer, and every other is left to its own reader."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_jsonl import NAMES, jsonl_files, pyarrow_column, write_zstd

import gpu_profiler as gp
from gpu_profiler import ProfilerError
from gpu_profiler.readers import LengthSpec, Reading, jsonl
from gpu_profiler.readers.jsonl import JsonlPart
from gpu_profiler.readers.jsonl import many as jsonl_many

CAP = 5000


def scan(source: Path, name: str, together: bool) -> object:
    """The histogram of ``source`` (or its error's text), shards read together or not."""
    saved = JsonlPart.__dict__["together"]  # (the staticmethod itself)
    if not together:
        JsonlPart.together = None  # type: ignore[assignment,misc]
    try:
        return gp.histogram(str(source), column=name, cap=CAP)
    except ProfilerError as exc:
        return str(exc)
    finally:
        JsonlPart.together = saved  # type: ignore[misc]


def read_together(paths: list[Path], name: str) -> tuple[list[int], np.ndarray, np.ndarray]:
    """``(left, values, valid)`` of one together call."""
    joined = jsonl_many.together([JsonlPart(p) for p in paths], Reading(LengthSpec(name)),
                                 None)
    chunks = list(joined.chunks())
    values = np.concatenate([c.data for c in chunks]) if chunks else np.zeros(0, np.int64)
    valid = np.concatenate([np.ones(c.samples, bool) if c.valid is None else c.valid
                            for c in chunks]) if chunks else np.zeros(0, bool)
    return joined.left(), values, valid


@pytest.mark.slow  # 60 random directories, ~10 s
@settings(max_examples=60, deadline=None)
@given(named=st.sampled_from(NAMES).flatmap(
    lambda n: st.tuples(st.just(n), st.lists(jsonl_files(n), min_size=1, max_size=6))),
    zstd=st.lists(st.booleans()), run=st.sampled_from([1, 300, 16 << 20]))
def test_random_shards_as_their_own_readers_read_them(named, zstd, run):
    """Random shards (fields among decoys, nulls, absent, blank lines, CRLF, no final
    newline; some zstd), under one field name: together or alone, the same histogram or
    the same error; what is read together is pyarrow's column, file by file."""
    name, files = named
    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for i, (text, _) in enumerate(files):
            path = Path(tmp) / f"{i:02d}.jsonl{'.zst' if i < len(zstd) and zstd[i] else ''}"
            if path.suffix == ".zst":
                write_zstd(path, text)
            else:
                path.write_bytes(text)
            paths.append(path)
        saved = jsonl_many.RUN_BYTES
        jsonl_many.RUN_BYTES = run
        try:
            assert scan(Path(tmp), name, True) == scan(Path(tmp), name, False)
            if not jsonl.plain_name(name):
                return
            left, values, valid = read_together(paths, name)
        finally:
            jsonl_many.RUN_BYTES = saved
        read = [p for i, p in enumerate(paths) if i not in left]
        want = [pyarrow_column(p, name) for p in read]
        np.testing.assert_array_equal(
            np.where(valid, values, -1),
            np.concatenate([w.fill_null(-1).to_numpy() for w in want]) if want else [])
        assert all(p.suffix != ".zst" for p in read)


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines))
    return path


def test_what_is_left_and_why(tmp_path):
    """Left to their own readers: zstd, a first object without the field or with it null, a
    bad line, a float, an empty or blank file, one larger than `MOST_BYTES`; read: the
    rest, a BOM and blank lines included."""
    good = ['{"n": 1, "t": "a"}', "", '{"n": null}', '{"t": "b"}', '{"n": 7}']
    files = {
        "a.jsonl": "\n".join(good),
        "b.jsonl": '\ufeff{"n": 3}\n  \n{"n": 4}',
        "c.jsonl": '{"t": "x"}\n{"n": 5}\n',
        "d.jsonl": '{"n": null}\n{"n": 5}\n',
        "e.jsonl": '{"n": 1}\n{"n": 2.5}\n',
        "f.jsonl": '{"n": 1}\n{"n": 2\n',
        "g.jsonl": "",
        "h.jsonl": "  \n\n",
        "i.jsonl": '{"n": 1}\n[1]\n',
    }
    paths = []
    for k, text in files.items():
        (tmp_path / k).write_bytes(text.encode())
        paths.append(tmp_path / k)
    write_zstd(tmp_path / "z.jsonl.zst", b'{"n": 9}\n')
    big = write_lines(tmp_path / "y.jsonl", ['{"n": 2}'] * (jsonl_many.MOST_BYTES // 9 + 1))
    paths += [tmp_path / "z.jsonl.zst", big]
    left, values, valid = read_together(paths, "n")
    assert [paths[i].name for i in left] == ["c.jsonl", "d.jsonl", "e.jsonl", "f.jsonl",
                                             "g.jsonl", "h.jsonl", "i.jsonl", "z.jsonl.zst",
                                             "y.jsonl"]
    np.testing.assert_array_equal(np.where(valid, values, -1), [1, -1, -1, 7, 3, 4])


def test_a_directory_as_its_shards_own_readers_read_it(tmp_path):
    """Many shards, some left: the histogram of every file's own reading; a bad shard among
    them: its own reader's one line, whichever way the others are read."""
    rng = np.random.default_rng(1)
    every = []
    for k in range(40):
        x = rng.integers(0, 9000, int(rng.integers(1, 300)))
        every.append(x)
        lines = [f'{{"text": "{"w" * int(v % 30)}", "num_tokens": {v}}}' for v in x]
        if k % 7 == 3:
            lines.insert(0, '{"text": "no length yet"}')
            every[-1] = np.concatenate([[-1], x])
        write_lines(tmp_path / f"{k:03d}.jsonl", lines)
    got = gp.lengths(str(tmp_path), column="num_tokens")
    np.testing.assert_array_equal(got, np.concatenate(every))
    want = scan(tmp_path, "num_tokens", False)
    assert isinstance(want, gp.LengthHistogram)
    assert scan(tmp_path, "num_tokens", True) == want
    write_lines(tmp_path / "020.jsonl", ['{"num_tokens": 1}', '{"num_tokens": "x"}'])
    error = scan(tmp_path, "num_tokens", True)
    assert isinstance(error, str) and "020.jsonl: line 2" in error
    assert error == scan(tmp_path, "num_tokens", False)
    # the field in none of a shard's first 64 objects: not in its schema, as its reader says
    write_lines(tmp_path / "020.jsonl", ['{"text": "a"}'] * 70 + ['{"num_tokens": 1}'])
    error = scan(tmp_path, "num_tokens", True)
    assert isinstance(error, str) and "020.jsonl: schema differs" in error
    assert error == scan(tmp_path, "num_tokens", False)


def test_runs_are_read_in_bounded_pieces(tmp_path, monkeypatch):
    """A run of shards is read `RUN_BYTES` of text at a time, a chunk each."""
    for k in range(10):
        write_lines(tmp_path / f"{k}.jsonl", [f'{{"n": {k * 10 + i}}}' for i in range(10)])
    monkeypatch.setattr(jsonl_many, "RUN_BYTES", 250)
    joined = jsonl_many.together([JsonlPart(p) for p in sorted(tmp_path.iterdir())],
                                 Reading(LengthSpec("n")), None)
    chunks = list(joined.chunks())
    assert len(chunks) == 5 and joined.left() == []
    np.testing.assert_array_equal(np.concatenate([c.data for c in chunks]), np.arange(100))
