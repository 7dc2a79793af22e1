"""``gpu-profiler diagnose``: is a training loss curve banded by batch composition, and, given
the batch order, how much of it do the buckets explain and what would the stride order do.

The loss is read on the log scale (when every loss is positive): bucket levels then act as
ratios to the training trend, so bands keep their width as the loss falls. The trend is a
local linear fit over ``trend_window`` logged points (`gpu_profiler.analysis.curve.trend`);
what is left, ``d``, is what is analysed.

- **From the loss alone**: the bands of ``d`` (a Gaussian mixture, BIC choosing 1-6
  separated modes), the period of ``d`` (periodogram) and its ladders (monotonic runs).
- **With the order** (the bucket of every batch: `gpu_profiler.trained_order`): each logged
  point is aligned with the batches it averages (optimizer steps of ``grad_accum`` plan
  steps of ``world_size`` batches; a logged step is the step's loss, or the mean since the
  last logged step), and ``d`` is regressed on each point's bucket mix (OLS, jointly with
  the trend by backfitting): ``bucket_r2`` is its R^2, the fitted bucket effects give the
  de-banded curve, and swapping in the stride order's mix predicts the fixed curve.

**Banded** means that batch composition carries at least `BANDED_R2` of the variance of the
curve as it is read, means over windows of ``window`` steps (of the logged points in
them, at least one) (``band_r2``: from the bands without the order, from the buckets with
it), and the order does not interleave it away: the composition keeps at least
`MIN_PERSISTENCE` of the swing a random order would leave over those windows
(``persistence``). Without the order, a significant period longer than two windows that
holds `PERIOD_SHARE` of the variance (a ladder) is banded too.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import field
from typing import Any

import numpy as np

from gpu_profiler.analysis import curve
from gpu_profiler.analysis.buckets import DOMINANT_BATCH_PCT
from gpu_profiler.analysis.interleave import interleave, longest_run
from gpu_profiler.errors import ProfilerError
from gpu_profiler.frozen import frozen
from gpu_profiler.losslog import LossLog, read_loss_log
from gpu_profiler.params import BucketParams
from gpu_profiler.trained_order import (
    TrainedOrder,
    order_of,
    read_bucket_order,
    read_plans,
    sampled_order,
)

SCHEMA = "gpu-profiler/diagnose/v1"
LOGGED = ("auto", "sample", "mean")
#: The verdict's thresholds (module docstring).
BANDED_R2, MIN_PERSISTENCE = 0.25, 0.7
PERIOD_P, PERIOD_SHARE = curve.PERIOD_P, 0.10
#: Steps per reading window, the least trend window (points), the fewest points diagnosed.
DEFAULT_WINDOW, MIN_TREND, MIN_POINTS = 10, 101, 20
#: Step offsets tried when aligning (logged step s = optimizer step s - offset, 0-based).
OFFSETS = (0, 1, -1, 2, -2)
#: `BucketBatchSampler`'s options `diagnose` plans a source with (and ``world_size``).
SAMPLER_OPTIONS = ("bounds", "max_seq_len", "token_budget", "max_batch_size", "policy",
                   "order", "seed", "drop_last", "max_run", "align_ranks", "drop_outside",
                   "attention_weight", "cost_curve", "cost_budget", "cost_unit", "shape",
                   "rows_per_sample", "group_by", "varlen_attention")
#: Backfitting rounds of trend and bucket effects.
_ROUNDS = 3


@frozen
class Band:
    """One mode of the logged losses: its share of the points, their mean loss (``level``)
    and their 10th-90th percentiles (``lo``, ``hi``)."""

    level: float
    share: float
    lo: float
    hi: float


@frozen
class BucketEffect:
    """One bucket, from the regression: its batches in the log's span and their share,
    its loss at the end of the log (``loss``: the de-banded trend's last value with the
    bucket's effect) and the difference from that trend (``effect``); its longest run of
    plan steps back to back (``longest_run``, the latest such, from plan step
    ``run_start``), the mean logged loss of the points inside that run (``run_loss``) and
    how far above the trend it sat (``run_effect``; both None: no point logged in it)."""

    index: int
    batches: int
    share: float
    loss: float
    effect: float
    longest_run: int
    run_start: int
    run_loss: float | None
    run_effect: float | None


@frozen
class Alignment:
    """How logged points were matched with batches: ``logged`` ``sample`` (the loss of the
    logged step) or ``mean`` (the mean since the last logged point), logged step ``s`` as
    optimizer step ``s - step_offset``, ``grad_accum`` plan steps per optimizer step, the
    batches of every rank (``rank`` None) or of one; ``auto``: chosen as the best R^2 of
    ``tried`` (``(logged, step_offset, R^2)``)."""

    logged: str
    step_offset: int
    grad_accum: int
    world_size: int
    rank: int | None
    auto: bool
    tried: tuple[tuple[str, int, float], ...]

    def to_dict(self) -> dict[str, Any]:
        return {"logged": self.logged, "step_offset": self.step_offset,
                "grad_accum": self.grad_accum, "world_size": self.world_size,
                "rank": self.rank, "auto": self.auto,
                "tried": [{"logged": g, "step_offset": o, "r2": r} for g, o, r in self.tried]}


@frozen
class Curves:
    """The per-point series behind the numbers (plots and ``--debanded``): the logged
    loss, the trend and the de-banded loss (None without the order) in loss units, each
    point's band and its batches' most frequent bucket (None without the order), and the
    periodogram of the detrended values (frequency in cycles per logged point)."""

    steps: np.ndarray
    loss: np.ndarray
    trend: np.ndarray
    band: np.ndarray
    debanded: np.ndarray | None
    bucket: np.ndarray | None
    frequency: np.ndarray
    power: np.ndarray


@frozen
class DiagnoseResult:
    """What `diagnose` finds (``to_dict``: the ``-f json`` document, schema
    ``gpu-profiler/diagnose/v1``; README "diagnose" and docs/guide/diagnose.md say what
    each number is)."""

    log: str
    format: str
    series: str
    points: int
    first_step: int
    last_step: int
    log_every: int
    nonfinite: int
    rewritten: int
    skipped: int
    scale: str
    trend_window: int
    window: int
    window_points: int
    banded: bool
    verdict: str
    band_r2: float
    persistence: float | None
    bands: tuple[Band, ...]
    band_delta_bic: float
    band_separation: float | None
    period: float | None
    period_share: float
    period_p: float
    longest_ladder: int
    ladder_step: int
    ladder_rise: float
    ladders: int
    ladder_length: int
    expected_ladders: float
    window_std: float
    order: str | None = None
    alignment: Alignment | None = None
    bucket_r2: float | None = None
    bucket_r2_adjusted: float | None = None
    bucket_length_r2: float | None = None
    bucket_length_r2_adjusted: float | None = None
    length_slope: float | None = None
    debanded_window_std: float | None = None
    predicted_window_std: float | None = None
    longest_run: int | None = None
    stride_longest_run: int | None = None
    max_batch_pct: float | None = None
    buckets: tuple[BucketEffect, ...] = ()
    fix: str | None = None
    warnings: tuple[str, ...] = field(default=())
    curves: Curves | None = field(default=None, compare=False, repr=False)

    def to_dict(self) -> dict[str, Any]:
        skip = {"curves", "alignment", "bands", "buckets"}
        d = {k: getattr(self, k) for k in self.__dataclass_fields__ if k not in skip}
        return {"schema": SCHEMA, **d, "band_count": len(self.bands),
                "bands": [vars(b) for b in self.bands],
                "alignment": self.alignment.to_dict() if self.alignment else None,
                "buckets": [vars(b) for b in self.buckets],
                "warnings": list(self.warnings)}


# ---------------------------------------------------------------- the public entry point
def diagnose(log: LossLog | str | os.PathLike[str], *,
             plan: str | os.PathLike[str] | Sequence[str | os.PathLike[str]] | None = None,
             buckets: Sequence[int] | np.ndarray | str | os.PathLike[str] | None = None,
             source: Any = None, batch_lengths: Sequence[float] | np.ndarray | None = None,
             world_size: int | None = None, grad_accum: int | None = None,
             rank: int | None = None, logged: str = "auto", step_offset: int | None = None,
             window: int = DEFAULT_WINDOW, trend_window: int | None = None, skip: int = 0,
             series: str | None = None, step_column: str | None = None,
             log_format: str | None = None, epoch: int = 0, **sampler: Any
             ) -> DiagnoseResult:
    """Diagnose the loss curve of ``log`` (a `LossLog`, or the path of a TensorBoard run or
    event file, or a CSV / JSONL / Parquet table: `gpu_profiler.losslog.read_loss_log`,
    with ``series``, ``step_column`` and ``log_format``).

    The batch order, when known, one of: ``plan`` (``gpu-profiler plan`` files, one per
    epoch); ``source`` (the corpus, a `Source` or its data: planned again as ``plan``
    plans it, from ``epoch`` on, ``sampler`` the options of `BucketBatchSampler`:
    ``bounds``, ``policy``, ``order``, ``seed``, ...); ``buckets`` (the bucket of every
    batch: an array, with each batch's mean sample length in ``batch_lengths`` if known,
    or a file as ``--emit-order`` writes it). ``world_size``: ranks (a plan file's own;
    else 1); ``grad_accum``: plan steps per optimizer step (default: the plan's, which
    ``plan`` records (4 unless told), also with ``source``; 1 with ``buckets``);
    ``rank``: the logged loss is that rank's (default: the mean over ranks); ``logged``:
    ``sample``, ``mean`` or ``auto`` (the better fit); ``step_offset``: logged step s is
    optimizer step s - offset (default: the best fit of -2..2). ``window``: steps per
    reading window; ``trend_window``: logged points per trend fit (default: the larger of
    101 and a tenth of the points); ``skip``: steps before this are left out (warm-up).
    """
    if not isinstance(log, LossLog):
        log = read_loss_log(log, series=series, step_column=step_column, format=log_format)
    order = trained_order(log, plan=plan, buckets=buckets, source=source,
                          batch_lengths=batch_lengths, world_size=world_size,
                          grad_accum=grad_accum, step_offset=step_offset, epoch=epoch,
                          **sampler)
    return diagnose_log(log, order, grad_accum=grad_accum, rank=rank, logged=logged,
                        step_offset=step_offset, window=window, trend_window=trend_window,
                        skip=skip)


def trained_order(log: LossLog, *, plan: Any = None, buckets: Any = None, source: Any = None,
                  batch_lengths: Any = None, world_size: int | None = None,
                  grad_accum: int | None = None, step_offset: int | None = None,
                  epoch: int = 0, **sampler: Any) -> TrainedOrder | None:
    """The batch order of `diagnose`'s arguments (None: none given); a source is planned
    for the fewest epochs that hold the log's last step (at ``step_offset``, else the
    largest tried), as the plan files of the epochs it trained would."""
    _positive(world_size=world_size, grad_accum=grad_accum)
    given = [name for name, value in (("plan", plan), ("bucket order", buckets),
                                      ("SOURCE", source)) if value is not None]
    if len(given) > 1:
        raise ProfilerError(f"give one batch order, not the {' and the '.join(given)}")
    unknown = sorted(set(sampler) - set(SAMPLER_OPTIONS))
    if unknown:
        raise TypeError(f"unexpected keyword argument(s) {', '.join(unknown)}; the "
                        f"sampler's are: {', '.join(SAMPLER_OPTIONS)}")
    if sampler and source is None:
        raise ProfilerError(f"{', '.join(sampler)}: options of planning the SOURCE, which "
                            "was not given")
    if batch_lengths is not None and (buckets is None or isinstance(buckets, (str, os.PathLike))):
        raise ProfilerError("batch_lengths go with buckets given as an array")
    if plan is not None:
        order = read_plans([plan] if isinstance(plan, (str, os.PathLike)) else list(plan))
        if world_size not in (None, order.world_size):
            raise ProfilerError(f"--world-size {world_size}: the plan is for "
                                f"{order.world_size} ranks (its batches depend on them)")
        return order
    if source is not None:
        last = int(log.steps[-1]) if log.steps.size else 0
        steps = last + 1 - (max(OFFSETS) if step_offset is None else step_offset)
        return _planned(source, world_size or 1, grad_accum or BucketParams.grad_accum,
                        max(steps, 1), epoch, sampler)
    if isinstance(buckets, (str, os.PathLike)):
        return read_bucket_order(buckets, world_size or 1)
    return None if buckets is None else order_of(buckets, world_size or 1,
                                                 length=batch_lengths)


def _planned(source: Any, world_size: int, accum: int, steps: int, epoch: int,
             sampler: dict[str, Any]) -> TrainedOrder:
    """The order ``plan`` writes for ``source`` with these options, epoch after epoch
    from ``epoch``, until it holds ``steps`` optimizer steps."""
    from gpu_profiler.request import Source
    from gpu_profiler.sampler import planned_sampler

    src = source if isinstance(source, Source) else Source(source)
    s, _ = planned_sampler(src, epoch, world_size=world_size, **sampler)
    return sampled_order(s, steps, accum, src.label)


def diagnose_log(log: LossLog, order: TrainedOrder | None = None, *,
                 grad_accum: int | None = None, rank: int | None = None,
                 logged: str = "auto", step_offset: int | None = None,
                 window: int = DEFAULT_WINDOW, trend_window: int | None = None,
                 skip: int = 0) -> DiagnoseResult:
    """`diagnose` on a log and an order already read."""
    _check_options(logged, window, trend_window, grad_accum, rank, order)
    keep = log.steps >= skip
    steps, loss = log.steps[keep], log.loss[keep]
    n = int(steps.size)
    if n < MIN_POINTS:
        raise ProfilerError(f"{log.path}: {n} finite loss values"
                            + (f" at steps >= {skip}" if skip else "")
                            + f" ({log.nonfinite:,} NaN/inf dropped): too few to diagnose "
                            f"(at least {MIN_POINTS})")
    scale = "log" if float(loss.min()) > 0 else "linear"
    y = np.log(loss) if scale == "log" else loss.astype(np.float64)
    every = max(1, int(np.median(np.diff(steps))))
    t_window = min(trend_window or max(MIN_TREND, n // 10), n)
    w = max(1, round(window / every))  # logged points per reading window
    base = curve.trend(y, t_window)
    d0 = y - base
    mix = curve.bands(d0)
    band = mix.assign(d0)
    period = curve.period(d0, t_window / 2)
    lad = curve.ladders(d0)
    warnings = list(log.warnings) + _log_warnings(log, n, t_window, w)
    common: dict[str, Any] = dict(
        log=log.path, format=log.format, series=log.series, points=n,
        first_step=int(steps[0]), last_step=int(steps[-1]), log_every=every,
        nonfinite=log.nonfinite, rewritten=log.rewritten, skipped=int(log.steps.size - n),
        scale=scale, trend_window=t_window, window=w * every, window_points=w,
        bands=tuple(_bands(loss, band, mix.k)), band_delta_bic=mix.delta_bic,
        band_separation=mix.separation,
        period=None if period.points is None else period.points * every,
        period_share=period.share, period_p=period.p,
        longest_ladder=lad.longest, ladder_step=int(steps[lad.start]),
        ladder_rise=float(loss[lad.start + lad.longest - 1] - loss[lad.start]),
        ladders=lad.count, ladder_length=lad.length, expected_ladders=lad.expected)
    if order is None:
        share = curve.band_share(d0, mix, w)
        persist = curve.persistence(mix.mean[band], w) if mix.k > 1 else None
        banded, verdict = _verdict_alone(mix.k, share, persist, period, every, w)
        curves = Curves(steps, loss, _level(base, scale), band, None, None,
                        period.frequency, period.power)
        return DiagnoseResult(**common, banded=banded, verdict=verdict, band_r2=share,
                              persistence=persist,
                              window_std=_wstd(_loss_units(d0, base, scale), w),
                              warnings=tuple(warnings), curves=curves)
    return _with_order(common, order, steps, loss, y, d0, band, period, scale, every,
                       t_window, w, grad_accum, rank, logged, step_offset, warnings)


def _check_options(logged: str, window: int, trend_window: int | None, grad_accum: int | None,
                   rank: int | None, order: TrainedOrder | None) -> None:
    if logged not in LOGGED:
        raise ProfilerError(f"--logged {logged!r}: choose from {', '.join(LOGGED)}")
    _positive(window=window, trend_window=trend_window, grad_accum=grad_accum)
    if trend_window is not None and trend_window < 3:
        raise ProfilerError(f"--trend-window must be at least 3, got {trend_window}")
    if rank is not None and (order is None or not 0 <= rank < order.world_size):
        ranks = f"0..{order.world_size - 1}" if order else "none without an order"
        raise ProfilerError(f"--rank {rank}: the ranks are {ranks}")


def _positive(**values: int | None) -> None:
    """A one-line error for an option given as anything but a positive integer."""
    for name, value in values.items():
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or value < 1):
            raise ProfilerError(f"--{name.replace('_', '-')} must be a positive integer, "
                                f"got {value!r}")


def _log_warnings(log: LossLog, n: int, t_window: int, w: int) -> list[str]:
    out = []
    if log.nonfinite:
        out.append(f"{log.nonfinite:,} NaN/inf loss values dropped")
    if log.rewritten:
        out.append(f"{log.rewritten:,} values dropped: their steps were logged again later "
                   "(a resumed run; the later values are kept, as TensorBoard shows them)")
    if n < 3 * t_window:
        out.append(f"{n:,} points are fewer than three trend windows ({t_window:,}): the "
                   "trend is crude and slow swings go into it")
    if n < 8 * w:
        out.append(f"{n:,} points make only {n // w} reading windows of {w}: the window "
                   "statistics are rough")
    return out


def _bands(loss: np.ndarray, band: np.ndarray, k: int) -> list[Band]:
    out = []
    for j in range(k):
        member = loss[band == j]
        if member.size:
            lo, hi = np.quantile(member, [0.1, 0.9])
            out.append(Band(float(member.mean()), member.size / loss.size, float(lo),
                            float(hi)))
    return out


def _level(x: np.ndarray, scale: str) -> np.ndarray:
    return np.exp(x) if scale == "log" else x


def _loss_units(x: np.ndarray, trend: np.ndarray, scale: str) -> np.ndarray:
    """Detrended values ``x`` as loss above the trend."""
    return np.exp(trend) * np.expm1(x) if scale == "log" else x


def _wstd(x: np.ndarray, w: int) -> float:
    return float(curve.window_means(x, w).std())


def _verdict_alone(k: int, share: float, persist: float | None, period: curve.Period,
                   every: int, w: int) -> tuple[bool, str]:
    over = f"over {w * every:,}-step windows"
    ladder = (period.points is not None and period.p < PERIOD_P
              and period.share >= PERIOD_SHARE and period.points >= 2 * w)
    if k > 1 and share >= BANDED_R2 and (persist or 0.0) >= MIN_PERSISTENCE:
        return True, (f"Banded: {k} bands carry {share:.0%} of the curve's swing {over} and "
                      f"come as from a random or grouped order (persistence {persist:.2f}); "
                      "the batch order (--plan) would tie them to buckets.")
    if ladder:
        assert period.points is not None
        return True, (f"Banded: the loss swings with a period of {period.points * every:,.0f} "
                      f"steps ({period.share:.0%} of its variance, p={period.p:.1g}), a "
                      "ladder of batch composition; the batch order (--plan) would tie it "
                      "to buckets.")
    if k > 1 and (persist or 0.0) < MIN_PERSISTENCE:
        return False, (f"Not banded: {k} bands, but they alternate (persistence "
                       f"{persist or 0:.2f}) and average out {over}, as an interleaved "
                       "order does.")
    if k > 1:
        return False, f"Not banded: {k} bands carry only {share:.0%} of the curve's swing {over}."
    return False, ("Not banded: the detrended loss has one mode and no period holding "
                   f"{PERIOD_SHARE:.0%} of it.")


# ---------------------------------------------------------------- with the order
def _step_rows(order: TrainedOrder, accum: int) -> tuple[np.ndarray, np.ndarray]:
    """The plan rows ``[start, end)`` of every optimizer step (none spans two epochs)."""
    starts, ends, base = [], [], 0
    for rows in order.epochs:
        s = base + np.arange(0, rows, accum)
        starts.append(s)
        ends.append(np.minimum(s + accum, base + rows))
        base += rows
    return np.concatenate(starts), np.concatenate(ends)


def _windows(steps: np.ndarray, every: int, logged: str, offset: int, n_steps: int
             ) -> tuple[np.ndarray, np.ndarray] | None:
    """The optimizer steps ``[lo, hi)`` each logged point covers (None when some point
    falls outside the order)."""
    idx = steps - offset
    if idx[0] < 0 or idx[-1] >= n_steps:
        return None
    if logged == "sample":
        return idx, idx + 1
    prev = np.concatenate(([idx[0] - every], idx[:-1]))
    return np.maximum(prev + 1, 0), idx + 1


def _taken(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every plan row of every point's ``[lo, hi)``: the point, and the row."""
    length = hi - lo
    start = np.repeat(lo - np.concatenate(([0], np.cumsum(length)[:-1])), length)
    return np.repeat(np.arange(lo.size), length), start + np.arange(int(length.sum()))


