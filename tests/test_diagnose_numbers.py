"""`gpu_profiler.diagnose` recovers what simulated training logs were made from (bucket
levels, band shares, period, alignment) within stated tolerances, calls banded logs banded
and clean ones (stride order, one bucket) clean, per-step and window-mean logging, with
gradient accumulation and several ranks; and the curve statistics it rests on hold on
series whose answer is known."""

from __future__ import annotations

import math

import numpy as np
import pytest
from diagnose_sim import simulate

import gpu_profiler as gp
from gpu_profiler.analysis import curve
from gpu_profiler.errors import ProfilerError
from gpu_profiler.losslog import loss_log

#: The ladder bench's corpus shape: six buckets, the longest with 48.6% of the batches,
#: levels its held-out losses (nats/token), x4 its batches.
COUNTS = np.array([93, 47, 49, 60, 58, 290]) * 4
LEVELS = np.log([2.92, 3.25, 3.41, 3.58, 3.72, 3.97])


def run_and_diagnose(**kw):
    shape = {k: kw.pop(k) for k in ("grad_accum", "world_size") if k in kw}
    run = simulate(COUNTS, LEVELS, **shape, **kw)
    log = loss_log(run.steps, run.loss)
    alone = gp.diagnose(log)
    with_order = gp.diagnose(log, buckets=run.buckets, world_size=shape.get("world_size", 1),
                             grad_accum=shape.get("grad_accum", 1))
    return run, alone, with_order


def effects(result):
    """Each bucket's fitted log-effect, from its loss and effect at the log's end."""
    return np.array([math.log(b.loss / (b.loss - b.effect)) for b in result.buckets])


def _shape(marks: tuple = (), **shape) -> object:
    return pytest.param(shape, marks=marks,
                        id=",".join(f"{k}={v}" for k, v in shape.items()) or "per-step")


# The first and the last (all at once) run by default, the others with the slow group.
SHAPES = [
    _shape(),  # every step logged
    _shape(pytest.mark.slow, grad_accum=2),
    _shape(pytest.mark.slow, world_size=4),
    _shape(pytest.mark.slow, every=10, logged="mean"),  # 10-step window means, as HF Trainer logs
    _shape(grad_accum=4, world_size=2, every=5, logged="mean", first_step=1),
]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("seed", [0, pytest.param(1, marks=pytest.mark.slow)])
def test_random_order_is_banded_and_its_levels_recovered(shape, seed):
    run, _, r = run_and_diagnose(order="random", seed=seed, **shape)
    assert r.banded, r.verdict
    assert np.abs(effects(r) - run.levels).max() < 0.03  # log units: 3% of the loss
    assert r.bucket_r2 > 0.5 and r.band_r2 > 0.4
    assert 0.7 <= r.persistence <= 1.4  # a random order keeps a random order's swing
    assert r.predicted_window_std < 0.75 * r.window_std  # stride would calm it
    assert r.alignment.logged == ("step" if shape.get("every", 1) == 1 else "mean")
    assert r.alignment.step_offset == shape.get("first_step", 0)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("seed", [0, pytest.param(1, marks=pytest.mark.slow)])
def test_stride_order_is_not_banded(shape, seed):
    run, alone, r = run_and_diagnose(order="stride", seed=seed, **shape)
    assert not r.banded, r.verdict
    assert not alone.banded, alone.verdict
    assert r.persistence < 0.3
    assert r.predicted_window_std == pytest.approx(r.window_std, rel=0.05)
    assert "interleaved already" in r.fix
    assert np.abs(effects(r) - run.levels).max() < 0.08  # fewer mixes to tell them apart


@pytest.mark.parametrize("every, logged", [pytest.param(1, "sample", marks=pytest.mark.slow),
                                           (10, "mean")])
def test_one_bucket_is_not_banded(every, logged):
    run = simulate([2000], [0.0], "random", every=every, logged=logged)
    log = loss_log(run.steps, run.loss)
    for r in (gp.diagnose(log), gp.diagnose(log, buckets=run.buckets)):
        assert not r.banded, r.verdict
        assert len(r.bands) == 1 and r.band_r2 == 0.0
    assert r.bucket_r2 == pytest.approx(0.0, abs=1e-9)


