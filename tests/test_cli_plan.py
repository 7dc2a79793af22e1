"""`gpu-profiler plan`: one epoch's batches in a .npz, equal to the sampler's."""

from __future__ import annotations

import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import run_cli as run
from conftest import sft_lengths

import gpu_profiler as gp


def test_writes_the_samplers_batches(hf_dir, tmp_path, capsys):
    path, x = hf_dir
    target, order = tmp_path / "b.npz", tmp_path / "order.txt"
    rc, out, err = run(["plan", path, "-o", target, "--world-size", "2", "--seed", "3",
                        "--epoch", "1", "--policy", "sorted", "-f", "json",
                        "--emit-order", order], capsys)
    assert rc == 0, err
    summary = json.loads(out)
    got = np.load(target)
    indices, offsets, bucket = got["indices"], got["offsets"], got["bucket"]
    assert indices.dtype == np.int64 and np.array_equal(np.sort(indices), np.arange(x.size))
    assert offsets[0] == 0 and offsets[-1] == indices.size and len(offsets) == len(bucket) + 1
    assert json.loads(str(got["params"]))["seed"] == 3 == summary["seed"]
    assert summary["batches"] == len(bucket) and summary["steps"] == len(bucket) // 2
    assert [int(v) for v in order.read_text().split()] == bucket.tolist()
    for rank in (0, 1):
        s = gp.BucketBatchSampler(x, world_size=2, rank=rank, seed=3, policy="sorted")
        s.set_epoch(1)
        mine = [indices[offsets[j]:offsets[j + 1]].tolist()
                for j in range(rank, len(bucket), 2)]
        assert mine == list(s)
    # the mixed steps at the end (leftovers of fewer than 2 batches) may add one to a run
    assert summary["min_run"] <= summary["longest_run"] <= summary["min_run"] + 1
    clipped = np.minimum(x[indices], 8192)
    rows = np.diff(offsets)
    assert summary["padded_tokens"] == int((rows * np.maximum.reduceat(clipped,
                                                                         offsets[:-1])).sum())


def test_table_summary_and_train_split(tmp_path, capsys):
    datasets = pytest.importorskip("datasets")
    d = datasets.DatasetDict({"train": datasets.Dataset.from_dict({"length": [100] * 300}),
                              "test": datasets.Dataset.from_dict({"length": [5000] * 10})})
    d.save_to_disk(str(tmp_path / "d"))
    rc, out, err = run(["plan", tmp_path / "d", "-o", tmp_path / "p.npz"], capsys)
    assert rc == 0, err
    assert "train" in out and "longest same-bucket run" in out
    assert np.load(tmp_path / "p.npz")["indices"].size == 300


def test_refusals_write_nothing(hf_dir, tmp_path, capsys):
    path, x = hf_dir
    hist = tmp_path / "h.json"
    gp.histogram(x).save(hist)
    out = tmp_path / "o"
    out.mkdir()
    for args, says in ((["plan", path], "pass -o FILE.npz"),
                       (["plan", hist, "-o", out / "p.npz"], "no per-sample lengths"),
                       (["plan", path, "-o", out / "p.npz", "--bounds", "0,50,8193",
                         "--max-run", "1"], "is infeasible"),
                       (["plan", path, "-o", out / "p.npz", "--policy", "estimate"],
                        "fixed, sorted or packed")):
        rc, _, err = run(args, capsys)
        assert rc == 2 and says in err and len(err.strip().splitlines()) == 1
        assert os.listdir(out) == []


def test_says_which_buckets_cannot_end_in_the_last_2_percent(tmp_path, capsys):
    # 1 batch of bucket 0 and 99 of bucket 1: runs of 50 at least, so bucket 0's batch sits
    # between them, mid-epoch, in any order with the least runs
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "x.parquet"
    pq.write_table(pa.table({"length": [50] * 64 + [8000] * 594}), path)
    rc, out, err = run(["plan", path, "-o", tmp_path / "p.npz", "--bounds", "0,100,8193",
                        "-f", "json"], capsys)
    got = json.loads(out)
    assert rc == 0 and got["early_buckets"] == [0] and got["longest_run"] == 50, err
    rc, out, _ = run(["plan", path, "-o", tmp_path / "p.npz", "--bounds", "0,100,8193"],
                     capsys)
    assert "the counts leave no room" in out


