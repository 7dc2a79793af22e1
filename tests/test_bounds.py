"""Bounds search: the DP proposal is optimal on its grid and never worse than the others."""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_profiler import BucketParams, LengthHistogram, ProfilerError
from gpu_profiler.analysis import bounds as bounds_mod
from gpu_profiler.analysis.bounds import METHODS, suggest_bounds
from gpu_profiler.analysis.buckets import clipped_counts
from gpu_profiler.analysis.policies import evaluate_policy, log_falling, present_lengths
from gpu_profiler.backends import get_backend
from gpu_profiler.chunk import Chunk
from gpu_profiler.demo import demo_lengths


def hist_of(lengths, cap):
    return get_backend("numpy").histogram_chunk(Chunk(np.asarray(lengths, np.int64)), cap)


def lognormal(n, seed, median=700, sigma=1.0, hi=9000):
    rng = np.random.default_rng(seed)
    return np.clip(rng.lognormal(np.log(median), sigma, n), 1, hi).astype(np.int64)


@pytest.fixture(scope="module")
def demo_hist():
    return hist_of(demo_lengths(), 8192)


@pytest.mark.parametrize("k", [2, 4, 6, 9])
@pytest.mark.parametrize("seed", range(3))
def test_min_padding_is_never_worse_than_the_other_proposals(seed, k):
    h = hist_of(lognormal(20_000, seed, sigma=0.8 + 0.2 * seed), 8192)
    s = suggest_bounds(h, k)
    best = s["min-padding"]
    assert len(best.bounds) - 1 <= k
    for q in s.proposals:
        if len(q.bounds) - 1 <= k:
            assert best.padded_tokens <= q.padded_tokens, (q.method, q.bounds)
    # the reported numbers are the fixed policy's, recomputed independently here
    again = evaluate_policy(h, "fixed", replace(s.params, bounds=best.bounds))
    assert again.padded_tokens == best.padded_tokens
    assert again.total_batches == best.total_batches


def test_min_padding_with_drop_last_is_never_worse(demo_hist):
    s = suggest_bounds(demo_hist, 5, drop_last=True)
    assert all(s["min-padding"].padded_tokens <= q.padded_tokens for q in s.proposals
               if len(q.bounds) <= 6)
    assert s["min-padding"].policy.drop_last


@pytest.mark.parametrize("seed", range(4))
def test_dp_equals_exhaustive_search_when_every_length_is_a_candidate(seed, monkeypatch):
    monkeypatch.setattr(bounds_mod, "GRID", 4096)  # every present length becomes a candidate
    rng = np.random.default_rng(seed)
    lengths = rng.choice(rng.integers(1, 400, 11), size=300)
    p = BucketParams(bounds=(0, 401), max_seq_len=400, token_budget=1200, max_batch_size=16)
    h = hist_of(lengths, 400)
    k = 3 + seed % 2
    values = np.unique(lengths)
    exhaustive = min(
        evaluate_policy(h, "fixed", replace(p, bounds=(0, *map(int, edges), 401))).padded_tokens
        for r in range(k) for edges in itertools.combinations(values[1:], r))
    got = suggest_bounds(h, k, p)["min-padding"].padded_tokens
    assert got == pytest.approx(exhaustive, rel=1e-12)


def test_with_few_lengths_the_search_is_exact_and_equals_brute_force():
    # at most GRID present lengths (no monkeypatch): every one a candidate, exact costs
    rng = np.random.default_rng(11)
    values = np.sort(rng.choice(np.arange(1, 3000), bounds_mod.GRID - 2, replace=False))
    lengths = rng.choice(values, size=5000, p=rng.dirichlet(np.full(values.size, 0.7)))
    p = BucketParams(bounds=(0, 3001), max_seq_len=3000, token_budget=12000, max_batch_size=32)
    h = hist_of(lengths, 3000)
    exhaustive = min(
        evaluate_policy(h, "fixed", replace(p, bounds=(0, *map(int, edges), 3001))).padded_tokens
        for r in range(4) for edges in itertools.combinations(values[1:], r))
    assert suggest_bounds(h, 4, p)["min-padding"].padded_tokens == pytest.approx(exhaustive,
                                                                                 rel=1e-12)


