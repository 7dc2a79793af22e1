"""Renderings of the analyses beyond the bucket table: batching policies, bounds proposals
and batch schedules (rich tables, Markdown, CSV; JSON is each result's ``to_dict``)."""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from typing import Any

from gpu_profiler.analysis.buckets import DOMINANT_BATCH_PCT
from gpu_profiler.analysis.mixture import NOUNS
from gpu_profiler.analysis.policies import PolicyResult
from gpu_profiler.cost import cost_words

SHARES_NOTE = ("samples % / tokens % / batches %: a bucket's share of the gradient under "
               "per-sample, per-token, and per-batch loss averaging (per-batch: each "
               "micro-batch's mean loss counts equally)")


def _n(x: float) -> str:
    return f"{x:,.0f}" if float(x).is_integer() else f"{x:,.1f}"


def _bucket(b: Any) -> str:
    return f"{b.index} [{b.lo},{b.hi})"


def _pct(x: float, hot: bool = False) -> str:
    s = f"{x:.1f}"
    return f"[bold yellow]{s}[/]" if hot and x > DOMINANT_BATCH_PCT else s


def rich_table(title: str, columns: Sequence[str], caption: str | None = None) -> Any:
    """An empty rich Table in the style of every analysis view (and `render.compare`'s):
    the first column left-aligned and unwrapped, the others right-aligned numbers."""
    from rich import box
    from rich.table import Table

    view = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, padding=(0, 1),
                 collapse_padding=True, pad_edge=False, caption=caption,
                 caption_justify="left")
    for i, col in enumerate(columns):
        view.add_column(col, justify="left" if i == 0 else "right", no_wrap=i == 0)
    return view


def _of(split: str | None) -> str:
    """`` of split NAME`` for a rich title (nothing for an unsplit source)."""
    from rich.markup import escape  # a split name is text, not rich markup

    return f" of split {escape(split)}" if split else ""


def _split_line(split: str | None) -> list[str]:
    """The Markdown line naming the split analysed (none for an unsplit source)."""
    return [f"**split `{split}`**", ""] if split else []


def markdown_table(rows: list[list[str]], left: int = 1) -> str:
    """A header row and body rows as a Markdown table, its first ``left`` columns
    left-aligned and the others right-aligned (a ``|`` in a body cell escaped)."""
    head, *body = rows
    align = "|" + "---|" * left + "--:|" * (len(head) - left)
    return "\n".join(["| " + " | ".join(head) + " |", align,
                      *("| " + " | ".join(c.replace("|", "\\|") for c in r) + " |"
                        for r in body)])


def print_warnings(console: Any, warnings: Sequence[str]) -> None:
    """Each warning on its own line, flagged in bold yellow (as every analysis view ends);
    a warning is text (it may quote a group, a path), never rich markup."""
    from rich.markup import escape

    for w in warnings:
        console.print(f"[bold yellow]warning:[/] {escape(w)}", highlight=False)


# ---------------------------------------------------------------- policies
def policy_note(pol: PolicyResult) -> str:
    """What the policy's numbers mean, in a few words."""
    if pol.rows is not None:
        assert pol.algorithm is not None and pol.packing_efficiency is not None  # packed
        return (f"{pol.algorithm.upper()} packing: {pol.rows:,} rows of max_seq_len, "
                f"{pol.rows_per_batch} per batch, efficiency {pol.packing_efficiency * 100:.2f}%")
    notes = {"estimate": "samples / batch size as a float, every sample padded to its "
                         "bucket's max",
             "fixed": "one batch size per bucket; padding is the exact expectation over "
                      "random within-bucket batches",
             "sorted": "lengths sorted in each bucket, batches filled up to the "
                       + ("token budget" if pol.cost is None else "cost budget")}
    extra = []
    if pol.dropped_samples:
        extra.append(f"{pol.dropped_samples:,} samples dropped (drop_last)")
    if pol.unbatchable_samples:
        extra.append(f"{pol.unbatchable_samples:,} samples over the budget")
    return "; ".join([notes[pol.name], *extra])


