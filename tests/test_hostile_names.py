"""Field names a file should not have: several fields of one name (Apache's
``generated_duplicate_fieldnames`` goldens have them) and names that are not UTF-8. Each is
one line and exit 2 naming the file, from every reader, never an internal error."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gpu_profiler.cli import main


def _write(path: Path, t: pa.Table) -> Path:
    if path.suffix == ".parquet":
        pq.write_table(t, path)
    else:
        new = pa.ipc.new_file if path.suffix == ".arrow" else pa.ipc.new_stream
        with new(str(path), t.schema) as w:
            w.write_table(t)
    return path


def _exit(argv: list[str], capsys) -> tuple[int, str]:
    with pytest.raises(SystemExit) as done:
        main(argv)
    return done.value.code, capsys.readouterr().err


SUFFIXES = [".arrow", ".arrows", ".parquet"]


@pytest.mark.parametrize("suffix", SUFFIXES)
@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("flag", [[], ["--column", "length"], ["--offsets-of", "length"]])
def test_duplicate_field_names(tmp_path, suffix, backend, flag, capsys):
    column = pa.array([[1, 2], [3]]) if "--offsets-of" in flag else pa.array([1, 2], pa.int32())
    t = pa.Table.from_arrays([column, column], names=["length", "length"])
    path = _write(tmp_path / f"dup{suffix}", t)
    code, err = _exit(["profile", str(path), "-q", "-b", backend, *flag], capsys)
    assert code == 2 and len(err.splitlines()) == 1
    assert str(path) in err and "2 fields are named 'length'" in err


@pytest.mark.parametrize("suffix", SUFFIXES)
def test_names_that_are_not_utf8(tmp_path, suffix, capsys):
    path = _write(tmp_path / f"name{suffix}", pa.table({"lengtX": pa.array([1, 2], pa.int32())}))
    data = path.read_bytes()
    path.write_bytes(data.replace(b"lengtX", b"lengt\xff"))
    code, err = _exit(["profile", str(path), "-q", "-b", "numba"], capsys)
    assert code == 2 and len(err.splitlines()) == 1 and str(path) in err
    assert "internal error" not in err


def test_other_duplicates_do_not_matter(tmp_path, capsys):
    one = pa.array([1, 2], pa.int32())
    t = pa.Table.from_arrays([one, one, pa.array([5, 6], pa.int32())],
                             names=["x", "x", "length"])
    path = _write(tmp_path / "ok.arrow", t)
    code, _ = _exit(["profile", str(path), "-q", "-f", "json"], capsys)
    assert code == 0