def _mix(rows: np.ndarray, lo: np.ndarray, hi: np.ndarray, k: int) -> np.ndarray:
    """Each point's bucket mix: the share of each bucket among the batches of plan rows
    ``[lo, hi)`` (``rows``: the bucket of each batch taken, per plan row)."""
    n = lo.size
    point, row = _taken(lo, hi)
    counts = np.bincount((point[:, None] * k + rows[row]).ravel(),
                         minlength=n * k).reshape(n, k)
    return counts / ((hi - lo) * rows.shape[1])[:, None]


def _mean_over(values: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Each point's mean of ``values`` (per plan row, a column per batch taken) over the
    batches of its plan rows ``[lo, hi)``."""
    point, row = _taken(lo, hi)
    sums = np.bincount(point, values[row].sum(axis=1), minlength=lo.size)
    return sums / ((hi - lo) * values.shape[1])


def _length_fit(d: np.ndarray, mix: np.ndarray, x: np.ndarray, r2: float
                ) -> tuple[float, float] | None:
    """The R^2 of ``d`` regressed on the bucket mix and ``x`` (each point's mean log batch
    length) together, and the slope of ``x``, from ``r2`` (the mix's alone) by
    Frisch-Waugh: ``x`` less its fit by the mix carries the length's own share (None: no
    length varies apart from the buckets)."""
    rx = x - mix @ np.linalg.lstsq(mix, x, rcond=None)[0]
    sxx, sxd = float(rx @ rx), float(rx @ d)
    ss = float(((d - d.mean()) ** 2).sum())
    if sxx <= 1e-12 * max(float(((x - x.mean()) ** 2).sum()), 1e-300) or ss <= 0:
        return None
    return r2 + sxd * sxd / sxx / ss, sxd / sxx


def _r2(d: np.ndarray, fitted: np.ndarray) -> float:
    ss = float(((d - d.mean()) ** 2).sum())
    return 1 - float(((d - fitted) ** 2).sum()) / ss if ss > 0 else 0.0


def _with_order(common: dict[str, Any], order: TrainedOrder, steps: np.ndarray,
                loss: np.ndarray, y: np.ndarray, d0: np.ndarray, band: np.ndarray,
                period: curve.Period, scale: str, every: int, t_window: int, w: int,
                grad_accum: int | None, rank: int | None, logged: str,
                step_offset: int | None, warnings: list[str]) -> DiagnoseResult:
    accum = _grad_accum(grad_accum, order, warnings)
    row_lo, row_hi = _step_rows(order, accum)
    ranks = slice(None) if rank is None else [rank]
    rows = order.bucket[:, ranks]
    k = order.buckets
    alignment, lo, hi, mix = _align(steps, d0, rows, row_lo, row_hi, k, every, logged,
                                    step_offset, accum, order, rank)
    trend, beta = y - d0, np.zeros(k)
    taken = mix.sum(axis=0)
    weights = taken / taken.sum()
    for _ in range(_ROUNDS):  # backfitting: the bucket effects, then the trend without them
        beta = np.linalg.lstsq(mix, y - trend, rcond=None)[0]
        beta = np.where(taken > 0, beta - weights @ beta, 0.0)
        trend = curve.trend(y - mix @ beta, t_window)
    d = y - trend
    fitted = mix @ beta
    r2 = _r2(d, mix @ np.linalg.lstsq(mix, d, rcond=None)[0])
    present = int((taken > 0).sum())
    r2_adj = _adjusted(r2, d.size, present)
    fit = None if order.length is None else _length_fit(
        d, mix, _mean_over(np.log(order.length[:, ranks]), lo, hi), r2)
    spread = curve.window_means(d, w).var()
    share = max(0.0, 1 - float(curve.window_means(d - fitted, w).var()) / spread) \
        if spread > 0 else 0.0
    persist = _persistence(fitted, beta, rows, lo, hi, w)
    seq = order.bucket[:, 0 if rank is None else rank]
    stride = np.concatenate([interleave(np.bincount(part, minlength=k))
                             for part in np.split(seq, np.cumsum(order.epochs)[:-1])])
    stride_rows = np.repeat(stride[:, None], rows.shape[1], axis=1).astype(rows.dtype)
    predicted = _mix(stride_rows, lo, hi, k) @ beta + (d - fitted)
    current_run, stride_run = longest_run(seq)[0], longest_run(stride)[0]
    counts = np.bincount(order.bucket.ravel(), minlength=k)
    top = int(np.argmax(counts))
    top_pct = float(counts[top] / counts.sum() * 100)
    wstd = _wstd(_loss_units(d, trend, scale), w)
    debanded_std = _wstd(_loss_units(d - fitted, trend, scale), w)
    predicted_std = _wstd(_loss_units(predicted, trend, scale), w)
    banded = share >= BANDED_R2 and (persist or 0.0) >= MIN_PERSISTENCE
    verdict = _verdict_order(banded, share, r2, persist, w * every, wstd, predicted_std)
    fix = _fix(current_run, stride_run, persist, wstd, predicted_std, debanded_std,
               w * every, top, top_pct, alignment.logged == "sample" and every > 1)
    if current_run > t_window * every / accum / 3:
        warnings.append(f"the longest same-bucket run ({current_run:,} plan steps) is over a "
                        f"third of the trend window ({t_window:,} points): the trend takes "
                        "in part of the bucket effect, and R^2 understates it")
    level = _level(trend[-1:], scale)[0]
    effects = [_level(trend[-1:] + b, scale)[0] for b in beta]
    curves = Curves(steps, loss, _level(trend, scale), band, _level(y - fitted, scale),
                    np.argmax(mix, axis=1), period.frequency, period.power)
    return DiagnoseResult(
        **common, banded=banded, verdict=verdict, band_r2=share, persistence=persist,
        window_std=wstd, order=order.source, alignment=alignment, bucket_r2=r2,
        bucket_r2_adjusted=r2_adj, bucket_length_r2=fit[0] if fit else None,
        bucket_length_r2_adjusted=_adjusted(fit[0], d.size, present + 1) if fit else None,
        length_slope=fit[1] if fit else None, debanded_window_std=debanded_std,
        predicted_window_std=predicted_std, longest_run=current_run,
        stride_longest_run=stride_run, max_batch_pct=top_pct,
        buckets=tuple(_bucket_effects(seq, loss, _loss_units(d, trend, scale), lo, hi, rows,
                                      effects, level, k)),
        fix=fix, warnings=tuple(warnings), curves=curves)


def _adjusted(r2: float, n: int, p: int) -> float:
    """``r2`` adjusted for ``p`` regressors fitted to ``n`` points."""
    return 1 - (1 - r2) * (n - 1) / (n - p) if n > p else r2


def _grad_accum(given: int | None, order: TrainedOrder, warnings: list[str]) -> int:
    """Plan steps per optimizer step: ``given`` (``--grad-accum``), else the plan's, else
    1; a given one that differs from the plan's overrides it, with a warning (the plan's
    batches do not depend on it, and ``plan`` records its default, 4, when not told)."""
    if given is None:
        return order.grad_accum or 1
    if order.grad_accum is not None and given != order.grad_accum:
        warnings.append(f"--grad-accum {given} overrides the {order.grad_accum} recorded "
                        f"with the order ({order.source}): plan records 4 unless told, and "
                        "its batches are the same for any")
    return given


def _persistence(fitted: np.ndarray, beta: np.ndarray, rows: np.ndarray, lo: np.ndarray,
                 hi: np.ndarray, w: int) -> float | None:
    """The variance of the ``w``-point window means of the bucket effects over its
    expectation had the same plan rows come in random order: a window of ``R`` of the
    span's ``N`` rows then has variance ``s^2 / R * (N - R) / (N - 1)``, ``s^2`` the rows'
    (None: the buckets have no effect)."""
    effect = beta[rows[lo[0]:hi[-1]]].mean(axis=1)
    n = effect.size
    per_window = np.add.reduceat(hi - lo, np.arange(0, lo.size, w))[:lo.size // w or 1]
    random = float(effect.var()) * float(np.mean((n - per_window) / per_window)) / max(n - 1, 1)
    if random <= 0:
        return None
    return float(curve.window_means(fitted, w).var()) / random


def _align(steps: np.ndarray, d0: np.ndarray, rows: np.ndarray, row_lo: np.ndarray,
           row_hi: np.ndarray, k: int, every: int, logged: str, step_offset: int | None,
           accum: int, order: TrainedOrder, rank: int | None
           ) -> tuple[Alignment, np.ndarray, np.ndarray, np.ndarray]:
    """The alignment of logged points with plan rows: the given one, else the candidate
    (logging mode x step offset) whose bucket mix fits the detrended loss best; with each
    point's plan rows ``[lo, hi)`` and bucket mix under it."""
    modes = ("sample",) if every == 1 else ("mean", "sample") if logged == "auto" \
        else (logged,)
    offsets = OFFSETS if step_offset is None else (step_offset,)
    tried, best = [], None
    for mode in modes:
        for offset in offsets:
            span = _windows(steps, every, mode, offset, row_lo.size)
            if span is None:
                continue
            lo, hi = row_lo[span[0]], row_hi[span[1] - 1]
            mix = _mix(rows, lo, hi, k)
            r2 = _r2(d0, mix @ np.linalg.lstsq(mix, d0, rcond=None)[0])
            label = "step" if every == 1 else mode
            tried.append((label, offset, r2))
            if best is None or r2 > best[0] + 1e-12:
                best = (r2, label, offset, lo, hi, mix)
    if best is None:
        first, last = int(steps[0]), int(steps[-1])
        raise ProfilerError(
            f"the log's steps {first:,}..{last:,} do not fall in the order's "
            f"{row_lo.size:,} optimizer steps ({sum(order.epochs):,} plan steps of "
            f"{order.world_size} rank{'s' * (order.world_size > 1)}, grad_accum {accum}, "
            f"{len(order.epochs)} epoch{'s' * (len(order.epochs) > 1)}) at step offsets "
            f"{', '.join(map(str, offsets))}: give every epoch's plan (--plan per epoch), "
            "or --grad-accum / --step-offset as trained")
    _, label, offset, lo, hi, mix = best
    return Alignment(label, offset, accum, order.world_size, rank,
                     step_offset is None or len(modes) > 1, tuple(tried)), lo, hi, mix


