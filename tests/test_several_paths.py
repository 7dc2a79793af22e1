"""Several PATHs read together (what a shell makes of an unquoted glob), each file once;
a directory or glob mixing formats refused, never counted twice."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.parquet as pq
import pytest
from conftest import run_cli

import gpu_profiler as gp

rng = np.random.default_rng(11)


@pytest.fixture
def shards(tmp_path):
    xs = [rng.integers(1, 6000, 700 + 13 * i) for i in range(4)]
    for i, x in enumerate(xs):
        pq.write_table(pa.table({"length": x}), tmp_path / f"s{i}.parquet")
    return tmp_path, xs


@pytest.mark.parametrize("command", ["profile", "suggest", "schedule", "plan", "report"])
def test_every_scanning_command_takes_several_paths(shards, command, capsys, tmp_path):
    """The shell expands `shards/*.parquet` into PATHs: each command reads them together
    (it printed click's usage error listing every path)."""
    d, xs = shards
    paths = sorted(str(p) for p in d.glob("*.parquet"))
    extra = {"suggest": ["-k", "3"], "plan": ["-o", tmp_path / "p.npz"],
             "report": ["-o", tmp_path / "r.html"]}.get(command, [])
    fmt = [] if command == "report" else ["-f", "json"]
    code, out, err = run_cli([command, *paths, "-q", *fmt, *extra], capsys)
    assert code == 0, err
    if command == "profile":
        assert json.loads(out)["total_samples"] == sum(x.size for x in xs)
    if command == "plan":
        assert np.load(tmp_path / "p.npz")["indices"].size == sum(x.size for x in xs)


def test_several_paths_count_each_file_once(shards, capsys):
    d, xs = shards
    once = gp.histogram([str(d / "s1.parquet"), str(d), str(d / "s1.parquet")])
    assert once == gp.histogram(str(d))
    assert once.total == sum(x.size for x in xs)


def test_a_split_dataset_and_an_unsplit_source_do_not_mix(tmp_path, shards):
    datasets = pytest.importorskip("datasets")
    datasets.DatasetDict({"train": datasets.Dataset.from_dict({"length": [1, 2]})}
                         ).save_to_disk(str(tmp_path / "dd"))
    with pytest.raises(gp.ProfilerError, match=r"dd has splits \(train\) and .*has none"):
        gp.histogram([str(tmp_path / "dd"), str(shards[0] / "s0.parquet")])


def test_a_directory_of_two_formats_is_refused(tmp_path, capsys):
    """`x.parquet` beside the same rows as `x.arrow` counted both (75,000 samples for
    37,500, exit 0): now one line naming both formats and the ways out."""
    x = rng.integers(1, 3000, 1500)
    pq.write_table(pa.table({"length": x}), tmp_path / "x.parquet")
    feather.write_feather(pa.table({"length": x}), tmp_path / "x.arrow")
    code, _, err = run_cli(["profile", tmp_path, "-q"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "several formats" in err and "Parquet" in err and "Arrow IPC" in err
    assert "--format" in err
    for way in ([tmp_path, "--format", "parquet"], [tmp_path, "--format", "ipc"],
                [tmp_path / "*.parquet"]):
        code, out, err = run_cli(["profile", *way, "-q", "-f", "json"], capsys)
        assert code == 0 and json.loads(out)["total_samples"] == x.size, err
    glob = str(tmp_path / "*")
    with pytest.raises(gp.ProfilerError, match="several formats"):
        gp.histogram(glob)
    # named one by one, files are the user's choice: both are read
    both = gp.histogram([str(tmp_path / "x.parquet"), str(tmp_path / "x.arrow")])
    assert both.total == 2 * x.size


def test_a_jsonl_beside_parquet_is_refused(tmp_path):
    pq.write_table(pa.table({"length": [1, 2, 3]}), tmp_path / "train.parquet")
    (tmp_path / "train.jsonl").write_text("".join(f'{{"length": {n}}}\n' for n in (1, 2, 3)))
    with pytest.raises(gp.ProfilerError, match="1 JSON Lines.*1 Parquet"):
        gp.histogram(str(tmp_path))