def policies_view(pols: Sequence[PolicyResult], params: Any) -> Any:
    """One row per policy: batches, optimizer steps, tokens, padding."""
    from rich.markup import escape  # a cost unit is text (a curve file's header)

    split = pols[0].split if pols else None
    view = rich_table(f"batching policies{_of(split)} "
                      f"({params.grad_accum * params.world_size} batches per optimizer step: "
                      f"grad_accum {params.grad_accum} x world_size {params.world_size})",
                      ("policy", "batches", "steps", "tokens", "padded tokens", "padding %")
                      + (f"cost ({escape(params.cost.unit)})",) * _priced(pols),
                      caption="padded tokens: rows x longest row, summed over batches "
                              "(fixed: expected over random within-bucket batches)"
                              + (f"; cost: {cost_words(params.cost)} "
                                 "(docs/guide/cost.md)") * _priced(pols))
    for p in pols:
        view.add_row(p.name + (" (drop_last)" if p.drop_last else ""), _n(p.total_batches),
                     _n(p.steps_per_epoch), _n(p.tokens), _n(round(p.padded_tokens, 1)),
                     f"{p.padding_pct:.2f}", *(_cost(p.cost),) * _priced(pols))
    return view


def _priced(pols: Sequence[PolicyResult]) -> bool:
    """Whether a cost model priced these policies (then their cost is shown)."""
    return any(p.cost is not None for p in pols)


def _cost(x: float | None) -> str:
    return "" if x is None else f"{x:,.4g}" if abs(x) < 1e4 else f"{x:,.0f}"


def policy_buckets_view(pol: PolicyResult, caption: bool = True) -> Any:
    """One policy's buckets: batch size, batches and the three shares side by side."""
    view = rich_table(f"{pol.name}: {policy_note(pol)}", (
        "bucket", "bsz", "batches", "samples %", "tokens %", "batches %", "pad %")
        + ("cost", "cost %") * (pol.cost is not None),
        caption=(SHARES_NOTE + ("; cost %: share of the epoch's compute (cost)"
                                if pol.cost is not None else "")) if caption else None)
    for b in pol.buckets:
        view.add_row(_bucket(b), _bsz(b), _n(b.batches), f"{b.sample_pct:.1f}",
                     f"{b.token_pct:.1f}", _pct(b.batch_pct, hot=True), f"{b.padding_pct:.1f}",
                     *(_cost(b.cost), f"{b.cost_pct or 0.0:.1f}") * (pol.cost is not None))
    return view


def _bsz(b: Any) -> str:
    """A policy bucket's batch size: its range where it varies (``sorted``: filled under
    the budget), else the one size."""
    if b.min_batch_size != b.max_batch_size:
        return f"{b.min_batch_size:,}-{b.max_batch_size:,}"
    return _n(b.batch_size)


def print_policies(pols: Sequence[PolicyResult], params: Any, console: Any) -> None:
    """Print the policy comparison, then each policy's buckets."""
    console.print(policies_view(pols, params))
    last = max((i for i, p in enumerate(pols) if p.buckets), default=-1)
    for i, p in enumerate(pols):
        if p.buckets:
            console.print(policy_buckets_view(p, caption=i == last))
        else:
            console.print(f"{p.name}: {policy_note(p)}", highlight=False)
    print_warnings(console, [w for p in pols for w in p.warnings])
    console.print()


