"""``--plot`` on profile, suggest and schedule: the files decode, hold what the issue asks
(title, labelled axes, thousands separators, edges, max_seq_len, truncated mass), are
byte-identical across runs, and a bad extension is a usage error before any scan."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import xml.etree.ElementTree as ET

import numpy as np
import pytest
from conftest import run_cli
from PIL import Image

from gpu_profiler.analysis.buckets import bucket_table
from gpu_profiler.backends import get_backend
from gpu_profiler.chunk import Chunk
from gpu_profiler.demo import demo_lengths
from gpu_profiler.params import BucketParams
from gpu_profiler.render import plots

SVG = "{http://www.w3.org/2000/svg}"


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """The demo corpus' histogram, saved (the long tail passes max_seq_len 8192)."""
    path = tmp_path_factory.mktemp("plots") / "demo <&>.json"
    get_backend("numpy").histogram_chunk(Chunk(demo_lengths()), 8192).save(path)
    return path


def svg_texts(data: bytes) -> list[str]:
    root = ET.fromstring(data)
    return ["".join(t.itertext()) for t in root.iter(f"{SVG}text")]


def test_binned_sums_equal_numpy_histogram_of_the_lengths():
    x = np.random.default_rng(5).integers(0, 3000, 10_000)
    hist = get_backend("numpy").histogram_chunk(Chunk(x), 4000)
    edges, counts, width = plots.binned(hist, 3500)
    assert width == 18 and edges[-1] >= 3500 and counts.size <= 200
    ref, _ = np.histogram(x, bins=edges)
    assert np.array_equal(counts, ref)
    edges, counts, width = plots.binned(hist.with_cap(2000), 5000)  # past the cap: empty
    ref, _ = np.histogram(x[x <= 2000], bins=edges)
    assert width == 26 and np.array_equal(counts, ref) and not counts[edges[1:] > 2026].any()


def test_profile_svg_holds_title_axes_edges_and_truncated_mass(saved, tmp_path, capsys):
    out = tmp_path / "p.svg"
    rc, stdout, err = run_cli(["profile", saved, "--plot", out, "-f", "json"], capsys)
    assert rc == 0, err
    d = json.loads(stdout)
    texts = svg_texts(out.read_bytes())
    joined = "\n".join(texts)
    assert f"{saved}: {d['total_samples']:,} samples, {d['total_tokens']:,} tokens" in texts
    for label in ("sample length (tokens)", "samples per 41-token bin", "bucket edges",
                  "max_seq_len 8,192", "share of the corpus (%)",
                  "padding (% of the computed tokens)", "samples %", "tokens %", "batches %",
                  f"truncated: {d['truncated_samples']:,} samples"):
        assert label in joined, label
    assert "8,000" in texts and "1,000" in texts  # thousands separators on the axes
    assert f"{d['truncated_tokens']:,} tokens cut" in joined
    n = d["truncated_samples"]  # all past the saved histogram's cap: one bar
    assert (f"{n:,} samples ({n / d['total_samples'] * 100:.2f}%) longer than 8,192, up to "
            f"{d['max_len']:,}") in joined


def test_profile_figure_bars_are_the_tables_shares(saved):
    from gpu_profiler.histogram import LengthHistogram

    hist = LengthHistogram.load(saved)
    table = bucket_table(hist, BucketParams())
    fig = plots.profile_figure(hist, table, "t")
    bars = [p.get_height() for p in fig.axes[2].patches]
    k = len(table.buckets)
    assert bars[:k] == pytest.approx([b.sample_pct for b in table.buckets])
    assert bars[2 * k:] == pytest.approx([b.batch_pct for b in table.buckets])
    edges = fig.axes[0].collections[0].get_segments()  # the dashed bucket edges
    assert [int(s[0][0]) for s in edges] == [b for b in table.params.bounds if b <= 8192]
    from gpu_profiler.analysis.policies import evaluate_policy

    for drop_last in (False, True):  # padding: the fixed policy's, as the profile ran it
        fig = plots.profile_figure(hist, table, "t", drop_last=drop_last)
        want = evaluate_policy(hist, "fixed", drop_last=drop_last).buckets
        assert [p.get_height() for p in fig.axes[3].patches] == pytest.approx(
            [b.padding_pct for b in want])


