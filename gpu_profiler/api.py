"""The public Python API: `histogram` and `profile`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from gpu_profiler.analysis.advice import advise, attach
from gpu_profiler.analysis.buckets import BucketTable, bucket_table
from gpu_profiler.analysis.policies import (
    PolicyResult,
    evaluate_policies,
    evaluate_policy,
    parse_policies,
)
from gpu_profiler.engine import ShardReport
from gpu_profiler.errors import ProfilerError
from gpu_profiler.histogram import MAX_AUTO_CAP, LengthHistogram
from gpu_profiler.params import DEFAULT_BOUNDS, BucketParams, parse_bounds
from gpu_profiler.readers import SourceOptions, open_source
from gpu_profiler.sharded import scan

SCHEMA = "gpu-profiler/profile/v1"


def histogram(source: Any, *, column: str | None = None, offsets_of: str | None = None,
              format: str | None = None, split: str | None = None, backend: str = "auto",
              cap: int | None = None, progress: bool = False,
              backend_options: Any = None, unit: str | None = None, eot: int | None = None,
              eot_position: str | None = None, token_dtype: str | None = None,
              trust_statistics: bool = False, client: Any = None,
              cache_dir: str | None = None, part: str | None = None) -> LengthHistogram:
    """Exact length histogram of ``source`` (all splits together).

    Args:
        source: path (HF save_to_disk dir, Parquet/IPC/JSONL file, Megatron-LM ``.idx``
            or prefix, token stream ``.bin``/``.npy``, directory or glob of shards) or an
            in-memory numpy array, pyarrow Array/Table, or ``datasets.Dataset``.
        column: integer length column (default: ``length``, else the only integer column).
        offsets_of: derive lengths from this list column's offsets instead.
        format: force ``hf``, ``parquet``, ``ipc`` or ``ipc-stream``.
        split: one split of a DatasetDict.
        backend: ``auto`` (for inputs up to ``engine.SMALL_SCAN_BYTES``: numba; else the
            first usable of cuda, numba, numpy), ``numpy``, ``numba`` or ``cuda``.
        cap: bins ``0..cap``; lengths above are summarized (count, tokens, min, max).
            ``None`` bins up to the largest length seen, at most
            `gpu_profiler.histogram.MAX_AUTO_CAP` (2**24).
        progress: draw a progress bar on a terminal.
        backend_options: the backend's typed options, `CpuOptions` (numba) or `CudaOptions`
            (cuda), or a dict of their fields, e.g. ``{"devices": [0, 1]}`` (see
            `gpu_profiler.backends.options`).
        unit: a Megatron-LM dataset's samples: ``sequence`` (default) or ``document``.
        eot: the end-of-text token id of a flat token stream (required for those).
        eot_position: ``end`` (default: each EOT closes its document, nanoGPT) or
            ``start`` (each EOT opens the next one, llm.c).
        token_dtype: a raw ``.bin`` token stream's ids, ``uint16`` (default) or ``uint32``.
        trust_statistics: Parquet: count a row group whose footer statistics say every
            value is equal from those statistics, without reading it (a lying footer then
            gives wrong numbers; off by default).
        client: a ``distributed.Client``: the scan runs as tasks (groups of shards) on its
            cluster (the ``[dask]`` extra; see `gpu_profiler.cluster`).
        cache_dir: keep each finished shard's histogram here, and reuse the ones kept, so
            a scan killed and rerun rescans only what it had not finished.
        part: ``"I/N"``: only slice I of N of the shard list (`gpu_profiler.slices`).

    An option the source's format does not take is a `ProfilerError` that says which
    formats take it (`gpu_profiler.readers.SourceOptions`).

    A histogram file written by ``LengthHistogram.save`` (``--save-hist``) is read back
    instead of scanned (re-binned to ``cap`` when one is given).
    """
    if LengthHistogram.is_saved(source):
        no_scan_options(source, column=column, offsets_of=offsets_of, format=format,
                        split=split, unit=unit, eot=eot, eot_position=eot_position,
                        token_dtype=token_dtype, trust_statistics=trust_statistics,
                        cache_dir=cache_dir, part=part)
        saved = LengthHistogram.load(source)
        return saved if cap is None else saved.with_cap(cap)
    return scan(source, column=column, offsets_of=offsets_of, format=format, split=split,
                backend=backend, cap=cap, progress=progress,
                backend_options=backend_options,
                source_options=SourceOptions(unit, eot, eot_position, token_dtype,
                                             trust_statistics),
                client=client, cache_dir=cache_dir, part=part).total


def no_scan_options(source: Any, **options: Any) -> None:
    """A histogram (saved, or in memory) was scanned already: an option that chooses what
    to scan cannot apply to it, and is an error rather than silently ignored."""
    given = [name for name, value in options.items() if value not in (None, False)]
    if given:
        flags = ", ".join("--" + name.replace("_", "-") for name in given)
        raise ProfilerError(f"{_label(source)}: {flags} cannot apply to a histogram (its "
                            "lengths were read when it was saved)")


@dataclass(frozen=True)
class ProfileResult:
    """A profile: the bucket table of the whole source, and of each split when it has them;
    ``policies`` are of one split (see :func:`profile`); ``report`` what a sharded scan
    adds (cache use, skipped shards, a slice's provenance)."""

    source: str
    backend: str
    length_source: str
    table: BucketTable
    histogram: LengthHistogram
    splits: dict[str, BucketTable]
    seconds: float
    policies: tuple[PolicyResult, ...] = ()
    report: ShardReport = ShardReport()

    def to_dict(self) -> dict[str, Any]:
        """The stable JSON interface (``schema`` names its version)."""
        d: dict[str, Any] = {"schema": SCHEMA, "source": self.source, "backend": self.backend,
                             "length_source": self.length_source}
        d.update(self.table.to_dict())
        if self.splits:
            d["splits"] = {name: t.to_dict() for name, t in self.splits.items()}
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


def analysed_split(source: Any, format: str | None = None,
                   split: str | None = None) -> str | None:
    """The split an analysis of ``source`` (``suggest``, ``schedule``, ``profile
    --policy``) covers: ``split`` when given, else ``train`` when the source has it, else
    its only split; None for an unsplit source and for a histogram (saved or not: it has
    no splits, and ``split`` is an error there). Several splits and none named ``train`` is a
    `ProfilerError`: merging them would analyse batches no training run makes."""
    if isinstance(source, LengthHistogram) or LengthHistogram.is_saved(source):
        no_scan_options(source, format=format, split=split)
        return None
    if split is not None:
        return split
    names = [name for name in open_source(source, format) if name]
    if "train" in names or len(names) < 2:
        return "train" if "train" in names else next(iter(names), None)
    raise ProfilerError(f"{_label(source)}: splits {', '.join(map(repr, names))} and none is "
                        "'train': choose the one to analyse with --split (split= in Python)")


def profile(source: Any, *, bounds: Sequence[int] | str = DEFAULT_BOUNDS,
            max_seq_len: int = BucketParams.max_seq_len,
            token_budget: int = BucketParams.token_budget,
            max_batch_size: int = BucketParams.max_batch_size,
            grad_accum: int = BucketParams.grad_accum,
            world_size: int = BucketParams.world_size, column: str | None = None,
            offsets_of: str | None = None, format: str | None = None,
            split: str | None = None, backend: str = "auto",
            progress: bool = False,
            backend_options: Any = None,
            policies: Sequence[str] | str = (), drop_last: bool = False,
            unit: str | None = None, eot: int | None = None, eot_position: str | None = None,
            token_dtype: str | None = None, trust_statistics: bool = False,
            client: Any = None, cache_dir: str | None = None, part: str | None = None,
            skip_bad_shards: bool = False) -> ProfileResult:
    """Scan ``source`` once and build the bucket table of every split and of the whole
    source (see docs/design.md for the semantics). The scan bins the whole length range
    (up to `gpu_profiler.histogram.MAX_AUTO_CAP`), so each table's ``percentiles`` are
    exact above ``max_seq_len`` too, and ``result.histogram`` serves any later
    ``max_seq_len``.

    ``source`` may also be a `LengthHistogram` (no scan). ``policies`` (e.g. ``"all"`` or
    ``["fixed", "packed"]``) adds exact batching policies (see
    :mod:`gpu_profiler.analysis.policies`) of one split, the one :func:`analysed_split`
    names (``train`` by default); each policy's ``split`` says which. Every split's table
    (or the whole source's, when it has no splits) carries the
    `~gpu_profiler.analysis.advice.Advice` on a dominant bucket, scored with ``drop_last``.
    ``skip_bad_shards``: a shard that cannot be read is left out (named with its error in
    ``report.skipped``) rather than stopping the scan. Other arguments as in
    :func:`histogram` and :class:`~gpu_profiler.params.BucketParams`.
    """
    params = BucketParams(parse_bounds(bounds), max_seq_len, token_budget, max_batch_size,
                          grad_accum, world_size)
    names = parse_policies(policies)
    source_options = SourceOptions(unit, eot, eot_position, token_dtype, trust_statistics)
    chosen = analysed_split(source, format, split) if names else None
    sharding = {"client": client, "cache_dir": cache_dir, "part": part,
                "skip_bad_shards": skip_bad_shards}
    result, hists = _profile(source, params, column, offsets_of, format, split, backend,
                             progress, backend_options, drop_last, source_options, sharding)
    if not names:
        return result
    pols = evaluate_policies(hists[chosen or ""], names, params, drop_last=drop_last)
    return replace(result, policies=tuple(replace(p, split=chosen) for p in pols))


def _profile(source: Any, params: BucketParams, column: str | None, offsets_of: str | None,
             format: str | None, split: str | None, backend: str, progress: bool,
             backend_options: Any, drop_last: bool,
             source_options: SourceOptions | None = None,
             sharding: dict[str, Any] | None = None
             ) -> tuple[ProfileResult, dict[str, LengthHistogram]]:
    """The profile, and the histogram of each split (``""``: an unsplit source);
    ``sharding``: the arguments of `gpu_profiler.sharded.scan` that shard it."""
    def table(hist: LengthHistogram) -> BucketTable:
        return attach(padded(hist), advise(hist, params, drop_last=drop_last))

    def padded(hist: LengthHistogram) -> BucketTable:
        fixed = evaluate_policy(hist, "fixed", params, drop_last=drop_last)
        return replace(bucket_table(hist, params), padding_pct=fixed.padding_pct)

    if LengthHistogram.is_saved(source) or isinstance(source, LengthHistogram):
        no_scan_options(source, column=column, offsets_of=offsets_of, format=format,
                        split=split, **_given(source_options),
                        **{k: v for k, v in (sharding or {}).items() if v and k != "client"})
        hist = source if isinstance(source, LengthHistogram) else LengthHistogram.load(source)
        saved = not isinstance(source, LengthHistogram)
        return ProfileResult(str(source) if saved else "<histogram>", "none",
                             "saved histogram" if saved else "histogram", table(hist), hist,
                             {}, 0.0), {"": hist}
    # The whole length range is binned (up to MAX_AUTO_CAP), so the percentiles are exact
    # above max_seq_len too, and a saved histogram serves any later --max-seq-len.
    s = scan(source, column=column, offsets_of=offsets_of, format=format, split=split,
             backend=backend, cap=None if params.max_seq_len <= MAX_AUTO_CAP
             else params.max_seq_len, progress=progress,
             backend_options=backend_options, source_options=source_options,
             **(sharding or {}))
    total = s.total
    named = {k: table(h) for k, h in s.histograms.items() if k}
    # The total of several splits is a sum for reference: the advice is each split's.
    whole = padded(total) if named else table(total)
    return ProfileResult(_label(source), s.backend, s.spec.describe(), whole, total, named,
                         s.seconds, report=s.report), {**s.histograms, "": total}


def _given(options: SourceOptions | None) -> dict[str, Any]:
    """The source options given, by name."""
    return {n: getattr(options, n) for n in options.given()} if options else {}


def _label(source: Any) -> str:
    """How ``source`` is named in results and errors."""
    return str(source) if isinstance(source, (str, bytes)) or hasattr(source, "__fspath__") \
        else f"<{type(source).__name__}>"