def policies_markdown(pols: Sequence[PolicyResult]) -> str:
    """The same tables in Markdown."""
    priced = _priced(pols)
    out = [*_split_line(pols[0].split if pols else None), markdown_table([
        ["policy", "batches", "steps", "tokens", "padded tokens", "padding %", *["cost"] * priced],
        *([p.name, _n(p.total_batches), _n(p.steps_per_epoch), _n(p.tokens),
           _n(round(p.padded_tokens, 1)), f"{p.padding_pct:.2f}", *[_cost(p.cost)] * priced]
          for p in pols)])]
    for p in pols:
        out += ["", f"**{p.name}**: {policy_note(p)}"]
        if p.buckets:
            out += ["", markdown_table([
                ["bucket", "bsz", "batches", "samples %", "tokens %", "batches %", "pad %",
                 *["cost", "cost %"] * priced],
                *([f"[{b.lo}, {b.hi})", _bsz(b), _n(b.batches), f"{b.sample_pct:.1f}",
                   f"{b.token_pct:.1f}", f"{b.batch_pct:.1f}", f"{b.padding_pct:.1f}",
                   *[_cost(b.cost), f"{b.cost_pct or 0.0:.1f}"] * priced] for b in p.buckets)])]
    if any(p.buckets for p in pols):
        out += ["", f"_{SHARES_NOTE}_"]
    out += [f"\n> **warning:** {w}" for p in pols for w in p.warnings]
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------- suggest
def _bounds(b: Sequence[int]) -> str:
    return ",".join(map(str, b))


def print_suggestion(s: Any, console: Any) -> None:
    """The proposals side by side, then each proposal's bucket table."""
    from rich.markup import escape  # a column name is text, not rich markup

    cols = ["method", "padded tokens", "padding %", "batches", "steps",
            "largest share %"] + (["objective"] if s.balance else []) + _SOURCE_HEAD * (
                s.group_by is not None)
    noun = NOUNS.get(s.group_by or "", s.group_by)
    view = rich_table(f"bounds for {s.buckets} buckets{_of(s.split)}, scored under the "
                      "fixed policy"
                      + (f" (balance {s.balance:g})" if s.balance else ""), cols,
                      caption="padding: expected over random within-bucket batches; each "
                              "proposal's bounds and buckets follow"
                      + ("" if s.group_by is None else
                         f". one-source: batches from buckets made mostly of one "
                         f"{escape(noun or '')}; run: the most in a row in the stride order "
                         "(in parentheses: a lower bound for any order)"))
    for q in s.proposals:
        row = [q.method, _n(round(q.padded_tokens)), f"{q.padding_pct:.2f}",
               f"{q.total_batches:,}", f"{q.steps_per_epoch:,}",
               _pct(q.max_batch_pct, hot=True)]
        view.add_row(*row, *([f"{q.objective:.4f}"] if s.balance else []),
                     *_source_cells(q))
    console.print(view)
    for q in s.proposals:
        console.print(proposal_view(q))
    print_warnings(console, s.warnings)


_SOURCE_HEAD = ["one-source batches %", "run (least)"]


def _source_cells(q: Any) -> list[str]:
    """A proposal's `_SOURCE_HEAD` cells (none without groups)."""
    g = q.groups
    return [] if g is None else [f"{g.mostly_batch_pct:.1f}",
                                 f"{g.longest_run} ({g.least_run})"]


def proposal_view(q: Any) -> Any:
    """One proposal's buckets under the fixed policy."""
    view = rich_table(f"{q.method}: {_bounds(q.bounds)}", (
        "bucket", "samples", "samples %", "tokens %", "bsz", "batches", "batches %", "pad %"))
    for b in q.policy.buckets:
        view.add_row(_bucket(b), f"{b.samples:,}", f"{b.sample_pct:.1f}", f"{b.token_pct:.1f}",
                     str(b.batch_size), f"{b.batches:,}", _pct(b.batch_pct, hot=True),
                     f"{b.padding_pct:.1f}")
    return view