@pytest.mark.parametrize("fmt", ["png", "pdf", "svg"])
def test_files_are_deterministic_and_decode(saved, tmp_path, capsys, fmt):
    a, b = tmp_path / f"a.{fmt}", tmp_path / f"b.{fmt}"
    for target in (a, b):
        rc, _, err = run_cli(["schedule", saved, "--plot", target, "-q"], capsys)
        assert rc == 0, err
    assert a.read_bytes() == b.read_bytes()
    data = a.read_bytes()
    if fmt == "png":
        img = Image.open(io.BytesIO(data)).convert("RGB")
        assert img.size[0] > 1000
        assert len(img.getcolors(1 << 20)) > 8  # the strip's bucket colours, not a blank page
        assert b"Software" not in data and b"matplotlib" not in data
    elif fmt == "pdf":
        assert data.startswith(b"%PDF") and data.rstrip().endswith(b"%%EOF")
        assert b"CreationDate" not in data and b"Producer" not in data
    else:
        texts = svg_texts(data)
        assert "random" in texts and "stride" in texts
        assert "mean sample length per window of 50 batches (tokens)" in texts
        assert b"<dc:date>" not in data


def test_schedule_curves_are_the_window_means_of_the_orders(saved, tmp_path, capsys):
    from gpu_profiler.analysis.schedule import batch_order, simulate_schedule
    from gpu_profiler.histogram import LengthHistogram

    r = simulate_schedule(LengthHistogram.load(saved), ("random", "stride"), trials=10)
    fig = plots.schedule_figure(r, "t")
    strip, curve = fig.axes[0], fig.axes[1]
    assert np.array_equal(strip.images[0].get_array()[1],
                          batch_order(r.batches, "stride"))
    x = np.asarray(r.mean_len)[batch_order(r.batches, "random", seed=r.seed)]
    n = x.size // 50 * 50
    assert curve.lines[0].get_ydata() == pytest.approx(x[:n].reshape(-1, 50).mean(axis=1))
    long = simulate_schedule(LengthHistogram.load(saved).with_cap(8192) + LengthHistogram(
        np.full(8193, 40)), ("stride",), trials=10)  # past 4,096 batches: sampled cells
    total = sum(long.batches)
    cells = plots.schedule_figure(long, "t").axes[0].images[0].get_array()[0]
    assert total > 4096 and cells.size == 4096
    assert np.array_equal(cells, batch_order(long.batches, "stride")[
        np.linspace(0, total - 1, 4096).round().astype(int)])
    spreads = [float(np.std(line.get_ydata())) for line in curve.lines]
    assert spreads == pytest.approx([o.window_spread for o in r.orders])
    assert spreads[1] < spreads[0] / 3  # the interleaved order flattens the ladder


def test_suggest_lanes_are_the_proposals(saved, tmp_path, capsys):
    out = tmp_path / "s.svg"
    rc, _, err = run_cli(["suggest", saved, "-k", "4", "--plot", out, "-f", "json", "-o",
                          tmp_path / "s.json"], capsys)
    assert rc == 0, err
    d = json.loads((tmp_path / "s.json").read_text())
    texts = svg_texts(out.read_bytes())
    for q in d["proposals"]:
        assert f"{q['method']} ({q['padding_pct']:.2f}% padding)" in texts
    assert f"{saved}: bounds for 4 buckets" in texts


@pytest.mark.parametrize("command", [["profile"], ["suggest", "-k", "3"], ["schedule"],
                                     ["compare"]])
def test_bad_plot_extension_is_a_usage_error_before_the_scan(tmp_path, capsys, command):
    missing = tmp_path / "no-such-corpus"
    rc, out, err = run_cli([*command, missing, "--plot", tmp_path / "p.jpg"], capsys)
    assert rc == 2 and out == ""
    assert err == f"gpu-profiler: error: --plot {tmp_path / 'p.jpg'}: the file must end in " \
                  ".png, .svg or .pdf\n"
    assert list(tmp_path.iterdir()) == []


