"""Plots of a profile, a bounds suggestion, a batch schedule and a comparison (matplotlib).

matplotlib is an extra (``pip install gpu-profiler[plot]``), imported only here and only
when a plot is drawn: a scan never loads it. Figures are built on `matplotlib.figure.Figure`
(no pyplot, no global backend) and saved without dates or version strings and with a fixed
``svg.hashsalt``, so the same input gives the same bytes (PNG, SVG and PDF). Colours are
the Okabe-Ito palette, safe for colour-blind readers."""

from __future__ import annotations

import io
import math
from pathlib import Path
from typing import Any

import numpy as np

from gpu_profiler.analysis.buckets import BucketTable, bucket_table
from gpu_profiler.analysis.policies import evaluate_policy
from gpu_profiler.errors import ProfilerError
from gpu_profiler.histogram import LengthHistogram

FORMATS = ("png", "svg", "pdf")
#: Okabe & Ito (2008), black last: distinguishable under every common colour blindness.
OKABE_ITO = ("#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2", "#D55E00", "#CC79A7",
             "#000000")
#: What each format would otherwise stamp with the date or the matplotlib version.
_METADATA: dict[str, dict[str, Any]] = {
    "png": {"Software": None},
    "svg": {"Date": None, "Creator": None},
    "pdf": {"CreationDate": None, "ModDate": None, "Producer": None, "Creator": None},
}
#: rcParams of every figure: SVG ids from a fixed salt, SVG text as text (searchable).
_RC: Any = {"svg.hashsalt": "gpu-profiler", "svg.fonttype": "none", "font.size": 9}
#: Distribution plots are drawn with at most this many bins, schedule strips with at most
#: this many cells.
_BINS, _STRIP = 200, 4096


def plot_format(path: str | Path) -> str:
    """The format named by ``path``'s extension; anything but .png/.svg/.pdf is a usage
    error."""
    ext = Path(path).suffix.lower().lstrip(".")
    if ext not in FORMATS:
        raise ProfilerError(f"--plot {path}: the file must end in .png, .svg or .pdf")
    return ext


def check_plot(path: str | Path) -> None:
    """Fail early (before a long scan) on a plot file that cannot be written."""
    from gpu_profiler.io.output import check_writable

    plot_format(path)
    require_matplotlib(f"--plot {path}")
    check_writable(path)


def require_matplotlib(what: str) -> None:
    """Fail early, saying what to install, when matplotlib is absent."""
    from importlib.util import find_spec

    if find_spec("matplotlib") is None:
        raise ProfilerError(f"{what}: needs matplotlib (pip install 'gpu-profiler[plot]')")


def figure_bytes(fig: Any, fmt: str) -> bytes:
    """``fig`` encoded as ``fmt``, deterministically."""
    import matplotlib

    buf = io.BytesIO()
    with matplotlib.rc_context(_RC):
        fig.savefig(buf, format=fmt, metadata=_METADATA[fmt], dpi=110)
    return buf.getvalue()


def save_figure(fig: Any, path: str | Path) -> None:
    """Write ``fig`` atomically to ``path`` in the format its extension names."""
    from gpu_profiler.io.output import write_atomic

    write_atomic(path, figure_bytes(fig, plot_format(path)))


# ---------------------------------------------------------------- shared pieces
def _figure(rows: int, cols: int, size: tuple[float, float], title: str, **kw: Any
            ) -> tuple[Any, Any]:
    import matplotlib
    from matplotlib.figure import Figure

    with matplotlib.rc_context(_RC):
        fig = Figure(figsize=size, layout="constrained")
        axes = fig.subplots(rows, cols, squeeze=False, **kw)
    fig.suptitle(title, fontsize=11)
    return fig, axes


