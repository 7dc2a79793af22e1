"""One scan request: `Source` / `Execution` / `Sharding` taken by every entry point, the
source listed once per command, and `lengths` through the same planner (and its schema
checks) as a scan."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import gpu_profiler as gp
from gpu_profiler import readers
from gpu_profiler.cli import main
from gpu_profiler.request import gather


@pytest.fixture
def dataset_dict(tmp_path):
    """A DatasetDict-like dir of Parquet shards per split is not a format: use real IPC
    files of an HF dir written by `datasets`."""
    datasets = pytest.importorskip("datasets")
    rng = np.random.default_rng(0)
    d = datasets.DatasetDict({
        "train": datasets.Dataset.from_dict({"length": rng.integers(1, 5000, 3000)}),
        "test": datasets.Dataset.from_dict({"length": rng.integers(1, 900, 500)})})
    d.save_to_disk(str(tmp_path / "dd"))
    return tmp_path / "dd"


def test_flat_keywords_and_typed_objects_are_one_request(tmp_path):
    x = np.arange(1, 2000) % 700
    path = tmp_path / "a.parquet"
    pq.write_table(pa.table({"n": x}), path)
    flat = gp.histogram(str(path), column="n", backend="numpy", cap=512)
    typed = gp.histogram(gp.Source(str(path), column="n"), execution=gp.Execution("numpy",
                                                                                  cap=512))
    assert flat == typed
    assert flat.counts.tolist() == np.bincount(x[x <= 512], minlength=513).tolist()


def test_an_option_given_twice_or_unknown_is_a_type_error():
    with pytest.raises(TypeError, match="column: given as a keyword and in the Source"):
        gather(gp.Source("x", column="a"), {"column": "b"})
    with pytest.raises(TypeError, match="cap: given as a keyword and in the Execution"):
        gather("x", {"cap": 3}, execution=gp.Execution(cap=4))
    with pytest.raises(TypeError, match="colum\\b.*the options are: .*column"):
        gp.histogram(np.arange(3), colum="x")
    with pytest.raises(TypeError, match="cache_dir"):  # lengths takes no sharding
        gp.lengths(np.arange(3), cache_dir="/tmp")
    with pytest.raises(TypeError, match="profile bins every length"):
        gp.profile(np.arange(3), cap=10)


def test_options_are_checked_before_anything_is_read():
    with pytest.raises(gp.ProfilerError, match="cap must be a non-negative integer"):
        gp.Execution(cap=-1)
    with pytest.raises(gp.ProfilerError, match="--eot-position must be end or start"):
        gp.Source("missing", eot_position="middle")
    with pytest.raises(gp.ProfilerError, match="I/N"):
        gp.Sharding(part="3/2")


def test_a_saved_histogram_takes_no_scan_option(tmp_path):
    saved = tmp_path / "h.json"
    gp.histogram(np.arange(10), cap=20).save(saved)
    assert gp.histogram(str(saved)).total == 10
    with pytest.raises(gp.ProfilerError, match="--column, --cache-dir cannot apply"):
        gp.histogram(str(saved), column="x", cache_dir=str(tmp_path))
    hist = gp.histogram(np.arange(10), cap=20)
    assert gp.profile(hist).histogram == hist  # in memory too, no scan


def test_a_command_lists_its_source_once(dataset_dict, monkeypatch, tmp_path):
    """profile --policy, suggest, schedule, plan and report choose the analysed split and
    scan from one listing (they listed the source twice, and report scanned a split
    source twice)."""
    calls = []
    real = readers.open_source

    def counting(*args, **kwargs):
        calls.append(args[0])
        return real(*args, **kwargs)
    monkeypatch.setattr("gpu_profiler.engine.open_source", counting)
    runs = [["profile", str(dataset_dict), "--policy", "all"],
            ["suggest", str(dataset_dict), "-k", "3"], ["schedule", str(dataset_dict)],
            ["plan", str(dataset_dict), "-o", str(tmp_path / "p.npz")]]
    for argv in runs:
        calls.clear()
        with pytest.raises(SystemExit) as done:
            main([*argv, "-q", "-f", "json"])
        assert done.value.code in (0, None), argv
        assert len(calls) == 1, argv


def test_the_analysed_split_is_scanned_alone(dataset_dict):
    hist, split = gp.api.analysed_histogram(gp.Source(str(dataset_dict)))
    assert split == "train" and hist == gp.histogram(str(dataset_dict), split="train")
    result = gp.profile(str(dataset_dict), policies="fixed")
    assert result.split_histograms["train"] == gp.histogram(str(dataset_dict),
                                                            split="train")
    assert result.policies[0].split == "train"


def test_lengths_check_every_shard_schema_like_a_scan(tmp_path):
    pq.write_table(pa.table({"length": pa.array([1, 2, 3], pa.int32())}), tmp_path / "a.parquet")
    pq.write_table(pa.table({"length": pa.array(["x"])}), tmp_path / "b.parquet")
    with pytest.raises(gp.ProfilerError, match="b.parquet"):
        gp.histogram(str(tmp_path))
    with pytest.raises(gp.ProfilerError, match="b.parquet"):
        gp.lengths(str(tmp_path))


def test_the_sampler_reads_a_source(tmp_path):
    x = (np.arange(5000) * 7919) % 3000 + 1
    pq.write_table(pa.table({"n": x}), tmp_path / "a.parquet")
    by_source = gp.BucketBatchSampler(gp.Source(str(tmp_path / "a.parquet"), column="n"))
    by_keyword = gp.BucketBatchSampler(str(tmp_path / "a.parquet"), column="n")
    in_memory = gp.BucketBatchSampler(x)
    assert list(by_source) == list(by_keyword) == list(in_memory)
    with pytest.raises(gp.ProfilerError, match="column: options of a source"):
        gp.BucketBatchSampler(x, column="n")
