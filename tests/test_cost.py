"""The cost model (`gpu_profiler.cost`, issue 29 item 4): a batch of ``rows`` rows, longest
``L``, costs ``rows x (L + A L^2)`` (attention) or ``rows x curve(L)``; every batch size,
policy, suggestion and sampler batch honours the budget. Every expected number here is
computed independently (exact rationals, brute-force greedy and search), never read back
from the implementation."""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import replace
from fractions import Fraction

import jsonschema
import numpy as np
import pytest
from conftest import run_cli

from gpu_profiler.analysis.bounds import suggest_bounds
from gpu_profiler.analysis.buckets import bucket_table
from gpu_profiler.analysis.policies import evaluate_policy
from gpu_profiler.backends import get_backend
from gpu_profiler.chunk import Chunk
from gpu_profiler.cost import CostModel, load_curve
from gpu_profiler.errors import ProfilerError
from gpu_profiler.params import BucketParams
from gpu_profiler.sampler import BucketBatchSampler
from gpu_profiler.schemas import load


def lengths(n=6000, seed=3):
    return np.random.default_rng(seed).lognormal(6.6, 1.1, n).astype(np.int64) + 1


def hist_of(x):
    return get_backend("numpy").histogram_chunk(Chunk(np.asarray(x, np.int64)),
                                                int(np.max(x)))


def exact_rows(length, a, budget, max_rows):
    """``floor(budget / (L + A L^2))`` in exact rationals, at most ``max_rows``
    (``max_rows`` for an empty bucket)."""
    if length == 0:
        return max_rows
    cost = length + Fraction(a) * length * length
    return min(math.floor(Fraction(budget) / cost), max_rows)


# ---------------------------------------------------------------- batch sizes
@pytest.mark.parametrize("a, budget", [(1 / 1024, None), (0.5, 10**7), (3.0, 4 * 10**8),
                                       (2.0 ** -13, 98304)])