def _thousands(axis: Any) -> None:
    """Tick labels with thousands separators (``12,345``)."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    axis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:,.0f}"))
    axis.set_minor_formatter(NullFormatter())


def bucket_colours(k: int) -> list[Any]:
    """One colour per bucket: Okabe-Ito up to 8 buckets, else cividis (also colour-blind
    safe) sampled evenly."""
    if k <= len(OKABE_ITO):
        return list(OKABE_ITO[:k])
    from matplotlib import colormaps

    return [colormaps["cividis"](x) for x in np.linspace(0, 1, k)]


def binned(hist: LengthHistogram, upto: int) -> tuple[np.ndarray, np.ndarray, int]:
    """``(edges, counts, width)``: the counts of lengths ``0..upto`` summed into at most
    `_BINS` bins of ``width`` tokens (exact sums of the histogram's bins)."""
    width = max(1, math.ceil((upto + 1) / _BINS))
    starts = np.arange(math.ceil((upto + 1) / width) + 1) * width
    seen = hist.counts[: upto + 1]
    counts = np.zeros(starts.size - 1, dtype=np.int64)
    inside = starts[:-1] < seen.size  # bins past the histogram's cap hold nothing
    counts[inside] = np.add.reduceat(seen, starts[:-1][inside])
    return starts, counts, width


def _plot_extent(hist: LengthHistogram, max_seq_len: int) -> int:
    """The longest length the distribution axes show: the longest binned length, and
    max_seq_len, whichever is more."""
    nz = np.flatnonzero(hist.counts)
    return max(int(nz[-1]) if nz.size else 0, max_seq_len)


def distribution(ax: Any, hist: LengthHistogram, table: BucketTable, *, log: bool) -> None:
    """The length distribution on ``ax`` with the bucket edges, max_seq_len and the
    truncated mass marked."""
    p = table.params
    upto = _plot_extent(hist, p.max_seq_len)
    x, counts, width = binned(hist, upto)
    ax.stairs(counts, x, fill=True, color=OKABE_ITO[4], alpha=0.85, label="samples")
    ax.vlines([b for b in p.bounds if b <= upto], 0, 1, transform=ax.get_xaxis_transform(),
              colors="#555555", linestyles="dashed", linewidth=0.8, label="bucket edges")
    right = int(x[-1])
    if hist.above_count:  # lengths above the binned range: one bar holds them all
        right += 4 * width
        ax.bar(x[-1], hist.above_count, 4 * width, align="edge", color=OKABE_ITO[5],
               hatch="//", edgecolor="white",
               label=f"> {hist.cap:,} (all of them): {hist.above_count:,} samples")
    pct = table.truncated_samples / table.total_samples * 100 if table.total_samples else 0.0
    ax.axvline(p.max_seq_len, color=OKABE_ITO[5], linewidth=1.4,
               label=f"max_seq_len {p.max_seq_len:,}")
    ax.axvspan(p.max_seq_len, right, color=OKABE_ITO[5], alpha=0.15,
               label=f"truncated: {table.truncated_samples:,} samples ({pct:.2f}%), "
                     f"{table.truncated_tokens:,} tokens cut")
    ax.set_xlim(0, right)
    log = log and bool(counts.any())  # nothing to draw on a log axis without a count
    if log:
        ax.set_yscale("log")
        ax.set_ylim(bottom=0.8)
    ax.set_xlabel("sample length (tokens)")
    ax.set_ylabel(f"samples per {width:,}-token bin" + (" (log)" if log else ""))
    _thousands(ax.xaxis)
    _thousands(ax.yaxis)
    ax.legend(loc="upper right", fontsize=7)


def _bucket_labels(params: Any) -> list[str]:
    return [f"{i}\n[{lo:,},{hi:,})" for i, (lo, hi) in
            enumerate(zip(params.bounds[:-1], params.bounds[1:], strict=True))]


# ---------------------------------------------------------------- profile
def profile_figure(hist: LengthHistogram, table: BucketTable, source: str, *,
                   drop_last: bool = False) -> Any:
    """The distribution (linear and log counts); per bucket, its shares of samples, tokens
    and batches side by side, and its padding under the fixed policy (``drop_last`` as
    the profile's). The title names ``source`` and its totals."""
    fig, ax = _figure(2, 2, (12, 8), titled(
        source, f"{table.total_samples:,} samples, {table.total_tokens:,} tokens"))
    distribution(ax[0, 0], hist, table, log=False)
    distribution(ax[0, 1], hist, table, log=True)
    shares(ax[1, 0], table)
    padding(ax[1, 1], hist, table, drop_last)
    return fig


def shares(ax: Any, table: BucketTable) -> None:
    """Grouped bars: each bucket's share of the samples, the tokens and the batches."""
    rows = table.buckets
    tokens = sum(b.tokens for b in rows)
    series = (("samples %", [b.sample_pct for b in rows]),
              ("tokens %", [b.tokens / tokens * 100 if tokens else 0.0 for b in rows]),
              ("batches %", [b.batch_pct for b in rows]))
    x = np.arange(len(rows))
    w = 0.27
    for j, (name, values) in enumerate(series):
        ax.bar(x + (j - 1) * w, values, w, label=name, color=OKABE_ITO[j])
    ax.set_xticks(x, _bucket_labels(table.params), fontsize=7)
    ax.set_xlabel("bucket [lo, hi) (tokens)")
    ax.set_ylabel("share of the corpus (%)")
    ax.set_title("per-bucket shares (batches: estimated)", fontsize=9)
    ax.legend(fontsize=7)


def padding(ax: Any, hist: LengthHistogram, table: BucketTable, drop_last: bool) -> None:
    """Bars: each bucket's padding under the fixed policy (expected over random batches)."""
    pol = evaluate_policy(hist, "fixed", table.params, drop_last=drop_last)
    x = np.arange(len(pol.buckets))
    ax.bar(x, [b.padding_pct for b in pol.buckets], 0.6, color=OKABE_ITO[5])
    ax.set_xticks(x, _bucket_labels(table.params), fontsize=7)
    ax.set_xlabel("bucket [lo, hi) (tokens)")
    ax.set_ylabel("padding (% of the computed tokens)")
    ax.set_title(f"padding per bucket, fixed policy (all buckets: {pol.padding_pct:.2f}%)",
                 fontsize=9)


# ---------------------------------------------------------------- suggest
def suggest_figure(hist: LengthHistogram, s: Any, title: str) -> Any:
    """The distribution (log counts) over the current bounds, and under it one lane per
    bounds set (the current one, then each proposal) with its edges and its padding."""
    lanes = len(s.proposals)
    fig, ax = _figure(2, 1, (11, 5 + 0.35 * lanes), title, sharex=True,
                      height_ratios=(3, 0.6 + 0.4 * lanes))
    table = bucket_table(hist, s.params)
    distribution(ax[0, 0], hist, table, log=True)
    ax[0, 0].set_xlabel("")
    lane = ax[1, 0]
    for y, q in enumerate(s.proposals):
        lane.vlines(q.bounds, y - 0.38, y + 0.38, colors=OKABE_ITO[y % len(OKABE_ITO)],
                    linewidth=2)
    lane.set_yticks(range(lanes), [f"{q.method} ({q.padding_pct:.2f}% padding)"
                                   for q in s.proposals])
    lane.set_ylim(lanes - 0.5, -0.5)
    lane.set_xlabel("bucket edges: sample length (tokens)")
    _thousands(lane.xaxis)
    return fig


# ---------------------------------------------------------------- schedule
def schedule_figure(r: Any, title: str) -> Any:
    """Each simulated order as a strip of bucket colours, one cell per batch (past
    `_STRIP` batches, per evenly spaced batch: more than a page shows), and the mean batch
    length per logging window of each order overlaid: a ladder is the steps."""
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    from gpu_profiler.analysis.schedule import batch_order, window_means

    names = [o.name for o in r.orders]
    orders = [batch_order(r.batches, n, seed=r.seed, max_run=r.max_run) for n in names]
    k = len(r.batches)
    colours = bucket_colours(k)
    fig, ax = _figure(2, 1, (12, 4.5 + 0.4 * len(names)), title, sharex=True,
                      height_ratios=(0.6 + 0.4 * len(names), 3))
    n = int(sum(r.batches))
    strip = ax[0, 0]
    if n:  # a cell per batch, or per evenly spaced batch past _STRIP (bounded memory)
        picks = np.linspace(0, n - 1, min(n, _STRIP)).round().astype(np.int64)
        strip.imshow(np.stack(orders)[:, picks], aspect="auto", interpolation="nearest",
                     cmap=ListedColormap(colours), vmin=-0.5, vmax=k - 0.5,
                     extent=(0, n, len(names) - 0.5, -0.5))
    strip.set_yticks(range(len(names)), names)
    strip.set_title(f"bucket of every batch ({n:,} batches, policy {r.policy})", fontsize=9)
    p = r.params
    strip.legend(handles=[Patch(color=c, label=f"{i} [{lo:,},{hi:,})") for i, (c, lo, hi) in
                          enumerate(zip(colours, p.bounds[:-1], p.bounds[1:], strict=True))],
                 loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7, title="bucket")
    curve = ax[1, 0]
    mean_len = np.asarray(r.mean_len, dtype=np.float64)
    for i, (name, order) in enumerate(zip(names, orders, strict=True)):
        means = window_means(order, mean_len, r.log_window)
        o = r[name]
        curve.plot((np.arange(means.size) + 0.5) * min(r.log_window, max(n, 1)), means,
                   color=OKABE_ITO[(4, 5, 2, 6)[i % 4]], linewidth=1.2,
                   label=f"{name}: window spread {o.window_spread:,.1f}, longest run "
                         f"{o.longest_run}")
    curve.set_xlabel("batch in the epoch")
    curve.set_ylabel(f"mean sample length per window of {r.log_window:,} batches (tokens)")
    curve.set_xlim(0, max(n, 1))
    _thousands(curve.xaxis)
    _thousands(curve.yaxis)
    curve.legend(fontsize=7)
    return fig


def titled(source: str, what: str, split: str | None = None) -> str:
    """A plot title naming the dataset (and the split analysed)."""
    return f"{source}{f' [{split}]' if split else ''}: {what}"


# ---------------------------------------------------------------- compare
def compare_figure(a: LengthHistogram, b: LengthHistogram, c: Any, title: str) -> Any:
    """Both distributions overlaid as shares of their samples (linear and log), their
    cumulative distributions with the KS gap marked, and each bucket's batch share."""
    fig, ax = _figure(2, 2, (12, 8), title)
    p = c.a.table.params
    upto = max(_plot_extent(a, p.max_seq_len), _plot_extent(b, c.b.table.params.max_seq_len))
    names = (f"A: {c.a.source}", f"B: {c.b.source}")
    shares_ab = []
    for h in (a, b):
        x, counts, width = binned(h, upto)
        shares_ab.append(counts / max(h.valid, 1) * 100)
    for log, axis in ((False, ax[0, 0]), (True, ax[0, 1])):
        axis.stairs(shares_ab[0], x, fill=True, color=OKABE_ITO[4], alpha=0.55,
                    label=names[0])
        axis.stairs(shares_ab[1], x, color=OKABE_ITO[5], linewidth=1.3, label=names[1])
        axis.vlines([e for e in p.bounds if e <= upto], 0, 1,
                    transform=axis.get_xaxis_transform(), colors="#555555",
                    linestyles="dashed", linewidth=0.8, label="bucket edges (A)")
        axis.axvline(p.max_seq_len, color="#000000", linewidth=1.2,
                     label=f"max_seq_len (A) {p.max_seq_len:,}")
        axis.set_xlim(0, x[-1])
        if log and (shares_ab[0].any() or shares_ab[1].any()):
            axis.set_yscale("log")
        axis.set_xlabel("sample length (tokens)")
        axis.set_ylabel(f"% of the samples per {width:,}-token bin" + (" (log)" if log else ""))
        _thousands(axis.xaxis)
        axis.legend(fontsize=7)
    cdf = ax[1, 0]
    ca, cb = (np.cumsum(s) for s in shares_ab)
    cdf.stairs(ca, x, color=OKABE_ITO[4], label=names[0])
    cdf.stairs(cb, x, color=OKABE_ITO[5], label=names[1])
    gap = int(np.argmax(np.abs(ca - cb)))
    cdf.vlines(x[gap + 1], min(ca[gap], cb[gap]), max(ca[gap], cb[gap]), colors="#000000",
               linewidth=2, label=f"ks {c.distances.ks:.4f} (binned: "
                                  f"{abs(ca[gap] - cb[gap]) / 100:.4f})")
    cdf.set_xlim(0, x[-1])
    cdf.set_xlabel("sample length (tokens)")
    cdf.set_ylabel("% of the samples at most this long")
    cdf.set_title(f"tv {c.distances.tv:.4f}, w1 {c.distances.w1:,.1f} tokens", fontsize=9)
    _thousands(cdf.xaxis)
    cdf.legend(fontsize=7)
    per = ax[1, 1]
    k = max(len(c.a.table.buckets), len(c.b.table.buckets))
    idx = np.arange(k)
    for j, side in enumerate((c.a, c.b)):
        pct = [r.batch_pct for r in side.table.buckets] + [0.0] * (k - len(side.table.buckets))
        per.bar(idx + (j - 0.5) * 0.4, pct, 0.4, color=OKABE_ITO[(4, 5)[j]], label=names[j])
    per.set_xticks(idx, [str(i) for i in idx])
    per.set_xlabel("bucket index")
    per.set_ylabel("share of the estimated batches (%)")
    per.legend(fontsize=7)
    return fig

