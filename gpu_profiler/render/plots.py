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
from gpu_profiler.analysis.mixture import NOUNS
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
#: rcParams of every figure: SVG ids from a fixed salt, SVG text as text (searchable), and
#: no mathtext: labels quote data (group names, paths), where a ``$`` is a character.
_RC: Any = {"svg.hashsalt": "gpu-profiler", "svg.fonttype": "none", "font.size": 9,
            "text.parse_math": False}
#: Distribution plots are drawn with at most this many bins, schedule strips with at most
#: this many cells.
_BINS, _STRIP = 200, 4096
#: A distribution's axis ends at the larger of max_seq_len and p99 (`plot_extent`) when
#: the longest sample is more than this many times as long: past it lies a tail (151k
#: tokens in an 8k-context corpus) that would push every bucket edge into the leftmost
#: few percent of the axis, and one bar summarises it instead.
_TAIL = 1.25


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
        _plain(fig)
        fig.savefig(buf, format=fmt, metadata=_METADATA[fmt], dpi=110)
    return buf.getvalue()


def _plain(fig: Any) -> None:
    """Every text of ``fig`` drawn as it is written (see `_RC`: a text made outside the
    rc context took mathtext from the defaults)."""
    from matplotlib.text import Text

    for text in fig.findobj(Text):
        text.set_parse_math(False)


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