@pytest.mark.parametrize("seed", range(3))
def test_the_binned_search_pads_as_little_as_the_exact_one(seed, monkeypatch):
    # 150 present lengths: the search prices buckets with binned costs; the reference (GRID
    # raised) makes every length a candidate and prices exactly: its split is the optimum
    rng = np.random.default_rng(seed)
    values = np.sort(rng.choice(np.arange(1, 2000), 150, replace=False))
    lengths = rng.choice(values, size=20_000, p=rng.dirichlet(np.ones(values.size)))
    p = BucketParams(bounds=(0, 2001), max_seq_len=2000, token_budget=8000, max_batch_size=32)
    h = hist_of(lengths, 2000)
    got = suggest_bounds(h, 5, p)["min-padding"].padded_tokens
    monkeypatch.setattr(bounds_mod, "GRID", 4096)
    optimum = suggest_bounds(h, 5, p)["min-padding"].padded_tokens
    assert optimum <= got <= optimum * (1 + 1e-3)


def corpora():
    """SFT-like with a long tail, bimodal, and a small sparse one (few samples a length)."""
    rng = np.random.default_rng(3)
    sft = np.concatenate([rng.lognormal(7.6, 0.7, 60_000), rng.lognormal(9, 1.2, 2_000)])
    bimodal = np.concatenate([rng.lognormal(5.5, 0.5, 40_000), rng.normal(6000, 800, 10_000)])
    sparse = rng.lognormal(6.5, 1.0, 3_000)
    return {name: hist_of(np.clip(x, 1, 8192).astype(np.int64), 8192)
            for name, x in (("sft", sft), ("bimodal", bimodal), ("sparse", sparse))}


@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("name", ["sft", "bimodal", "sparse"])
def test_binned_costs_are_close_to_the_exact_ones(name, drop_last):
    """The search's costs of 300 random buckets against the exact ones: the same batches,
    expected padded tokens within 1% (the median within 0.1%)."""
    p = BucketParams()
    values, cnt = present_lengths(clipped_counts(corpora()[name], 8192), 0, 8193)
    cum, gaps = np.cumsum(cnt), np.diff(values).astype(np.float64)
    rng = np.random.default_rng(7)
    a = rng.integers(0, values.size - 1, 300)
    b = np.array([rng.integers(x + 1, values.size + 1) for x in a])
    exact = [bounds_mod._interval_cost(values, cum, gaps, int(x), int(y), p, drop_last)
             for x, y in zip(a, b, strict=True)]
    got, batches = bounds_mod._Binned(values, cnt, p, drop_last, [])(a, b)
    assert batches.tolist() == [n for _, n in exact]
    cost = np.array([c for c, _ in exact])
    assert (got[cost == 0] == 0).all()  # drop_last: fewer samples than a batch
    rel = np.abs(got[cost > 0] / cost[cost > 0] - 1)
    assert rel.max() < 1e-2 and np.median(rel) < 1e-3


def test_binned_costs_are_exact_when_every_bin_is_one_length():
    p = BucketParams()
    values, cnt = present_lengths(clipped_counts(corpora()["sparse"], 8192), 0, 8193)
    cum, gaps = np.cumsum(cnt), np.diff(values).astype(np.float64)
    a, b = np.triu_indices(values.size + 1, 1)
    pick = np.random.default_rng(1).choice(a.size, 500, replace=False)
    a, b = a[pick], b[pick]
    model = bounds_mod._Binned(values, cnt, p, False, list(range(values.size)), exact_last=True)
    got = model(a, b)[0]
    exact = [bounds_mod._interval_cost(values, cum, gaps, int(x), int(y), p, False)[0]
             for x, y in zip(a, b, strict=True)]
    assert got == pytest.approx(exact, rel=1e-9)


