"""Analyses of a DatasetDict (written by `datasets`) cover one split, never a silent merge:
train by default, --split to choose, the only split when there is one, and a one-line
refusal when there are several and none is train; every output format names it."""

from __future__ import annotations

import csv
import io
import json

import numpy as np
import pytest

import gpu_profiler as gp
from gpu_profiler import ProfilerError
from gpu_profiler.analysis.policies import evaluate_policy
from gpu_profiler.cli import main

datasets = pytest.importorskip("datasets")


def run(args, capsys):
    with pytest.raises(SystemExit) as exc:
        main([str(a) for a in args])
    out, err = capsys.readouterr()
    return exc.value.code, out, err


def train_lengths():
    """Chat turns plus 20% long documents: the longest bucket makes ~70% of the batches."""
    rng = np.random.default_rng(11)
    short = np.clip(rng.lognormal(np.log(450), 0.8, 6000), 16, None)
    return np.where(rng.random(6000) < 0.2, rng.uniform(3300, 8000, 6000), short).astype(int)


def answer_lengths():
    """Short answers only: all in the first buckets."""
    rng = np.random.default_rng(12)
    return np.clip(rng.lognormal(np.log(200), 0.5, 3000), 8, 1500).astype(int)


def save(path, **splits):
    datasets.DatasetDict({name: datasets.Dataset.from_dict({"length": x.tolist()})
                          for name, x in splits.items()}).save_to_disk(str(path))
    return path


@pytest.fixture(scope="module")
def train_test(tmp_path_factory):
    return save(tmp_path_factory.mktemp("dd") / "dd", train=train_lengths(),
                test=answer_lengths())


@pytest.fixture(scope="module")
def train_hist():
    return gp.histogram(train_lengths(), cap=8192)


@pytest.mark.parametrize("cmd", [["schedule"], ["suggest", "--buckets", "6"],
                                 ["profile", "--policy", "fixed,sorted"]])
def test_analyses_take_the_train_split(train_test, train_hist, cmd, capsys):
    rc, default, err = run([cmd[0], train_test, "-q", "-f", "json", *cmd[1:]], capsys)
    assert rc == 0, err
    rc, chosen, _ = run([cmd[0], train_test, "-q", "-f", "json", "--split", "train", *cmd[1:]],
                        capsys)
    d, want = json.loads(default), json.loads(chosen)
    fixed = evaluate_policy(train_hist, "fixed")
    if cmd[0] == "profile":
        assert [p["split"] for p in d["policies"]] == ["train", "train"]
        assert d["policies"] == want["policies"]
        assert d["policies"][0]["total_batches"] == fixed.total_batches
        assert d["total_samples"] == 9000  # the bucket table still shows every split
    else:
        assert d["split"] == "train" and d == want
        if cmd[0] == "schedule":
            assert d["buckets"] == want["buckets"]
            assert [b["batches"] for b in d["buckets"]] == [b.batches for b in fixed.buckets]
        else:
            assert d["proposals"][0]["total_batches"] == fixed.total_batches


def test_the_merge_is_not_what_is_analysed(train_test, train_hist, capsys):
    merged = gp.histogram(train_test)  # all splits together
    rc, out, _ = run(["schedule", train_test, "-q", "-f", "json"], capsys)
    got = sum(b["batches"] for b in json.loads(out)["buckets"])
    assert rc == 0 and got == evaluate_policy(train_hist, "fixed").total_batches
    assert got != evaluate_policy(merged, "fixed").total_batches


def test_profile_advises_each_split_and_train_as_schedule_does(train_test, capsys):
    rc, out, _ = run(["profile", train_test, "-q", "-f", "json"], capsys)
    d = json.loads(out)
    rc2, sched, _ = run(["schedule", train_test, "-q", "-f", "json"], capsys)
    assert rc == rc2 == 0
    assert d["splits"]["train"]["advice"] == json.loads(sched)["advice"]
    assert d["splits"]["train"]["advice"]["batch_pct"] > 60
    # short answers: all in bucket 0, whose own advice splits it
    assert d["splits"]["test"]["advice"]["bucket"] == 0
    assert d["splits"]["test"]["advice"]["bounds"] != d["splits"]["train"]["advice"]["bounds"]
    assert d["advice"] is None  # the total of two splits is a sum, not an analysis


@pytest.mark.parametrize("cmd, title", [
    (["schedule"], "batch orders of split train"),
    (["suggest", "--buckets", "4"], "bounds for 4 buckets of split train"),
    (["profile", "--policy", "fixed"], "batching policies of split train"),
])
def test_every_format_names_the_split(train_test, cmd, title, capsys):
    base = [cmd[0], train_test, "-q", *cmd[1:]]
    rc, table, _ = run(base, capsys)
    assert rc == 0 and title in " ".join(table.split())
    rc, md, _ = run([*base, "-f", "markdown"], capsys)
    assert rc == 0 and "**split `train`**" in md
    rc, out, _ = run([*base, "-f", "csv"], capsys)
    rows = [r for r in csv.DictReader(io.StringIO(out)) if r.get("policy") != "table"]
    assert rc == 0 and rows and {r["split"] for r in rows} == {"train"}