def test_a_quadratic_budget_sizes_every_bucket_as_its_formula_says(a, budget):
    x = lengths()
    h = hist_of(x)
    p = BucketParams(cost=CostModel(attention_weight=a, budget=budget))
    b = p.token_budget if budget is None else budget
    clipped = np.minimum(x, p.max_seq_len)
    table = bucket_table(h, p)
    fixed = evaluate_policy(h, "fixed", p)
    plain = bucket_table(h, BucketParams())
    changed = 0
    for row, pol, old in zip(table.buckets, fixed.buckets, plain.buckets, strict=True):
        inside = clipped[(clipped >= row.lo) & (clipped < row.hi)]
        longest = int(inside.max()) if inside.size else 0
        want = exact_rows(longest, a, b, p.max_batch_size)
        assert row.est_batch_size == want, (row.index, longest)
        assert row.over_budget == (want == 0)
        if want:  # fixed: ceil(n / size) batches of that size
            assert pol.batch_size == want
            assert pol.batches == -(-inside.size // want)
        changed += row.est_batch_size != old.est_batch_size
        # the bucket's compute: every sample padded to the bucket's max, each row priced
        want_cost = inside.size * (longest + Fraction(a) * longest * longest)
        assert row.est_cost == pytest.approx(float(want_cost), rel=1e-12)
    assert changed  # the quadratic term does change batch sizes
    assert sum(r.cost_pct for r in table.buckets) == pytest.approx(100.0)


def test_packing_rows_per_batch_follow_the_budget():
    x = lengths()
    p = BucketParams(cost=CostModel(attention_weight=1 / 4096, budget=400_000))
    packed = evaluate_policy(hist_of(x), "packed", p)
    want = exact_rows(p.max_seq_len, 1 / 4096, 400_000, p.max_batch_size)  # 8192 + 16384
    assert packed.rows_per_batch == want == 16
    assert packed.cost == pytest.approx(packed.rows * (8192 + 8192 ** 2 / 4096))


@pytest.mark.parametrize("extra", [[], [400], [400, 1100]])
def test_the_fixed_policys_cost_is_the_expectation_over_every_random_batch(extra):
    """fixed: batches are random draws from the bucket, so its cost is rows x the expected
    row cost of a batch's longest: here the mean over every subset of the batch's size."""
    values = [100, 100, 300, 500, 700, 700, 700, 900, 1200, *extra]
    a, budget = Fraction(1, 256), 21000
    p = BucketParams(bounds=(0, 8193), cost=CostModel(attention_weight=float(a),
                                                       budget=budget))
    size = exact_rows(max(values), a, budget, p.max_batch_size)
    assert size == 3

    def expected(k):  # E[row_cost(max of k draws without replacement)], exactly
        subsets = list(itertools.combinations(values, k))
        return sum(max(s) + a * max(s) ** 2 for s in subsets) / len(subsets)

    full, rest = divmod(len(values), size)
    want = full * size * expected(size) + (rest * expected(rest) if rest else 0)
    pol = evaluate_policy(hist_of(values), "fixed", p)
    assert pol.buckets[0].batches == full + bool(rest)
    assert pol.cost == pytest.approx(float(want), rel=1e-12)


def brute_sorted(x, p, a, budget, varlen=False):
    """The sorted policy by hand, in exact rationals: each bucket's samples ascending, one
    at a time into the open batch while it fits: rows <= max_batch_size and rows x
    row_cost(longest) <= budget (varlen: rows x longest + A x sum(len^2) <= budget)."""
    clipped = np.sort(np.minimum(x, p.max_seq_len))
    A = Fraction(a)

    def fits(batch):
        rows, longest = len(batch), max(batch)
        cost = rows * longest + A * (sum(v * v for v in batch) if varlen
                                     else rows * longest * longest)
        return rows <= p.max_batch_size and cost <= budget

    out = []
    for lo, hi in zip(p.bounds[:-1], p.bounds[1:], strict=True):
        batches, open_, unbatchable = [], [], 0
        for v in clipped[(clipped >= lo) & (clipped < hi)].tolist():
            if not fits([v]):
                unbatchable += 1
            elif open_ and fits(open_ + [v]):
                open_.append(v)
            else:
                if open_:
                    batches.append(open_)
                open_ = [v]
        if open_:
            batches.append(open_)
        out.append((batches, unbatchable))
    return out


@pytest.mark.parametrize("a, budget", [(1 / 1024, 49152), (1 / 256, 200_000), (0.0, 30_000)])
def test_sorted_under_a_quadratic_cost_is_the_brute_force_greedy(a, budget):
    x = lengths(3000, seed=11)
    p = BucketParams(max_seq_len=4096, bounds=(0, 500, 1500, 4097),
                     cost=CostModel(attention_weight=a, budget=budget))
    pol = evaluate_policy(hist_of(x), "sorted", p)
    for b, (batches, unbatchable) in zip(pol.buckets, brute_sorted(x, p, a, budget),
                                         strict=True):
        sizes = [len(bt) for bt in batches]
        assert b.batches == len(batches)
        assert (b.min_batch_size, b.max_batch_size) == (min(sizes, default=0),
                                                        max(sizes, default=0))
        assert b.unbatchable_samples == unbatchable
        assert b.padded_tokens == sum(len(bt) * max(bt) for bt in batches)
        want = sum(len(bt) * (max(bt) + Fraction(a) * max(bt) ** 2) for bt in batches)
        assert b.cost == pytest.approx(float(want), rel=1e-12)


# ---------------------------------------------------------------- a curve equal to L
def identity_curve():
    return CostModel(curve=((1, 1.0), (8192, 8192.0)), budget=49152, unit="tokens")


def test_a_curve_equal_to_the_length_reproduces_the_default_outputs():
    x = lengths()
    h = hist_of(x)
    plain, curved = BucketParams(), BucketParams(cost=identity_curve())
    strip = ("cost", "cost_pct", "est_cost", "total_est_cost", "params")
    for name in ("estimate", "fixed", "sorted", "packed", "packed-ffd"):
        a, b = evaluate_policy(h, name, plain), evaluate_policy(h, name, curved)
        da, db = a.to_dict(), b.to_dict()
        db["buckets"] = [{k: v for k, v in r.items() if k not in strip} for r in db["buckets"]]
        assert da == {k: v for k, v in db.items() if k not in strip}, name
        assert b.cost == pytest.approx(a.padded_tokens, rel=1e-12)  # cost counts tokens
        for pa, pb in zip(a.buckets, b.buckets, strict=True):
            assert pb.cost == pytest.approx(pa.padded_tokens, rel=1e-12, abs=1e-9)
    ta, tb = bucket_table(h, plain).to_dict(), bucket_table(h, curved).to_dict()
    tb["buckets"] = [{k: v for k, v in r.items() if k not in strip} for r in tb["buckets"]]
    assert {k: v for k, v in ta.items() if k not in strip} == \
        {k: v for k, v in tb.items() if k not in strip}
    sa, sb = suggest_bounds(h, 4, plain, balance=1.0), suggest_bounds(h, 4, curved, balance=1.0)
    assert [(q.method, q.bounds, q.padded_tokens, q.total_batches) for q in sa.proposals] == \
        [(q.method, q.bounds, q.padded_tokens, q.total_batches) for q in sb.proposals]
    for policy in ("fixed", "sorted", "packed"):
        one = BucketBatchSampler(x, policy=policy, seed=5, world_size=2)
        two = BucketBatchSampler(x, policy=policy, seed=5, world_size=2,
                                 cost_curve=[(1, 1), (8192, 8192)], cost_budget=49152)
        assert list(one) == list(two), policy


# ---------------------------------------------------------------- the sampler
def row_price(v, a=0.0, curve=None):
    if curve is None:
        return v + Fraction(a) * v * v
    xs, ys = zip(*curve, strict=True)
    return Fraction(float(np.interp(v, xs, ys))) if xs[0] <= v <= xs[-1] else None


@pytest.mark.parametrize("policy", ["fixed", "sorted", "packed"])
@pytest.mark.parametrize("world", [1, 3])
@pytest.mark.parametrize("model", ["attention", "curve"])
def test_the_samplers_batches_never_exceed_the_cost_budget(policy, world, model):
    x = lengths(5000, seed=7)
    if model == "attention":
        kw, a, curve, budget = dict(attention_weight=1 / 2048, cost_budget=120_000), \
            1 / 2048, None, 120_000
    else:
        curve = [(1, 0.0001), (1024, 0.002), (4096, 0.011), (8192, 0.04)]
        kw, a, budget = dict(cost_curve=curve, cost_budget=0.3), 0.0, Fraction(0.3)
    s = BucketBatchSampler(x, policy=policy, world_size=world, seed=1, **kw)
    plain = BucketBatchSampler(x, policy=policy, world_size=world, seed=1)
    seen = []
    plan = s.plan()
    for j, batch in enumerate(s):
        seen += batch
        longest = int(np.minimum(x[batch], 8192).max())
        if policy == "packed":  # rows of max_seq_len, each priced at it
            cost = int(plan.rows()[j]) * row_price(8192, a, curve)
        else:
            cost = len(batch) * row_price(longest, a, curve)
        assert cost <= budget, (j, len(batch), longest)
    assert sorted(seen) == list(range(x.size))  # every sample once
    assert len(s) != len(plain)  # the cost changed the batches


def test_sampler_state_names_the_cost_model():
    x = lengths(800)
    s = BucketBatchSampler(x, attention_weight=1 / 1024, cost_budget=10**6)
    other = BucketBatchSampler(x, attention_weight=1 / 512, cost_budget=10**6)
    plain = BucketBatchSampler(x)
    for made, into in ((s, other), (s, plain), (plain, s)):
        with pytest.raises(ProfilerError, match="cost"):
            into.load_state_dict(json.loads(json.dumps(made.state_dict())))
    same = BucketBatchSampler(x, attention_weight=1 / 1024, cost_budget=10**6)
    same.load_state_dict(json.loads(json.dumps(s.state_dict())))  # through JSON: resumes
    assert "cost" not in plain.state_dict()["plan"]  # default: as before


# ---------------------------------------------------------------- suggest
@pytest.mark.parametrize("varlen", [False, True])
def test_suggest_minimizes_the_cost_exactly_on_few_lengths(varlen):
    """With few distinct lengths the search is exact: its min-padding bounds cost what the
    cheapest of every split into at most 3 buckets costs, found by brute force (varlen:
    the padded part plus A x every sample's length^2, which no split changes)."""
    rng = np.random.default_rng(4)
    values = np.array([100, 300, 700, 900, 1500, 2200, 3000, 4000, 6000, 8000])
    x = np.repeat(values, rng.integers(20, 400, values.size))
    h = hist_of(x)
    p = BucketParams(bounds=(0, 8193), cost=CostModel(attention_weight=1 / 512,
                                                      budget=1_000_000, varlen=varlen))
    best = math.inf
    for k in range(0, 3):
        for cut in itertools.combinations(values[1:].tolist(), k):
            pol = evaluate_policy(h, "fixed", replace(p, bounds=(0, *cut, 8193)))
            best = min(best, pol.cost)
    got = suggest_bounds(h, 3, p)["min-padding"]
    assert got.cost == pytest.approx(best, rel=1e-12)
    tokens_best = suggest_bounds(h, 3, replace(p, cost=CostModel()))["min-padding"]
    if not varlen:  # padded attention: the cost, not the padding, was minimized
        assert got.bounds != tokens_best.bounds


# ---------------------------------------------------------------- hostile curves
@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    path = tmp_path_factory.mktemp("cost") / "h.json"
    hist_of(lengths(3000)).save(path)
    return path


HOSTILE = {
    "empty": "",
    "blank": "\n\n  \n",
    "header only": "length,seconds\n",
    "non-monotone cost": "length,seconds\n512,0.01\n1024,0.005\n",
    "lengths not increasing": "length,s\n1024,0.01\n512,0.02\n",
    "negative cost": "length,s\n512,-0.01\n1024,0.02\n",
    "negative length": "length,s\n-5,0.01\n1024,0.02\n",
    "nan": "length,s\n512,nan\n1024,0.02\n",
    "inf": "length,s\n512,0.01\n1024,inf\n",
    "overflowing": "length,s\n512,0.01\n1024,1e400\n",
    "huge value": "length,s\n512,0.01\n1024,1e300\n",
    "fractional length": "length,s\n512.5,0.01\n",
    "three cells": "512,0.01,7\n",
    "words": "length,s\n512,fast\n",
    "all zero": "length,s\n512,0\n1024,0\n",
    "json nan": '{"unit": "s", "points": [[512, NaN]]}',
    "json junk": '{"unit": "s", "points": 5}',
    "json not pairs": "[[512, 0.01, 3], [1024]]",
    "json bad": "[[512, 0.01],",
    "json deep": "[" * 100_000,
    "json unit": '{"unit": 7, "points": [[512, 0.01]]}',
    "json bool": "[[true, 0.01]]",
    "binary": b"\xff\xfe\x00\x01junk",
    "huge file": "length,s\n" + "".join(f"{i},{i}\n" for i in range(1, 200_000)),
    "too many points": "".join(f"{i},{i}\n" for i in range(1, 10_100)),
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_a_hostile_cost_curve_is_one_line_and_exit_2(name, saved, tmp_path, capsys):
    path = tmp_path / "curve.csv"
    data = HOSTILE[name]
    path.write_bytes(data if isinstance(data, bytes) else data.encode())
    rc, out, err = run_cli(["profile", saved, "--cost-curve", path, "--cost-budget", "1"],
                           capsys)
    assert rc == 2, (name, err)
    assert err.count("\n") == 1 and "cost" in err and "Traceback" not in err, err
    with pytest.raises(ProfilerError):
        load_curve(path)


@pytest.mark.parametrize("args", [
    ["--cost-curve", "{missing}"], ["--cost-budget", "nan", "--attention-weight", "1"],
    ["--cost-budget", "-1"], ["--attention-weight", "-0.5"], ["--attention-weight", "inf"],
    ["--cost-curve", "{good}"],  # no budget
    ["--cost-curve", "{good}", "--cost-budget", "1", "--attention-weight", "0.1"]])
def test_bad_cost_options_are_one_line_and_exit_2(args, saved, tmp_path, capsys):
    good = tmp_path / "good.csv"
    good.write_text("length,s\n512,0.01\n")
    args = [a.format(missing=tmp_path / "nope.csv", good=good) for a in args]
    rc, out, err = run_cli(["profile", saved, *args], capsys)
    assert rc == 2 and err.count("\n") == 1, err


def test_a_curve_file_reads_as_csv_and_json(tmp_path):
    csv_ = tmp_path / "c.csv"
    csv_.write_text("# probe steps, 2 x H100\nlength,seconds\n512, 0.004\n2048,0.02  # ok\n")
    js = tmp_path / "c.json"
    js.write_text(json.dumps({"unit": "bytes", "points": [[512, 1e6], [2048, 5e6]]}))
    assert load_curve(csv_) == (((512, 0.004), (2048, 0.02)), "seconds")
    assert load_curve(js) == (((512, 1e6), (2048, 5e6)), "bytes")
    m = CostModel(curve=((512, 0.004), (2048, 0.02)), budget=1.0)
    from gpu_profiler.cost import row_cost

    # linear between the points, the end segments extended (never below 0)
    assert row_cost(1280, m) == pytest.approx(0.012)
    assert row_cost(4096, m) == pytest.approx(0.02 + 2048 * 0.016 / 1536)
    assert row_cost(1, m) == 0.0


# ---------------------------------------------------------------- CLI and schemas
def check(name, doc):
    jsonschema.validate(doc, load(name), cls=jsonschema.Draft202012Validator)


def json_of(args, capsys):
    rc, out, err = run_cli(args, capsys)
    assert rc == 0, err
    return json.loads(out)


def test_cli_json_with_a_cost_model_validates(saved, tmp_path, capsys):
    curve = tmp_path / "c.csv"
    curve.write_text("length,seconds\n256,0.001\n8192,0.05\n")
    for cost in (["--attention-weight", "0.0005"],
                 ["--cost-curve", curve, "--cost-budget", "0.6"]):
        doc = json_of(["profile", saved, *cost, "--policy", "all", "-f", "json"], capsys)
        check("profile", doc)
        assert doc["params"]["cost"]["kind"] in ("attention", "curve")
        assert all("est_cost" in b and "cost_pct" in b for b in doc["buckets"])
        assert sum(b["cost_pct"] for b in doc["buckets"]) == pytest.approx(100.0)
        for pol in doc["policies"]:
            assert pol["cost"] > 0
            assert sum(b["cost"] for b in pol["buckets"]) == pytest.approx(pol["cost"]) \
                if pol["buckets"] else True
        check("suggest", json_of(["suggest", saved, "--buckets", "4", *cost, "-f", "json"],
                                 capsys))
        check("schedule", json_of(["schedule", saved, "--trials", "5", *cost, "-f", "json"],
                                  capsys))
    plain = json_of(["profile", saved, "--policy", "all", "-f", "json"], capsys)
    assert "cost" not in plain["params"] and "est_cost" not in plain["buckets"][0]
    assert "cost" not in plain["policies"][0]


def test_plan_cuts_batches_under_the_cost_budget(tmp_path, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq

    x = lengths(2000, seed=9)
    data = tmp_path / "d.parquet"
    pq.write_table(pa.table({"length": x}), data)
    out = tmp_path / "plan.npz"
    doc = json_of(["plan", data, "-o", out, "--policy", "sorted", "--attention-weight",
                   "0.001", "--cost-budget", "60000", "-f", "json"], capsys)
    check("plan", doc)
    assert doc["params"]["cost"]["attention_weight"] == 0.001
    z = np.load(out)
    idx, off = z["indices"], z["offsets"]
    total = Fraction(0)
    for j in range(off.size - 1):
        batch = np.minimum(x[idx[off[j]:off[j + 1]]], 8192)
        longest = int(batch.max())
        cost = batch.size * (longest + Fraction(0.001) * longest ** 2)
        assert cost <= 60000 or batch.size == 1
        total += cost
    assert sorted(idx.tolist()) == list(range(x.size))
    assert doc["cost"] == pytest.approx(float(total), rel=1e-12)  # the plan's compute


def test_text_markdown_and_csv_report_the_cost(saved, capsys):
    args = ["profile", saved, "--attention-weight", "0.001", "--policy", "fixed"]
    rc, out, _ = run_cli([*args, "--width", "200"], capsys)
    assert rc == 0 and "% cost" in out and "cost (tokens)" in out
    rc, out, _ = run_cli([*args, "-f", "markdown"], capsys)
    assert rc == 0 and "| est cost | % cost |" in out and "| cost | cost % |" in out
    rc, out, _ = run_cli([*args, "-f", "csv"], capsys)
    header = out.splitlines()[0].split(",")
    assert rc == 0 and header[-2:] == ["cost", "cost_pct"]
    rc, out, _ = run_cli(["profile", saved, "-f", "csv"], capsys)
    assert "cost" not in out.splitlines()[0]


def test_the_report_shows_the_cost(saved, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    out = tmp_path / "r.html"
    rc, _, err = run_cli(["report", saved, "--attention-weight", "0.001", "-o", out], capsys)
    assert rc == 0, err
    page = out.read_text()
    for field in ("est_cost", "cost_pct", "cost"):
        assert f'data-field="{field}"' in page
    rc, _, err = run_cli(["report", saved, "-o", out], capsys)
    assert rc == 0 and 'data-field="est_cost"' not in out.read_text()


@pytest.mark.parametrize("unit", ["time [ms]", "[/x]", "[bold]s|b"])
def test_a_units_brackets_are_text(unit, tmp_path, capsys):
    """A unit names columns and captions: rich markup in it is printed as written."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path, data = tmp_path / "curve.csv", tmp_path / "d.parquet"
    path.write_text(f"length,{unit}\n512,0.01\n8192,0.3\n")
    pq.write_table(pa.table({"length": lengths(3000)}), data)
    for cmd in (["profile", data, "--policy", "fixed"],
                ["plan", data, "-o", tmp_path / "p.npz"]):
        rc, out, err = run_cli([*cmd, "--cost-curve", path, "--cost-budget", "1",
                                "--width", "200"], capsys)
        assert rc == 0 and unit in out, (cmd[0], err)


# ---------------------------------------------------------------- varlen attention
@pytest.mark.parametrize("a, budget", [(1 / 1024, 49152), (1 / 64, 300_000), (0.3, 10**7)])
def test_varlen_sorted_batches_are_the_brute_force_greedy_and_cost_their_formula(a, budget):
    """Each batch holds samples while rows x longest + A x sum(len^2) fits; padded
    attention would fit fewer, so batches grow; the cost is that sum over batches; the
    sampler cuts the same batches the policy counts."""
    x = lengths(4000, seed=5)
    p = BucketParams(max_seq_len=4096, bounds=(0, 500, 1500, 4097),
                     cost=CostModel(attention_weight=a, budget=budget, varlen=True))
    padded = evaluate_policy(hist_of(x), "sorted", replace(p, cost=replace(p.cost, varlen=False)))
    pol = evaluate_policy(hist_of(x), "sorted", p)
    want_cost = 0
    for b, (batches, unbatchable) in zip(pol.buckets, brute_sorted(x, p, a, budget, varlen=True),
                                         strict=True):
        sizes = [len(bt) for bt in batches]
        assert (b.batches, b.unbatchable_samples) == (len(batches), unbatchable)
        assert (b.min_batch_size, b.max_batch_size) == (min(sizes, default=0),
                                                        max(sizes, default=0))
        assert b.padded_tokens == sum(len(bt) * max(bt) for bt in batches)
        cost = sum(len(bt) * max(bt) + Fraction(a) * sum(v * v for v in bt) for bt in batches)
        assert b.cost == pytest.approx(float(cost), rel=1e-12)
        want_cost += cost
    assert pol.total_batches < padded.total_batches
    assert pol.cost == pytest.approx(float(want_cost), rel=1e-12)
    s = BucketBatchSampler(x, bounds=p.bounds, max_seq_len=4096, policy="sorted",
                           attention_weight=a, cost_budget=budget, varlen_attention=True)
    assert len(s) == pol.total_batches
    for batch in s:
        v = np.minimum(x[batch], 4096)
        assert len(batch) * int(v.max()) + Fraction(a) * int((v * v).sum()) <= budget


@pytest.mark.parametrize("policy", ["estimate", "fixed", "packed"])
def test_varlen_changes_the_cost_not_the_fixed_batch_sizes(policy):
    """fixed (and packed) batches are sized for the worst case, as padded attention
    sizes them; their cost is the padded tokens plus A x every kept sample's length^2."""
    x = lengths(3000, seed=9)
    a, budget = 1 / 512, 400_000
    p = BucketParams(max_seq_len=4096, bounds=(0, 700, 2000, 4097),
                     cost=CostModel(attention_weight=a, budget=budget, varlen=True))
    q = replace(p, cost=replace(p.cost, varlen=False))
    h = hist_of(x)
    var, pad = evaluate_policy(h, policy, p), evaluate_policy(h, policy, q)
    assert var.total_batches == pad.total_batches and var.padded_tokens == pad.padded_tokens
    clipped = np.minimum(x, 4096).astype(object)
    want = var.padded_tokens + Fraction(a) * sum(v * v for v in clipped)
    assert var.cost == pytest.approx(float(want), rel=1e-9)
    assert var.cost < pad.cost
    if policy == "estimate":
        t = bucket_table(h, p)
        assert sum(r.est_cost for r in t.buckets) == pytest.approx(float(want), rel=1e-9)


def test_varlen_in_the_cli_plan_and_state(tmp_path, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq

    x = lengths(3000, seed=2)
    pq.write_table(pa.table({"length": x}), tmp_path / "x.parquet")
    args = ["--attention-weight", "0.001", "--cost-budget", "200000", "--varlen-attention"]
    rc, out, err = run_cli(["profile", tmp_path / "x.parquet", *args, "--policy", "sorted",
                            "-f", "json"], capsys)
    assert rc == 0, err
    d = json.loads(out)
    jsonschema.validate(d, load("profile"), cls=jsonschema.Draft202012Validator)
    assert d["params"]["cost"]["kind"] == "varlen-attention" and d["params"]["cost"]["varlen"]
    rc, out, err = run_cli(["plan", tmp_path / "x.parquet", *args, "--policy", "sorted",
                            "-o", tmp_path / "p.npz", "-f", "json"], capsys)
    assert rc == 0, err
    plan = json.loads(out)
    sorted_policy = next(q for q in d["policies"] if q["name"] == "sorted")
    assert plan["batches"] == sorted_policy["total_batches"]
    assert plan["cost"] == pytest.approx(sorted_policy["cost"], rel=1e-9)
    rc, _, err = run_cli(["profile", tmp_path / "x.parquet", "--varlen-attention"], capsys)
    assert rc == 2 and "needs an attention weight" in err, err
    s = BucketBatchSampler(x, attention_weight=0.001, cost_budget=200000,
                           varlen_attention=True)
    with pytest.raises(ProfilerError, match="cost"):
        BucketBatchSampler(x, attention_weight=0.001, cost_budget=200000).load_state_dict(
            s.state_dict())


def test_every_view_says_how_a_varlen_cost_is_counted(tmp_path, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"length": lengths(2000, seed=4)}), tmp_path / "x.parquet")
    args = ["profile", tmp_path / "x.parquet", "--attention-weight", "0.001",
            "--varlen-attention", "--policy", "sorted", "--width", "240"]
    rc, out, err = run_cli([*args, "-f", "table"], capsys)
    assert rc == 0, err
    out = " ".join(out.split())  # captions wrap
    assert "samples x the bucket's max + 0.001 x sum(length^2)" in out, out
    assert "rows x the longest + 0.001 x sum(length^2), summed over batches" in out, out
    rc, _, err = run_cli(["report", *args[1:5], "-o", tmp_path / "r.html"], capsys)
    assert rc == 0, err
    html = (tmp_path / "r.html").read_text()
    assert html.count("0.001 x sum(length^2)") >= 2 and "varlen-attention cost model" in html


def test_varlen_on_empty_buckets_zero_lengths_and_older_states(tmp_path, capsys):
    """Buckets with no samples cost 0, a sample of length 0 costs nothing (sorted batches
    take them up to max_batch_size), and a state without varlen names no varlen key (older
    states with a cost model still resume)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"length": [100, 200, 300] * 100}), tmp_path / "short.parquet")
    for cmd in (["profile"], ["profile", "--policy", "all"], ["suggest", "-k", "3"], ["schedule"]):
        rc, _, err = run_cli([*cmd, tmp_path / "short.parquet", "--attention-weight", "0.001",
                              "--varlen-attention"], capsys)
        assert rc == 0, (cmd, err)
    x = np.array([0, 5, 10, 3000] * 40 + [0] * 100)
    kw = dict(attention_weight=0.001, cost_budget=200_000, max_batch_size=16)
    s = BucketBatchSampler(x, policy="sorted", varlen_attention=True, **kw)
    p = BucketParams(max_batch_size=16, cost=CostModel(attention_weight=0.001,
                                                       budget=200_000, varlen=True))
    assert len(s) == evaluate_policy(hist_of(x), "sorted", p).total_batches
    assert sorted(i for b in s for i in b) == list(range(x.size))
    assert "varlen" not in BucketBatchSampler(x, **kw).state_dict()["plan"]["cost"]
    with pytest.raises(ProfilerError, match="True or False"):
        CostModel(attention_weight=0.1, varlen=1)