def _bucket_effects(seq: np.ndarray, loss: np.ndarray, above: np.ndarray, lo: np.ndarray,
                    hi: np.ndarray, rows: np.ndarray,
                    effects: list[float], level: float, k: int) -> list[BucketEffect]:
    """Per bucket: batches, effect, and its longest run with the loss logged inside it."""
    cut = np.flatnonzero(np.diff(seq)) + 1
    starts = np.concatenate(([0], cut))
    lengths = np.diff(np.concatenate((starts, [seq.size])))
    which = seq[starts]
    counts = np.bincount(rows[lo[0]:hi[-1]].ravel(), minlength=k)
    out = []
    for b in range(k):
        mine = np.flatnonzero(which == b)
        if not mine.size:
            continue
        i = mine[mine.size - 1 - int(np.argmax(lengths[mine][::-1]))]  # the latest longest
        s, e = int(starts[i]), int(starts[i] + lengths[i])
        inside = (lo >= s) & (hi <= e)
        seen = bool(inside.any())
        out.append(BucketEffect(
            b, int(counts[b]), float(counts[b] / max(counts.sum(), 1) * 100),
            float(effects[b]), float(effects[b] - level), int(lengths[i]), s,
            float(loss[inside].mean()) if seen else None,
            float(above[inside].mean()) if seen else None))
    return out