def test_compare_overlays_both_distributions(saved, tmp_path, capsys):
    other = tmp_path / "other.json"
    x = (demo_lengths(5000, seed=3) * 1.5).astype(np.int64)
    get_backend("numpy").histogram_chunk(Chunk(x), int(x.max())).save(other)
    out = tmp_path / "c.svg"
    rc, stdout, err = run_cli(["compare", saved, other, "--plot", out, "-f", "json"], capsys)
    assert rc == 0, err
    d = json.loads(stdout)
    texts = svg_texts(out.read_bytes())
    assert f"{saved} vs {other}: two length distributions" in texts
    assert f"A: {saved}" in texts and f"B: {other}" in texts
    assert any(t.startswith(f"ks {d['ks']:.4f} (binned: ") for t in texts)
    assert f"tv {d['tv']:.4f}, w1 {d['w1']:,.1f} tokens" in texts

    from gpu_profiler.analysis.compare import compare
    from gpu_profiler.histogram import LengthHistogram

    a, b = LengthHistogram.load(saved), LengthHistogram.load(other)
    fig = plots.compare_figure(a, b, compare(a, b, BucketParams(), BucketParams()), "t")
    shares = [p.get_data().values for p in fig.axes[0].patches[:2]]
    edges = fig.axes[0].patches[0].get_data().edges
    for h, raw, got in ((a, demo_lengths(), shares[0]), (b, x, shares[1])):
        ref, _ = np.histogram(raw[raw <= h.cap], bins=edges)  # the binned lengths
        assert got == pytest.approx(ref / raw.size * 100)