@pytest.mark.parametrize("every, logged", [(1, "sample"), (5, "mean")])
def test_a_ladder_is_banded_from_the_loss_alone_with_its_period(every, logged):
    """HF's LengthGroupedSampler: mega-batches of 50 batches, longest first."""
    run, alone, r = run_and_diagnose(order="ladder", every=every, logged=logged)
    assert alone.banded and r.banded
    assert alone.period == pytest.approx(50, rel=0.03) or alone.period == pytest.approx(
        25, rel=0.03)  # the sawtooth's fundamental, or its first harmonic
    assert alone.period_p < 1e-3
    assert r.persistence > 5  # runs: far more swing than a random order


def test_uniform_bucket_order_runs_are_caught():
    _, _, r = run_and_diagnose(order="uniform-bucket")
    assert r.banded and r.persistence > 2


def test_bands_recover_planted_levels_and_shares():
    """Three well separated levels (59/21/20%, as the issue's seed) and a falling trend:
    the bands' shares within 3 points, their level ratios within 3%."""
    counts = np.array([590, 210, 200]) * 6
    run = simulate(counts, np.log([0.55, 1.1, 2.0]), "random", noise=0.04, seed=3)
    r = gp.diagnose(loss_log(run.steps, run.loss))
    assert len(r.bands) == 3 and r.band_delta_bic > 100
    assert [b.share for b in r.bands] == pytest.approx([0.59, 0.21, 0.20], abs=0.03)
    ratios = [b.level / r.bands[0].level for b in r.bands]
    assert ratios == pytest.approx([1, 2.0, 2.0 / 0.55], rel=0.03)
    assert r.banded


def test_an_off_by_one_log_is_aligned_and_a_wrong_offset_fits_worse():
    run = simulate(COUNTS, LEVELS, "random", first_step=1)
    log = loss_log(run.steps[:2000], run.loss[:2000])  # a prefix: every offset fits in
    best = gp.diagnose(log, buckets=run.buckets)
    forced = gp.diagnose(log, buckets=run.buckets, step_offset=0)
    assert best.alignment.step_offset == 1 and best.alignment.auto
    assert best.bucket_r2 > 0.7 > 0.1 > forced.bucket_r2


def test_a_sampled_log_every_k_steps_shows_buckets_in_any_order():
    """One step's loss every 10 steps shows that step's bucket: banded even in stride
    order, and the fix says to log means."""
    run, _, r = run_and_diagnose(order="stride", every=10, logged="sample")
    assert r.banded and "log the mean loss" in r.fix


def test_rank_selects_one_ranks_batches():
    rng = np.random.default_rng(0)
    rows = rng.integers(0, 3, (3000, 2))  # mixed steps: the two ranks differ
    levels = np.array([-0.3, 0.0, 0.3])
    y = 2.0 * np.exp(levels[rows[:, 1]] + rng.normal(0, 0.03, 3000))  # rank 1's loss
    log = loss_log(np.arange(3000), y)
    one = gp.diagnose(log, buckets=rows.ravel(), world_size=2, rank=1)
    both = gp.diagnose(log, buckets=rows.ravel(), world_size=2)
    assert one.bucket_r2 > 0.95 > 0.7 > both.bucket_r2
    with pytest.raises(ProfilerError, match="--rank 2"):
        gp.diagnose(log, buckets=rows.ravel(), world_size=2, rank=2)


