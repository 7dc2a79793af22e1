"""Batching policies against brute-force simulations over the individual samples."""

from __future__ import annotations

import bisect
import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
from conftest import reference_table

from gpu_profiler import BucketParams, ProfilerError
from gpu_profiler.analysis.policies import (
    POLICIES,
    draw_all_below,
    evaluate_policies,
    evaluate_policy,
    expected_max,
    log_falling,
    pack_rows,
    parse_policies,
)
from gpu_profiler.backends import get_backend
from gpu_profiler.chunk import Chunk

SMALL = BucketParams(bounds=(0, 8, 20, 40, 65), max_seq_len=64, token_budget=200,
                     max_batch_size=8, grad_accum=3, world_size=2)
TIGHT = BucketParams(bounds=(0, 10, 30, 65), max_seq_len=64, token_budget=50,
                     max_batch_size=5, grad_accum=1, world_size=1)


def hist_of(lengths, cap):
    return get_backend("numpy").histogram_chunk(Chunk(np.asarray(lengths, np.int64)), cap)


def corpus(seed, n=400, hi=90):
    rng = np.random.default_rng(seed)
    return rng.integers(0, hi, n)


def members(lengths, p, b):
    clipped = np.minimum(lengths, p.max_seq_len)
    lo, hi = p.bounds[b], p.bounds[b + 1]
    return [int(x) for x in clipped if lo <= x < hi]


