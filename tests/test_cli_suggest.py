"""`gpu-profiler suggest`: proposals for K buckets from a real dataset."""

from __future__ import annotations

import csv
import io
import json
import os

import pytest

from gpu_profiler.cli import main


def run(args, capsys):
    with pytest.raises(SystemExit) as exc:
        main([str(a) for a in args])
    out, err = capsys.readouterr()
    return exc.value.code, out, err


def test_json_proposals(hf_dir, capsys):
    rc, out, err = run(["suggest", hf_dir[0], "-q", "--buckets", "4", "--balance", "0.5",
                        "-f", "json"], capsys)
    assert rc == 0, err
    d = json.loads(out)
    assert d["schema"] == "gpu-profiler/suggest/v1" and d["buckets"] == 4
    methods = [q["method"] for q in d["proposals"]]
    assert methods == ["current", "equal-samples", "equal-tokens", "equal-batches",
                       "min-padding", "balanced"]
    best = d["proposals"][4]
    for q in d["proposals"]:
        assert {"method", "bounds", "padded_tokens", "total_batches", "max_batch_pct"} <= set(q)
        if len(q["bounds"]) <= 5:
            assert best["padded_tokens"] <= q["padded_tokens"]
    assert d["proposals"][5]["objective"] <= best["objective"]


def test_source_and_bucket_options_are_honoured(hf_dir, capsys):
    base = ["suggest", hf_dir[0], "-q", "--buckets", "3", "-f", "json", "--max-seq-len", "6000",
            "--token-budget", "30000", "--bounds", "0,2000,6001"]
    rc, by_column, _ = run(base + ["--column", "length", "--backend", "numpy"], capsys)
    rc2, by_offsets, _ = run(base + ["--offsets-of", "input_ids"], capsys)
    assert rc == rc2 == 0 and json.loads(by_column) == json.loads(by_offsets)
    d = json.loads(by_column)
    assert d["params"]["token_budget"] == 30000
    assert all(q["bounds"][0] == 0 and q["bounds"][-1] == 6001 for q in d["proposals"])


def test_table_markdown_csv_and_output_file(hf_dir, tmp_path, capsys):
    rc, out, _ = run(["suggest", hf_dir[0], "-q", "--buckets", "3"], capsys)
    assert rc == 0 and "min-padding" in out and "current:" in out
    rc, out, _ = run(["suggest", hf_dir[0], "-q", "--buckets", "3", "-f", "markdown"], capsys)
    assert rc == 0 and "**equal-tokens**" in out
    rc, out, _ = run(["suggest", hf_dir[0], "-q", "--buckets", "3", "-f", "csv"], capsys)
    rows = list(csv.DictReader(io.StringIO(out)))
    assert rc == 0 and {r["method"] for r in rows} >= {"current", "min-padding"}
    rc, out, _ = run(["suggest", hf_dir[0], "-q", "--buckets", "3", "-o", tmp_path / "s.txt"],
                     capsys)
    assert rc == 0 and out == "" and "min-padding" in (tmp_path / "s.txt").read_text()
    assert os.listdir(tmp_path) == ["s.txt"]


def test_buckets_is_required(hf_dir, capsys):
    rc, _, err = run(["suggest", hf_dir[0]], capsys)
    assert rc == 2 and "--buckets" in err