def suggestion_markdown(s: Any) -> str:
    out = [*_split_line(s.split), markdown_table([
        ["method", "bounds", "padded tokens", "padding %", "batches", "steps", "largest share %",
         *_SOURCE_HEAD * (s.group_by is not None)],
        *([q.method, f"`{_bounds(q.bounds)}`", f"{q.padded_tokens:,.0f}", f"{q.padding_pct:.2f}",
           f"{q.total_batches:,}", f"{q.steps_per_epoch:,}", f"{q.max_batch_pct:.1f}",
           *_source_cells(q)] for q in s.proposals)], left=2)]
    for q in s.proposals:
        out += ["", f"**{q.method}** `{_bounds(q.bounds)}`", "", markdown_table([
            ["bucket", "samples", "samples %", "tokens %", "bsz", "batches", "batches %", "pad %"],
            *([f"[{b.lo}, {b.hi})", f"{b.samples:,}", f"{b.sample_pct:.1f}", f"{b.token_pct:.1f}",
               f"{b.batch_size}", f"{b.batches:,}", f"{b.batch_pct:.1f}", f"{b.padding_pct:.1f}"]
              for b in q.policy.buckets)])]
    out += [f"\n> **warning:** {w}" for w in s.warnings]
    return "\n".join(out) + "\n"


def suggestion_csv(s: Any) -> str:
    """One row per proposal and bucket, and an ``all`` row per proposal with its totals
    and steps per epoch (README, "CSV")."""
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    grouped = s.group_by is not None
    w.writerow(("split", "method", "bounds", "bucket", "lo", "hi", "samples", "batch_size",
                "batches", "padded_tokens", "padding_pct", "batch_pct", "steps_per_epoch",
                *(("mostly_batch_pct", "group_longest_run", "group_least_run")
                  if grouped else ())))
    for q in s.proposals:
        head = (s.split or "", q.method, _bounds(q.bounds))
        for b in q.policy.buckets:
            w.writerow((*head, b.index, b.lo, b.hi, b.samples, b.batch_size, b.batches,
                        b.padded_tokens, b.padding_pct, b.batch_pct, "", *("",) * 3 * grouped))
        g = q.groups
        w.writerow((*head, "all", "", "", q.policy.samples, "", q.total_batches,
                    q.padded_tokens, q.padding_pct, 100.0, q.steps_per_epoch,
                    *((g.mostly_batch_pct, g.longest_run, g.least_run) if grouped else ())))
    return out.getvalue()


# ---------------------------------------------------------------- schedule
def _first_out(o: Any) -> str:
    done = [e for e in o.exhausted_at if e is not None]
    return f"{min(done) * 100:.1f}" if done else ""


def _order_cells(o: Any) -> list[str]:
    """An order's row of the schedule's orders table (an empty cell for what it lacks)."""
    return [o.name, str(o.longest_run),
            "" if o.longest_run_bucket is None else str(o.longest_run_bucket),
            f"{o.expected_longest_run:.1f}" if o.trials else "",
            f"{o.p_run_ge[4]:.2f}" if o.p_run_ge else "",
            "" if o.lag1_autocorr is None else f"{o.lag1_autocorr:+.3f}",
            f"{o.window_spread:,.1f}", _first_out(o)]


def print_schedule(r: Any, console: Any) -> None:
    """The orders side by side, then per bucket: exhaustion point and tail mix per order."""
    trials = next((o.trials for o in r.orders if o.trials), None)
    view = rich_table(f"batch orders{_of(r.split)} ({sum(r.batches):,} batches, policy "
                      f"{r.policy})",
                      ("order", "longest run", "of bucket", "mean longest", "P(run>=4)",
                       "lag-1 corr", "window spread", "first out %"),
                      caption=(f"mean longest, P(run>=4): over {trials} seeds. " if trials
                               else "")
                      + f"window spread: std of the mean batch length over windows of "
                      f"{r.log_window} batches (what bands a logged loss curve). first out: "
                      "epoch fraction when the first bucket runs dry")
    for o in r.orders:
        view.add_row(*_order_cells(o))
    console.print(view)
    cols = ["bucket", "batches", "%", "mean len"] + [o.name for o in r.orders]
    per = rich_table("per bucket (per order: out % / tail %)", cols,
                     caption="out: % of the epoch done when the bucket's last batch runs; "
                             "tail: the bucket's share of the last 10% of batches")
    for column in per.columns:
        column.no_wrap = True
    p = r.params
    for i, (lo, hi) in enumerate(zip(p.bounds[:-1], p.bounds[1:], strict=True)):
        row = [f"{i} [{lo},{hi})", f"{r.batches[i]:,}", _pct(r.batch_pct[i], hot=True),
               f"{r.mean_len[i]:,.0f}"]
        for o in r.orders:
            e = o.exhausted_at[i]
            row.append(f"{'-' if e is None else f'{e * 100:.1f}'}/{o.tail_mix[i] * 100:.1f}")
        per.add_row(*row)
    console.print(per)
    _print_groups(r, console)
    print_warnings(console, r.warnings)


