"""`gpu-profiler schedule`: orders, the report on a dominant bucket, --emit-order."""

from __future__ import annotations

import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gpu_profiler.analysis.interleave import interleave, min_run
from gpu_profiler.analysis.schedule import batch_order
from gpu_profiler.backends import get_backend
from gpu_profiler.chunk import Chunk
from gpu_profiler.cli import main
from gpu_profiler.demo import demo_lengths


def run(args, capsys):
    with pytest.raises(SystemExit) as exc:
        main([str(a) for a in args])
    out, err = capsys.readouterr()
    return exc.value.code, out, err


@pytest.fixture(scope="module")
def dominant(tmp_path_factory):
    """A saved histogram whose longest bucket makes about 52% of the batches."""
    path = tmp_path_factory.mktemp("sched") / "demo.json"
    get_backend("numpy").histogram_chunk(Chunk(demo_lengths()), 8192).save(path)
    return path


def test_report_states_stride_fix_and_random_runs(dominant, capsys):
    rc, out, err = run(["schedule", dominant, "--order", "random", "--order", "stride",
                        "-f", "json"], capsys)
    assert rc == 0, err
    d = json.loads(out)
    orders = {o["name"]: o for o in d["orders"]}
    assert 50 <= max(b["batch_pct"] for b in d["buckets"]) <= 54
    assert orders["stride"]["longest_run"] <= 3 and min(orders["stride"]["exhausted_at"]) >= 0.99
    assert orders["random"]["longest_run"] > 3 and orders["random"]["expected_longest_run"] > 3
    rc, table, _ = run(["schedule", dominant, "--order", "random,stride"], capsys)
    text = " ".join(table.split())
    assert rc == 0
    assert f"--order stride keeps every same-bucket run <= {orders['stride']['longest_run']}" \
        in text
    assert f"order random: {orders['random']['longest_run']} batches of bucket 5" in text


def test_every_order_in_json(dominant, capsys):
    rc, out, _ = run(["schedule", dominant, "--order", "all", "--trials", "5", "--log-window",
                      "20", "--seed", "3", "-f", "json"], capsys)
    d = json.loads(out)
    assert rc == 0 and [o["name"] for o in d["orders"]] == ["random", "uniform-bucket",
                                                            "sequential", "stride"]
    assert d["orders"][0]["trials"] == 5 and d["log_window"] == 20 and d["seed"] == 3
    for o in d["orders"]:
        assert {"longest_run", "longest_run_bucket", "exhausted_at", "tail_mix",
                "lag1_autocorr", "window_spread"} <= set(o)


@pytest.mark.parametrize("name", ["order.txt", "order.npy"])
def test_emit_order(dominant, tmp_path, capsys, name):
    target = tmp_path / name
    rc, out, _ = run(["schedule", dominant, "--order", "random", "--seed", "9", "-f", "json",
                      "--emit-order", target], capsys)
    assert rc == 0
    got = np.load(target) if name.endswith(".npy") else \
        np.array([int(x) for x in target.read_text().split()])
    batches = [b["batches"] for b in json.loads(out)["buckets"]]
    assert (got == batch_order(batches, "random", seed=9)).all()
    assert os.listdir(tmp_path) == [name]


def test_emit_order_with_the_default_orders_writes_the_interleaved_one(dominant, tmp_path,
                                                                      capsys):
    plain, named = tmp_path / "o.txt", tmp_path / "r.npy"
    rc, out, err = run(["schedule", dominant, "-f", "json", "--emit-order", plain,
                        "--emit-order", f"random={named}", "--seed", "4"], capsys)
    assert rc == 0, err
    batches = [b["batches"] for b in json.loads(out)["buckets"]]
    assert [int(x) for x in plain.read_text().split()] == interleave(batches).tolist()
    assert (np.load(named) == batch_order(batches, "random", seed=4)).all()


def test_emit_order_refusals_write_nothing(dominant, tmp_path, capsys):
    for order, emit, says in (("random", "stride=x.txt", "is not simulated"),
                              ("random,sequential", "x.txt", "which order?")):
        rc, _, err = run(["schedule", dominant, "--order", order, "--emit-order",
                          tmp_path / emit if "=" not in emit else emit.replace(
                              "=", f"={tmp_path}/")], capsys)
        assert rc == 2 and says in err and os.listdir(tmp_path) == []


def test_max_run(dominant, tmp_path, capsys):
    rc, out, _ = run(["schedule", dominant, "-f", "json", "--max-run", "4"], capsys)
    got = json.loads(out)
    stride = next(o for o in got["orders"] if o["name"] == "stride")
    assert rc == 0 and got["max_run"] == 4 and stride["longest_run"] <= 4
    assert got["min_run"] == min_run(got and [b["batches"] for b in got["buckets"]])
    rc, _, err = run(["schedule", dominant, "--max-run", "1"], capsys)
    assert rc == 2 and f"use --max-run {got['min_run']} or more" in err


def test_scans_a_real_dataset(hf_dir, capsys):
    rc, out, _ = run(["schedule", hf_dir[0], "-q", "--offsets-of", "input_ids", "--policy",
                      "sorted", "--drop-last", "-f", "markdown"], capsys)
    assert rc == 0 and "| stride |" in out and "| random |" in out


def test_markdown_leaves_what_an_order_lacks_empty(tmp_path, capsys):
    """An empty corpus: no longest-run bucket, and Markdown leaves its cell empty as the
    terminal table does (it printed None)."""
    path = tmp_path / "empty.parquet"
    pq.write_table(pa.table({"length": pa.array([], pa.int64())}), path)
    rc, out, _ = run(["schedule", str(path), "-f", "markdown"], capsys)
    assert rc == 0 and "| stride | 0 |  |" in out and "None" not in out
