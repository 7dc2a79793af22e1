"""Shared by the analysis commands (``suggest``, ``schedule``, ``profile --policy``): their
options and loading the histogram of one split (a scan, or a histogram saved with
``--save-hist``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

import typer

from gpu_profiler.cli import options as o
from gpu_profiler.frozen import frozen

Policy = Annotated[list[str] | None, typer.Option(
    "--policy", metavar="[estimate|fixed|sorted|packed|packed-ffd|all]",
    help="Add exact batching policies: estimate, fixed, sorted, packed, "
    "packed-ffd, or all (repeat the option or separate with commas).")]
DropLast = Annotated[bool, typer.Option(
    "--drop-last", metavar="",
    help="Drop each bucket's incomplete last batch; steps per epoch round down.")]

MaxRun = Annotated[int | None, typer.Option(
    "--max-run", metavar="N",
    help="Hard cap on same-bucket batches back to back in the interleaved "
    "(stride) order (default: the least possible; an infeasible cap names the minimum).")]

# The sampler's options, as ``plan`` takes them (and ``diagnose`` with a SOURCE).
PlanPolicy = Annotated[str, typer.Option(
    "--policy", metavar="[fixed|sorted|packed]",
    help="fixed (the bucket table's batch size per bucket), sorted (filled under the "
    "token budget) or packed (rows of samples up to --max-seq-len, the rows profile "
    "--policy packed counts; a batch's rows are its samples cut greedily in order).")]
Order = Annotated[str, typer.Option(
    "--order", metavar="[stride|random]",
    help="stride (the interleaving planner) or random (steps shuffled).")]
Seed = Annotated[int, typer.Option("--seed", metavar="N", help="Seed of every shuffle.")]
Epoch = Annotated[int, typer.Option("--epoch", metavar="N",
                                    help="Which epoch's plan (with the seed, decides it).")]
MixedSteps = Annotated[bool, typer.Option(
    "--mixed-steps", metavar="", help="Let one step's micro-batches (one per rank) come from "
    "different buckets (default: one bucket per step, so no rank waits on another).")]
DropOutside = Annotated[bool, typer.Option(
    "--drop-outside", metavar="", help="Plan without the samples no bucket holds (null, "
    "negative, or outside the bounds once clipped); by default they are an error "
    "that says how many.")]
PlanGroupBy = Annotated[str | None, typer.Option(
    "--group-by", metavar="COLUMN", help="Interleave the sources too: COLUMN (a string, "
    "dictionary or integer column) names each sample's source; buckets made mostly of one "
    "source are interleaved as that source, keeping its runs of steps as short as the "
    "same-bucket cap allows. plan also reports each source's share of every 50 steps and "
    "the most steps in a row made mostly of one.")]

Sft = Annotated[str | None, typer.Option(
    "--sft", metavar="PROMPT,COMPLETION",
    help="Samples are SFT prompt + completion: two columns, each an integer length or a "
         "list of token ids; adds each bucket's loss (completion) tokens and the prompt x "
         "completion heat map.")]
Dpo = Annotated[str | None, typer.Option(
    "--dpo", metavar="PROMPT,CHOSEN,REJECTED",
    help="Samples are DPO triples (integer lengths or token lists): the memory length is "
         "the prompt and its longer answer, two rows a sample.")]
SftLabels = Annotated[str | None, typer.Option(
    "--sft-labels", metavar="COLUMN",
    help="Samples are SFT sequences whose list COLUMN marks the prompt with -100 (labels).")]
SftMask = Annotated[str | None, typer.Option(
    "--sft-mask", metavar="COLUMN", help="Samples are SFT sequences whose list COLUMN is "
    "non-zero on loss tokens (a loss or completion mask).")]


def shape(sft: str | None, dpo: str | None, labels: str | None, mask: str | None) -> Any:
    """The `gpu_profiler.shapes.Shape` these options ask for, None without any (its module,
    which loads the column readers, only then)."""
    if sft is None and dpo is None and labels is None and mask is None:
        return None
    from gpu_profiler.shapes import shape_of

    return shape_of(sft, dpo, labels, mask)


@frozen
class PlanOptions:
    """The sampler's options, as ``plan`` (and ``diagnose`` with a SOURCE) takes them."""

    policy: PlanPolicy = "fixed"
    order: Order = "stride"
    seed: Seed = 0
    epoch: Epoch = 0
    drop_last: DropLast = False
    max_run: MaxRun = None
    mixed_steps: MixedSteps = False
    drop_outside: DropOutside = False
    sft: Sft = None
    dpo: Dpo = None
    sft_labels: SftLabels = None
    sft_mask: SftMask = None
    group_by: PlanGroupBy = None

    def shape(self) -> Any:
        """The `gpu_profiler.shapes.Shape` of ``--sft``, ``--dpo``, ``--sft-labels`` or
        ``--sft-mask`` (None: the samples are the length source's)."""
        return shape(self.sft, self.dpo, self.sft_labels, self.sft_mask)

    def sampler(self, opts: o.ScanOptions) -> dict[str, Any]:
        """`BucketBatchSampler`'s keyword arguments (but the world size, which
        ``diagnose`` takes apart) with ``opts``' bucket table."""
        p = opts.params()
        return dict(bounds=p.bounds, max_seq_len=p.max_seq_len, token_budget=p.token_budget,
                    max_batch_size=p.max_batch_size, policy=self.policy, order=self.order,
                    seed=self.seed, drop_last=self.drop_last, max_run=self.max_run,
                    align_ranks=not self.mixed_steps, drop_outside=self.drop_outside,
                    attention_weight=p.cost.attention_weight,
                    cost_curve=p.cost.curve or None, cost_budget=p.cost.budget,
                    cost_unit=p.cost.unit if p.cost.curve else None,
                    varlen_attention=p.cost.varlen, shape=self.shape(),
                    group_by=self.group_by)


