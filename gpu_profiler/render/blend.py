"""Renderings of a blend (`gpu_profiler.analysis.blend.Blend`): its sources (what each
holds, what the blend draws from it, its token share against its weight), then the bucket
table of the blend as trained (rich, Markdown, CSV; JSON is its ``to_dict``)."""

from __future__ import annotations

import csv
import io
from typing import Any

from gpu_profiler.render.analysis import print_warnings, rich_table
from gpu_profiler.render.formats import bucket_markdown, distribution_line, summary_line
from gpu_profiler.render.table import bucket_table_view

COLUMNS = ("source", "weight", "w %", "samples", "mean len", "drawn", "epochs",
           "tokens drawn", "tokens %", "tokens/w")
CSV_COLUMNS = ("index", "path", "weight", "normalized_weight", "samples", "tokens", "mean_len",
               "requested", "built", "drawn", "epochs", "sample_share", "tokens_drawn",
               "token_share", "share_ratio", "windows")


def _columns(b: Any) -> tuple[str, ...]:
    """`COLUMNS`, with each source's windows an epoch after its samples (``--seq-length``)."""
    return COLUMNS if b.seq_length is None else (*COLUMNS[:5], "windows", *COLUMNS[5:])


def _w(x: float | None) -> str:
    return "-" if x is None else f"{x:g}"


def _rows(b: Any) -> list[list[str]]:
    return [[f"{s.index} {s.path}", _w(s.weight), f"{100 * s.normalized_weight:.2f}",
             f"{s.samples:,}", "-" if s.mean_len is None else f"{s.mean_len:,.1f}",
             *([] if b.seq_length is None else [f"{s.windows:,}"]),
             f"{s.drawn:,}", f"{s.epochs:.3f}", f"{s.tokens_drawn:,}",
             f"{100 * s.token_share:.2f}",
             "-" if s.share_ratio is None else f"{s.share_ratio:.2f}"] for s in b.sources]


def summary(b: Any) -> str:
    """The blend's size in one sentence."""
    asked = (f"{b.train_tokens:,} training tokens = {b.train_samples:,} samples"
             if b.train_tokens is not None else f"{b.train_samples:,} training samples")
    split = f" ({b.spec.split})" if b.spec.split else ""
    if b.megatron_split:
        split += f", the {b.data_split} rows of --split {b.megatron_split}"
    what = "samples" if b.seq_length is None else \
        f"GPTDataset windows of {b.seq_length:,} tokens"
    return (f"--{b.spec.form}{split}: {len(b.sources)} source(s); {asked} -> a blend of "
            f"{b.size:,} {what}, {b.tokens_drawn:,} tokens; the most repeated source "
            f"{max(s.epochs for s in b.sources):.3f} epochs")


def table_title(b: Any) -> str:
    """What the blend's bucket table is of: its samples, or the documents its windows hold
    (``--seq-length``: every batch is windows of one length; the table is of documents)."""
    return ("the blend as trained" if b.seq_length is None else
            "the documents the blend's windows hold (expected; batches are windows)")


def _warnings(b: Any) -> list[str]:
    """The blend's warnings, and its bucket table's (a windowed blend's has none: its
    documents are not batched by length)."""
    return [*b.warnings, *(b.table.warnings if b.table is not None else ())]


def print_blend(b: Any, console: Any) -> None:
    """Print ``b`` on a rich console."""
    from rich.markup import escape  # paths are text, not rich markup

    view = rich_table("blend sources", _columns(b), caption="w %: normalized weight (the share "
                      "of samples aimed at); tokens/w: tokens % / w %"
                      + ("" if b.seq_length is None else "; windows: GPTDataset's an epoch, "
                         "(tokens - 1) // seq_length; drawn: windows"))
    for row in _rows(b):
        view.add_row(escape(row[0]), *row[1:])
    console.print(view)
    console.print(escape(summary(b)), highlight=False)
    console.print()
    if b.table is not None:
        console.print(bucket_table_view([("", b.table)], table_title(b)))
        console.print(summary_line(b.table), highlight=False)
        console.print(distribution_line(b.table), highlight=False)
    print_warnings(console, _warnings(b))


def blend_markdown(b: Any) -> str:
    """``b`` as Markdown: the sources, the summary, the bucket table as trained."""
    cols = _columns(b)
    lines = ["| " + " | ".join(cols) + " |", "|---" + "|--:" * (len(cols) - 1) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in _rows(b)]
    lines += ["", summary(b), ""]
    if b.table is not None:
        lines += [f"**{table_title(b)}**", "",
                  bucket_markdown([("", b.table)], named=False,
                                  priced=not b.table.params.cost.is_default),
                  "", summary_line(b.table), "", distribution_line(b.table), ""]
    lines += [f"> **warning:** {w}\n" for w in _warnings(b)]
    return "\n".join(lines) + "\n"


def blend_csv(b: Any) -> str:
    """One row per source (the JSON ``sources`` keys), then an ``all`` row."""
    out = io.StringIO()
    w = csv.DictWriter(out, CSV_COLUMNS, lineterminator="\n")
    w.writeheader()
    for s in b.sources:
        w.writerow({k: getattr(s, k) for k in CSV_COLUMNS})
    w.writerow(dict(index="all", samples=sum(s.samples for s in b.sources),
                    tokens=sum(s.tokens for s in b.sources), drawn=b.size,
                    tokens_drawn=b.tokens_drawn, normalized_weight=1.0, sample_share=1.0,
                    token_share=1.0))
    return out.getvalue()


_HTML_SOURCES = (("index", "source"), ("path", "path"), ("weight", "weight"),
                 ("normalized_weight", "w"), ("samples", "samples"), ("mean_len", "mean len"),
                 ("drawn", "drawn"), ("epochs", "epochs"), ("tokens_drawn", "tokens drawn"),
                 ("token_share", "token share"), ("share_ratio", "tokens / w"),
                 ("windows", "windows an epoch"))


def blend_html(b: Any, command: str) -> str:
    """``b`` as one offline HTML page (the report's): the sources, the summary, the bucket
    table as trained with its figure, each source's weight against its token share and
    epochs, the warnings and the command."""
    from html import escape

    from gpu_profiler.render import plots, report

    sources = report.table("blend sources", _HTML_SOURCES,
                           ([getattr(s, k) for k, _ in _HTML_SOURCES] for s in b.sources),
                           "blend-sources")
    parts = ["<h2>Sources</h2>", sources, f"<p>{escape(summary(b))}</p>",
             report.figure("each source's weight, token share and epochs",
                           plots.blend_figure(b))]
    if b.table is not None:
        parts += [f"<h2>{escape(table_title(b).capitalize())}</h2>",
                  report.summary("", b.table),
                  report.buckets("", b.table),
                  report.figure("the blend as trained", plots.profile_figure(
                      b.histogram, b.table, "the blend as trained"))]
    parts += ["<h2>Warnings</h2>", report.warnings([("blend", _warnings(b))]),
              "<h2>Command</h2>", f"<pre id=\"command\">{escape(command)}</pre>"]
    return report.page(f"gpu-profiler blend: {len(b.sources)} sources", parts)
