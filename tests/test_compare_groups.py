"""``compare --group-by``: each group of B against the same group of A, checked against
numbers computed straight from the rows (counts, shares, percentiles, the KS distance),
on scans and on saved grouped histograms, in every output format, with its gates."""

from __future__ import annotations

import csv
import io
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import run_cli

from gpu_profiler.schemas import load


def mixture(path, n: int, names: list[str], seed: int, stretch: float = 1.0):
    """A Parquet file of ``n`` rows of the groups ``names`` (lengths by group, scaled by
    ``stretch`` for the last): {group: its lengths}."""
    rng = np.random.default_rng(seed)
    pick = rng.integers(0, len(names), n)
    scale = np.where(pick == len(names) - 1, stretch, 1.0)
    lengths = (rng.lognormal(4 + 2 * pick / len(names), 0.5) * scale).astype(np.int64) + 1
    source = np.array(names, dtype=object)[pick]
    pq.write_table(pa.table({"length": lengths, "source": source}), path,
                   row_group_size=max(1, n // 3))
    return {g: lengths[source == g] for g in names if (source == g).any()}


def ks(x: np.ndarray, y: np.ndarray) -> float:
    """The two-sample KS statistic, from the sorted samples."""
    grid = np.union1d(x, y)
    fx = np.searchsorted(np.sort(x), grid, side="right") / x.size
    fy = np.searchsorted(np.sort(y), grid, side="right") / y.size
    return float(np.abs(fx - fy).max())


def doc(capsys, *args) -> dict:
    rc, out, err = run_cli(["compare", *args, "-f", "json"], capsys)
    assert rc == 0, err
    return json.loads(out)


@pytest.mark.parametrize("k", [3, 17])
def test_each_group_equals_its_rows(tmp_path, capsys, k):
    """Groups on both sides, one only in A and one only in B: counts, shares of samples
    and tokens, p50, max and ks equal the rows'; the groups sum to the whole."""
    import jsonschema

    names = [f"src-{i}" for i in range(k)]
    a = mixture(tmp_path / "a.parquet", 20_000, names[:-1] + ["only-a"], seed=k)
    b = mixture(tmp_path / "b.parquet", 25_000, names[:-1] + ["only-b"], seed=k + 1)
    d = doc(capsys, tmp_path / "a.parquet", tmp_path / "b.parquet", "--group-by", "source")
    jsonschema.validate(d, load("compare"), cls=jsonschema.Draft202012Validator)
    assert d["group_by"] == "source" and set(d["groups"]) == set(a) | set(b)
    tokens = {side: sum(int(v.sum()) for v in rows.values()) for side, rows in
              (("a", a), ("b", b))}
    for name, g in d["groups"].items():
        for side, rows in (("a", a), ("b", b)):
            mine = rows.get(name, np.zeros(0, np.int64))
            total = sum(v.size for v in rows.values())
            assert g[side]["total_samples"] == mine.size
            assert g[side]["total_tokens"] == int(mine.sum())
            assert g[f"sample_pct_{side}"] == pytest.approx(100 * mine.size / total)
            assert g[f"token_pct_{side}"] == pytest.approx(100 * mine.sum() / tokens[side])
            if mine.size:
                assert g[side]["max_len"] == int(mine.max())
                # p50: the smallest length with at least half the samples at or below
                assert g[side]["percentiles"]["p50"] == int(np.sort(mine)[(mine.size - 1) // 2])
        if name in a and name in b:
            assert g["ks"] == pytest.approx(ks(a[name], b[name]), abs=1e-12)
        else:  # compared with nothing: no distance, not 0 ("equal")
            assert g["ks"] is g["tv"] is g["w1"] is None
    assert sum(g["a"]["total_samples"] for g in d["groups"].values()) == \
        d["a"]["total_samples"]
    assert "source only in A: 'only-a'" in d["warnings"]
    assert "source only in B: 'only-b'" in d["warnings"]
    both = [g["ks"] for n, g in d["groups"].items() if n in a and n in b]
    assert d["max_group_ks"] == pytest.approx(max(both))


def test_a_share_that_moves_is_warned_about_and_gated(tmp_path, capsys):
    mixture(tmp_path / "a.parquet", 10_000, ["web", "code"], seed=1)
    mixture(tmp_path / "b.parquet", 10_000, ["web", "code"], seed=2, stretch=4.0)
    d = doc(capsys, tmp_path / "a.parquet", tmp_path / "b.parquet", "--group-by", "source")
    moved = d["groups"]["code"]["token_pct_b"] - d["groups"]["code"]["token_pct_a"]
    assert moved > 5 and d["max_group_token_pct_shift"] == pytest.approx(moved)
    assert any(w.startswith("source whose share of the tokens moved by more than 5 points: "
                            "'code' ") for w in d["warnings"])
    args = ["compare", tmp_path / "a.parquet", tmp_path / "b.parquet", "--group-by", "source"]
    rc, _, err = run_cli([*args, "--fail-if", "max_group_token_pct_shift>5"], capsys)
    assert rc == 1 and "failed: max_group_token_pct_shift>5" in err, err
    rc, _, err = run_cli([*args, "--fail-if", f"max_group_ks>{d['max_group_ks'] + 1e-9}"],
                         capsys)
    assert rc == 0, err
    # without groups the group gates have no value: they fail rather than pass unmeasured
    rc, _, err = run_cli([*args[:3], "--fail-if", "max_group_ks>0.5"], capsys)
    assert rc == 1 and "has no value" in err, err
    # the same source against itself: every group equal, nothing warned
    same = doc(capsys, tmp_path / "a.parquet", tmp_path / "a.parquet", "--group-by", "source")
    assert same["max_group_ks"] == 0 and same["max_group_token_pct_shift"] == 0
    assert same["warnings"] == []


def test_saved_grouped_histograms_compare_as_the_data_does(tmp_path, capsys):
    mixture(tmp_path / "a.parquet", 8_000, ["web", "code", "books"], seed=3)
    mixture(tmp_path / "b.parquet", 8_000, ["web", "code"], seed=4)
    for side in "ab":
        rc, _, err = run_cli(["profile", tmp_path / f"{side}.parquet", "--group-by", "source",
                              "--save-hist", tmp_path / f"{side}.json"], capsys)
        assert rc == 0, err
    scanned = doc(capsys, tmp_path / "a.parquet", tmp_path / "b.parquet", "--group-by", "source")
    saved = doc(capsys, tmp_path / "a.json", tmp_path / "b.json", "--group-by", "source")
    for d in (scanned, saved):
        for g in d["groups"].values():
            g["a"].pop("source")
            g["b"].pop("source")
        d.pop("a")
        d.pop("b")
    assert saved == scanned
    rc, _, err = run_cli(["compare", tmp_path / "a.json", tmp_path / "b.json", "--group-by",
                          "lang"], capsys)
    assert rc == 2 and "its groups are by source, not lang" in err, err
    rc, _, err = run_cli(["compare", tmp_path / "a.json", tmp_path / "b.parquet",
                          "--group-by", "nope"], capsys)
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    rc, _, err = run_cli(["profile", tmp_path / "b.parquet", "--save-hist",
                          tmp_path / "plain.json"], capsys)
    assert rc == 0, err
    rc, _, err = run_cli(["compare", tmp_path / "a.json", tmp_path / "plain.json",
                          "--group-by", "source"], capsys)
    assert rc == 2 and "a histogram has no groups" in err, err


def test_table_markdown_and_csv_show_the_groups(tmp_path, capsys):
    mixture(tmp_path / "a.parquet", 6_000, ["web", "code"], seed=5)
    mixture(tmp_path / "b.parquet", 6_000, ["web", "math"], seed=6)
    args = ["compare", tmp_path / "a.parquet", tmp_path / "b.parquet", "--group-by", "source"]
    d = doc(capsys, *args[1:])
    for fmt in ("table", "markdown"):
        rc, out, err = run_cli([*args, "-f", fmt, "--width", "200"], capsys)
        assert rc == 0 and "by source" in out and "math" in out and "code" in out, err
    rc, out, err = run_cli([*args, "-f", "csv"], capsys)
    assert rc == 0, err
    rows = list(csv.DictReader(io.StringIO(out)))
    assert list(rows[0])[0] == "group" and list(rows[0])[-1] == "token_pct_b"
    whole = [r for r in rows if not r["group"]]
    assert rows[:len(whole)] == whole and whole[-1]["bucket"] == "all"
    for name, g in d["groups"].items():
        mine = [r for r in rows if r["group"] == name]
        assert [int(r["samples_b"]) for r in mine[:-1]] == \
            [b["samples_b"] for b in g["buckets"]]
        last = mine[-1]
        assert last["bucket"] == "all" and int(last["samples_a"]) == g["a"]["total_samples"]
        assert float(last["token_pct_b"]) == pytest.approx(g["token_pct_b"])
    rc, out, err = run_cli(args[:3] + ["-f", "csv"], capsys)  # no groups: no column
    assert rc == 0 and out.split(",", 1)[0] == "bucket", err


def test_many_files_make_one_warning_each_kind(tmp_path, capsys):
    """@file groups of two sources sharded differently: the groups on one side only are
    named in one warning per side, the first ten and how many more."""
    for side, shards in (("a", 3), ("b", 14)):
        (tmp_path / side).mkdir()
        for k in range(shards):
            pq.write_table(pa.table({"length": np.arange(1, 200 + k)}),
                           tmp_path / side / f"{side}-{k:02d}.parquet")
    d = doc(capsys, tmp_path / "a", tmp_path / "b", "--group-by", "@file")
    assert len(d["groups"]) == 17
    only = [w for w in d["warnings"] if w.startswith("file only in")]
    assert only[0] == "file only in A: 'a-00.parquet', 'a-01.parquet', 'a-02.parquet'"
    assert only[1].startswith("file only in B: 'b-00.parquet', ") and \
        only[1].endswith("'b-09.parquet' and 4 more")