def test_a_plan_file_read_back_counts_consumed_samples_per_step(tmp_path, capsys):
    x = sft_lengths(3000, seed=21)
    src = tmp_path / "x.parquet"
    pq.write_table(pa.table({"length": x}), src)
    out = tmp_path / "p.npz"
    rc, _, _ = run(["plan", src, "-o", out, "--world-size", "2", "--policy", "sorted"], capsys)
    assert rc == 0
    plan = gp.load_plan(str(out))
    sampler = gp.BucketBatchSampler(x, world_size=2, policy="sorted")
    assert plan.steps == sampler.plan().steps and plan.world_size == 2
    sizes = [len(b) for b in sampler]  # every rank's batches, step by step
    for step in (0, 1, 7, plan.steps):
        consumed = sum(sizes[:2 * step])
        assert plan.consumed_samples(step) == consumed and plan.step_at(consumed) == step
    assert plan.batch(3, 1).tolist() == sampler.plan().batch(7).tolist()
    with pytest.raises(gp.ProfilerError, match="no step boundary"):
        plan.step_at(plan.consumed_samples(5) + 1)


def test_hostile_plan_files_are_one_line_errors(tmp_path):
    good = {"indices": np.arange(4), "offsets": np.array([0, 2, 4]), "bucket": np.array([0, 1]),
            "params": np.array('{"params": {"world_size": 2}}')}
    np.savez(tmp_path / "ok.npz", **good)
    old = gp.load_plan(str(tmp_path / "ok.npz"))  # as earlier versions wrote: no tokens,
    assert old.steps == 1 and old.tokens is None and old.grad_accum is None  # no grad_accum
    recorded = np.array('{"params": {"world_size": 2}, "grad_accum": 3}')
    np.savez(tmp_path / "new.npz", **{**good, "tokens": np.array([9, 4]), "params": recorded})
    new = gp.load_plan(str(tmp_path / "new.npz"))
    assert new.grad_accum == 3 and new.tokens.tolist() == [9, 4]
    cases = {"missing": {k: v for k, v in good.items() if k != "bucket"},
             "unsorted": {**good, "offsets": np.array([0, 3, 2])},
             "past the end": {**good, "offsets": np.array([0, 2, 9])},
             "world": {**good, "params": np.array('{"params": {"world_size": 3}}')},
             "nan": {**good, "params": np.array('{"params": {"world_size": NaN}}')},
             "deep": {**good, "params": np.array("[" * 100_000 + "]" * 100_000)},
             "float": {**good, "indices": np.arange(4.0)},
             "negative": {**good, "indices": np.array([0, -1, 2, 3])},
             "tokens short": {**good, "tokens": np.array([5])},
             "tokens negative": {**good, "tokens": np.array([5, -1])},
             "tokens float": {**good, "tokens": np.array([5.0, 1.0])},
             "other array": {**good, "extra": np.array([1])}}
    for accum in ("0", "true", '"2"', "2.5"):
        cases[f"grad_accum {accum}"] = {
            **good, "params": np.array(f'{{"params": {{"world_size": 2}}, "grad_accum": {accum}}}')}
    for name, arrays in cases.items():
        np.savez(tmp_path / f"{name}.npz", **arrays)
        with pytest.raises(gp.ProfilerError) as err:
            gp.load_plan(str(tmp_path / f"{name}.npz"))
        assert len(str(err.value).splitlines()) == 1, name
    np.savez(tmp_path / "pickled.npz", **{**good, "indices": np.array([object()])})
    with pytest.raises(gp.ProfilerError):
        gp.load_plan(str(tmp_path / "pickled.npz"))
    (tmp_path / "junk.npz").write_bytes(b"PK\x03\x04 not a zip")
    with pytest.raises(gp.ProfilerError, match="not a readable plan"):
        gp.load_plan(str(tmp_path / "junk.npz"))