def test_binned_costs_exact_cases():
    # one row per batch pads nothing; a bucket with fewer samples than a batch is one batch
    # holding all of them, padded to the longest
    values, cnt = np.array([10, 50, 300, 4000]), np.array([7, 3, 11, 2])
    one = BucketParams(max_batch_size=1)
    got, batches = bounds_mod._Binned(values, cnt, one, False, [])(np.array([0, 1]),
                                                                  np.array([4, 3]))
    assert got.tolist() == [float(cnt @ values), float(cnt[1:3] @ values[1:3])]
    assert batches.tolist() == [23, 14]
    got, batches = bounds_mod._Binned(values, cnt, BucketParams(), False, [])(
        np.array([0]), np.array([3]))
    assert got.tolist() == [21 * 300.0] and batches.tolist() == [1]


def test_the_series_for_log_falling_matches_stirling():
    k = np.array([2, 5, 17, 24, 40, 64, 64, 300])
    for m in (k + 40.0, k * 30.0, np.full(k.size, 1e6), np.full(k.size, 3e12)):
        falling = bounds_mod._Falling(k, m)
        assert falling(m) == pytest.approx(log_falling(m, k), rel=1e-13, abs=1e-9)
        assert falling(m, np.arange(k.size)) == pytest.approx(log_falling(m, k), rel=1e-13,
                                                              abs=1e-9)


def test_huge_counts_stay_finite_and_never_worse():
    counts = hist_of(lognormal(20_000, 5), 8192).counts * 10**6  # 2e10 samples
    s = suggest_bounds(LengthHistogram(counts), 6)
    best = s["min-padding"]
    assert np.isfinite([q.padded_tokens for q in s.proposals]).all()
    assert all(best.padded_tokens <= q.padded_tokens for q in s.proposals)


def test_balance_trades_padding_for_a_smaller_largest_share(demo_hist):
    plain = suggest_bounds(demo_hist, 6)
    assert "balanced" not in [q.method for q in plain.proposals]
    s = suggest_bounds(demo_hist, 6, balance=2.0)
    bal, best = s["balanced"], s["min-padding"]
    assert bal.objective <= min(q.objective for q in s.proposals if len(q.bounds) <= 7)
    assert bal.max_batch_pct <= best.max_batch_pct
    assert bal.objective == pytest.approx(bal.padded_tokens / best.policy.tokens
                                          + 2.0 * bal.max_batch_pct / 100)


def test_quantile_proposals_split_their_weight_evenly():
    h = hist_of(lognormal(50_000, 7), 8192)
    s = suggest_bounds(h, 4)
    shares = [b.sample_pct for b in s["equal-samples"].policy.buckets]
    assert max(shares) - min(shares) < 1.0  # one distinct length holds < 0.5% here
    tokens = [b.token_pct for b in s["equal-tokens"].policy.buckets]
    assert max(tokens) - min(tokens) < 2.0


def test_current_bounds_come_first_and_outer_edges_are_kept(demo_hist):
    p = BucketParams(bounds=(0, 1000, 4000, 8193))
    s = suggest_bounds(demo_hist, 5, p)
    assert s.proposals[0].method == "current" and s.proposals[0].bounds == p.bounds
    assert {q.method for q in s.proposals} <= set(METHODS)
    for q in s.proposals:
        assert q.bounds[0] == 0 and q.bounds[-1] == 8193
        assert all(a < b for a, b in zip(q.bounds, q.bounds[1:]))  # noqa: B905


def test_json_fields(demo_hist):
    d = suggest_bounds(demo_hist, 3).to_dict()
    assert d["schema"] == "gpu-profiler/suggest/v1"
    for q in d["proposals"]:
        assert {"method", "bounds", "padded_tokens", "total_batches", "max_batch_pct"} <= set(q)


@pytest.mark.parametrize("kwargs, message", [
    (dict(buckets=0), "--buckets must be a positive integer"),
    (dict(buckets=3, balance=-1.0), "--balance must be >= 0"),
])
def test_bad_options(demo_hist, kwargs, message):
    with pytest.raises(ProfilerError, match=message):
        suggest_bounds(demo_hist, **kwargs)