def _verdict_order(banded: bool, share: float, r2: float, persist: float | None,
                   window: int, wstd: float, predicted: float) -> str:
    over = f"over {window:,}-step windows"
    if banded:
        return (f"Banded: the buckets carry {share:.0%} of the curve's swing {over} (R^2 "
                f"{r2:.2f} per logged point) and the order does not interleave them "
                f"(persistence {persist:.2f}); the stride order would take the windows' std "
                f"from {wstd:.3g} to {predicted:.3g}.")
    if (persist or 0.0) < MIN_PERSISTENCE and r2 >= BANDED_R2:
        return (f"Not banded: the buckets explain {r2:.0%} of each logged point's loss, but "
                f"the order interleaves them (persistence {persist or 0:.2f}): they average "
                f"out {over} (std {wstd:.3g}).")
    return (f"Not banded: the buckets carry {share:.0%} of the curve's swing {over} (R^2 "
            f"{r2:.2f} per logged point).")


def _fix(current: int, stride: int, persist: float | None, wstd: float, predicted: float,
         debanded: float, window: int, top: int, top_pct: float, sampled: bool) -> str:
    if current <= stride and (persist or 0.0) < MIN_PERSISTENCE:
        text = (f"the order is interleaved already (longest same-bucket run {current}, the "
                f"stride order's {stride})")
    else:
        text = (f"train in the stride order (gpu-profiler plan --order stride; "
                f"BucketBatchSampler's default): longest same-bucket run {stride} instead of "
                f"{current}, predicted std of {window:,}-step window means {predicted:.3g} "
                f"(now {wstd:.3g}; de-banded {debanded:.3g})")
    if sampled:
        text += ("; log the mean loss since the last log, not one step's: a step's loss "
                 "shows its bucket in any order")
    if top_pct > DOMINANT_BATCH_PCT:
        text += (f"; bucket {top} makes {top_pct:.1f}% of the batches (over "
                 f"{DOMINANT_BATCH_PCT:.0f}%): other bounds spread it (gpu-profiler suggest "
                 "on the corpus)")
    return text
