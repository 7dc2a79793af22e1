"""`profile --policy / --drop-last`, and what every analysis command shares: a saved
histogram as PATH, output formats, one-line errors."""

from __future__ import annotations

import csv
import io
import json

import pytest

from gpu_profiler import BucketParams, LengthHistogram, histogram
from gpu_profiler.analysis.policies import POLICIES, evaluate_policy
from gpu_profiler.cli import main


def run(args, capsys):
    with pytest.raises(SystemExit) as exc:
        main([str(a) for a in args])
    out, err = capsys.readouterr()
    return exc.value.code, out, err


@pytest.fixture(scope="module")
def hist(hf_dir):
    return histogram(hf_dir[0], cap=8192, backend="numpy")


def test_profile_policies_json(hf_dir, hist, capsys):
    rc, out, err = run(["profile", hf_dir[0], "-q", "-f", "json", "--policy", "fixed",
                        "--policy", "sorted,packed"], capsys)
    assert rc == 0, err
    got = json.loads(out)["policies"]
    assert [p["name"] for p in got] == ["fixed", "sorted", "packed"]
    for p in got:
        want = evaluate_policy(hist, p["name"], BucketParams()).to_dict()
        for key in ("total_batches", "steps_per_epoch", "padding_pct", "padded_tokens"):
            assert p[key] == want[key], key
        assert [b["batches"] for b in p["buckets"]] == [b["batches"] for b in want["buckets"]]
    assert got[2]["rows"] > 0 and 0 < got[2]["packing_efficiency"] <= 1


def test_drop_last_rounds_steps_down(hf_dir, hist, capsys):
    rc, out, _ = run(["profile", hf_dir[0], "-q", "-f", "json", "--policy", "fixed",
                      "--drop-last", "--grad-accum", "7"], capsys)
    pol = json.loads(out)["policies"][0]
    assert rc == 0 and pol["drop_last"]
    assert pol["steps_per_epoch"] == pol["total_batches"] // 7
    assert pol["total_batches"] < evaluate_policy(hist, "fixed").total_batches


def test_profile_policies_table_markdown_csv(hf_dir, capsys):
    rc, out, _ = run(["profile", hf_dir[0], "-q", "--policy", "all"], capsys)
    assert rc == 0 and "batching policies" in out and "BFD packing" in out
    assert "per-token" in out  # the shares say which loss averaging they weigh
    rc, out, _ = run(["profile", hf_dir[0], "-q", "--policy", "all", "-f", "markdown"], capsys)
    assert rc == 0 and "**sorted**" in out and "| packed-ffd |" in out
    rc, out, _ = run(["profile", hf_dir[0], "-q", "--policy", "fixed,packed", "-f", "csv"],
                     capsys)
    rows = list(csv.DictReader(io.StringIO(out)))  # one schema: the table's rows, then policies'
    assert rc == 0 and {r["policy"] for r in rows} == {"table", "fixed", "packed"}
    assert sum(r["bucket"] == "all" for r in rows) == 3
    assert all(r["steps_per_epoch"] for r in rows if r["bucket"] == "all")


def test_profile_without_policy_has_no_policies_key(hf_dir, capsys):
    rc, out, _ = run(["profile", hf_dir[0], "-q", "-f", "json"], capsys)
    assert rc == 0 and "policies" not in json.loads(out)


def test_saved_histogram_is_a_source(hf_dir, tmp_path, capsys):
    saved = tmp_path / "h.json"
    rc, _, _ = run(["profile", hf_dir[0], "-q", "--save-hist", saved, "-f", "json"], capsys)
    assert rc == 0 and LengthHistogram.load(saved).valid == len(hf_dir[1])
    for cmd in (["suggest", "--buckets", "3"], ["schedule", "--order", "stride"]):
        rc, from_hist, _ = run([cmd[0], saved, *cmd[1:], "-f", "json"], capsys)
        rc2, from_scan, _ = run([cmd[0], hf_dir[0], "-q", *cmd[1:], "-f", "json"], capsys)
        assert rc == rc2 == 0 and json.loads(from_hist) == json.loads(from_scan)


@pytest.mark.parametrize("args, message", [
    (["profile", "{src}", "--policy", "greedy"], "unknown policy 'greedy'"),
    (["suggest", "{src}", "--buckets", "0"], "--buckets must be a positive integer"),
    (["schedule", "{src}", "--order", "zigzag"], "unknown order 'zigzag'"),
    (["schedule", "{src}", "--trials", "0"], "--trials must be a positive integer"),
    (["schedule", "{src}", "--policy", "packed"], "policy fixed or sorted"),
    (["suggest", "{src}", "--buckets", "2", "--bounds", "5,3"], "strictly increasing"),
    (["suggest", "/no/such/dir", "--buckets", "2"], "/no/such/dir"),
])
def test_bad_input_is_one_line_exit_2(hf_dir, capsys, args, message):
    rc, out, err = run([a.format(src=hf_dir[0]) for a in args] + ["-q"], capsys)
    assert rc == 2 and out == ""
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_policy_names_listed_in_help(capsys):
    with pytest.raises(SystemExit):
        main(["profile", "--help"])
    out = capsys.readouterr().out
    assert "--policy" in out and "--drop-last" in out and all(
        p.split("-")[0] in out for p in POLICIES)


def test_scan_options_on_a_saved_histogram_are_refused(tmp_path, capsys):
    """A saved histogram was read already: --column, --offsets-of, --format or --split
    cannot apply to it, and say so instead of being ignored."""
    import numpy as np

    saved = tmp_path / "h.json"
    histogram(np.arange(1, 100)).save(saved)
    for command in (["profile"], ["schedule"], ["suggest", "--buckets", "3"]):
        for flag in (["--column", "n"], ["--offsets-of", "ids"], ["--split", "train"],
                     ["--format", "parquet"]):
            with pytest.raises(SystemExit) as exc:
                main([command[0], str(saved), *command[1:], "-q", *flag])
            err = capsys.readouterr().err
            assert exc.value.code == 2 and f"{flag[0]} cannot apply to a histogram" in err
