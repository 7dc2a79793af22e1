"""`--fail-if`: conditions parsed, checked against real outputs, and the exit codes."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import run_cli

from gpu_profiler.backends import get_backend
from gpu_profiler.chunk import Chunk
from gpu_profiler.demo import demo_lengths
from gpu_profiler.errors import ProfilerError
from gpu_profiler.gates import METRICS, failures, metrics, parse_gates


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """The demo's histogram, saved: its longest bucket makes ~51% of the batches."""
    path = tmp_path_factory.mktemp("gates") / "demo.json"
    x = demo_lengths()
    get_backend("numpy").histogram_chunk(Chunk(x), int(x.max())).save(path)
    return path


@pytest.mark.parametrize("expr, holds", [
    ("p99>100", True), ("p99 >= 100", True), ("p99<100", False), ("p99<=100", False),
    ("p99==100", False), ("p99!=100", True), ("p99>1e2", True), ("p99>100.5", True)])
def test_operators(expr, holds):
    assert bool(failures(parse_gates([expr], ["p99"]), {"p99": 101})) is holds


@pytest.mark.parametrize("expr", ["p99", "p99>", ">5", "p99=>5", "p99>5x", "p99 > 5 > 6"])
def test_malformed_and_unknown_name_the_valid_metrics(expr):
    with pytest.raises(ProfilerError, match="malformed.*NAME one of p99, ks"):
        parse_gates([expr], ["p99", "ks"])
    with pytest.raises(ProfilerError, match="unknown metric 'p98'.*one of p99, ks"):
        parse_gates(["p98>1"], ["p99", "ks"])


def test_a_metric_without_a_value_fails_its_gate():
    assert failures(parse_gates(["p99<5"], ["p99"]), {"p99": None}) == [
        "failed: p99<5 (p99 has no value)"]


@pytest.mark.parametrize("command", ["profile", "schedule", "compare", "blend"])
def test_every_name_is_a_json_key_of_the_command(demo, command, tmp_path, capsys):
    args = [demo]
    if command in ("compare", "schedule"):  # their group gates are there with groups
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.table({"length": [3, 5, 9], "source": ["a", "b", "a"]}),
                       tmp_path / "mix.parquet")
        args = [tmp_path / "mix.parquet", "--group-by", "source"]
    rc, out, err = run_cli([command, *args, "-f", "json"], capsys)
    assert rc == 0 and set(METRICS[command]) <= set(metrics(json.loads(out))), err


def test_profile_passing_failing_and_malformed(demo, tmp_path, capsys):
    d = json.loads(run_cli(["profile", demo, "-f", "json"], capsys)[1])
    p99, share = d["percentiles"]["p99"], d["max_batch_pct"]
    rc, out, err = run_cli(["profile", demo, "--fail-if", f"p99>{p99}", "--fail-if",
                        "max_batch_pct>60"], capsys)
    assert rc == 0 and err == "" and "samples" in out
    target = tmp_path / "p.json"
    rc, out, err = run_cli(["profile", demo, "-f", "json", "-o", target, "--fail-if",
                        f"p99>={p99}", "--fail-if", "max_batch_pct>40", "--fail-if",
                        "truncated_pct>1000"], capsys)
    assert rc == 1 and json.loads(target.read_text())["percentiles"]["p99"] == p99
    assert err.splitlines() == [f"failed: p99>={p99} (p99 = {p99:,})",
                                f"failed: max_batch_pct>40 (max_batch_pct = {share:,.6g})"]
    rc, out, err = run_cli(["profile", demo, "--fail-if", "p98>1"], capsys)
    assert rc == 2 and out == "" and "padding_pct" in err and len(err.splitlines()) == 1


def test_schedule_and_compare_gates(demo, capsys):
    rc, _, err = run_cli(["schedule", demo, "-q", "--fail-if", "longest_run>3"], capsys)
    assert rc == 0, err
    rc, _, err = run_cli(["schedule", demo, "-q", "--order", "random", "--fail-if",
                      "longest_run>3"], capsys)
    assert rc == 1 and err.startswith("failed: longest_run>3 (longest_run = ")
    rc, _, err = run_cli(["compare", demo, "--bounds-b", "0,1000,8193", "--fail-if", "ks>0.05",
                      "--fail-if", "steps_per_epoch_shift>0"], capsys)
    assert rc == 1 and len(err.splitlines()) == 1  # the same lengths: ks is 0
    assert err.startswith("failed: steps_per_epoch_shift>0")
    assert np.isfinite(float(err.split("= ")[1].rstrip(")\n").replace(",", "")))
