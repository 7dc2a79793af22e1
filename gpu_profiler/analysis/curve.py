"""Statistics of one loss curve, from its values alone: the slow training trend, the bands
its detrended values fall into, its period and its ladders (`gpu_profiler.analysis.diagnose`
puts them together with the batch order).

Everything is vectorized numpy (a million logged points in about a second): the trend is a
Savitzky-Golay parabola over a sliding window (by FFT); the bands are a Gaussian mixture
fitted by EM on a fine histogram of the detrended values; the period is read off the
periodogram against its own smoothed background; ladders are runs of a monotonic sign.
"""

from __future__ import annotations

import math

import numpy as np

from gpu_profiler.frozen import frozen

#: Mixture sizes tried for the bands, and what makes a mode a band: at least this share
#: of the points, and adjacent modes at least this many pooled SDs apart (Ashman's D).
MAX_BANDS, MIN_BAND_SHARE, MIN_SEPARATION = 6, 0.02, 2.0
#: BIC gain over one mode below which a mixture is not taken (Kass & Raftery: "strong").
MIN_DELTA_BIC = 10.0
#: The detrended values outside these quantiles (spikes) are left out of the mixture fit.
_CLIP_Q = 0.001
_HIST_BINS = 512
_EM_ITERS, _EM_TOL = 300, 1e-7
#: Harmonics a period's share counts (a sawtooth's power lies in them), and the p-value
#: below which a periodogram peak is a period.
_HARMONICS, PERIOD_P = 6, 1e-3
#: Euler-Mascheroni: the mean of log Exp(1), to turn a smoothed log-periodogram into the
#: background level a periodogram ordinate is compared with.
_EULER = 0.5772156649015329


