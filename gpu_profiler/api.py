"""The public Python API: `histogram`, `profile` and `blend`."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import field, fields, replace
from typing import TYPE_CHECKING, Any

from gpu_profiler import driver, engine
from gpu_profiler.analysis.advice import advise, attach
from gpu_profiler.analysis.buckets import BucketTable, bucket_table
from gpu_profiler.analysis.policies import (
    PolicyResult,
    evaluate_policies,
    evaluate_policy,
    parse_policies,
)
from gpu_profiler.engine import ShardReport
from gpu_profiler.errors import ProfilerError, first_line
from gpu_profiler.frozen import frozen
from gpu_profiler.histogram import (
    MAX_AUTO_CAP,
    Grouping,
    LengthHistogram,
    merge,
    read_groups,
    read_saved,
)
from gpu_profiler.params import DEFAULT_BOUNDS, BucketParams, parse_bounds
from gpu_profiler.request import DEFAULT, LOCAL, Execution, Sharding, Source, gather

if TYPE_CHECKING:  # (imported where a blend, a mixture or a shape is profiled)
    from gpu_profiler.analysis.blend import Blend, BlendSpec
    from gpu_profiler.analysis.mixture import Mixture
    from gpu_profiler.analysis.shapes import ShapeProfile
    from gpu_profiler.shapes import Shape

SCHEMA = "gpu-profiler/profile/v1"


def histogram(source: Any, *, execution: Execution | None = None,
              sharding: Sharding | None = None, **options: Any) -> LengthHistogram:
    """Exact length histogram of ``source`` (all splits together).

    ``source`` is a `Source`, or its ``data``: a path (HF save_to_disk dir,
    Parquet/IPC/JSONL file, Megatron-LM ``.idx`` or prefix, token stream ``.bin``/``.npy``,
    directory or glob of shards) or an in-memory numpy array, pyarrow Array/Table or
    ``datasets.Dataset``. Every option is a field of `Source` (``column``, ``offsets_of``,
    ``format``, ``split``, ``unit``, ``eot``, ``eot_position``, ``token_dtype``,
    ``trust_statistics``), of `Execution` (``backend``, ``backend_options``, ``cap``,
    ``progress``) or of `Sharding` (``client``, ``cache_dir``, ``part``,
    ``skip_bad_shards``), given as a keyword or in the typed object (see
    `gpu_profiler.request`).

    A histogram (a `LengthHistogram`, or a file written by ``LengthHistogram.save``:
    ``--save-hist``) is taken as it is instead of scanned, re-binned to ``cap`` when one is
    given; an option that chooses what to scan is an error there.
    """
    src, ex, sh = gather(source, options, execution, sharding)
    saved = _histogram_given(src, sh)
    if saved is not None:
        return saved[0] if ex.cap is None else saved[0].with_cap(ex.cap)
    return driver.scan(src, ex, sh).total


def analysed_histogram(source: Source, execution: Execution = DEFAULT
                       ) -> tuple[LengthHistogram, str | None]:
    """The histogram an analysis (``suggest``, ``schedule``) covers and its split: the
    source listed once, then only its analysed split (`Planned.analysed_split`) scanned; a
    histogram is taken as it is (split None)."""
    saved = _histogram_given(source, LOCAL)
    if saved is not None:
        hist = saved[0]
        return (hist if execution.cap is None else hist.with_cap(execution.cap)), None
    planned = engine.plan(source, execution)
    split = planned.analysed_split()
    return driver.run(planned.only(split)).total, split


def analysed_groups(source: Source, by: str, execution: Execution = DEFAULT
                    ) -> tuple[dict[str, LengthHistogram], str | None]:
    """Each group's histogram (``--group-by``) of the split an analysis covers, and that
    split: scanned (see `gpu_profiler.groups.scan`), or the groups saved with a histogram,
    which must be by ``by`` (split None)."""
    given = _histogram_given(source, LOCAL)
    if given is None:
        from gpu_profiler import groups

        g = groups.scan(source, by, execution)
        return g.histograms, g.split
    if given[1] is None:
        raise ProfilerError(f"{source.label}: --group-by needs the data: a histogram has no "
                            "groups")
    saved_by, hists = given[1]
    if saved_by != by:
        raise ProfilerError(f"{source.label}: its groups are by {saved_by}, not {by}")
    cap = execution.cap
    return (hists if cap is None else {k: h.with_cap(cap) for k, h in hists.items()}), None


def _histogram_given(source: Source, sharding: Sharding
                     ) -> tuple[LengthHistogram, Grouping | None] | None:
    """The histogram ``source`` is (in memory, or saved to a file) and the groups saved
    with it (``--group-by``), else None. It was scanned already: an option that chooses
    what to scan cannot apply to it, and is an error rather than silently ignored."""
    data = source.data
    groups = None
    if isinstance(data, LengthHistogram):
        hist = data
    elif LengthHistogram.is_saved(data):
        hist, d = read_saved(data)
        try:
            groups = read_groups(d, hist)
        except ValueError as exc:
            raise ProfilerError(f"{data}: not a gpu-profiler histogram ({exc})") from None
    else:
        return None
    given = [*source.given(), *sharding.given()]
    if given:
        flags = ", ".join("--" + name.replace("_", "-") for name in given)
        raise ProfilerError(f"{source.label}: {flags} cannot apply to a histogram (its "
                            "lengths were read when it was saved)")
    return hist, groups


@frozen
class ProfileResult:
    """A profile: the bucket table and histogram of the whole source, and of each split
    when it has them; ``policies`` are of one split (see :func:`profile`); ``report`` what
    a sharded scan adds (cache use, skipped shards, a slice's provenance)."""

    source: str
    backend: str
    length_source: str
    table: BucketTable
    histogram: LengthHistogram
    splits: dict[str, BucketTable]
    seconds: float
    policies: tuple[PolicyResult, ...] = ()
    report: ShardReport = ShardReport()
    split_histograms: dict[str, LengthHistogram] = field(default_factory=dict)
    groups: dict[str, BucketTable] = field(default_factory=dict)
    group_histograms: dict[str, LengthHistogram] = field(default_factory=dict)
    mixture: Mixture | None = None
    group_split: str | None = None
    shape: ShapeProfile | None = None

    def to_dict(self) -> dict[str, Any]:
        """The stable JSON interface (``schema`` names its version)."""
        d: dict[str, Any] = {"schema": SCHEMA, "source": self.source, "backend": self.backend,
                             "length_source": self.length_source}
        d.update(self.table.to_dict())
        if self.splits:
            d["splits"] = {name: t.to_dict() for name, t in self.splits.items()}
        if self.mixture is not None:
            shares = {g.name: g for g in self.mixture.shares}
            d["group_by"] = self.mixture.by
            d["group_split"] = self.group_split
            d["groups"] = {name: {**t.to_dict(), "batches": shares[name].batches,
                                  "sample_share_pct": shares[name].sample_pct,
                                  "token_share_pct": shares[name].token_pct,
                                  "batch_share_pct": shares[name].batch_pct}
                           for name, t in self.groups.items()}
            d["group_buckets"] = self.mixture.to_dict()["buckets"]
        if self.shape is not None:
            d["shape"] = self.shape.to_dict()
            d["shape_split"] = self.group_split
        if self.policies:
            d["policies"] = [p.to_dict() for p in self.policies]
        if self.report.cache is not None:
            d["cache"] = self.report.cache
        if self.report.skipped:
            d["skipped_shards"] = [{"shard": s, "error": e} for s, e in self.report.skipped]
        if self.report.provenance is not None:
            d["part"] = self.report.provenance["slices"][0]
            d["parts"] = self.report.provenance["parts"]
        d["seconds"] = self.seconds
        return d


def profile(source: Any, *, policies: Sequence[str] | str = (), drop_last: bool = False,
            group_by: str | None = None, shape: Shape | None = None,
            execution: Execution | None = None, sharding: Sharding | None = None,
            **options: Any) -> ProfileResult:
    """Scan ``source`` once and build the bucket table of every split and of the whole
    source (see docs/design.md for the semantics). The scan bins the whole length range
    (up to `gpu_profiler.histogram.MAX_AUTO_CAP`), so each table's ``percentiles`` are
    exact above ``max_seq_len`` too, and ``result.histogram`` serves any later
    ``max_seq_len``.

    ``source`` and the scan's options are those of :func:`histogram` (but ``cap``); the
    bucket options (``bounds``, ``max_seq_len``, ``token_budget``, ``max_batch_size``,
    ``grad_accum``, ``world_size``, and ``cost``: a `gpu_profiler.cost.CostModel`) are the
    fields of `BucketParams`. ``source`` may
    also be a `LengthHistogram` (no scan). ``policies`` (e.g. ``"all"`` or ``["fixed",
    "packed"]``) adds exact batching policies (see :mod:`gpu_profiler.analysis.policies`)
    of one split, the one `Planned.analysed_split` names (``train`` by default); each
    policy's ``split`` says which. Every split's table (or the whole source's, when it has
    no splits) carries the `~gpu_profiler.analysis.advice.Advice` on a dominant bucket,
    scored with ``drop_last``. With ``skip_bad_shards`` a shard that cannot be read is
    left out (named with its error in ``report.skipped``).

    ``group_by`` (a column: string, dictionary or integer; or ``"@file"`` / ``"@dir"``: each
    file, or each top-level subdirectory, of a source of many) profiles one split (as
    ``policies`` do) and each of its groups: ``result.groups`` holds each group's table,
    ``result.mixture`` their shares of samples, tokens and batches and each bucket's
    composition (`gpu_profiler.analysis.mixture`); the tables are the split's.

    ``shape`` (a `gpu_profiler.shapes.Shape`: `gpu_profiler.shapes.shape_of` makes one
    from ``sft=("prompt_ids", "completion_ids")``, ``dpo=(...)``, ``labels="labels"`` or
    ``loss_mask=...``) profiles one split of SFT or DPO samples: the tables are of the length
    that sets memory, and ``result.shape`` adds each bucket's loss tokens and the prompt x
    completion heat map (`gpu_profiler.analysis.shapes`).
    """
    bucket = {k: options.pop(k) for k in [f.name for f in fields(BucketParams)] if k in options}
    params = BucketParams(**{**bucket, "bounds": parse_bounds(bucket.get("bounds",
                                                                         DEFAULT_BOUNDS))})
    if shape is not None and params.cost.rows_per_sample == 1:
        params = replace(params, cost=replace(params.cost,
                                              rows_per_sample=shape.rows_per_sample))
    names = parse_policies(policies)
    if "cap" in options or (execution is not None and execution.cap is not None):
        raise TypeError("profile bins every length: cap is an option of histogram()")
    src, ex, sh = gather(source, options, execution, sharding)

    def table(hist: LengthHistogram) -> BucketTable:
        fixed = evaluate_policy(hist, "fixed", params, drop_last=drop_last)  # once, for both
        return attach(padded(hist, fixed), advise(hist, params, drop_last=drop_last,
                                                  fixed=fixed))

    def padded(hist: LengthHistogram, fixed: PolicyResult | None = None) -> BucketTable:
        fixed = fixed or evaluate_policy(hist, "fixed", params, drop_last=drop_last)
        return replace(bucket_table(hist, params), padding_pct=fixed.padding_pct)

    # A scan bins the whole length range (up to MAX_AUTO_CAP), so the percentiles are exact
    # above max_seq_len too, and a saved histogram serves any later --max-seq-len.
    ex = replace(ex, cap=None if params.max_seq_len <= MAX_AUTO_CAP else params.max_seq_len)
    given_groups = _histogram_given(src, sh)
    given = None if given_groups is None else given_groups[0]
    if shape is not None:
        if group_by is not None or given is not None or not sh.local:
            why = ("--group-by" if group_by is not None else "a histogram" if given is not None
                   else "a sharded scan")
            raise ProfilerError(f"{shape.option} reads the samples' parts in this process: "
                                f"not with {why}")
        result = _shaped(src, shape, ex, params, table)
        chosen = result.group_split
        hists = {chosen or "": result.histogram}
    elif given_groups is not None and given_groups[1] is not None:
        by, saved_groups = given_groups[1]
        if group_by not in (None, by):
            raise ProfilerError(f"{src.label}: its groups are by {by}, not {group_by}")
        result = _mixed(src.label, by, given_groups[0], saved_groups, table, padded,
                        "none", "saved histogram", 0.0, None)
        hists, chosen = {"": result.histogram}, None
    elif group_by is not None:
        if given is not None:
            raise ProfilerError(f"{src.label}: --group-by needs the data: a histogram has no "
                                "groups")
        result = _grouped(src, group_by, ex, sh, table, padded)
        chosen = result.group_split
        hists = {chosen or "": result.histogram}
    elif given is not None:
        saved = not isinstance(src.data, LengthHistogram)
        result = ProfileResult(src.label if saved else "<histogram>", "none",
                               "saved histogram" if saved else "histogram", table(given),
                               given, {}, 0.0)
        hists, chosen = {"": given}, None
    else:
        planned = engine.plan(src, ex, skip_bad=sh.skip_bad_shards)
        chosen = planned.analysed_split() if names else None
        s = driver.run(planned, sh)
        total = s.total
        named = {k: h for k, h in s.histograms.items() if k}
        # The total of several splits is a sum for reference: the advice is each split's.
        result = ProfileResult(src.label, s.backend, s.spec.describe(),
                               padded(total) if named else table(total), total,
                               {k: table(h) for k, h in named.items()}, s.seconds,
                               report=s.report, split_histograms=named)
        hists = {**s.histograms, "": total}
    if not names:
        return result
    pols = evaluate_policies(hists[chosen or ""], names, params, drop_last=drop_last)
    return replace(result, policies=tuple(replace(p, split=chosen) for p in pols))


def _grouped(src: Source, by: str, ex: Execution, sh: Sharding, table: Any, padded: Any
             ) -> ProfileResult:
    """The profile of one split of ``src`` and of each of its groups (see `profile`)."""
    from gpu_profiler import groups

    g = groups.scan(src, by, ex, sh)
    total = merge(g.histograms.values()) if g.histograms else LengthHistogram.empty(0)
    s = g.scan
    return replace(_mixed(src.label, by, total, g.histograms, table, padded, s.backend,
                          s.spec.describe(), s.seconds, g.split), report=s.report)


def _mixed(label: str, by: str, total: LengthHistogram, hists: dict[str, LengthHistogram],
           table: Any, padded: Any, backend: str, length_source: str, seconds: float,
           split: str | None) -> ProfileResult:
    """The profile of ``total`` and of its groups ``hists`` (see `profile`)."""
    from gpu_profiler.analysis.mixture import mixture

    whole = table(total)
    tables = {name: padded(h) for name, h in hists.items()}
    mix = mixture(by, tables, whole)
    whole = replace(whole, warnings=(*whole.warnings, *mix.warnings))
    return ProfileResult(label, backend, length_source, whole, total, {}, seconds,
                         groups=tables, group_histograms=hists, mixture=mix, group_split=split)


def _shaped(src: Source, shape: Shape, ex: Execution, params: BucketParams, table: Any
            ) -> ProfileResult:
    """The profile of one split of ``src``'s SFT or DPO samples (see `profile`)."""
    from gpu_profiler import shapes
    from gpu_profiler.analysis.shapes import shape_profile

    counted, split, planned = shapes.scan(src, shape, ex)
    hist = counted.histogram()
    what = (f"{shape.kind.upper()} {' + '.join(shape.parts[:2])}"
            + (" (the longer answer), two rows a sample" if shape.kind == "dpo" else "")
            + f": {', '.join(map(repr, shape.columns))}"
            + (f" ({shape.count})" if shape.count else ""))
    return ProfileResult(src.label, planned.backend.name, what, table(hist), hist, {},
                         time.perf_counter() - planned.started, group_split=split,
                         shape=shape_profile(counted.keys, counted.counts, shape.to_dict(),
                                             params))


def blend(spec: Sequence[str] | str | BlendSpec | None = None, *,
          data_args_path: str | None = None, per_split_data_args_path: str | None = None,
          data_split: str = "train", train_samples: int | None = None,
          train_tokens: int | None = None, warn_epochs: float | None = None,
          seq_length: int | None = None, megatron_split: str | None = None,
          execution: Execution | None = None, sharding: Sharding | None = None,
          **options: Any) -> Blend:
    """A Megatron-LM blend as trained (see :mod:`gpu_profiler.analysis.blend`).

    The blend is ``spec`` (``--data-path``'s words: ``["0.3", "a", "0.7", "b"]``, a string
    of them, or a `BlendSpec`), or the file ``data_args_path`` (``--data-args-path``), or
    the ``data_split`` (train, valid, test) of the JSON file ``per_split_data_args_path``.
    Each distinct path is scanned once with :func:`histogram` (any source it reads, or a
    saved histogram) with the scan options given (``column``, ``offsets_of``, ``unit``...:
    the same for every source, as in ``histogram``). ``train_samples`` (or
    ``train_tokens``; default: every source's samples added up) sizes the blend, whose
    samples are Megatron-LM GPTDataset windows of ``seq_length`` tokens when given. With
    ``megatron_split`` (Megatron-LM's ``--split``, ``"969,30,1"``) each source holds only
    the rows of its ``data_split`` (the rows read in order, `gpu_profiler.lengths`). A source
    repeated more than ``warn_epochs`` epochs is warned about (None:
    `gpu_profiler.analysis.blend.WARN_EPOCHS`, 4). The bucket
    options (``bounds``, ``max_seq_len``, ``token_budget``...: `BucketParams`) make the
    bucket table of the blend as trained (``result.table``, with its advice, as `profile`
    makes it)."""
    from gpu_profiler.analysis.blend import (
        WARN_EPOCHS,
        BlendSpec,
        number,
        parse_blend,
        read_data_args,
        read_per_split_data_args,
    )
    from gpu_profiler.analysis.blend import blend as run_blend

    bucket = {k: options.pop(k) for k in [f.name for f in fields(BucketParams)] if k in options}
    given = [x is not None for x in (spec, data_args_path, per_split_data_args_path)]
    if sum(given) != 1:
        raise ProfilerError("give one blend: WEIGHT PATH pairs (--data-path), "
                            "--data-args-path FILE or --per-split-data-args-path FILE")
    if isinstance(spec, BlendSpec):
        parsed = spec
    elif spec is not None:
        parsed = parse_blend(spec.split() if isinstance(spec, str) else list(spec))
    elif data_args_path is not None:
        parsed = read_data_args(data_args_path)
    else:
        parsed = read_per_split_data_args(str(per_split_data_args_path), data_split)
    if "cap" in options or (execution is not None and execution.cap is not None):
        raise TypeError("blend bins every length: cap is an option of histogram()")
    BucketParams(**{**bucket, "bounds": parse_bounds(bucket.get("bounds", DEFAULT_BOUNDS))})
    if megatron_split is not None and per_split_data_args_path is not None:
        raise ProfilerError("--megatron-split splits the rows of --data-path sources; "
                            "--per-split-data-args-path names each split's sources")
    if megatron_split is not None and options.get("unit") == "document":
        raise ProfilerError("--megatron-split splits a dataset's sequences, as Megatron-LM "
                            "does: not with --unit document")
    scanned: dict[str, LengthHistogram] = {}
    for prefix in parsed.prefixes:
        if prefix in scanned:
            continue
        try:
            scanned[prefix] = histogram(prefix, execution=execution, sharding=sharding,
                                        **options) if megatron_split is None else \
                _split_histogram(prefix, megatron_split, data_split, execution, options)
        except ProfilerError as e:
            if parsed.weights is None and len(parsed.prefixes) % 2 and number(prefix) is not None:
                raise ProfilerError(
                    f"{first_line(e)} (the blend has an odd number of items, so Megatron-LM "
                    f"reads every one as a path: is a weight missing its path?)") from None
            raise
    result = run_blend(parsed, [scanned[p] for p in parsed.prefixes], train_samples,
                       train_tokens, WARN_EPOCHS if warn_epochs is None else warn_epochs,
                       seq_length)
    if megatron_split is not None:
        result = replace(result, megatron_split=megatron_split, data_split=data_split)
    trained = profile(result.histogram, **bucket)  # the bucket table, with its advice
    table = trained.table if seq_length is None else \
        replace(trained.table, warnings=(), advice=None)  # documents: no batching to advise
    return replace(result, table=table)


def _split_histogram(prefix: str, ratios: str, which: str, execution: Execution | None,
                     options: dict[str, Any]) -> LengthHistogram:
    """The histogram of the rows of ``prefix`` that Megatron-LM's ``--split`` ``ratios``
    gives its split ``which`` (`gpu_profiler.analysis.blend.split_rows`), its lengths read
    in row order (`gpu_profiler.lengths`, where a null is -1: a length of -1 counts as
    null)."""
    import numpy as np

    from gpu_profiler.analysis.blend import split_rows
    from gpu_profiler.lengths import NULL, lengths

    if LengthHistogram.is_saved(prefix):
        raise ProfilerError(f"{prefix}: a saved histogram has no row order to split "
                            "(--megatron-split)")
    x = lengths(prefix, **{f.name: options[f.name] for f in fields(Source)
                           if f.name in options})
    beg, end = split_rows(ratios, which, x.size)
    part = x[beg:end]
    nulls = int(np.count_nonzero(part == NULL))
    return replace(histogram(part[part != NULL], execution=execution),
                   null_count=nulls)
