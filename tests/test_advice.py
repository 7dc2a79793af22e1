"""The one advice on a dominant bucket: what it picks, what it says, and that profile,
schedule and suggest give the same one on one corpus."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import numpy as np
import pytest

import gpu_profiler as gp
from gpu_profiler import BucketParams
from gpu_profiler.analysis import advice as advice_mod
from gpu_profiler.analysis import bounds as bounds_mod
from gpu_profiler.analysis.advice import ADVISED, advise, attach
from gpu_profiler.analysis.bounds import suggest_bounds
from gpu_profiler.analysis.interleave import interleave, longest_run, min_run
from gpu_profiler.analysis.policies import evaluate_policy
from gpu_profiler.analysis.schedule import simulate_schedule
from gpu_profiler.backends import get_backend
from gpu_profiler.chunk import Chunk
from gpu_profiler.cli import main
from gpu_profiler.demo import build_demo, demo_lengths


def hist_of(lengths, cap=8192):
    return get_backend("numpy").histogram_chunk(Chunk(np.asarray(lengths, np.int64)), cap)


def run(args, capsys):
    with pytest.raises(SystemExit) as exc:
        main([str(a) for a in args])
    out, err = capsys.readouterr()
    return exc.value.code, out, err


def heavy_lengths(n=20_000, seed=3):
    """Chat turns plus 20% long documents: the longest bucket makes ~70% of the batches."""
    rng = np.random.default_rng(seed)
    short = np.clip(rng.lognormal(np.log(450), 0.8, n), 16, None)
    return np.where(rng.random(n) < 0.2, rng.uniform(3300, 8000, n), short).astype(np.int64)


@pytest.fixture(scope="module")
def demo_hist():
    return hist_of(demo_lengths())


def test_picks_the_least_padding_with_every_share_under_40_percent(demo_hist):
    a = advise(demo_hist)
    s = suggest_bounds(demo_hist, 6)
    fits = [q for q in s.proposals if q.method in ADVISED and q.max_batch_pct <= 40]
    want = min(fits, key=lambda q: q.padded_tokens)
    assert a.proposal == want and a.buckets == 6
    # the flattest proposal is another one: the advice does not trade padding for nothing
    assert min(s.proposals, key=lambda q: q.max_batch_pct).method != want.method
    assert (a.bucket, a.lo, a.hi) == (5, 3296, 8193) and 50 < a.batch_pct < 53
    assert f"{want.method} bounds for 6 buckets: {','.join(map(str, want.bounds))}: largest " \
           f"share {want.max_batch_pct:.1f}% at {want.padding_pct:.1f}% padding" in a.text
    assert f"(now {s['current'].padding_pct:.1f}%" in a.text


def test_the_current_bounds_are_scored_once(demo_hist, monkeypatch):
    # the advice hands its fixed policy of the current bounds to the search
    scored = []

    def counting(hist, name, params=None, **kwargs):
        scored.append(params.bounds)
        return evaluate_policy(hist, name, params, **kwargs)

    monkeypatch.setattr(advice_mod, "evaluate_policy", counting)
    monkeypatch.setattr(bounds_mod, "evaluate_policy", counting)
    assert advise(demo_hist).proposal is not None
    assert scored.count(BucketParams().bounds) == 1


def test_the_order_fix_is_the_planner_s_least_possible_run(demo_hist):
    a = advise(demo_hist)
    counts = [int(b.batches) for b in evaluate_policy(demo_hist, "fixed").buckets]
    assert a.longest_run == min_run(counts) == longest_run(interleave(counts))[0] == 2
    assert "`gpu-profiler schedule --order stride` runs at most 2 batches of one bucket " \
           "back to back, the least possible" in a.text
    assert "gpu_profiler.BucketBatchSampler" in a.text and "gpu-profiler plan" in a.text
    assert a.to_dict()["order"] == {"order": "stride", "longest_run": 2}


def test_without_a_proposal_under_40_percent_the_flattest_one(demo_hist):
    a = advise(demo_hist, buckets=2)
    s = suggest_bounds(demo_hist, 2)
    flat = min((q for q in s.proposals if q.method in ADVISED), key=lambda q: q.max_batch_pct)
    assert flat.max_batch_pct > 40 and a.proposal == flat
    assert f"{flat.method} bounds for 2 buckets" in a.text
    assert "still above 40%: try more buckets" in a.text


def test_a_proposal_with_fewer_buckets_says_why_in_the_advice():
    # three lengths, two of them in the current longest bucket: 3 buckets at most
    x = np.concatenate([np.full(640, 100), np.full(300, 4000), np.full(300, 7000)])
    a = advise(hist_of(x))
    q = a.proposal
    assert q.bounds == (0, 4000, 7000, 8193) and a.batch_pct > 85
    assert q.why_fewer.startswith("only 3 distinct lengths lie inside [0, 8193)")
    assert f"{q.method} bounds for 3 buckets (6 asked: {q.why_fewer}): 0,4000,7000,8193" \
        in a.text
    assert a.to_dict()["bounds"]["why_fewer"] == q.why_fewer


def test_no_advice_when_no_bucket_dominates_or_nothing_would_help():
    even = np.concatenate([np.full(640, 100), np.full(490, 1000), np.full(240, 2000)])
    assert max(b.batch_pct for b in evaluate_policy(hist_of(even), "fixed").buckets) < 40
    assert advise(hist_of(even)) is None
    assert advise(hist_of([100] * 50)) is None  # one batch of one length: no bounds, no order


def test_samples_over_the_budget_leave_only_the_order_fix():
    x = np.concatenate([np.full(300, 100), np.full(600, 1000), np.full(10, 7000)])
    p = BucketParams(token_budget=6000)  # the 7000-token samples fit no batch
    a = advise(hist_of(x), p)
    assert a.batch_pct == pytest.approx(100 / 105 * 100)  # 100 of 105 batches
    assert a.proposal is None and "bounds for" not in a.text
    assert "`gpu-profiler schedule --order stride` runs at most 17 batches" in a.text
    assert a.to_dict()["bounds"] is None and a.longest_run == min_run([5, 100, 0, 0, 0, 0])


def test_attach_puts_the_advice_first(demo_hist):
    r = simulate_schedule(demo_hist, "random")
    a = advise(demo_hist)
    got = attach(r, a)
    assert got.advice is a and got.warnings == (a.text, *r.warnings)
    assert got.to_dict()["advice"] == a.to_dict()
    assert attach(r, None) is r


def test_a_suggestion_for_other_parameters_is_refused(demo_hist):
    with pytest.raises(ValueError, match="other parameters"):
        advise(demo_hist, buckets=6, suggestion=suggest_bounds(demo_hist, 5))


def test_the_computations_never_import_the_advice():
    """advice.py sits above buckets, policies, bounds, schedule and interleave: none of them
    imports it, and their imports of each other (lazy ones included) have no cycle."""
    pkg = Path(advice_mod.__file__).parent
    graph = {}
    for name in ("buckets", "policies", "bounds", "schedule", "interleave"):
        tree = ast.parse((pkg / f"{name}.py").read_text())
        graph[name] = {n.module.rsplit(".", 1)[-1] for n in ast.walk(tree)
                       if isinstance(n, ast.ImportFrom) and n.module
                       and n.module.startswith("gpu_profiler.analysis.")}
        assert "advice" not in graph[name], name

    def reaches(a, b, seen=()):
        return any(n == b or (n not in seen and reaches(n, b, (*seen, n)))
                   for n in graph.get(a, ()))

    assert not [m for m in graph if reaches(m, m)]


# ---------------------------------------------------------------- one voice, end to end
@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory):
    return build_demo(tmp_path_factory.mktemp("demo") / "corpus")


@pytest.fixture(scope="module")
def heavy_dir(tmp_path_factory):
    datasets = pytest.importorskip("datasets")
    path = tmp_path_factory.mktemp("heavy") / "ds"
    datasets.Dataset.from_dict({"length": heavy_lengths().tolist()}).save_to_disk(str(path))
    return path


@pytest.mark.parametrize("corpus, share", [("demo_dir", (50, 53)), ("heavy_dir", (66, 72))])
def test_profile_schedule_and_suggest_give_one_recommendation(corpus, share, request, capsys):
    path = request.getfixturevalue(corpus)
    said = {}
    for cmd in (["profile"], ["profile", "--policy", "fixed,sorted"], ["schedule"],
                ["suggest", "--buckets", "6"], ["suggest", "--buckets", "6", "--balance", "1"]):
        rc, out, err = run([cmd[0], path, "-q", "-f", "json", *cmd[1:]], capsys)
        assert rc == 0, err
        d = json.loads(out)
        said[" ".join(cmd)] = d["advice"]
        assert d["warnings"][0] == d["advice"]["text"]
        if cmd[0] == "profile" and len(cmd) > 1:
            assert not any("bounds" in w for p in d["policies"] for w in p["warnings"])
    first = said["profile"]
    assert share[0] < first["batch_pct"] < share[1]
    assert first["bounds"]["buckets"] == 6 and first["bounds"]["max_batch_pct"] <= 40
    assert all(a == first for a in said.values()), said
    # and in the table every command prints the same sentence
    for cmd in (["profile"], ["schedule"], ["suggest", "--buckets", "6"]):
        rc, out, _ = run([cmd[0], path, "-q", *cmd[1:]], capsys)
        assert rc == 0 and first["text"] in " ".join(out.split())


def test_python_profile_carries_the_same_advice(demo_dir, capsys):
    result = gp.profile(demo_dir, backend="numpy")
    rc, out, _ = run(["schedule", demo_dir, "-q", "-f", "json"], capsys)
    assert rc == 0 and result.table.advice.to_dict() == json.loads(out)["advice"]