def trend(y: np.ndarray, window: int) -> np.ndarray:
    """The slow trend of ``y``: at each point, the least-squares parabola through the
    ``window`` points around it (rounded up to odd), evaluated there: a Savitzky-Golay
    filter (by FFT), with the parabolas through the first and last ``window`` points at the
    ends. A parabola follows the learning curve's bend, which a moving average cuts."""
    n = y.size
    h = max(1, min(window, n) // 2)
    if n < 2 * h + 1 or h < 2:  # too short for windows: one parabola (or line) through all
        t = np.arange(n, dtype=np.float64)
        return np.polyval(np.polyfit(t, y, min(2, n - 1)), t) if n > 1 else y.copy()
    j = np.arange(-h, h + 1, dtype=np.float64)
    coef = (3 * (3 * h * h + 3 * h - 1) - 15 * j * j) / ((2 * h + 3) * (2 * h + 1) * (2 * h - 1))
    size = 1 << int(n + 2 * h).bit_length()
    out = np.fft.irfft(np.fft.rfft(y, size) * np.fft.rfft(coef, size), size)[2 * h:n]
    t = np.arange(2 * h + 1, dtype=np.float64)
    head = np.polyval(np.polyfit(t, y[:2 * h + 1], 2), t[:h])
    tail = np.polyval(np.polyfit(t, y[-2 * h - 1:], 2), t[h + 1:])
    return np.concatenate((head, out, tail))


def window_means(x: np.ndarray, w: int) -> np.ndarray:
    """Means of consecutive whole windows of ``w`` points (the curve as a logger averaging
    ``w`` points draws it); the mean of all when there are fewer than ``w``."""
    m = x.size // w
    if m == 0:
        return x.mean(keepdims=True) if x.size else x
    return x[:m * w].reshape(m, w).mean(axis=1)


# ---------------------------------------------------------------- bands
@frozen
class Mixture:
    """A 1-D Gaussian mixture, modes in increasing ``mean``; ``delta_bic`` is BIC(1 mode)
    - BIC(this), ``separation`` the least Ashman's D of adjacent modes (None: one mode)."""

    weight: np.ndarray
    mean: np.ndarray
    sd: np.ndarray
    delta_bic: float
    separation: float | None

    @property
    def k(self) -> int:
        return int(self.mean.size)

    def assign(self, x: np.ndarray) -> np.ndarray:
        """The most probable mode of each value."""
        if self.k == 1:
            return np.zeros(x.size, dtype=np.int64)
        z = (-0.5 * ((x[:, None] - self.mean) / self.sd) ** 2 - np.log(self.sd)
             + np.log(self.weight))
        return np.argmax(z, axis=1)

    @property
    def within_var(self) -> float:
        """The variance inside the modes (what no mode explains)."""
        return float(self.weight @ self.sd ** 2)


def _em(x: np.ndarray, c: np.ndarray, start: tuple[np.ndarray, ...], floor: float
        ) -> tuple[np.ndarray, ...]:
    """EM for a Gaussian mixture on histogram centres ``x`` with counts ``c``, from
    ``start`` = ``(weight, mean, sd)``. Returns ``(weight, mean, sd, loglik)``, modes in
    increasing mean."""
    n = c.sum()
    weight, mean, sd = (np.asarray(a, dtype=np.float64) for a in start)
    last = -np.inf
    for _ in range(_EM_ITERS):
        z = -0.5 * ((x[:, None] - mean) / sd) ** 2 - np.log(sd) + np.log(weight)
        top = z.max(axis=1, keepdims=True)
        p = np.exp(z - top)
        total = p.sum(axis=1, keepdims=True)
        loglik = float(c @ (np.log(total[:, 0]) + top[:, 0])) - n * 0.5 * math.log(2 * math.pi)
        r = p / total * c[:, None]
        nk = r.sum(axis=0) + 1e-300
        weight = nk / n
        mean = (r * x[:, None]).sum(axis=0) / nk
        sd = np.sqrt((r * (x[:, None] - mean) ** 2).sum(axis=0) / nk + floor ** 2)
        if loglik - last < _EM_TOL * n:
            break
        last = loglik
    order = np.argsort(mean)
    return weight[order], mean[order], sd[order], loglik


def _starts(x: np.ndarray, c: np.ndarray, k: int, previous: tuple[np.ndarray, ...] | None,
            floor: float) -> list[tuple[np.ndarray, ...]]:
    """Where EM starts for ``k`` modes: at the data's ``k`` quantiles, and at the ``k - 1``
    modes fitted before with each of them split in two (EM from one start can settle two
    modes on one band and one on two)."""
    cdf = np.cumsum(c) / c.sum()
    mean = x[np.minimum(np.searchsorted(cdf, (np.arange(k) + 0.5) / k), x.size - 1)]
    spread = math.sqrt(float(c @ (x - (c @ x) / c.sum()) ** 2) / c.sum())
    out: list[tuple[np.ndarray, ...]] = [(np.full(k, 1.0 / k), mean,
                                          np.full(k, max(spread / k, floor)))]
    if previous is not None:
        weight, mean, sd = previous[:3]
        for j in range(k - 1):
            out.append((np.concatenate((weight, [weight[j] / 2])) * np.where(
                np.arange(k) == j, 0.5, 1.0),
                np.concatenate((mean, [mean[j] + sd[j]])) - np.where(
                    np.arange(k) == j, sd[j], 0.0),
                np.concatenate((sd, [sd[j]]))))
    return out


def bands(d: np.ndarray) -> Mixture:
    """The bands of the detrended values ``d``: the Gaussian mixture of 1 to `MAX_BANDS`
    modes with the lowest BIC among those whose every mode is a band (a share of at least
    `MIN_BAND_SHARE`, adjacent modes `MIN_SEPARATION` pooled SDs apart), fitted on a
    `_HIST_BINS`-bin histogram of ``d`` within its 0.1-99.9% quantiles (spikes left out);
    one mode when no mixture gains `MIN_DELTA_BIC`."""
    lo, hi = np.quantile(d, [_CLIP_Q, 1 - _CLIP_Q]) if d.size else (0.0, 0.0)
    if not hi > lo:
        return Mixture(np.ones(1), np.array([float(lo)]), np.array([0.0]), 0.0, None)
    c, edges = np.histogram(d, bins=_HIST_BINS, range=(lo, hi))
    x = (edges[:-1] + edges[1:]) / 2
    c = c.astype(np.float64)
    n = c.sum()
    floor = (edges[1] - edges[0]) / math.sqrt(12)  # a mode no narrower than its bin
    fits, previous = [], None
    for k in range(1, MAX_BANDS + 1):
        weight, mean, sd, loglik = previous = max(
            (_em(x, c, start, floor) for start in _starts(x, c, k, previous, floor)),
            key=lambda fit: fit[3])
        gap = np.diff(mean) / np.sqrt((sd[1:] ** 2 + sd[:-1] ** 2) / 2)
        bands_ok = k == 1 or (weight.min() >= MIN_BAND_SHARE and gap.min() >= MIN_SEPARATION)
        fits.append((-2 * loglik + (3 * k - 1) * math.log(n), weight, mean, sd,
                     float(gap.min()) if k > 1 else None, bands_ok))
    bic1 = fits[0][0]
    bic, weight, mean, sd, separation, _ = min(
        (f for f in fits if f[5] and (f is fits[0] or bic1 - f[0] >= MIN_DELTA_BIC)),
        key=lambda f: f[0])
    return Mixture(weight, mean, sd, float(bic1 - bic), separation)


def band_share(d: np.ndarray, mix: Mixture, w: int) -> float:
    """The share of the variance of the ``w``-point window means of ``d`` that the bands
    carry: 1 - (what is left inside the bands, averaged over ``w`` points) / (the window
    means' variance). What is left inside the bands has the mixture's within-mode
    variance and the autocorrelation of ``d`` less its mode means (zero for uncorrelated
    noise); 0 with one mode."""
    means = window_means(d, w)
    total = float(means.var())
    if mix.k == 1 or total <= 0 or means.size < 2:
        return 0.0
    rest = d - mix.mean[mix.assign(d)]
    lag = autocorrelation(rest, w)
    k = np.arange(1, w)
    left = mix.within_var * (w + 2 * float(((w - k) * lag[1:w]).sum())) / w ** 2
    return float(min(1.0, max(0.0, 1 - left / total)))


def persistence(x: np.ndarray, w: int) -> float | None:
    """How much ``x`` keeps of its variance over ``w``-point window means, against
    uncorrelated values (which keep 1/w of it): 1 as a random order, below 1 when it
    alternates (interleaved), above 1 when it comes in runs (None: no variance)."""
    v = float(x.var())
    means = window_means(x, w)
    if v <= 0 or means.size < 2:
        return None
    return float(means.var() * w / v)


def autocorrelation(x: np.ndarray, lags: int) -> np.ndarray:
    """The autocorrelation of ``x`` at lags ``0 .. lags - 1`` (by FFT)."""
    x = x - x.mean()
    n = x.size
    f = np.fft.rfft(x, 2 * n)
    ac = np.fft.irfft(f * np.conj(f))[:max(lags, 1)]
    return ac / ac[0] if ac[0] > 0 else np.zeros(max(lags, 1))


# ---------------------------------------------------------------- period
@frozen
class Period:
    """The strongest periodic swing of a series: ``points`` per cycle, the share of the
    variance at that frequency and its harmonics (with their neighbours, for leakage), and
    the p-value of its periodogram ordinate against the smoothed background (Bonferroni
    over the frequencies tried). ``frequency``/``power``: the periodogram, for plots."""

    points: float | None
    share: float
    p: float
    frequency: np.ndarray
    power: np.ndarray


def period(d: np.ndarray, longest: float) -> Period:
    """The period of ``d`` by its periodogram, among periods of 2 to ``longest`` points
    (longer swings are the trend's). Each ordinate is compared with the mean of its
    neighbours' (a moving average of the log-periodogram, so a smooth red spectrum is not
    a period): under no period their ratio is Exp(1). When the strongest is a harmonic of
    a lower frequency that is significant too, that one is the period."""
    n = d.size
    x = d - d.mean()
    power = np.abs(np.fft.rfft(x)) ** 2 / max(n, 1)
    freq = np.arange(power.size) / max(n, 1)
    usable = np.flatnonzero((freq >= 1.0 / max(longest, 2.0)) & (freq < 0.5))
    if usable.size < 8 or not float(x @ x) > 0:
        return Period(None, 0.0, 1.0, freq[usable], power[usable])
    logp = np.log(np.maximum(power[usable], 1e-300))
    half = max(3, usable.size // 100)
    c = np.concatenate(([0.0], np.cumsum(np.pad(logp, half, mode="reflect"))))
    background = np.exp((c[2 * half + 1:] - c[:-2 * half - 1]) / (2 * half + 1) + _EULER)
    ratio = power[usable] / background
    j = int(np.argmax(ratio))
    tests = usable.size
    for m in range(_HARMONICS, 1, -1):  # a sawtooth's peak may be a harmonic: the lowest
        sub = np.flatnonzero(np.abs(usable - usable[j] / m) <= 1)  # significant sub-peak
        if sub.size and tests * math.exp(-float(ratio[sub].max())) < PERIOD_P:
            j = int(sub[np.argmax(ratio[sub])])
            break
    p = min(1.0, tests * math.exp(-float(ratio[j])))
    top = int(usable[j])
    near = np.concatenate([np.arange(h * top - 1, h * top + 2) for h in range(1, _HARMONICS + 1)])
    near = np.unique(near[(near >= 1) & (near < power.size)])
    share = float(power[near].sum() * 2 / float(x @ x))
    return Period(n / top, min(share, 1.0), p, freq[usable], power[usable])


# ---------------------------------------------------------------- ladders
@frozen
class Ladders:
    """Monotonic runs of a series (a ladder: each point above, or each below, the one
    before). ``longest``: points in the longest, from index ``start``; ``count``: runs of
    at least ``length`` points, the shortest length that uncorrelated values make fewer
    than one of on average (``expected``)."""

    longest: int
    start: int
    length: int
    count: int
    expected: float


def ladders(x: np.ndarray) -> Ladders:
    """The ladders of ``x``. Under uncorrelated values, ``r`` given points rise with chance
    1/r!, so ``n`` values hold about ``2 n r / (r + 1)!`` maximal monotonic runs of ``r``
    or more points (either way)."""
    n = x.size
    if n < 2:
        return Ladders(n, 0, 2, 0, 0.0)
    sign = np.sign(np.diff(x))
    cut = np.flatnonzero(sign[1:] != sign[:-1]) + 1
    starts = np.concatenate(([0], cut))
    steps = np.diff(np.concatenate((starts, [sign.size])))
    steps[sign[starts] == 0] = 0  # equal neighbours climb nothing
    i = int(np.argmax(steps))
    length = 2
    while 2.0 * n * length / math.factorial(length + 1) >= 1:
        length += 1
    return Ladders(int(steps[i]) + 1, int(starts[i]), length,
                   int((steps + 1 >= length).sum()),
                   2.0 * n * length / math.factorial(length + 1))