def _thousands(*axes: Any) -> None:
    """Tick labels with thousands separators (``12,345``) on each of ``axes``."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    for axis in axes:
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


def plot_extent(hist: LengthHistogram, max_seq_len: int) -> int:
    """The longest length the distribution axes show: the bucketed range, max_seq_len or
    p99 (within the binned range), whichever is more; the whole distribution (to its
    longest binned length) when its longest sample is at most `_TAIL` times that. Longer
    samples are the tail `tail` counts."""
    r = hist.percentile_range(99)
    if r is None:  # no samples
        return max_seq_len
    reach = max(max_seq_len, min(r[0], hist.cap))
    if (hist.max or 0) > _TAIL * reach:
        return reach
    lengths = hist.present[0]  # (the binned lengths that occur: the percentile found them)
    return max(int(lengths[-1]) if lengths.size else 0, max_seq_len)


def tail(hist: LengthHistogram, upto: int) -> tuple[int, int, int]:
    """``(samples, past, longest)``: the samples longer than ``past`` (``upto``, or the
    histogram's cap when ``upto`` lies beyond the lengths it bins), which a distribution
    drawn to ``upto`` does not show, and the longest of them."""
    n = int(hist.counts[upto + 1:].sum()) + hist.above_count
    return n, min(upto, hist.cap), hist.max or 0


def tail_label(hist: LengthHistogram, upto: int) -> str | None:
    """The tail past ``upto`` in words (None when there is none): ``'N samples (x%)
    longer than L, up to MAX'``."""
    n, past, longest = tail(hist, upto)
    if not n:
        return None
    return (f"{n:,} samples ({n / hist.valid * 100:.2f}%) longer than {past:,}, up to "
            f"{longest:,}")


def distribution(ax: Any, hist: LengthHistogram, table: BucketTable, *, log: bool) -> float:
    """The length distribution on ``ax`` over `plot_extent` with the bucket edges,
    max_seq_len and the truncated mass marked, the samples past it in one hatched bar
    (`tail_label`), and a legend in the upper right; returns the highest bar, for
    `clear_legends`."""
    p = table.params
    upto = plot_extent(hist, p.max_seq_len)
    x, counts, width = binned(hist, upto)
    ax.stairs(counts, x, fill=True, color=OKABE_ITO[4], alpha=0.85, label="samples")
    ax.vlines([b for b in p.bounds if b <= upto], 0, 1, transform=ax.get_xaxis_transform(),
              colors="#555555", linestyles="dashed", linewidth=0.8, label="bucket edges")
    right = int(x[-1])
    longer = tail_label(hist, upto)
    top = int(counts.max(initial=0))
    if longer:  # the lengths past the axis: one bar holds them all
        n = tail(hist, upto)[0]
        right += 4 * width
        ax.bar(x[-1], n, 4 * width, align="edge", color=OKABE_ITO[5], hatch="//",
               edgecolor="white", label=longer)
        top = max(top, n)
    pct = table.truncated_samples / table.total_samples * 100 if table.total_samples else 0.0
    ax.axvline(p.max_seq_len, color=OKABE_ITO[5], linewidth=1.4,
               label=f"max_seq_len {p.max_seq_len:,}")
    ax.axvspan(p.max_seq_len, right, color=OKABE_ITO[5], alpha=0.15,
               label=f"truncated: {table.truncated_samples:,} samples ({pct:.2f}%), "
                     f"{table.truncated_tokens:,} tokens cut")
    ax.set_xlim(0, right)
    log = log and bool(top)  # nothing to draw on a log axis without a count
    if log:
        ax.set_yscale("log")
        ax.set_ylim(bottom=0.8)
    ax.set_xlabel("sample length (tokens)")
    ax.set_ylabel(f"samples per {width:,}-token bin" + (" (log)" if log else ""))
    _thousands(ax.xaxis, ax.yaxis)
    ax.legend(loc="upper right", fontsize=7, ncols=2)
    return float(top)


# ---------------------------------------------------------------- legends that hide nothing
def clear_legends(fig: Any, tops: list[tuple[Any, float]]) -> Any:
    """For each ``(axes, highest value)``, raise the top of the axes' y range so that its
    data ends below its legend (in the upper part of the axes; measured on the laid-out
    figure), a margin between: a legend never hides a bar (the demo report's hid bucket
    5's tokens bar). Returns ``fig``."""
    import matplotlib

    tops = [(ax, top) for ax, top in tops if top > 0 and ax.get_legend() is not None]
    if not tops:
        return fig
    with matplotlib.rc_context(_RC):
        _plain(fig)
        fig.draw_without_rendering()
        for ax, top in tops:
            box = ax.get_legend().get_window_extent()
            bottom = float(ax.transAxes.inverted().transform((0, box.y0))[1])
            frac = max(bottom - 0.04, 0.2)  # where the highest value may reach (axes 0..1)
            lo = ax.get_ylim()[0]
            if ax.get_yscale() == "log":
                ax.set_ylim(lo, 10 ** (math.log10(lo) + math.log10(top / lo) / frac))
            else:
                ax.set_ylim(lo, lo + (top - lo) / frac)
    return fig


def _bucket_axis(ax: Any, x: Any, params: Any, label: str = "bucket [lo, hi) (tokens)") -> None:
    """An x axis of ``params``' buckets: a tick at each of ``x`` naming its bucket, and
    ``label``."""
    ax.set_xticks(x, [f"{i}\n[{lo:,},{hi:,})" for i, (lo, hi) in
                      enumerate(zip(params.bounds[:-1], params.bounds[1:], strict=True))],
                  fontsize=7)
    ax.set_xlabel(label)


# ---------------------------------------------------------------- profile
def profile_figure(hist: LengthHistogram, table: BucketTable, source: str, *,
                   drop_last: bool = False) -> Any:
    """The distribution (linear and log counts); per bucket, its shares of samples, tokens
    and batches side by side, and its padding under the fixed policy (``drop_last`` as
    the profile's). The title names ``source`` and its totals."""
    fig, ax = _figure(2, 2, (12, 8), titled(
        source, f"{table.total_samples:,} samples, {table.total_tokens:,} tokens"))
    tops = [(ax[0, 0], distribution(ax[0, 0], hist, table, log=False)),
            (ax[0, 1], distribution(ax[0, 1], hist, table, log=True)),
            (ax[1, 0], shares(ax[1, 0], table))]
    padding(ax[1, 1], hist, table, drop_last)
    return clear_legends(fig, tops)


def shares(ax: Any, table: BucketTable) -> float:
    """Grouped bars: each bucket's share of the samples, the tokens and the batches, their
    legend in one row at the top; returns the highest bar, for `clear_legends`."""
    rows = table.buckets
    tokens = sum(b.tokens for b in rows)
    series = (("samples %", [b.sample_pct for b in rows]),
              ("tokens %", [b.tokens / tokens * 100 if tokens else 0.0 for b in rows]),
              ("batches %", [b.batch_pct for b in rows]))
    x = np.arange(len(rows))
    w = 0.27
    for j, (name, values) in enumerate(series):
        ax.bar(x + (j - 1) * w, values, w, label=name, color=OKABE_ITO[j])
    _bucket_axis(ax, x, table.params)
    ax.set_ylabel("share of the corpus (%)")
    ax.set_title("per-bucket shares (batches: estimated)", fontsize=9)
    ax.legend(loc="upper center", fontsize=7, ncols=3)
    return max((max(v, default=0.0) for _, v in series), default=0.0)


def padding(ax: Any, hist: LengthHistogram, table: BucketTable, drop_last: bool) -> None:
    """Bars: each bucket's padding under the fixed policy (expected over random batches)."""
    pol = evaluate_policy(hist, "fixed", table.params, drop_last=drop_last)
    x = np.arange(len(pol.buckets))
    ax.bar(x, [b.padding_pct for b in pol.buckets], 0.6, color=OKABE_ITO[5])
    _bucket_axis(ax, x, table.params)
    ax.set_ylabel("padding (% of the computed tokens)")
    ax.set_title(f"padding per bucket, fixed policy (all buckets: {pol.padding_pct:.2f}%)",
                 fontsize=9)


# ---------------------------------------------------------------- mixture
#: Groups drawn one by one in a mixture figure (the rest: one "other" colour).
MIXTURE_GROUPS = 12


def mixture_figure(result: Any) -> Any:
    """A grouped profile (``--group-by``): each group's share of the samples, the tokens
    and the batches side by side, and each bucket's composition by group as stacked bars
    (the buckets' samples), the largest `MIXTURE_GROUPS` groups named."""
    mix = result.mixture
    shares = sorted(mix.shares, key=lambda g: -g.samples)
    named = [g.name for g in shares[:MIXTURE_GROUPS]]
    colours = dict(zip(named, bucket_colours(len(named)), strict=True))
    fig, ax = _figure(1, 2, (13, 5), titled(
        result.source, f"by {NOUNS.get(mix.by, mix.by)}", result.group_split))
    x = np.arange(3)
    bottom = np.zeros(3)
    for g in shares:
        values = np.array([g.sample_pct, g.token_pct, g.batch_pct])
        colour = colours.get(g.name, "0.75")
        ax[0, 0].bar(x, values, 0.6, bottom=bottom, color=colour,
                     label=g.name if g.name in colours else None, edgecolor="white",
                     linewidth=0.3)
        bottom += values
    if len(shares) > len(named):
        ax[0, 0].bar([], [], color="0.75", label=f"{len(shares) - len(named)} others")
    ax[0, 0].set_xticks(x, ["samples", "tokens", "batches (est.)"])
    ax[0, 0].set_ylabel("share of the whole (%)")
    ax[0, 0].set_title("each group's share", fontsize=9)
    if shares:  # (an empty source has no group to name)
        ax[0, 0].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    buckets = mix.buckets
    xb = np.arange(len(buckets))
    bottom = np.zeros(len(buckets))
    for g in shares:
        values = np.array([b.groups.get(g.name, 0.0) for b in buckets])
        ax[0, 1].bar(xb, values, 0.7, bottom=bottom, color=colours.get(g.name, "0.75"),
                     edgecolor="white", linewidth=0.3)
        bottom += values
    _bucket_axis(ax[0, 1], xb, result.table.params)
    for i in range(len(buckets)):
        ax[0, 1].annotate(f"{result.table.buckets[i].batch_pct:.0f}% of batches", (i, 100),
                          ha="center", va="bottom", fontsize=6)
    ax[0, 1].set_ylim(0, 110)
    ax[0, 1].set_ylabel("share of the bucket's samples (%)")
    ax[0, 1].set_title("bucket composition", fontsize=9)
    return fig


# ---------------------------------------------------------------- blend
def blend_figure(b: Any) -> Any:
    """A blend (`gpu_profiler.analysis.blend.Blend`): each source's normalized weight
    beside its share of the tokens drawn, and the epochs the blend makes of it."""
    fig, ax = _figure(1, 2, (13, 4.5), f"{len(b.sources)} sources: {b.size:,} samples, "
                      f"{b.tokens_drawn:,} tokens")
    x = np.arange(len(b.sources))
    names = [f"{s.index}" for s in b.sources]
    ax[0, 0].bar(x - 0.2, [100 * s.normalized_weight for s in b.sources], 0.4,
                 color=OKABE_ITO[0], label="weight (share of samples)")
    ax[0, 0].bar(x + 0.2, [100 * s.token_share for s in b.sources], 0.4,
                 color=OKABE_ITO[1], label="share of the tokens drawn")
    ax[0, 0].set_xticks(x, names)
    ax[0, 0].set_xlabel("source")
    ax[0, 0].set_ylabel("%")
    ax[0, 0].legend(fontsize=7)
    ax[0, 0].set_title("weight against token share", fontsize=9)
    ax[0, 1].bar(x, [s.epochs for s in b.sources], 0.6, color=OKABE_ITO[2])
    ax[0, 1].axhline(b.warn_epochs, color="0.4", linestyle="--", linewidth=0.8)
    ax[0, 1].set_xticks(x, names)
    ax[0, 1].set_xlabel("source")
    ax[0, 1].set_ylabel("epochs (times each sample is drawn)")
    ax[0, 1].set_title("epochs (dashed: --warn-epochs)", fontsize=9)
    return fig


# ---------------------------------------------------------------- shapes
def shape_figure(result: Any) -> Any:
    """A shaped profile (``--sft``, ``--dpo``): the prompt x completion heat map (log
    counts; DPO: the longer answer) and each bucket's tokens split into prompt and loss
    tokens after truncation."""
    from matplotlib.colors import LogNorm

    sh = result.shape
    answer = "completion" if sh.shape["kind"] == "sft" else "longer answer"
    fig, ax = _figure(1, 2, (13, 5), titled(
        result.source, f"{sh.shape['kind'].upper()}: {sh.samples:,} samples, "
        f"{sh.loss_token_pct:.1f}% loss tokens", result.group_split))
    heat = sh.heatmap
    counts = np.array(heat["counts"], dtype=float)
    mesh = ax[0, 0].pcolormesh(heat["completion_edges"], heat["prompt_edges"],
                               np.ma.masked_equal(counts, 0), cmap="cividis",
                               norm=LogNorm(vmin=1, vmax=max(counts.max(), 1)))
    fig.colorbar(mesh, ax=ax[0, 0], label="samples")
    ax[0, 0].set_xlabel(f"{answer} (tokens)")
    ax[0, 0].set_ylabel("prompt (tokens)")
    ax[0, 0].set_title(f"prompt x {answer}", fontsize=9)
    _thousands(ax[0, 0].xaxis, ax[0, 0].yaxis)
    x = np.arange(len(sh.buckets))
    prompt = [b.prompt_tokens for b in sh.buckets]
    loss = [b.loss_tokens for b in sh.buckets]
    ax[0, 1].bar(x, prompt, 0.6, color=OKABE_ITO[1], label="prompt tokens")
    ax[0, 1].bar(x, loss, 0.6, bottom=prompt, color=OKABE_ITO[2], label="loss tokens")
    for i, b in enumerate(sh.buckets):
        ax[0, 1].annotate(f"{b.loss_token_pct:.0f}%", (i, b.tokens), ha="center",
                          va="bottom", fontsize=7)
    _bucket_axis(ax[0, 1], x, result.table.params,
                 "bucket [lo, hi) of the memory length (tokens)")
    ax[0, 1].set_ylabel("tokens after truncation")
    ax[0, 1].set_title("tokens per bucket (labels: loss share)", fontsize=9)
    ax[0, 1].legend(fontsize=7)
    _thousands(ax[0, 1].yaxis)
    return fig


# ---------------------------------------------------------------- suggest
def suggest_figure(hist: LengthHistogram, s: Any, title: str) -> Any:
    """The distribution (log counts) over the current bounds, and under it one lane per
    bounds set (the current one, then each proposal) with its edges and its padding."""
    lanes = len(s.proposals)
    fig, ax = _figure(2, 1, (11, 5 + 0.35 * lanes), title, sharex=True,
                      height_ratios=(3, 0.6 + 0.4 * lanes))
    table = bucket_table(hist, s.params)
    top = distribution(ax[0, 0], hist, table, log=True)
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
    return clear_legends(fig, [(ax[0, 0], top)])


# ---------------------------------------------------------------- schedule
def schedule_figure(r: Any, title: str) -> Any:
    """Each simulated order as a strip of bucket colours, one cell per batch (past
    `_STRIP` batches, per evenly spaced batch: more than a page shows), and the mean batch
    length per logging window of each order overlaid: a ladder is the steps."""
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    from gpu_profiler.analysis.schedule import window_means

    names = [o.name for o in r.orders]
    orders = [r.order(n) for n in names]
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
    _thousands(curve.xaxis, curve.yaxis)
    curve.legend(fontsize=7)
    return fig


def titled(source: str, what: str, split: str | None = None) -> str:
    """A plot title naming the dataset (and the split analysed)."""
    return f"{source}{f' [{split}]' if split else ''}: {what}"


# ---------------------------------------------------------------- compare
def compare_figure(a: LengthHistogram, b: LengthHistogram, c: Any, title: str) -> Any:
    """Both distributions overlaid as shares of their samples (linear and log) over the
    longer of their `plot_extent`, each side's tail past it in a bar of its own; their
    cumulative distributions with the KS gap marked, and each bucket's batch share. Each
    side is named by its source, and by its bounds when the two sides' differ
    (`gpu_profiler.render.compare.side_names`: ``compare --bounds-b`` compares one source
    under two bucketings)."""
    from gpu_profiler.render.compare import side_names

    fig, ax = _figure(2, 2, (12, 8), title)
    pa, pb = c.a.table.params, c.b.table.params
    upto = max(plot_extent(a, pa.max_seq_len), plot_extent(b, pb.max_seq_len))
    names = side_names(c)
    shares_ab, tails = [], []
    for h in (a, b):
        x, counts, width = binned(h, upto)
        shares_ab.append(counts / max(h.valid, 1) * 100)
        tails.append((tail(h, upto)[0] / max(h.valid, 1) * 100, tail_label(h, upto)))
    right = int(x[-1]) + (4 * width if any(label for _, label in tails) else 0)
    tops = []
    for log, axis in ((False, ax[0, 0]), (True, ax[0, 1])):
        axis.stairs(shares_ab[0], x, fill=True, color=OKABE_ITO[4], alpha=0.55,
                    label=names[0])
        axis.stairs(shares_ab[1], x, color=OKABE_ITO[5], linewidth=1.3, label=names[1])
        for j, (share, label) in enumerate(tails):
            if label:  # the side's lengths past the axis: one bar holds them all
                side = "AB"[j]
                axis.bar(x[-1], share, 4 * width, align="edge", hatch="//",
                         **({"color": OKABE_ITO[4], "alpha": 0.55, "edgecolor": "white"}
                            if j == 0 else {"fill": False, "edgecolor": OKABE_ITO[5],
                                            "linewidth": 1.3}),
                         label=f"{side}: {label}")
        axis.vlines([e for e in pa.bounds if e <= upto], 0, 1,
                    transform=axis.get_xaxis_transform(), colors="#555555",
                    linestyles="dashed", linewidth=0.8, label="bucket edges (A)")
        if pb.bounds != pa.bounds:
            axis.vlines([e for e in pb.bounds if e <= upto], 0, 1,
                        transform=axis.get_xaxis_transform(), colors=OKABE_ITO[5],
                        linestyles="dotted", linewidth=1.0, label="bucket edges (B)")
        axis.axvline(pa.max_seq_len, color="#000000", linewidth=1.2,
                     label=f"max_seq_len (A) {pa.max_seq_len:,}")
        axis.set_xlim(0, right)
        top = max(float(shares_ab[0].max(initial=0)), float(shares_ab[1].max(initial=0)),
                  *(share for share, _ in tails))
        if log and top:
            axis.set_yscale("log")
        axis.set_xlabel("sample length (tokens)")
        axis.set_ylabel(f"% of the samples per {width:,}-token bin" + (" (log)" if log else ""))
        _thousands(axis.xaxis)
        axis.legend(loc="upper right", fontsize=7)
        tops.append((axis, top))
    cdf = ax[1, 0]
    ca, cb = (np.cumsum(s) for s in shares_ab)
    cdf.stairs(ca, x, color=OKABE_ITO[4], label=names[0])
    cdf.stairs(cb, x, color=OKABE_ITO[5], label=names[1])
    gap = int(np.argmax(np.abs(ca - cb)))
    cdf.vlines(x[gap + 1], min(ca[gap], cb[gap]), max(ca[gap], cb[gap]), colors="#000000",
               linewidth=2, label=f"ks {c.distances.ks:.4f} (binned: "
                                  f"{abs(ca[gap] - cb[gap]) / 100:.4f})")
    cdf.set_xlim(0, x[-1])
    cdf.set_xlabel("sample length (tokens)" + (f" (to {upto:,}: the tails are in the bars "
                                               "above)" if right > x[-1] else ""))
    cdf.set_ylabel("% of the samples at most this long")
    cdf.set_title(f"tv {c.distances.tv:.4f}, w1 {c.distances.w1:,.1f} tokens", fontsize=9)
    _thousands(cdf.xaxis)
    cdf.legend(loc="lower right", fontsize=7)
    per = ax[1, 1]
    k = max(len(c.a.table.buckets), len(c.b.table.buckets))
    idx = np.arange(k)
    highest = 0.0
    for j, side in enumerate((c.a, c.b)):
        pct = [r.batch_pct for r in side.table.buckets] + [0.0] * (k - len(side.table.buckets))
        per.bar(idx + (j - 0.5) * 0.4, pct, 0.4, color=OKABE_ITO[(4, 5)[j]], label=names[j])
        highest = max(highest, *pct)
    per.set_xticks(idx, [str(i) for i in idx])
    per.set_xlabel("bucket index")
    per.set_ylabel("share of the estimated batches (%)")
    per.legend(loc="upper right", fontsize=7)
    return clear_legends(fig, [*tops, (per, highest)])


# ---------------------------------------------------------------- diagnose
def diagnose_figure(r: Any, title: str) -> Any:
    """A loss-curve diagnosis (`gpu_profiler.analysis.diagnose`): the logged loss coloured
    by its batches' bucket (by band without the order) over its trend; the histogram of
    the loss over its trend with the bands; the de-banded loss (with the order) or the
    window means; the periodogram with the period found. Past `_STRIP` points, evenly
    spaced points are drawn."""
    from gpu_profiler.analysis.diagnose import PERIOD_P

    c = r.curves
    fig, ax = _figure(2, 2, (12, 8), title)
    n = c.steps.size
    picks = np.linspace(0, n - 1, min(n, 4 * _STRIP)).round().astype(np.int64)
    groups = c.bucket if c.bucket is not None else c.band
    k = int(groups.max()) + 1 if n else 1
    colours = bucket_colours(k)
    raw = ax[0, 0]
    for g in range(k):
        mine = picks[groups[picks] == g]
        raw.scatter(c.steps[mine], c.loss[mine], s=4, color=colours[g], linewidths=0,
                    label=f"{'bucket' if c.bucket is not None else 'band'} {g}")
    raw.plot(c.steps, c.trend, color="#000000", linewidth=1.0, label="trend")
    raw.set_xlabel("step")
    raw.set_ylabel(f"logged loss ({r.series})")
    raw.set_title(r.verdict if len(r.verdict) < 90 else r.verdict[:87] + "...", fontsize=8)
    raw.legend(loc="upper right", fontsize=7, markerscale=3, ncols=2)
    _thousands(raw.xaxis)
    hist = ax[0, 1]
    above = c.loss / c.trend if r.scale == "log" else c.loss - c.trend
    counts, edges = np.histogram(above, bins=min(200, max(10, n // 20)))
    hist.stairs(counts, edges, fill=True, color=OKABE_ITO[4], alpha=0.85, label="points")
    for i, b in enumerate(r.bands):
        members = above[c.band == i]
        if members.size:
            hist.axvline(float(np.median(members)), color=OKABE_ITO[(5, 2, 6, 0, 1, 7)[i % 6]],
                         linewidth=1.4, label=f"band {i}: {b.share:.0%}, loss {b.level:.3g}")
    hist.set_xlabel("loss / trend" if r.scale == "log" else "loss - trend")
    hist.set_ylabel("logged points")
    hist.set_title(f"{len(r.bands)} band{'s' * (len(r.bands) != 1)} from the loss alone "
                   f"(BIC gain {r.band_delta_bic:,.0f})", fontsize=9)
    hist.legend(loc="upper right", fontsize=7)
    curve = ax[1, 0]
    w = r.window_points
    whole = n // w * w
    mid = c.steps[:whole].reshape(-1, w).mean(axis=1) if whole else c.steps[:1]
    means = c.loss[:whole].reshape(-1, w).mean(axis=1) if whole else c.loss[:1]
    curve.plot(mid, means, color=OKABE_ITO[5], linewidth=1.0,
               label=f"logged: {r.window:,}-step means (std {r.window_std:.3g} detrended)")
    if c.debanded is not None:
        deb = c.debanded[:whole].reshape(-1, w).mean(axis=1) if whole else c.debanded[:1]
        curve.plot(mid, deb, color=OKABE_ITO[4], linewidth=1.2,
                   label=f"de-banded (std {r.debanded_window_std:.3g}; stride order "
                         f"predicted {r.predicted_window_std:.3g})")
    curve.plot(c.steps, c.trend, color="#000000", linewidth=0.8, label="trend")
    curve.set_xlabel("step")
    curve.set_ylabel("loss")
    curve.set_title("the curve as read" + (", and de-banded (adjusted for each point's "
                                            "buckets)" if c.debanded is not None else
                                            " (de-banded: give the batch order)"), fontsize=9)
    curve.legend(loc="upper right", fontsize=7)
    _thousands(curve.xaxis)
    spec = ax[1, 1]
    if c.frequency.size:
        spec.loglog(r.log_every / c.frequency, c.power, color=OKABE_ITO[4], linewidth=0.7)
        spec.invert_xaxis()
    if r.period is not None:
        found = r.period_p < PERIOD_P
        spec.axvline(r.period, color=OKABE_ITO[5], linewidth=1.2,
                     linestyle="solid" if found else "dotted",
                     label=f"{'period' if found else 'strongest, no period:'} "
                           f"{r.period:,.1f} steps ({r.period_share:.0%}, p={r.period_p:.2g})")
        spec.legend(loc="upper right", fontsize=7)
    _thousands(spec.xaxis)
    spec.set_xlabel("period (steps)")
    spec.set_ylabel("power of the detrended loss")
    spec.set_title("periodogram", fontsize=9)
    return fig
