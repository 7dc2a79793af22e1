"""``schedule --group-by``: how each order mixes the sources, each batch standing for its
bucket's samples by group; checked against the rows (bucket counts per group, windows,
runs of batches from buckets one source makes) on scans and saved grouped histograms.
``suggest --group-by``: the same for each proposal's bounds."""

from __future__ import annotations

import csv
import io
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import run_cli

from gpu_profiler.analysis.schedule import batch_order
from gpu_profiler.schemas import load

BOUNDS = [0, 500, 1000, 2000, 4000, 8193]


def two_sources(path, seed: int = 0, n: int = 40_000):
    """``short`` (lengths under 1000, 70% of the rows) and ``long`` (2000 and up): rows."""
    rng = np.random.default_rng(seed)
    long = rng.random(n) < 0.3
    lengths = np.where(long, rng.integers(2000, 8000, n), rng.integers(1, 1000, n))
    source = np.where(long, "long", "short").astype(object)
    pq.write_table(pa.table({"length": lengths, "source": source}), path)
    return lengths, source


def doc(capsys, *args) -> dict:
    rc, out, err = run_cli(["schedule", *args, "-f", "json"], capsys)
    assert rc == 0, err
    return json.loads(out)


def reference(d, lengths, source, window: int, order_name: str):
    """The order's groups, computed from the rows: (longest run of batches from buckets
    one group makes, its group, {group: (share, min, max, std)}, the least such run any
    order has, the percent of batches from such buckets, the order itself)."""
    batches = [b["batches"] for b in d["buckets"]]
    names = sorted(set(source))
    b_of = np.searchsorted(BOUNDS, np.minimum(lengths, 8192), side="right") - 1
    counts = np.array([[np.sum((b_of == b) & (source == g)) for g in names]
                       for b in range(len(batches))], float)
    corpus = counts.sum(axis=0) / counts.sum() * 100
    mostly = []
    for b in range(len(batches)):
        pct = counts[b] / counts[b].sum() * 100 if counts[b].sum() else np.zeros(len(names))
        g = int(pct.argmax())
        mostly.append(g if pct[g] > 50 and pct[g] - corpus[g] >= 20 else -1)
    per = np.array([counts[b] / batches[b] if batches[b] else 0 * counts[b]
                    for b in range(len(batches))])
    order = batch_order(batches, order_name, seed=0, classes=np.array(mostly))
    best, who, run, last = 0, None, 0, None
    for b in order:
        g = mostly[b]
        run = run + 1 if g >= 0 and g == last else (1 if g >= 0 else 0)
        last = g
        if run > best:
            best, who = run, names[g]
    x = per[order]
    w = x.size // len(names) // window
    rows = x[:w * window].reshape(w, window, len(names)).sum(axis=1)
    share = rows / rows.sum(axis=1, keepdims=True) * 100
    stats = {g: (x[:, i].sum() / x.sum() * 100, share[:, i].min(), share[:, i].max(),
                 share[:, i].std()) for i, g in enumerate(names)}
    n = sum(batches)
    made = [sum(batches[b] for b in range(len(batches)) if mostly[b] == g)
            for g in range(len(names))]
    least = max((-(-m // (n - m + 1)) for m in made if m), default=0)
    return best, who, stats, least, 100 * sum(made) / n, order


@pytest.mark.parametrize("order", ["stride", "sequential", "random"])
def test_each_orders_groups_equal_the_rows(tmp_path, capsys, order):
    import jsonschema

    lengths, source = two_sources(tmp_path / "mix.parquet")
    d = doc(capsys, tmp_path / "mix.parquet", "--group-by", "source", "--order", order,
            "--bounds", ",".join(map(str, BOUNDS)), "--log-window", "20",
            "--emit-order", f"{order}={tmp_path / 'order.npy'}")
    jsonschema.validate(d, load("schedule"), cls=jsonschema.Draft202012Validator)
    got = d["orders"][0]["groups"]
    best, who, stats, least, pct, drawn = reference(d, lengths, source, 20, order)
    # the order written is the one measured (with the sources interleaved, for stride)
    assert np.array_equal(np.load(tmp_path / "order.npy"), drawn)
    assert (got["longest_run"], got["longest_run_group"]) == (best, who)
    assert got["least_run"] == least and got["mostly_batch_pct"] == pytest.approx(pct)
    for g, (share, lo, hi, std) in stats.items():
        w = got["windows"][g]
        assert [w["share"], w["min"], w["max"], w["spread"]] == pytest.approx(
            [share, lo, hi, std], abs=1e-9)
    assert d["longest_group_run"] == best and d["longest_group_run_group"] == who
    assert d["max_group_window_spread"] == pytest.approx(max(s[3] for s in stats.values()))
    if order == "sequential":  # bucket after bucket: the long buckets' batches in one run
        batches = [b["batches"] for b in d["buckets"]]
        assert best == max(batches[0] + batches[1], sum(batches[3:]))


def test_a_stride_that_switches_sources_is_warned_about_and_gated(tmp_path, capsys):
    two_sources(tmp_path / "mix.parquet", seed=1)
    args = [tmp_path / "mix.parquet", "--group-by", "source", "--bounds",
            ",".join(map(str, BOUNDS))]
    d = doc(capsys, *args)
    mix = d["orders"][-1]["groups"]
    said = [w for w in d["warnings"] if "made mostly of source" in w]
    # the short source makes buckets 0-1, the long one 3-4: whether stride runs either
    # past what an order of these batches can keep them to decides the warning
    assert bool(said) == (mix["longest_run"] > 3)
    rc, _, err = run_cli(["schedule", *args, "--fail-if",
                          f"longest_group_run>={mix['longest_run']}"], capsys)
    assert rc == 1 and "failed: longest_group_run" in err, err
    rc, _, err = run_cli(["schedule", *args[:1], "--fail-if", "longest_group_run>1"], capsys)
    assert rc == 1 and "has no value" in err, err


def test_one_source_makes_no_run_and_saved_groups_schedule_alike(tmp_path, capsys):
    pq.write_table(pa.table({"length": np.arange(1, 5000), "source": ["only"] * 4999}),
                   tmp_path / "one.parquet")
    d = doc(capsys, tmp_path / "one.parquet", "--group-by", "source")
    assert d["longest_group_run"] == 0 and d["longest_group_run_group"] is None
    assert d["orders"][0]["groups"]["windows"]["only"]["share"] == pytest.approx(100)
    two_sources(tmp_path / "mix.parquet", seed=2, n=8_000)
    rc, _, err = run_cli(["profile", tmp_path / "mix.parquet", "--group-by", "source",
                          "--save-hist", tmp_path / "mix.json"], capsys)
    assert rc == 0, err
    scanned = doc(capsys, tmp_path / "mix.parquet", "--group-by", "source")
    saved = doc(capsys, tmp_path / "mix.json", "--group-by", "source")
    assert saved["orders"] == scanned["orders"] and saved["warnings"] == scanned["warnings"]


def test_table_markdown_and_csv_show_the_groups(tmp_path, capsys):
    two_sources(tmp_path / "mix.parquet", seed=3, n=8_000)
    args = ["schedule", tmp_path / "mix.parquet", "--group-by", "source"]
    for fmt in ("table", "markdown"):
        rc, out, err = run_cli([*args, "-f", fmt, "--width", "200"], capsys)
        assert rc == 0 and "by source" in out and "made mostly of one source" in out, err
    d = doc(capsys, *args[1:])
    rc, out, err = run_cli([*args, "-f", "csv"], capsys)
    assert rc == 0, err
    rows = [r for r in csv.DictReader(io.StringIO(out)) if r["bucket"] == "all"]
    assert [int(r["group_longest_run"]) for r in rows] == \
        [o["groups"]["longest_run"] for o in d["orders"]]


def test_suggest_scores_each_proposal_as_schedule_does(tmp_path, capsys):
    """Each proposal's groups are schedule's stride order under its bounds; the current
    bounds' equal the rows' reference."""
    import jsonschema

    lengths, source = two_sources(tmp_path / "mix.parquet", seed=5)
    bounds = ",".join(map(str, BOUNDS))
    rc, out, err = run_cli(["suggest", tmp_path / "mix.parquet", "-k", "4", "--group-by",
                            "source", "--bounds", bounds, "-f", "json"], capsys)
    assert rc == 0, err
    d = json.loads(out)
    jsonschema.validate(d, load("suggest"), cls=jsonschema.Draft202012Validator)
    assert d["group_by"] == "source" and d["proposals"][0]["method"] == "current"
    for q in d["proposals"]:
        s = doc(capsys, tmp_path / "mix.parquet", "--group-by", "source", "--order", "stride",
                "--bounds", ",".join(map(str, q["bounds"])))
        assert q["groups"] == s["orders"][0]["groups"], q["method"]
    s = doc(capsys, tmp_path / "mix.parquet", "--group-by", "source", "--order", "stride",
            "--bounds", bounds, "--log-window", "50")
    best, who, _, least, pct, _ = reference(s, lengths, source, 50, "stride")
    got = d["proposals"][0]["groups"]
    assert (got["longest_run"], got["longest_run_group"], got["least_run"]) == \
        (best, who, least)
    assert got["mostly_batch_pct"] == pytest.approx(pct)
    for fmt in ("table", "markdown"):
        rc, out, err = run_cli(["suggest", tmp_path / "mix.parquet", "-k", "4", "--group-by",
                                "source", "-f", fmt, "--width", "200"], capsys)
        assert rc == 0 and "one-source batches %" in out, err
    rc, out, err = run_cli(["suggest", tmp_path / "mix.parquet", "-k", "4", "--group-by",
                            "source", "-f", "csv"], capsys)
    rows = [r for r in csv.DictReader(io.StringIO(out)) if r["bucket"] == "all"]
    assert [int(r["group_least_run"]) for r in rows] == \
        [q["groups"]["least_run"] for q in d["proposals"]]


@pytest.mark.parametrize("world, cells", [(1, None), (3, None), (2, 100)])
def test_plan_groups_are_the_planned_steps_own(tmp_path, capsys, world, cells, monkeypatch):
    """plan --group-by: each step's samples (read back from the plan file) by their rows'
    groups, with nulls and a dictionary column, give the summary's runs and windows (also
    counted a window of steps at a time: ``cells``)."""
    import jsonschema

    from gpu_profiler.analysis import schedule

    if cells:
        monkeypatch.setattr(schedule, "PLAN_CELLS", cells)

    rng = np.random.default_rng(world)
    n = 30_000
    pick = rng.integers(0, 3, n)
    lengths = np.where(pick == 2, rng.integers(2500, 8000, n), rng.integers(1, 1200, n))
    names = np.array(["web", "wiki", "code"], object)[pick]
    names[rng.random(n) < 0.01] = None
    path = tmp_path / "mix.parquet"
    pq.write_table(pa.table({"length": lengths,
                             "source": pa.array(names, pa.string()).dictionary_encode()}),
                   path, row_group_size=7_000)
    out = tmp_path / "p.npz"
    rc, text, err = run_cli(["plan", path, "--group-by", "source", "--world-size", str(world),
                             "-o", out, "-f", "json"], capsys)
    assert rc == 0, err
    d = json.loads(text)
    jsonschema.validate(d, load("plan"), cls=jsonschema.Draft202012Validator)
    got = d["groups"]
    saved = np.load(out)
    index, offsets = saved["indices"], saved["offsets"]
    order = sorted({"(null)" if v is None else v for v in names})
    code = np.array([order.index("(null)" if v is None else v) for v in names])
    steps = (offsets.size - 1) // world
    counts = np.zeros((steps, len(order)))
    for b in range(steps * world):
        for s in index[offsets[b]:offsets[b + 1]]:
            counts[b // world, code[s]] += 1
    corpus = counts.sum(axis=0) / counts.sum() * 100
    tags = []
    for row in counts:
        g = int(row.argmax())
        pct = row[g] / row.sum() * 100
        tags.append(g if pct > 50 and pct - corpus[g] >= 20 else -1)
    best, who, run = 0, None, 0
    for i, g in enumerate(tags):
        run = run + 1 if g >= 0 and i and tags[i - 1] == g else (1 if g >= 0 else 0)
        if run > best:
            best, who = run, order[g]
    assert (got["longest_run"], got["longest_run_group"]) == (best, who)
    assert got["mostly_batch_pct"] == pytest.approx(100 * np.mean(np.array(tags) >= 0))
    w = steps // 50
    share = counts[:w * 50].reshape(w, 50, -1).sum(axis=1)
    share = share / share.sum(axis=1, keepdims=True) * 100
    for i, name in enumerate(order):
        assert [got["windows"][name][k] for k in ("min", "max", "spread")] == pytest.approx(
            [share[:, i].min(), share[:, i].max(), share[:, i].std()], abs=1e-9)
    rc, text, err = run_cli(["plan", path, "--group-by", "@file", "-o", tmp_path / "q.npz"],
                            capsys)
    assert rc == 2 and "a plan groups its samples by a column" in err, err
    rc, text, err = run_cli(["plan", path, "--group-by", "source", "-o", tmp_path / "r.npz",
                             "--width", "200"], capsys)
    assert rc == 0 and "longest run of such steps" in text and "source (null)" in text, err