def test_other_split_by_name(train_test, capsys):
    rc, out, _ = run(["schedule", train_test, "-q", "-f", "json", "--split", "test"], capsys)
    d = json.loads(out)
    want = evaluate_policy(gp.histogram(answer_lengths(), cap=8192), "fixed")
    assert rc == 0 and d["split"] == "test"
    assert [b["batches"] for b in d["buckets"]] == [b.batches for b in want.buckets]


def test_several_splits_without_train_need_split(tmp_path, capsys):
    path = save(tmp_path / "ab", a=train_lengths()[:500], b=answer_lengths()[:500])
    capsys.readouterr()  # the progress bars of `datasets`
    for cmd in (["schedule"], ["suggest", "--buckets", "3"], ["profile", "--policy", "fixed"]):
        rc, out, err = run([cmd[0], path, "-q", *cmd[1:]], capsys)
        assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1
        assert "splits 'a', 'b' and none is 'train'" in err and "--split" in err
    rc, out, _ = run(["profile", path, "-q", "-f", "json"], capsys)  # tables: every split
    assert rc == 0 and set(json.loads(out)["splits"]) == {"a", "b"}
    rc, out, _ = run(["schedule", path, "-q", "-f", "json", "--split", "b"], capsys)
    assert rc == 0 and json.loads(out)["split"] == "b"
    with pytest.raises(ProfilerError, match="split= in Python"):
        gp.profile(str(path), policies="fixed")


def test_a_single_split_is_analysed_and_named(tmp_path, capsys):
    path = save(tmp_path / "v", validation=answer_lengths())
    rc, out, _ = run(["suggest", path, "-q", "-f", "json", "--buckets", "3"], capsys)
    assert rc == 0 and json.loads(out)["split"] == "validation"


def test_unsplit_sources_and_saved_histograms_name_no_split(train_test, hf_dir, tmp_path,
                                                            capsys):
    saved = tmp_path / "h.json"
    rc, _, _ = run(["profile", train_test, "-q", "--split", "train", "--save-hist", saved],
                   capsys)
    assert rc == 0
    for path in (hf_dir[0], saved):
        rc, out, _ = run(["schedule", path, "-q", "-f", "json"], capsys)
        assert rc == 0 and json.loads(out)["split"] is None
        rc, out, _ = run(["schedule", path, "-q", "-f", "csv"], capsys)
        assert rc == 0 and {r["split"] for r in csv.DictReader(io.StringIO(out))} == {""}
    rc, from_saved, _ = run(["schedule", saved, "-f", "json"], capsys)
    rc, from_train, _ = run(["schedule", train_test, "-q", "-f", "json"], capsys)
    saved_d, train_d = json.loads(from_saved), json.loads(from_train)
    assert saved_d["buckets"] == train_d["buckets"] and saved_d["advice"] == train_d["advice"]


def test_python_profile_policies_of_the_train_split(train_test, train_hist):
    r = gp.profile(str(train_test), policies="fixed")
    assert r.policies[0].split == "train" and set(r.splits) == {"train", "test"}
    assert r.policies[0].total_batches == evaluate_policy(train_hist, "fixed").total_batches
    ds = datasets.load_from_disk(str(train_test))  # an in-memory DatasetDict too
    assert gp.profile(ds, policies="fixed").policies[0].to_dict() == r.policies[0].to_dict()


@pytest.mark.parametrize("fmt", ["table", "markdown"])
def test_one_dominant_bucket_is_one_warning_naming_every_split(tmp_path, fmt, capsys):
    """Three splits with the same long-bucket excess: one warning names all three (the
    first split's fix, the others' shares), not three near-identical ones."""
    x = train_lengths()
    dd = save(tmp_path / "dd", train=x, validation=x[:2000], test=x[2000:4000])
    rc, out, _ = run(["profile", dd, "-q", "-f", fmt], capsys)
    warnings = [line for line in out.splitlines() if "warning" in line]
    assert rc == 0 and len(warnings) == 1, warnings
    line = warnings[0]
    assert "train, validation, test" in line and "numbers of train" in line
    d = json.loads(run(["profile", dd, "-q", "-f", "json"], capsys)[1])
    for split in ("validation", "test"):  # each split's own numbers, in the warning too
        a = d["splits"][split]["advice"]
        assert f"{split}: {a['batch_pct']:.1f}% of its {a['total_batches']:,} batches" in line


def test_a_split_name_cannot_break_the_markdown_bucket_table(tmp_path, capsys):
    """A ``|`` in a split's name is escaped in its cell, as in every Markdown table: each
    row keeps the header's columns."""
    path = save(tmp_path / "d", **{"train": train_lengths(), "te|st": answer_lengths()})
    rc, out, _ = run(["profile", path, "-q", "-f", "markdown"], capsys)
    rows = [r for r in out.splitlines() if r.startswith("| ")][:12]
    assert rc == 0 and any(r.startswith("| te\\|st |") for r in rows)
    assert {r.replace("\\|", "").count("|") for r in rows} == {rows[0].count("|")}
