"""Simulated training runs for the diagnose tests: every batch's loss is the training trend
times its bucket's level times lognormal noise, with known levels, trend, noise, order,
gradient accumulation, ranks and logging, so what `gpu_profiler.diagnose` recovers can be
checked against the truth."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpu_profiler.analysis.schedule import batch_order


@dataclass(frozen=True)
class Run:
    """A simulated run: the logged ``steps`` and ``loss``, the bucket of every batch in
    training order (``world_size`` per plan step), and the truth it was made from."""

    steps: np.ndarray
    loss: np.ndarray
    buckets: np.ndarray
    levels: np.ndarray  # log offset of each bucket, batch-weighted mean 0
    counts: np.ndarray  # plan steps per bucket
    lengths: np.ndarray  # each batch's mean sample length, as ``buckets``


def ladder_order(counts: np.ndarray, rng: np.random.Generator, mega: int = 50) -> np.ndarray:
    """HF's LengthGroupedSampler's walk: shuffled batches, each mega-batch of ``mega``
    sorted longest bucket first (a descending ladder every ``mega`` steps)."""
    b = rng.permutation(np.repeat(np.arange(counts.size), counts))
    cut = np.arange(mega, b.size, mega)
    return np.concatenate([np.sort(part)[::-1] for part in np.split(b, cut)])


def simulate(counts, levels, order: str = "random", *, grad_accum: int = 1,
             world_size: int = 1, every: int = 1, logged: str = "sample",
             noise: float = 0.05, first_step: int = 0, seed: int = 0,
             trend=lambda s: 2.0 + 2.5 * np.exp(-s / 300), length_slope: float = 0.0,
             length_sd: float = 0.15) -> Run:
    """A run of ``sum(counts)`` plan steps of ``world_size`` same-bucket batches each (as
    the sampler's aligned ranks), ``grad_accum`` plan steps per optimizer step; the logged
    loss is every ``every``-th optimizer step's (``sample``) or the mean of the ``every``
    steps up to it (``mean``), numbered from ``first_step``. A batch's mean sample length
    is its bucket's (512 x 2^bucket) times lognormal(``length_sd``), and its loss goes as
    that ratio ^ ``length_slope``."""
    rng = np.random.default_rng(seed)
    counts = np.asarray(counts)
    levels = np.asarray(levels, dtype=np.float64)
    levels = levels - (counts @ levels) / counts.sum()
    rows = (ladder_order(counts, rng) if order == "ladder"
            else batch_order(counts, order, seed=seed)).astype(np.int64)
    buckets = np.repeat(rows, world_size)
    n_steps = rows.size // grad_accum
    per_step = grad_accum * world_size
    # log length less the bucket's, from a stream of its own (the loss noise stays as it was)
    within = np.random.default_rng((seed, 1)).normal(0, length_sd, buckets.size)
    b = buckets[:n_steps * per_step].reshape(n_steps, per_step)
    e = within[:b.size].reshape(b.shape)
    s = np.arange(n_steps)
    batch_loss = trend(s)[:, None] * np.exp(levels[b] + length_slope * e
                                            + rng.normal(0, noise, b.shape))
    step_loss = batch_loss.mean(axis=1)
    logged_at = np.arange(every - 1, n_steps, every)
    if logged == "mean":
        loss = step_loss[:logged_at.size * every].reshape(-1, every).mean(axis=1)
    else:
        loss = step_loss[logged_at]
    return Run(logged_at + first_step, loss, buckets, levels, counts,
               512.0 * 2.0 ** buckets * np.exp(within))
