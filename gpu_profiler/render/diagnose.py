"""Renderings of a loss-curve diagnosis (`gpu_profiler.analysis.diagnose`): rich tables,
Markdown, CSV (JSON is the result's ``to_dict``), and the per-point curve of ``--debanded``."""

from __future__ import annotations

import csv
import io
from typing import Any

from rich.markup import escape

from gpu_profiler.render.analysis import markdown_table, print_warnings, rich_table


def _g(x: float | None, digits: int = 3) -> str:
    return "" if x is None else f"{x:.{digits}g}"


def _numbers(r: Any) -> list[tuple[str, str]]:
    """The headline numbers as (name, value) rows, the order's only with one."""
    rows = [("band_r2", f"{r.band_r2:.2f} (composition's share of the swing over "
                        f"{r.window:,}-step windows, from the "
                        f"{'buckets' if r.order else 'bands'})"),
            ("persistence", "" if r.persistence is None else
             f"{r.persistence:.2f} (1: as a random order; < 1 interleaved; > 1 runs)"),
            ("bands", f"{len(r.bands)} (BIC gain {r.band_delta_bic:,.1f}"
                      + (f", separation {r.band_separation:.1f} SD" if r.band_separation
                         else "") + ")"),
            ("period", "none" if r.period is None else
             f"{r.period:,.1f} steps ({r.period_share:.0%} of the variance, "
             f"p={r.period_p:.2g})"),
            ("ladders", f"longest {r.longest_ladder} points from step {r.ladder_step:,} "
                        f"({r.ladder_rise:+.3g}); {r.ladders} of >= {r.ladder_length} points "
                        f"({r.expected_ladders:.2f} expected by chance)"),
            ("window_std", f"{r.window_std:.3g} (std of {r.window:,}-step window means, "
                           "detrended)")]
    if r.order:
        a = r.alignment
        rows += [("bucket_r2", f"{r.bucket_r2:.3f} (adjusted {r.bucket_r2_adjusted:.3f})"),
                 ("bucket_length_r2", "none (no batch lengths)" if r.length_slope is None
                  else f"{r.bucket_length_r2:.3f} (adjusted {r.bucket_length_r2_adjusted:.3f}"
                  f"; buckets and batch length: loss ~ length^{r.length_slope:+.3f} within "
                  "a bucket)"),
                 ("debanded_window_std", _g(r.debanded_window_std)),
                 ("predicted_window_std", f"{_g(r.predicted_window_std)} (stride order)"),
                 ("longest_run", f"{r.longest_run} (stride order: {r.stride_longest_run})"),
                 ("aligned", f"{a.logged}, step offset {a.step_offset}, grad_accum "
                             f"{a.grad_accum}, world_size {a.world_size}"
                             + (f", rank {a.rank}" if a.rank is not None else "")
                             + (" (best fit)" if a.auto else ""))]
    return rows


def _title(r: Any) -> str:
    return (f"{r.log} [{r.series}]: {r.points:,} points, steps {r.first_step:,}-"
            f"{r.last_step:,} (every {r.log_every:,}), {r.scale} scale, trend over "
            f"{r.trend_window:,} points")


_BAND_HEAD = ("band", "share %", "mean loss", "10-90%")
_BUCKET_HEAD = ("bucket", "batches %", "loss at end", "effect", "longest run", "loss in it")


def _band_cells(i: int, b: Any) -> list[str]:
    return [str(i), f"{b.share * 100:.1f}", f"{b.level:.4g}", f"{b.lo:.4g}-{b.hi:.4g}"]


def _bucket_cells(b: Any) -> list[str]:
    return [str(b.index), f"{b.share:.1f}", f"{b.loss:.4g}", f"{b.effect:+.3g}",
            f"{b.longest_run:,}", _g(b.run_loss, 4)]


