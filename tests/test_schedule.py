"""Batch orders and their statistics, against direct step-by-step computations."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gpu_profiler import ProfilerError
from gpu_profiler.analysis.interleave import interleave, longest_run, min_run
from gpu_profiler.analysis.schedule import (
    ORDERS,
    batch_order,
    order_stats,
    parse_orders,
    simulate_order,
    simulate_schedule,
    write_order,
)
from gpu_profiler.backends import get_backend
from gpu_profiler.chunk import Chunk
from gpu_profiler.demo import demo_lengths

COUNTS = [37, 5, 0, 120, 18, 1]


def hist_of(lengths, cap):
    return get_backend("numpy").histogram_chunk(Chunk(np.asarray(lengths, np.int64)), cap)


@pytest.fixture(scope="module")
def dominant():
    """The demo corpus: its longest bucket makes about 52% of the batches."""
    return simulate_schedule(hist_of(demo_lengths(), 8192), "all", trials=200)


@pytest.mark.parametrize("order", ORDERS)
def test_every_order_runs_every_batch_once(order):
    o = batch_order(COUNTS, order, seed=3)
    assert np.bincount(o, minlength=len(COUNTS)).tolist() == COUNTS


def test_sequential_is_bucket_after_bucket():
    o = batch_order(COUNTS, "sequential")
    assert (np.diff(o) >= 0).all()


def test_stride_is_the_interleaving_planner():
    # bucket 3 has 120 of 181 batches: runs of 2 at least, and they are all 2 or less
    o = batch_order(COUNTS, "stride")
    assert np.array_equal(o, interleave(COUNTS)) and longest_run(o)[0] == min_run(COUNTS) == 2
    assert np.array_equal(batch_order(COUNTS, "stride", max_run=5), interleave(COUNTS, 5))


def test_random_orders_are_reproducible_per_seed():
    for order in ("random", "uniform-bucket"):
        assert (batch_order(COUNTS, order, seed=5) == batch_order(COUNTS, order, seed=5)).all()
        assert (batch_order(COUNTS, order, seed=5) != batch_order(COUNTS, order, seed=6)).any()


def test_uniform_bucket_picks_a_non_empty_bucket_uniformly():
    # two batches of A (0), one of B (1): AAB 1/4, ABA 1/4, BAA 1/2
    trials = 4000
    seen = {}
    for s in range(trials):
        key = "".join("AB"[b] for b in batch_order([2, 1], "uniform-bucket", seed=s))
        seen[key] = seen.get(key, 0) + 1
    for key, p in {"AAB": 0.25, "ABA": 0.25, "BAA": 0.5}.items():
        assert abs(seen.get(key, 0) / trials - p) < 5 * math.sqrt(p * (1 - p) / trials)


def brute_stats(order, mean_len, window):
    """The statistics computed one step at a time."""
    runs, best, best_bucket, cur = [], 0, None, 0
    for i, b in enumerate(order):
        cur = cur + 1 if i and order[i - 1] == b else 1
        if cur > best:
            best, best_bucket = cur, b
        runs.append(cur)
    n = len(order)
    exhausted = [(max(i for i in range(n) if order[i] == b) + 1) / n if b in order else None
                 for b in range(len(mean_len))]
    tail = order[n - math.ceil(0.1 * n):]
    mix = [tail.count(b) / len(tail) for b in range(len(mean_len))]
    x = [mean_len[b] for b in order]
    mu = sum(x) / n
    num = sum((x[i] - mu) * (x[i + 1] - mu) for i in range(n - 1))
    den = sum((v - mu) ** 2 for v in x)
    means = [sum(x[i:i + window]) / window for i in range(0, n - window + 1, window)]
    m = sum(means) / len(means)
    spread = math.sqrt(sum((v - m) ** 2 for v in means) / len(means))
    return best, best_bucket, exhausted, mix, num / den, spread, min(means), max(means)


@pytest.mark.parametrize("order", ORDERS)
def test_statistics_match_a_step_by_step_computation(order):
    mean_len = np.array([100.0, 350.0, 0.0, 900.0, 2000.0, 4000.0])
    o = batch_order(COUNTS, order, seed=11)
    got = order_stats(order, o, mean_len, 7)
    best, bucket, exhausted, mix, ac, spread, lo, hi = brute_stats(o.tolist(), mean_len, 7)
    assert (got.longest_run, got.longest_run_bucket) == (best, bucket)
    assert got.exhausted_at == tuple(exhausted)
    assert got.tail_mix == pytest.approx(mix)
    assert got.lag1_autocorr == pytest.approx(ac)
    assert (got.window_spread, got.window_min, got.window_max) == \
        pytest.approx((spread, lo, hi))


def test_random_orders_report_expected_longest_run_over_seeds():
    mean_len = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    got = simulate_order("random", COUNTS, mean_len, trials=30, seed=4)
    runs = [order_stats("random", batch_order(COUNTS, "random", seed=4 + t),
                        np.array(mean_len), 10).longest_run for t in range(30)]
    assert got.longest_run == runs[0] and got.trials == 30
    assert got.expected_longest_run == pytest.approx(np.mean(runs))
    assert got.p_run_ge[4] == pytest.approx(np.mean([r >= 4 for r in runs]))
    assert simulate_order("stride", COUNTS, mean_len).p_run_ge is None


def test_dominant_bucket_stride_keeps_runs_short_random_does_not(dominant):
    top = max(range(len(dominant.batches)), key=lambda b: dominant.batch_pct[b])
    assert 50 <= dominant.batch_pct[top] <= 54
    stride, rnd = dominant["stride"], dominant["random"]
    assert stride.longest_run <= 3
    assert min(stride.exhausted_at) >= 0.99
    assert rnd.longest_run > 3 and rnd.expected_longest_run > 6 and rnd.p_run_ge[4] > 0.95
    assert dominant["sequential"].lag1_autocorr > 0.9 and stride.lag1_autocorr < 0
    assert stride.window_spread < rnd.window_spread < dominant["sequential"].window_spread
    text = "\n".join(dominant.warnings)
    assert f"--order stride keeps every same-bucket run <= {stride.longest_run}" in text
    assert f"order random: {rnd.longest_run} batches of bucket {top}" in text
    assert "run back to back (> 3)" in text
    assert "bounds" not in text  # which bounds to use is the advice's (test_advice.py)


def test_json_fields(dominant):
    d = dominant.to_dict()
    assert d["schema"] == "gpu-profiler/schedule/v1"
    for o in d["orders"]:
        assert {"name", "longest_run", "longest_run_bucket", "exhausted_at", "tail_mix",
                "lag1_autocorr", "window_spread"} <= set(o)
        assert len(o["exhausted_at"]) == len(o["tail_mix"]) == len(d["buckets"])


def test_write_order_text_and_npy(tmp_path):
    o = batch_order(COUNTS, "stride")
    write_order(tmp_path / "order.txt", o)
    assert [int(x) for x in (tmp_path / "order.txt").read_text().split()] == o.tolist()
    write_order(tmp_path / "order.npy", o)
    assert (np.load(tmp_path / "order.npy") == o).all()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["order.npy", "order.txt"]


def test_bad_options():
    with pytest.raises(ProfilerError, match="unknown order 'zigzag'"):
        parse_orders("random,zigzag")
    assert parse_orders("all") == ORDERS
    h = hist_of([5, 50, 500], 8192)
    with pytest.raises(ProfilerError, match="policy fixed or sorted"):
        simulate_schedule(h, "random", policy="packed")
    with pytest.raises(ProfilerError, match="--trials"):
        simulate_schedule(h, "random", trials=0)
    with pytest.raises(ProfilerError, match="--log-window"):
        simulate_schedule(h, "random", log_window=0)


def test_no_advice_when_nothing_would_help():
    one_length = hist_of([100] * 50, 8192)  # one batch of one bucket: no order, no bounds fix
    assert simulate_schedule(one_length, "all").warnings == ()


def test_stride_advice_on_a_short_epoch():
    # 4 batches of bucket 0, 2 of bucket 5: stride's tail covers a large share of the epoch
    lengths = [100] * 256 + [8000] * 12
    r = simulate_schedule(hist_of(lengths, 8192), ["sequential", "stride"])
    assert r.batches == (4, 0, 0, 0, 0, 2)
    text = " ".join(r.warnings)
    assert "order sequential: 4 batches of bucket 0 run back to back (> 3)" in text
    assert "exhausts all buckets in the last 2 batches (33% of the epoch)" in text
    assert "bucket 5 runs out before the final 2% of the epoch" in text