def plan_options(command: Callable[..., None]) -> Callable[..., None]:
    """Add every `PlanOptions` field to ``command``'s options, received as ``sampling``."""
    return o.with_options(command, PlanOptions, "sampling")


GroupBy = Annotated[str | None, typer.Option(
    "--group-by", metavar="COLUMN|@file|@dir",
    help="Also analyse each group of one split: each value of a string, dictionary or "
         "integer COLUMN (a source, language, dataset), each file (@file) or top-level "
         "subdirectory (@dir). profile: each group's share of samples, tokens and batches "
         "and each bucket's composition; compare: each group of B against A's; schedule, "
         "suggest: the runs of batches each order makes of one group.")]

Plot = Annotated[str | None, typer.Option(
    "--plot", metavar="FILE", help="Also draw the result to FILE: .png, .svg or .pdf "
    "(needs matplotlib: pip install 'gpu-profiler[plot]').")]


def load_groups(paths: str | list[str], opts: o.ScanOptions, by: str | None,
                whole: bool = False) -> tuple[Any, str | None, Any]:
    """The exact histogram to analyse, the split it is of and, with ``by`` (``--group-by``),
    the groups ``(by, each group's histogram)`` it sums to. Read back when ``paths`` is a
    saved histogram (JSON; no splits), else scanned (capped at ``--max-seq-len``, or binning
    every length when ``whole``): the ``--split``, else the ``train`` split, else the only
    one (see `gpu_profiler.engine.Planned.analysed_split`), the source listed once."""
    from gpu_profiler.api import analysed_groups, analysed_histogram

    source, execution = opts.source(paths), opts.execution(None if whole else opts.max_seq_len)
    if by is None:
        return (*analysed_histogram(source, execution), None)
    from gpu_profiler.histogram import LengthHistogram, merge

    hists, split = analysed_groups(source, by, execution)
    return (merge(hists.values()) if hists else LengthHistogram.empty(0)), split, (by, hists)