def print_diagnose(r: Any, console: Any) -> None:
    """The verdict, the numbers, the bands and (with the order) the buckets and the fix."""
    console.print(escape(_title(r)), highlight=False)
    console.print(f"[bold]{escape(r.verdict)}[/]", highlight=False)
    view = rich_table("numbers", ("name", "value"))
    view.columns[1].justify = "left"
    for name, value in _numbers(r):
        view.add_row(name, escape(value))
    console.print(view)
    if r.bands:
        view = rich_table("bands (from the loss alone)", _BAND_HEAD)
        for i, b in enumerate(r.bands):
            view.add_row(*_band_cells(i, b))
        console.print(view)
    if r.buckets:
        view = rich_table("buckets (regression on each point's bucket mix)", _BUCKET_HEAD,
                          caption="loss at end: the de-banded trend's last value with the "
                                  "bucket's effect; longest run: plan steps back to back (the "
                                  "latest), and the mean logged loss inside it")
        for b in r.buckets:
            view.add_row(*_bucket_cells(b))
        console.print(view)
    if r.fix:
        console.print(f"fix: {escape(r.fix)}", highlight=False)
    print_warnings(console, r.warnings)


def diagnose_markdown(r: Any) -> str:
    out = [f"**{_title(r)}**", "", f"**{r.verdict}**", "",
           markdown_table([["name", "value"], *map(list, _numbers(r))], left=2)]
    if r.bands:
        out += ["", markdown_table([list(_BAND_HEAD),
                                    *(_band_cells(i, b) for i, b in enumerate(r.bands))], left=0)]
    if r.buckets:
        out += ["", markdown_table([list(_BUCKET_HEAD), *map(_bucket_cells, r.buckets)],
                                   left=0)]
    if r.fix:
        out += ["", f"Fix: {r.fix}"]
    out += [f"\n> **warning:** {w}" for w in r.warnings]
    return "\n".join(out) + "\n"


def diagnose_csv(r: Any) -> str:
    """One row per band and per bucket (docs/guide/diagnose.md)."""
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(("kind", "index", "share", "loss", "lo", "hi", "effect", "longest_run",
                "run_start", "run_loss", "run_effect"))
    for i, b in enumerate(r.bands):
        w.writerow(("band", i, b.share, b.level, b.lo, b.hi, "", "", "", "", ""))
    for b in r.buckets:
        w.writerow(("bucket", b.index, b.share / 100, b.loss, "", "", b.effect, b.longest_run,
                    b.run_start, "" if b.run_loss is None else b.run_loss,
                    "" if b.run_effect is None else b.run_effect))
    return out.getvalue()


def curve_csv(r: Any) -> str:
    """Every logged point: step, loss, trend, de-banded loss (empty without the order),
    band, and the most frequent bucket of its batches (``--debanded FILE``)."""
    c = r.curves
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(("step", "loss", "trend", "debanded", "band", "bucket"))
    empty = [""] * c.steps.size
    w.writerows(zip(c.steps.tolist(), c.loss.tolist(), c.trend.tolist(),
                    empty if c.debanded is None else c.debanded.tolist(), c.band.tolist(),
                    empty if c.bucket is None else c.bucket.tolist(), strict=True))
    return out.getvalue()


def diagnose_html(r: Any, fig: Any) -> str:
    """The HTML report's section on a loss log (``report --log``): the verdict, the
    numbers, the bands and buckets, the fix and the plot."""
    from html import escape as html

    from gpu_profiler.render.report import figure, table

    parts = ["<h2>Loss curve</h2>", f"<p><b>{html(r.verdict)}</b></p>",
             table(_title(r), (("name", "name"), ("value", "value")), _numbers(r),
                   "diagnose"),
             table("bands (from the loss alone)", (("index", "band"), ("share", "share"),
                                                   ("level", "mean loss"), ("lo", "10%"),
                                                   ("hi", "90%")),
                   [(i, b.share, b.level, b.lo, b.hi) for i, b in enumerate(r.bands)],
                   "diagnose-bands")]
    if r.buckets:
        parts.append(table("buckets", (("index", "bucket"), ("share", "batches %"),
                                       ("loss", "loss at end"), ("effect", "effect"),
                                       ("longest_run", "longest run"),
                                       ("run_loss", "loss in it")),
                           [(b.index, b.share, b.loss, b.effect, b.longest_run, b.run_loss)
                            for b in r.buckets], "diagnose-buckets"))
    if r.fix:
        parts.append(f"<p>fix: {html(r.fix)}</p>")
    parts.append(figure(f"loss curve of {r.log} ({r.series})", fig))
    return "\n".join(parts)
