"""The offline HTML report (``gpu-profiler report``): one self-contained file, inline CSS
and inline SVG plots, nothing that reaches the network (every link in it is a ``#``
fragment or a ``data:`` URI). Every string from the data (paths, split and field names,
warnings) is HTML-escaped here; the SVGs are matplotlib's, which escapes its own text.

Tables name each column's JSON key (``data-field``), so a reader (or a test) can match a
cell to ``profile -f json``."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from html import escape
from typing import Any

from gpu_profiler.cost import cost_words
from gpu_profiler.render.analysis import policy_note

_CSS = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 1200px;
       padding: 0 1em; color: #222; }
h1 { font-size: 1.5em; overflow-wrap: anywhere; } h2 { margin-top: 2em; }
table { border-collapse: collapse; margin: 0.6em 0 1.2em; }
th, td { border-bottom: 1px solid #ddd; padding: 0.2em 0.7em; text-align: right; }
th:first-child, td:first-child { text-align: left; }
caption { caption-side: top; text-align: left; font-weight: 600; padding: 0.3em 0; }
pre { background: #f4f4f4; padding: 0.8em; white-space: pre-wrap; overflow-wrap: anywhere; }
.warning { border-left: 4px solid #D55E00; padding: 0.3em 0.8em; margin: 0.5em 0;
           background: #fdf1ea; }
figure { margin: 1em 0; } svg { max-width: 100%; height: auto; }
"""

#: Even if the page held a link, the browser would fetch nothing.
_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"


def _cell(value: Any) -> str:
    """A number as the tables show it: integers with thousands separators, other numbers
    to two decimals; None as an empty cell."""
    if value is None:
        return ""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return escape(str(value))
    if isinstance(value, int) or float(value).is_integer():
        return f"{value:,.0f}"
    return f"{value:,.2f}"


