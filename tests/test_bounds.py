"""Bounds search: the DP proposal is optimal on its grid and never worse than the others."""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np
import pytest

from gpu_profiler import BucketParams, ProfilerError
from gpu_profiler.analysis import bounds as bounds_mod
from gpu_profiler.analysis.bounds import METHODS, equal_batches_proposal, suggest_bounds
from gpu_profiler.analysis.policies import evaluate_policy
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
    eb = equal_batches_proposal(h, 4, s.params)
    assert eb.bounds == s["equal-batches"].bounds


def test_current_bounds_come_first_and_outer_edges_are_kept(demo_hist):
    p = BucketParams(bounds=(0, 1000, 4000, 8193))
    s = suggest_bounds(demo_hist, 5, p)
    assert s.proposals[0].method == "current" and s.proposals[0].bounds == p.bounds
    assert {q.method for q in s.proposals} <= set(METHODS)
    for q in s.proposals:
        assert q.bounds[0] == 0 and q.bounds[-1] == 8193
        assert all(a < b for a, b in zip(q.bounds, q.bounds[1:]))  # noqa: B905


def test_warning_names_the_fix_with_numbers(demo_hist):
    s = suggest_bounds(demo_hist, 6)
    text = " ".join(s.warnings)
    assert "51.1% of the batches in bucket 5" in text and "largest share to" in text


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


def test_warning_when_no_proposal_balances_the_batches(demo_hist):
    s = suggest_bounds(demo_hist, 2, balance=1.0)
    text = " ".join(s.warnings)
    assert "no proposal for 2 buckets gets the largest share under 40%" in text
    best = s["min-padding"]
    if best.max_batch_pct > 40:
        assert f"min-padding bounds leave {best.max_batch_pct:.1f}%" in text