def test_a_log_longer_than_the_order_is_refused():
    run = simulate(COUNTS, LEVELS, "random")
    log = loss_log(run.steps, run.loss)
    with pytest.raises(ProfilerError, match="do not fall in the order"):
        gp.diagnose(log, buckets=run.buckets[: run.buckets.size // 2])
    with pytest.raises(ProfilerError, match="too few"):
        gp.diagnose(loss_log(np.arange(10), np.ones(10)))


@pytest.mark.slow  # its time is measured by bench/bench_diagnose.py, never asserted here
def test_a_million_steps_are_diagnosed():
    run = simulate(COUNTS * 420, LEVELS, "random", noise=0.1)
    log = loss_log(run.steps, run.loss)
    assert log.steps.size > 900_000
    assert gp.diagnose(log, buckets=run.buckets).banded


# ---------------------------------------------------------------- the curve statistics
def test_trend_is_exact_on_a_parabola_and_follows_a_learning_curve():
    x = np.arange(5000.0)
    parabola = 3e-7 * x * x - 1e-3 * x + 4
    assert curve.trend(parabola, 301) == pytest.approx(parabola, abs=1e-9)
    learning = np.log(2 + 2.5 * np.exp(-x / 300))
    assert np.abs(curve.trend(learning, 101) - learning).max() < 0.01


def test_bands_need_separation_share_and_evidence():
    rng = np.random.default_rng(0)
    one = rng.normal(0, 1, 20_000)
    assert curve.bands(one).k == 1
    heavy = rng.standard_t(3, 20_000)  # one heavy-tailed mode: no bands
    assert curve.bands(heavy).k == 1
    two = np.concatenate([rng.normal(0, 1, 15_000), rng.normal(6, 1, 5_000)])
    mix = curve.bands(two)
    assert mix.k == 2 and mix.weight == pytest.approx([0.75, 0.25], abs=0.01)
    assert mix.mean == pytest.approx([0, 6], abs=0.05) and mix.separation > 5


def test_period_finds_a_planted_cycle_and_not_noise():
    rng = np.random.default_rng(1)
    x = np.arange(20_000)
    noise = rng.normal(0, 1, x.size)
    assert curve.period(noise, 1000).p > 1e-3
    red = np.zeros(x.size)  # AR(1), rho 0.9: a red spectrum with no period
    for i in range(1, x.size):
        red[i] = 0.9 * red[i - 1] + noise[i]
    assert curve.period(red - curve.trend(red, 501), 250).p > 1e-3
    found = curve.period(noise + 0.5 * np.sin(2 * np.pi * x / 37), 1000)
    assert found.points == pytest.approx(37, rel=0.01) and found.p < 1e-10


def test_ladders_against_chance():
    rng = np.random.default_rng(2)
    noise = curve.ladders(rng.normal(size=100_000))
    assert noise.expected < 1 and noise.count <= 4
    steps = np.tile(np.arange(12.0), 50) + rng.normal(0, 0.01, 600)  # 12-point climbs
    ladder = curve.ladders(steps)
    assert ladder.longest == 12 and ladder.count >= 45


def test_persistence_of_orders():
    x = np.tile([1.0, -1.0], 500)
    assert curve.persistence(x, 10) == pytest.approx(0.0, abs=1e-12)
    assert curve.persistence(np.repeat([1.0, -1.0], 500), 10) > 9
    assert curve.persistence(np.ones(100), 10) is None


@pytest.mark.parametrize("shape", [
    pytest.param(dict(), id="per-step"),
    pytest.param(dict(grad_accum=2, world_size=2), id="accum2,world2", marks=pytest.mark.slow),
    pytest.param(dict(every=10, logged="mean"), id="mean10", marks=pytest.mark.slow)])
@pytest.mark.parametrize("slope", [-0.3, pytest.param(0.0, marks=pytest.mark.slow)])
def test_a_batch_length_effect_within_buckets_is_recovered(shape, slope):
    """Within each bucket, a batch's loss goes as its mean sample length ^ slope (the
    length's log spread 0.15): the bucket-and-length regression recovers the slope within
    0.05 and gains its share of R^2; with no length effect it gains under 0.005 (over seeds
    0-9 the worst were 0.045 and 0.0026, with 10-step means)."""
    run = simulate(COUNTS, LEVELS, "random", length_slope=slope, seed=5, **shape)
    ranks = shape.get("world_size", 1)
    r = gp.diagnose(loss_log(run.steps, run.loss), buckets=run.buckets,
                    batch_lengths=run.lengths, world_size=ranks,
                    grad_accum=shape.get("grad_accum", 1))
    assert r.length_slope == pytest.approx(slope, abs=0.05)
    gain = r.bucket_length_r2 - r.bucket_r2
    assert gain > 0.04 if slope else gain < 0.005
    assert r.bucket_length_r2_adjusted <= r.bucket_length_r2
    blind = gp.diagnose(loss_log(run.steps, run.loss), buckets=run.buckets, world_size=ranks,
                        grad_accum=shape.get("grad_accum", 1))
    assert blind.length_slope is None and blind.bucket_length_r2 is None
    assert blind.bucket_r2 == pytest.approx(r.bucket_r2)