def table(caption: str, columns: Sequence[tuple[str, str]], rows: Iterable[Sequence[Any]],
          ident: str) -> str:
    """An HTML table: ``columns`` are ``(json key, header)``; every value is escaped."""
    head = "".join(f'<th data-field="{escape(k)}">{escape(h)}</th>' for k, h in columns)
    body = "".join("<tr>" + "".join(f'<td data-field="{escape(k)}">{_cell(v)}</td>'
                                    for (k, _), v in zip(columns, row, strict=True)) + "</tr>"
                   for row in rows)
    return (f'<table id="{escape(ident)}"><caption>{escape(caption)}</caption>'
            f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")


_BUCKETS = (("index", "bucket"), ("lo", "lo"), ("hi", "hi"), ("samples", "samples"),
            ("sample_pct", "samples %"), ("tokens", "tokens (clipped)"),
            ("avg_len", "avg len"), ("max_len", "max len"), ("est_batch_size", "batch size"),
            ("est_batches", "est. batches"), ("batch_pct", "batches %"))
_SUMMARY = ("total_samples", "total_tokens", "clipped_tokens", "truncated_samples",
            "truncated_tokens", "null_samples", "invalid_samples", "unbucketed_samples",
            "total_est_batches", "steps_per_epoch")


def summary(split: str, t: Any) -> str:
    """The corpus-level counts, then the distribution of the unclipped lengths."""
    d = t.to_dict()
    counts = table(f"summary ({split})", (("field", "field"), ("value", "value")),
                   [(k, d[k]) for k in _SUMMARY], f"summary-{split}")
    dist = {"min_len": t.min_len, "mean_len": t.mean_len, **t.percentiles,
            "max_len": t.max_len}
    cols = [(k, k) for k in dist]
    lengths = table(f"lengths ({split}, unclipped, nearest-rank percentiles; tokens)", cols,
                    [list(dist.values())], f"lengths-{split}")
    bounds = "".join(f"<p>{escape(k)} lies in [{lo:,}, {hi:,}] (above the binned range)</p>"
                     for k, (lo, hi) in t.percentile_bounds.items())
    return counts + lengths + bounds


#: The bucket columns a cost model adds (`gpu_profiler.cost`; only with one).
_BUCKET_COST = (("est_cost", "est. cost"), ("cost_pct", "cost %"))


def buckets(split: str, t: Any) -> str:
    cols = _BUCKETS + _BUCKET_COST * (not t.params.cost.is_default)
    rows = [[getattr(b, k) for k, _ in cols] for b in t.buckets]
    caption = f"buckets ({split})"
    if not t.params.cost.is_default:
        caption += (f"; est. cost: {cost_words(t.params.cost, estimate=True)}, in "
                    f"{t.params.cost.unit} ({t.params.cost.kind} cost model)")
    return table(caption, cols, rows, f"buckets-{split}")


def policies(pols: Sequence[Any], cost: Any) -> str:
    """Every policy side by side, then each one's buckets. Whether a policy's tokens and
    padded tokens are counts or expectations over random batches (``fixed``: fractions)
    is a column of its own; ``sorted``'s batch size is a mean, shown with its range."""
    priced = any(p.cost is not None for p in pols)
    cols = (("name", "policy"), ("total_batches", "batches"),
            ("steps_per_epoch", "steps/epoch"), ("tokens", "tokens"),
            ("padded_tokens", "padded tokens"), ("padding_pct", "padding %"),
            *((("cost", "cost"),) if priced else ()), ("expected", "tokens are"))
    split = pols[0].split if pols else None
    out = [table("batching policies" + (f" of split {split}" if split else "")
                 + ": padded tokens are rows x longest row, summed over batches; expected: "
                 "over random within-bucket batches, exact: counted"
                 + (f"; cost: {cost_words(cost)}" if priced else ""), cols,
                 [[*(getattr(p, k) for k, _ in cols[:-1]),
                   "expected" if p.expected else "exact"] for p in pols], "policies")]
    for p in pols:
        out.append(f"<p>{escape(p.name)}: {escape(policy_note(p))}</p>")
        if p.buckets:
            per = _policy_columns(p)
            out.append(table(f"{p.name}: buckets", per,
                             [[getattr(b, k) for k, _ in per] for b in p.buckets],
                             f"policy-{p.name}"))
    return "".join(out)


def _policy_columns(p: Any) -> tuple[tuple[str, str], ...]:
    """A policy's bucket columns: ``sorted`` fills batches up to the budget, so its batch
    size is a mean (samples / batches) and its range follows it."""
    size: tuple[tuple[str, str], ...] = (("batch_size", "batch size"),)
    if p.name == "sorted":
        size = (("batch_size", "mean batch size"), ("min_batch_size", "min batch size"),
                ("max_batch_size", "max batch size"))
    return (("index", "bucket"), ("lo", "lo"), ("hi", "hi"), ("samples", "samples"), *size,
            ("batches", "batches"), ("sample_pct", "samples %"), ("token_pct", "tokens %"),
            ("batch_pct", "batches %"), ("padding_pct", "padding %"),
            *((("cost", "cost"), ("cost_pct", "cost %")) if p.cost is not None else ()))


def proposals(s: Any) -> str:
    """The proposals side by side (``s`` a `Suggestion`), or why there are none (``s`` the
    reason)."""
    if isinstance(s, str):
        return f"<p>No bounds to propose: {escape(s)}</p>"
    cols = (("method", "method"), ("bounds", "bounds"), ("padded_tokens", "padded tokens"),
            ("padding_pct", "padding %"), ("total_batches", "batches"),
            ("steps_per_epoch", "steps/epoch"), ("max_batch_pct", "largest share %"),
            *((("cost", "cost"),) if not s.params.cost.is_default else ()))
    rows = [[q.method, ",".join(map(str, q.bounds)), *(getattr(q, k) for k, _ in cols[2:])]
            for q in s.proposals]
    if s.group_by is not None:  # each proposal's stride order by source (suggest --group-by)
        cols = (*cols, ("mostly_batch_pct", "one-source batches %"),
                ("group_run", "one-source run"), ("least_run", "lower bound"))
        rows = [[*r, q.groups.mostly_batch_pct, q.groups.longest_run, q.groups.least_run]
                for r, q in zip(rows, s.proposals, strict=True)]
    return table(f"bounds for {s.buckets} buckets, scored under the fixed policy", cols, rows,
                 "suggestions")


def orders(r: Any) -> str:
    cols = (("name", "order"), ("longest_run", "longest run"),
            ("longest_run_bucket", "of bucket"), ("expected_longest_run", "mean longest"),
            ("lag1_autocorr", "lag-1 corr"), ("window_spread", "window spread"),
            ("window_min", "window min"), ("window_max", "window max"))
    out = table(f"batch orders ({sum(r.batches):,} batches, policy {r.policy}, windows of "
                f"{r.log_window} batches)", cols,
                [[getattr(o, k) for k, _ in cols] for o in r.orders], "orders")
    if r.group_by is None:
        return out
    # by group: its share of the epoch, and per order its least / most share of a window
    names = list(r.orders[0].groups.windows)
    gcols = (("group", "group"), ("share", "samples %"),
             *((f"{o.name}:{k}", f"{o.name} window {k} %") for o in r.orders
               for k in ("min", "max", "spread")))
    rows = ([n, r.orders[0].groups.windows[n]["share"],
             *(o.groups.windows[n][k] for o in r.orders for k in ("min", "max", "spread"))]
            for n in names)
    runs = (("name", "order"), ("longest_run", "longest run of batches mostly one group"),
            ("longest_run_group", "of group"))
    return (out + table(f"by {r.group_by}: each group's share of a window's samples", gcols,
                        rows, "order-groups")
            + table(f"runs of batches from buckets made mostly of one {r.group_by}", runs,
                    ([o.name, o.groups.longest_run, o.groups.longest_run_group]
                     for o in r.orders), "group-runs"))


def warnings(found: Sequence[tuple[str, Sequence[str]]]) -> str:
    """Every warning once, with where it was found (each names its own fix)."""
    where: dict[str, list[str]] = {}
    for origin, texts in found:
        for w in texts:
            where.setdefault(w, []).append(origin)
    if not where:
        return "<p>No warnings.</p>"
    return "".join(f'<div class="warning"><b>{escape(", ".join(dict.fromkeys(o)))}:</b> '
                   f"{escape(w)}</div>" for w, o in where.items())


def inline_svg(fig: Any) -> str:
    """``fig`` as an ``<svg>`` element for the page: no XML prolog, no RDF metadata."""
    from gpu_profiler.render.plots import figure_bytes

    svg = figure_bytes(fig, "svg").decode()
    svg = svg[svg.index("<svg"):]
    return re.sub(r"<metadata>.*?</metadata>", "", svg, flags=re.S)


def figure(caption: str, fig: Any) -> str:
    return f"<figure>{inline_svg(fig)}<figcaption>{escape(caption)}</figcaption></figure>"


_GROUPS = (("name", "group"), ("samples", "samples"), ("sample_pct", "samples %"),
           ("tokens", "tokens"), ("token_pct", "tokens %"), ("batches", "est. batches"),
           ("batch_pct", "batches %"))


def mixture(result: Any, fig: Any) -> str:
    """A grouped profile's section: each group's shares, each bucket's composition (the
    percent of its samples each group makes), and their figure."""
    m = result.mixture
    names = [g.name for g in m.shares]
    shares = table(f"by {m.by}", _GROUPS, ([getattr(g, k) for k, _ in _GROUPS]
                                           for g in m.shares), "groups")
    columns = (("index", "bucket"), ("samples", "samples"), ("top", "largest"),
               *((f"group:{n}", f"{n} %") for n in names))
    mix = table("bucket composition (% of the bucket's samples)", columns,
                ([b.index, b.samples, b.top, *(b.groups[n] for n in names)]
                 for b in m.buckets), "group-buckets")
    return ("<h2>Groups</h2>" + shares + mix
            + figure(f"by {m.by}: shares and bucket composition", fig))


_SHAPE = (("index", "bucket"), ("lo", "lo"), ("hi", "hi"), ("samples", "samples"),
          ("rows", "rows"), ("tokens", "tokens"), ("loss_tokens", "loss tokens"),
          ("prompt_tokens", "prompt tokens"), ("loss_token_pct", "loss %"))


def shaped(result: Any, fig: Any) -> str:
    """A shaped profile's section (``--sft``, ``--dpo``): its totals, each part's
    distribution, each bucket's loss tokens, and the heat map."""
    sh = result.shape
    totals = table("samples and tokens (after truncation)", (("name", "name"), ("value", "value")),
                   [("shape", f"{sh.shape['kind']}: {', '.join(sh.shape['columns'])}"),
                    ("samples", sh.samples), ("rows", sh.rows), ("tokens", sh.tokens),
                    ("loss tokens", sh.loss_tokens), ("loss %", sh.loss_token_pct),
                    ("loss tokens cut by truncation", sh.truncated_loss_tokens)], "shape")
    points = list(next(iter(sh.parts.values()))["percentiles"])
    parts = table("each part's tokens (unclipped)",
                  (("part", "part"), ("tokens", "tokens"), *((k, k) for k in points),
                   ("max", "max")),
                  ([name, p["tokens"], *(p["percentiles"][k] for k in points), p["max"]]
                   for name, p in sh.parts.items()), "shape-parts")
    rows = table("loss tokens per bucket", _SHAPE,
                 ([getattr(b, k) for k, _ in _SHAPE] for b in sh.buckets), "shape-buckets")
    return ("<h2>Samples</h2>" + totals + parts + rows
            + figure("prompt x completion and loss tokens per bucket", fig))


def report_html(*, title: str, command: str, parameters: Sequence[tuple[str, Any]],
                tables: Sequence[tuple[str, Any]], pols: Sequence[Any], suggestion: Any | str,
                schedule: Any, found: Sequence[tuple[str, Sequence[str]]],
                figures: dict[str, tuple[str, Any]], section: str = "", log: str = "") -> str:
    """The page. ``tables``: ``(split, BucketTable)``, the whole source last (``all``);
    ``suggestion``: a `Suggestion`, or why there is none; ``figures``: ``(caption,
    matplotlib figure)`` of the ``profile``, ``suggest`` (when there is a suggestion) and
    ``schedule`` sections; ``found``: warnings by origin; ``section``: the `mixture`
    section of a grouped profile, or the `shaped` one of SFT/DPO samples; ``log``: the
    section on a training loss log (`gpu_profiler.render.diagnose.diagnose_html`)."""
    params = table("parameters", (("name", "name"), ("value", "value")), parameters,
                   "parameters")
    parts = ["<h2>Summary</h2>", *(summary(s, t) for s, t in tables),
             "<h2>Buckets</h2>", *(buckets(s, t) for s, t in tables),
             figure(*figures["profile"]),
             section,
             "<h2>Warnings</h2>", warnings(found),
             "<h2>Batching policies</h2>", policies(pols, tables[-1][1].params.cost),
             "<h2>Bounds suggestions</h2>", proposals(suggestion),
             figure(*figures["suggest"]) if "suggest" in figures else "",
             "<h2>Batch order</h2>", orders(schedule), figure(*figures["schedule"]),
             *([log] if log else []),
             "<h2>Command</h2>", f"<pre id=\"command\">{escape(command)}</pre>", params]
    return page(title, parts)


def page(title: str, parts: Sequence[str]) -> str:
    """A whole offline page: ``title`` as its heading, then ``parts`` (HTML, escaped)."""
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">'
            f"<title>{escape(title)}</title><style>{_CSS}</style></head>\n<body>\n"
            + f"<h1>{escape(title)}</h1>\n" + "\n".join(parts) + "\n</body></html>\n")