def test_samples_longer_than_the_budget_are_an_error():
    p = BucketParams(bounds=(0, 101), max_seq_len=100, token_budget=50)
    with pytest.raises(ProfilerError, match="exceeds the token budget"):
        suggest_bounds(hist_of([10, 20, 80], 100), 2, p)
    with pytest.raises(ProfilerError, match="no samples inside"):
        suggest_bounds(hist_of([200], 300), 2, BucketParams(bounds=(0, 50), max_seq_len=300))


def test_a_proposal_with_every_bucket_has_no_note(demo_hist):
    s = suggest_bounds(demo_hist, 6, balance=1.0)
    assert all(len(q.bounds) == 7 for q in s.proposals)
    assert all(q.why_fewer is None for q in s.proposals) and s.warnings == ()
    assert all(q["why_fewer"] is None for q in s.to_dict()["proposals"])


def test_quantile_edges_on_a_heavy_length_say_why_there_are_fewer_buckets():
    # 4% of the samples are truncated to 8192: a third of the tokens sit on one length
    rng = np.random.default_rng(0)
    x = np.where(rng.random(20_000) < 0.04, 9000, lognormal(20_000, 1, median=450, sigma=0.8))
    s = suggest_bounds(hist_of(x, 8192), 6)
    q = s["equal-tokens"]
    assert len(q.bounds) - 1 == 5
    tokens = s["current"].policy.tokens
    share = (x >= 8192).sum() * 8192 / tokens * 100
    assert q.why_fewer.startswith(f"length 8192 holds {share:.1f}% of the tokens")
    assert f"equal-tokens: 5 buckets, not 6: {q.why_fewer}" in s.warnings
    assert s.to_dict()["proposals"][2]["why_fewer"] == q.why_fewer


def test_min_padding_with_fewer_buckets_says_no_more_buckets_pad_less():
    # one row per batch: no padding whatever the bounds, so the DP stops early
    s = suggest_bounds(hist_of(lognormal(5000, 3), 8192), 6, BucketParams(max_batch_size=1))
    q = s["min-padding"]
    assert len(q.bounds) - 1 < 6 and q.padded_tokens == pytest.approx(q.policy.tokens)
    assert q.why_fewer.startswith("no 6-bucket split of its candidate grid pads less")
    assert any(w.startswith(f"min-padding: {len(q.bounds) - 1} buckets, not 6")
               for w in s.warnings)


def test_too_few_lengths_for_the_buckets_asked():
    s = suggest_bounds(hist_of([100] * 50 + [300] * 40 + [900] * 5, 8192), 6, balance=1.0)
    for q in s.proposals[1:]:
        assert len(q.bounds) - 1 <= 3
        assert q.why_fewer.startswith("only 3 distinct lengths lie inside [0, 8193)")
    assert len(s.warnings) == len(s.proposals) - 1


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), k=st.integers(1, 9), distinct=st.integers(1, 40))
def test_every_proposal_with_fewer_buckets_says_why(seed, k, distinct):
    rng = np.random.default_rng(seed)
    values = rng.integers(1, 400, distinct)
    x = rng.choice(values, size=int(rng.integers(1, 2000)),
                   p=rng.dirichlet(np.full(distinct, 0.3)))
    p = BucketParams(bounds=(0, 401), max_seq_len=400, token_budget=int(rng.integers(400, 5000)),
                     max_batch_size=int(rng.integers(1, 65)))
    s = suggest_bounds(hist_of(x, 400), k, p, balance=1.0)
    for q in s.proposals[1:]:
        fewer = len(q.bounds) - 1 < k
        assert (q.why_fewer is not None) == fewer, (q.method, q.bounds)
        assert (f"{q.method}: {len(q.bounds) - 1} buckets, not {k}: {q.why_fewer}"
                in s.warnings) == fewer
