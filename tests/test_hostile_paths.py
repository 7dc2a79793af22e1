"""Hostile paths and metadata: a FIFO or device as PATH, symlink loops under a glob, and
HF metadata that names files outside the dataset or is not what it claims: one line, exit 2,
never a hang, a double count or a file read from elsewhere."""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import run_cli as run


def one_line_exit_2(args, capsys, says):
    rc, out, err = run(args, capsys)
    assert rc == 2 and out == "", err
    assert len(err.strip().splitlines()) == 1 and says in err and "Traceback" not in err


def test_a_fifo_or_device_as_path_is_refused_at_once(tmp_path, capsys):
    fifo = tmp_path / "p"
    os.mkfifo(fifo)  # opening it would block until a writer came
    one_line_exit_2(["profile", fifo, "-q"], capsys, "is a FIFO, not a file or a directory")
    one_line_exit_2(["profile", "/dev/null", "-q"], capsys, "a character device")
    one_line_exit_2(["schedule", fifo, "-q"], capsys, "a FIFO")


def test_a_symlink_loop_under_a_glob_counts_each_shard_once(tmp_path, capsys):
    d = tmp_path / "d"
    d.mkdir()
    pq.write_table(pa.table({"length": list(range(1, 101))}), d / "a.parquet")
    (d / "loop").symlink_to(d, target_is_directory=True)
    (tmp_path / "alias.parquet").symlink_to(d / "a.parquet")
    for source in (f"{tmp_path}/**/*.parquet", tmp_path):
        rc, out, err = run(["profile", source, "-q", "-f", "json"], capsys)
        assert rc == 0, err
        assert json.loads(out)["total_samples"] == 100


@pytest.mark.parametrize(("files", "says"), [
    ([{"filename": 7}], "must be named by a non-empty string, got int 7"),
    ([{"filename": None}], "got NoneType None"),
    ([{"filename": ["a"]}], "got list"),
    ([{"filename": "../outside.arrow"}], "lies outside"),
    ([{"filename": "/etc/passwd"}], "lies outside"),
    ([{"filename": "a\x1b[31mred.arrow"}], "\\x1b"),  # escaped, not sent to the terminal
])
def test_hf_metadata_that_points_elsewhere_or_is_not_a_name(tmp_path, capsys, files, says):
    ds = tmp_path / "ds"
    ds.mkdir()
    (tmp_path / "outside.arrow").write_bytes(b"\xff\xff\xff\xff")
    (ds / "state.json").write_text(json.dumps({"_data_files": files}))
    one_line_exit_2(["profile", ds, "-q"], capsys, says)


def test_hf_metadata_nested_too_deeply(tmp_path, capsys):
    ds = tmp_path / "ds"
    ds.mkdir()
    (ds / "state.json").write_text("[" * 100_000 + "]" * 100_000)
    one_line_exit_2(["profile", ds, "-q"], capsys, "unreadable Hugging Face metadata")


def test_dataset_dict_splits_must_stay_inside(tmp_path, capsys):
    d = tmp_path / "dd"
    d.mkdir()
    (d / "dataset_dict.json").write_text(json.dumps({"splits": ["../.."]}))
    one_line_exit_2(["profile", d, "-q"], capsys, "lies outside")
    (d / "dataset_dict.json").write_text(json.dumps({"splits": [3]}))
    one_line_exit_2(["profile", d, "-q"], capsys, "must be named by a non-empty string")