def test_a_scan_never_imports_matplotlib(saved):
    code = ("import sys; from gpu_profiler import profile; "
            f"profile({str(saved)!r}, policies='all'); "
            "print('matplotlib' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "False"


# ---------------------------------------------------------------- issue 27, item 1
@pytest.fixture(scope="module")
def long_tail():
    """60,000 SFT-like lengths whose longest 300 reach 151,405 tokens: p99 is ~5k."""
    rng = np.random.default_rng(7)
    x = np.clip(rng.lognormal(np.log(400), 1.0, 60_000), 8, None).astype(np.int64)
    x[:300] = rng.integers(9000, 151_405, 300)
    x[0] = 151_405
    return x


def hist_of(x):
    return get_backend("numpy").histogram_chunk(Chunk(x), int(x.max()))


def legend_texts(ax):
    return [t.get_text() for t in ax.get_legend().get_texts()]


def test_a_long_tail_is_one_bar_and_the_axis_shows_the_bucketed_range(long_tail):
    hist = hist_of(long_tail)
    table = bucket_table(hist, BucketParams())
    fig = plots.profile_figure(hist, table, "t")
    n = int((long_tail > 8192).sum())
    want = f"{n:,} samples ({n / long_tail.size * 100:.2f}%) longer than 8,192, up to 151,405"
    for ax in fig.axes[:2]:  # linear and log
        right = ax.get_xlim()[1]
        assert 8192 < right < 8192 * 1.05, right  # was 151,405: every edge in the first 5%
        assert want in legend_texts(ax)
        (bar,) = [c for c in ax.containers if c.get_label() == want]
        assert len(bar.patches) == 1 and bar.patches[0].get_height() == n
    # a tail no longer than 1.25x max_seq_len (or p99) is drawn as it is, to its longest
    short = hist_of(np.concatenate([long_tail[long_tail < 9000], [10_000]]))
    fig = plots.profile_figure(short, bucket_table(short, BucketParams()), "t")
    assert fig.axes[0].get_xlim()[1] == pytest.approx(10_000, rel=0.01)
    assert not any("longer than" in t for t in legend_texts(fig.axes[0]))


def test_the_axis_reaches_p99_when_it_passes_max_seq_len(long_tail):
    x = np.concatenate([long_tail, np.full(2000, 20_000)])  # p99 at 20,000
    hist = hist_of(x)
    fig = plots.profile_figure(hist, bucket_table(hist, BucketParams()), "t")
    right = fig.axes[0].get_xlim()[1]
    assert 20_000 <= right < 20_000 * 1.05
    n = int((x > 20_000).sum())
    assert (f"{n:,} samples ({n / x.size * 100:.2f}%) longer than 20,000, up to 151,405"
            in legend_texts(fig.axes[0]))


def test_profile_and_compare_plots_of_a_long_tail_via_the_cli(long_tail, tmp_path, capsys):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    hist_of(long_tail).save(a)
    hist_of((long_tail * 1.3).astype(np.int64)).save(b)
    out = tmp_path / "p.svg"
    rc, _, err = run_cli(["profile", a, "--plot", out, "-q"], capsys)
    assert rc == 0, err
    n = int((long_tail > 8192).sum())
    assert f"{n:,} samples ({n / long_tail.size * 100:.2f}%) longer than 8,192, up to " \
           "151,405" in svg_texts(out.read_bytes())
    out = tmp_path / "c.svg"
    rc, _, err = run_cli(["compare", a, b, "--plot", out, "-q"], capsys)
    assert rc == 0, err
    texts = svg_texts(out.read_bytes())
    nb = int(((long_tail * 1.3).astype(np.int64) > 8192).sum())
    assert f"A: {n:,} samples ({n / long_tail.size * 100:.2f}%) longer than 8,192, up to " \
           "151,405" in texts
    assert f"B: {nb:,} samples ({nb / long_tail.size * 100:.2f}%) longer than 8,192, up to " \
           "196,826" in texts
    assert "8,000" in texts and "100,000" not in texts  # the axis ends near 8,192


def _legend_clear(fig):
    """Every legend's box above every bar of its axes (after the figure is drawn)."""
    fig.draw_without_rendering()
    for ax in fig.axes:
        legend = ax.get_legend()
        if legend is None or not ax.patches:
            continue
        box = legend.get_window_extent()
        for p in ax.patches:
            if p.get_label() in legend_texts(ax) and hasattr(p, "get_data"):  # the stairs
                edges, values = p.get_data().edges, p.get_data().values
                tops = ax.transData.transform(np.column_stack([edges[:-1], values]))
                y = tops[(tops[:, 0] >= box.x0) & (tops[:, 0] <= box.x1), 1]
                clear = y < box.y0 if p.get_fill() else (y < box.y0) | (y > box.y1)
                assert clear.all(), (ax.get_ylabel(), p.get_label())
            elif p.get_label().startswith("_") and p.get_height() > 0:  # a bar, no span
                bar = p.get_window_extent()
                assert not bar.overlaps(box) or bar.y1 < box.y0, (ax.get_ylabel(), p)


@pytest.mark.slow  # (every plot rendered, ~2.5 s: the default suite stays under 5 minutes)
def test_no_legend_hides_a_bar(saved, long_tail):
    """The report's figure (the demo's, drawn as the page's SVG) and the long tail's: the
    shares legend hid bucket 5's tokens bar in the demo report."""
    from gpu_profiler.histogram import LengthHistogram
    from gpu_profiler.render.report import inline_svg

    demo = LengthHistogram.load(saved)
    for hist, name in ((demo, "/tmp/w/demo"), (hist_of(long_tail), "t")):
        fig = plots.profile_figure(hist, bucket_table(hist, BucketParams()), name)
        inline_svg(fig)  # laid out as the report lays it out
        _legend_clear(fig)
    from gpu_profiler.analysis.compare import compare

    a, b = hist_of(long_tail), hist_of((long_tail * 1.3).astype(np.int64))
    _legend_clear(plots.compare_figure(a, b, compare(a, b, BucketParams(), BucketParams()),
                                       "t"))


def test_compare_bounds_b_labels_each_side_with_its_bounds(saved, tmp_path, capsys):
    out = tmp_path / "c.svg"
    rc, table, err = run_cli(["compare", saved, "--bounds-b", "0,1000,8193", "--plot", out,
                              "-q"], capsys)
    assert rc == 0, err
    texts = svg_texts(out.read_bytes())
    a = f"A: {saved} (bounds 0,770,1216,1728,2432,3296,8193)"
    b = f"B: {saved} (bounds 0,1000,8193)"
    assert a in texts and b in texts
    assert "bucket edges (A)" in texts and "bucket edges (B)" in texts
    assert " ".join(f"{a}  vs  {b}".split()) in " ".join(table.split())  # the table's title


def test_compare_of_two_bucketings_names_each_side(saved, tmp_path, capsys):
    """`compare PATH --bounds-b` titled both sides with one name ("demo vs demo")."""
    out = tmp_path / "c.svg"
    rc, _, err = run_cli(["compare", saved, "--bounds-b", "0,1024,8193", "--plot", out, "-q"],
                         capsys)
    assert rc == 0, err
    texts = svg_texts(out.read_bytes())
    assert any(t.startswith(f"{saved} (bounds 0,770,") and " vs " in t
               and t.endswith(f"{saved} (bounds 0,1024,8193): two length distributions")
               for t in texts), texts