def _group_rows(r: Any) -> tuple[list[str], list[list[str]], str]:
    """With ``--group-by``: the groups table's header, rows and the longest runs line."""
    head = ["group", "% samples", *(f"{o.name}: window % (std)" for o in r.orders)]
    first = r.orders[0].groups.windows
    rows = [[name, f"{first[name]['share']:.1f}",
             *(f"{w['min']:.1f}-{w['max']:.1f} ({w['spread']:.1f})"
               for w in (o.groups.windows[name] for o in r.orders))] for name in first]
    runs = "; ".join(f"{o.name} {o.groups.longest_run}"
                     + (f" ({o.groups.longest_run_group})" if o.groups.longest_run_group
                        else "") for o in r.orders)
    noun = NOUNS.get(r.group_by, r.group_by)
    line = f"longest run of batches from buckets made mostly of one {noun}: {runs}"
    return head, rows, line


def _print_groups(r: Any, console: Any) -> None:
    if r.group_by is None:
        return
    from rich.markup import escape  # group names are text, not rich markup

    head, rows, line = _group_rows(r)
    view = rich_table(escape(f"by {r.group_by}"), [escape(h) for h in head],
                      caption=f"each group's % of the samples of a window of {r.log_window} "
                      "batches: least-most (std)")
    for row in rows:
        view.add_row(*map(escape, row))
    console.print(view)
    console.print(escape(line), highlight=False)


def schedule_markdown(r: Any) -> str:
    out = [*_split_line(r.split), markdown_table([
        ["order", "longest run", "of bucket", "mean longest", "P(run>=4)", "lag-1 corr",
         "window spread", "first out %"],
        *(_order_cells(o) for o in r.orders)])]
    if r.group_by is not None:
        head, rows, line = _group_rows(r)
        out += ["", f"by {r.group_by}", "", markdown_table([head, *rows]), "", line]
    out += [f"\n> **warning:** {w}" for w in r.warnings]
    return "\n".join(out) + "\n"


def schedule_csv(r: Any) -> str:
    """One row per order and bucket, and an ``all`` row per order with the epoch's batches
    and the order's statistics (README, "CSV")."""
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    grouped = r.group_by is not None
    w.writerow(("split", "order", "bucket", "batches", "batch_pct", "exhausted_at", "tail_mix",
                "longest_run", "longest_run_bucket", "expected_longest_run", "lag1_autocorr",
                "window_spread", *(("group_longest_run", "group_longest_run_group")
                                   if grouped else ())))
    for o in r.orders:
        stats = (o.longest_run, o.longest_run_bucket, o.expected_longest_run, o.lag1_autocorr,
                 o.window_spread, *((o.groups.longest_run, o.groups.longest_run_group or "")
                                    if grouped else ()))
        for i, n in enumerate(r.batches):
            w.writerow((r.split or "", o.name, i, n, r.batch_pct[i], o.exhausted_at[i],
                        o.tail_mix[i], *stats))
        w.writerow((r.split or "", o.name, "all", sum(r.batches), 100.0, "", "", *stats))
    return out.getvalue()