def batch_size(max_len, p):
    return min(p.token_budget // max_len, p.max_batch_size) if max_len else p.max_batch_size


# ---------------------------------------------------------------- brute-force references
def brute_sorted(xs, p, drop_last):
    """Sort, then fill batches one sample at a time."""
    fits = sorted(x for x in xs if batch_size(x, p) > 0)
    batches, cur, dropped = [], [], 0
    for x in fits:
        if cur and (len(cur) + 1 > p.max_batch_size or (len(cur) + 1) * x > p.token_budget):
            batches.append(cur)
            cur = []
        cur.append(x)
    if cur:
        if drop_last and len(cur) < batch_size(max(cur), p):
            dropped = len(cur)
        else:
            batches.append(cur)
    return dict(batches=len(batches), padded=sum(len(b) * max(b) for b in batches),
                tokens=sum(map(sum, batches)), dropped=dropped,
                unbatchable=len(xs) - len(fits), rows=[len(b) for b in batches])


def shuffled_fixed_padding(xs, size, drop_last, trials, rng):
    """Padded tokens of random within-bucket batches, one value per shuffle."""
    arr = np.tile(np.asarray(xs, np.int64), (trials, 1))
    arr = rng.permuted(arr, axis=1)
    full, rest = divmod(len(xs), size)
    padded = np.zeros(trials)
    if full:
        padded += size * arr[:, :full * size].reshape(trials, full, size).max(axis=2).sum(axis=1)
    if rest and not drop_last:
        padded += rest * arr[:, full * size:].max(axis=1)
    return padded


def bfd_reference(items, capacity):
    """Item-by-item best fit decreasing: a sorted list of the rows' free space."""
    free = []
    for x in sorted(items, reverse=True):
        i = bisect.bisect_left(free, x)
        if i < len(free):
            bisect.insort(free, free.pop(i) - x)
        else:
            bisect.insort(free, capacity - x)
    return len(free)


def ffd_reference(items, capacity):
    """Item-by-item first fit decreasing: a max-segment-tree finds the first row that fits."""
    items = sorted(items, reverse=True)
    size = 1
    while size < max(len(items), 1):
        size *= 2
    tree = [-1] * (2 * size)  # free space per row; -1 = row not opened
    rows = 0
    for x in items:
        if tree[1] >= x:
            i = 1
            while i < size:
                i = 2 * i if tree[2 * i] >= x else 2 * i + 1
            tree[i] -= x
        else:
            i = size + rows
            tree[i] = capacity - x
            rows += 1
        i //= 2
        while i:
            tree[i] = max(tree[2 * i], tree[2 * i + 1])
            i //= 2
    return rows


# ---------------------------------------------------------------- tests
@pytest.mark.parametrize("seed", range(4))
def test_estimate_is_the_reference_table(seed):
    lengths = corpus(seed)
    got = evaluate_policy(hist_of(lengths, 100), "estimate", SMALL)
    ref = reference_table(lengths.tolist(), list(SMALL.bounds), SMALL.max_seq_len,
                          SMALL.token_budget, SMALL.max_batch_size, SMALL.grad_accum,
                          SMALL.world_size)
    for b, r in zip(got.buckets, ref["buckets"], strict=True):
        assert b.samples == r["samples"] and b.tokens == r["tokens"]
        assert b.batches == pytest.approx(r["est_batches"], rel=1e-12)
        assert b.padded_tokens == r["samples"] * r["max_len"]
    assert got.steps_per_epoch == pytest.approx(ref["steps_per_epoch"], rel=1e-12)


@pytest.mark.parametrize("params", [SMALL, TIGHT], ids=["small", "tight"])
@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("seed", range(5))
def test_sorted_matches_sample_by_sample_filling(seed, drop_last, params):
    lengths = corpus(seed, n=int(np.random.default_rng(seed).integers(1, 600)))
    got = evaluate_policy(hist_of(lengths, 100), "sorted", params, drop_last=drop_last)
    total = 0
    for b, bucket in enumerate(got.buckets):
        ref = brute_sorted(members(lengths, params, b), params, drop_last)
        assert (bucket.batches, bucket.padded_tokens, bucket.tokens) == \
            (ref["batches"], ref["padded"], ref["tokens"])
        assert (bucket.dropped_samples, bucket.unbatchable_samples) == \
            (ref["dropped"], ref["unbatchable"])
        assert (bucket.min_batch_size, bucket.max_batch_size) == \
            (min(ref["rows"], default=0), max(ref["rows"], default=0))
        total += ref["batches"]
    assert got.total_batches == total
    per_step = params.grad_accum * params.world_size
    assert got.steps_per_epoch == (total // per_step if drop_last else math.ceil(total / per_step))


@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("seed", range(3))
def test_fixed_counts_exact_and_padding_within_monte_carlo_error(seed, drop_last):
    lengths = corpus(seed, n=300)
    got = evaluate_policy(hist_of(lengths, 100), "fixed", SMALL, drop_last=drop_last)
    rng = np.random.default_rng(100 + seed)
    for b, bucket in enumerate(got.buckets):
        xs = members(lengths, SMALL, b)
        size = batch_size(max(xs), SMALL)
        full, rest = divmod(len(xs), size)
        assert bucket.batch_size == size
        assert bucket.batches == full + (1 if rest and not drop_last else 0)
        assert bucket.dropped_samples == (rest if drop_last else 0)
        assert bucket.tokens == pytest.approx(sum(xs) * (len(xs) - bucket.dropped_samples)
                                              / len(xs), rel=1e-12)
        mc = shuffled_fixed_padding(xs, size, drop_last, 4000, rng)
        err = mc.std() / math.sqrt(mc.size)
        assert abs(bucket.padded_tokens - mc.mean()) <= 5 * err + 1e-9, (b, bucket, mc.mean())
        # random batches pad less than the bucket maximum (the estimate) unless all equal
        assert bucket.padded_tokens <= bucket.samples * max(xs) + 1e-6


def test_fixed_padding_equals_enumeration_of_every_shuffle():
    xs = [3, 5, 5, 9, 12, 12, 20]
    p = BucketParams(bounds=(0, 21), max_seq_len=64, token_budget=60, max_batch_size=3)
    got = evaluate_policy(hist_of(xs, 30), "fixed", p)
    perms = list(itertools.permutations(xs))
    exact = Fraction(sum(3 * max(q[0:3]) + 3 * max(q[3:6]) + 1 * q[6] for q in perms),
                     len(perms))
    assert got.padded_tokens == pytest.approx(float(exact), rel=1e-13)
    assert got.total_batches == 3


@pytest.mark.parametrize("k", [1, 2, 7, 24, 25, 64])
def test_expected_max_equals_the_combinatorial_formula(k):
    rng = np.random.default_rng(k)
    for _ in range(20):
        values = np.unique(rng.integers(0, 5000, rng.integers(1, 12)))
        counts = rng.integers(1, 40, values.size)
        n = int(counts.sum())
        if k > n:
            continue
        cum, prev, exact = np.cumsum(counts), 0, Fraction(0)
        for v, m in zip(values.tolist(), cum.tolist(), strict=True):
            exact += v * Fraction(math.comb(m, k) - math.comb(prev, k), math.comb(n, k))
            prev = m
        assert expected_max(values, counts, k) == pytest.approx(float(exact), rel=1e-12)


def test_expected_max_is_stable_for_huge_counts():
    values = np.array([100, 200])
    counts = np.array([10**12, 10**12])  # every draw is 200 unless all k are 100: (1/2)^k
    for k in (1, 6, 40):
        assert expected_max(values, counts, k) == pytest.approx(200 - 100 * 0.5 ** k, rel=1e-9)


def test_draw_all_below_multiplies_its_factors_in_order():
    # the k factors are built in one array, the same products in the same order as one
    # factor at a time: bit for bit
    rng = np.random.default_rng(5)
    for _ in range(300):
        k = int(rng.integers(0, 25))
        n = int(rng.integers(max(k, 1), 10 ** int(rng.integers(2, 13))))
        m = np.sort(rng.integers(k, n + 1, int(rng.integers(1, 2000))))
        want = np.ones(m.size)
        for i in range(k):
            want *= (m.astype(np.float64) - i) * (1.0 / (n - i))
        assert np.array_equal(draw_all_below(m, n, k), want)


def test_log_falling_takes_one_k_per_value_and_is_minus_inf_below_it():
    m = np.array([0, 3, 5, 40, 10**6, 10**12, 7], dtype=np.float64)
    k = np.array([1, 4, 5, 30, 64, 3, 7])
    got = log_falling(m, k)
    want = [sum(math.log(x - i) for i in range(j)) if x >= j else -math.inf
            for x, j in zip(m.tolist(), k.tolist(), strict=True)]
    assert got[:2].tolist() == [-math.inf, -math.inf]
    assert got[2:] == pytest.approx(want[2:], rel=1e-13)
    assert log_falling(m[2:4], 5) == pytest.approx(log_falling(m[2:4], np.full(2, 5)))


@pytest.mark.parametrize("seed", range(40))
def test_packing_on_small_corpora_equals_item_by_item(seed):
    rng = np.random.default_rng(seed)
    capacity = int(rng.integers(1, 60))
    items = rng.integers(0, capacity + 1, int(rng.integers(0, 120))).tolist()
    values, counts = np.unique(np.asarray(items, np.int64), return_counts=True)
    assert pack_rows(values, counts, capacity, "bfd") == bfd_reference(items, capacity)
    assert pack_rows(values, counts, capacity, "ffd") == ffd_reference(items, capacity)


@pytest.mark.parametrize("n", [10**3, 10**4, 10**5])
def test_packing_from_the_histogram_equals_item_by_item_up_to_1e5(n):
    rng = np.random.default_rng(n)
    items = np.minimum(np.clip(rng.lognormal(np.log(700), 1.1, n), 1, None), 8192).astype(int)
    values, counts = np.unique(items, return_counts=True)
    assert pack_rows(values, counts, 8192, "bfd") == bfd_reference(items.tolist(), 8192)
    if n <= 10**4:
        assert pack_rows(values, counts, 8192, "ffd") == ffd_reference(items.tolist(), 8192)


def test_packed_policy_totals():
    lengths = corpus(3, n=500)
    p = SMALL
    got = evaluate_policy(hist_of(lengths, 100), "packed", p)
    clipped = [min(int(x), p.max_seq_len) for x in lengths]
    rows = bfd_reference(clipped, p.max_seq_len)
    per_batch = p.token_budget // p.max_seq_len
    assert (got.rows, got.rows_per_batch) == (rows, per_batch)
    assert got.total_batches == math.ceil(rows / per_batch)
    assert got.tokens == sum(clipped) and got.padded_tokens == rows * p.max_seq_len
    assert got.packing_efficiency == pytest.approx(sum(clipped) / (rows * p.max_seq_len))
    assert got.buckets == () and "rows" in got.to_dict()
    dropped = evaluate_policy(hist_of(lengths, 100), "packed", p, drop_last=True)
    assert dropped.total_batches == rows // per_batch


def test_packed_uses_one_row_per_batch_when_the_budget_is_below_a_row():
    got = evaluate_policy(hist_of([5, 9, 60], 64), "packed", TIGHT)
    assert got.rows_per_batch == 1 and got.total_batches == got.rows
    assert any("one packed row of max_seq_len (64 tokens) exceeds the token budget" in w
               for w in got.warnings)


def test_shares_and_json_fields():
    lengths = corpus(1)
    for pol in evaluate_policies(hist_of(lengths, 100), "all", SMALL):
        d = pol.to_dict()
        assert {"name", "buckets", "total_batches", "steps_per_epoch", "padding_pct"} <= set(d)
        for b in d["buckets"]:
            assert {"index", "batches", "batch_size", "tokens", "padded_tokens",
                    "padding_pct", "sample_pct", "token_pct", "batch_pct"} <= set(b)
        if pol.buckets:
            for key in ("sample_pct", "token_pct", "batch_pct"):
                assert sum(getattr(b, key) for b in pol.buckets) == pytest.approx(100.0)
    assert [p.name for p in evaluate_policies(hist_of(lengths, 100), "all", SMALL)] == \
        list(POLICIES)


def test_over_budget_samples_are_flagged_not_batched():
    lengths = [5, 20, 55, 60, 62]  # 55..62 exceed TIGHT's budget of 50
    fixed = evaluate_policy(hist_of(lengths, 64), "fixed", TIGHT)
    assert fixed.buckets[2].unbatchable_samples == 3 and fixed.buckets[2].batches == 0
    assert any("longer than the token budget" in w for w in fixed.warnings)
    srt = evaluate_policy(hist_of(lengths, 64), "sorted", TIGHT)
    assert srt.unbatchable_samples == 3


def test_policy_names_are_validated():
    assert parse_policies("fixed, sorted") == ("fixed", "sorted")
    assert parse_policies(["all"]) == POLICIES
    with pytest.raises(ProfilerError, match="unknown policy 'greedy'"):
        parse_policies(["fixed", "greedy"])
