"""`BucketBatchSampler`: the profiled batching, handed to the training loop.

An epoch's plan (:func:`plan_epoch`) is a pure function of the lengths, the parameters, the
seed and the epoch, so every rank (and every machine) computes the same one:

1. **Bucket and shuffle.** Samples are counting-sorted by clipped length into random piles
   (`gpu_profiler.kernels.plan.pile_sort`) and each pile is shuffled: every bucket becomes
   a uniform random permutation of its samples (``fixed``), or its samples in ascending
   length with ties in random order (``sorted``). No argsort; O(samples).
2. **Batch.** ``fixed``: the bucket table's batch size per bucket (``ceil`` batches, or
   ``floor`` with ``drop_last``); ``sorted``: filled under the token budget. Both equal
   ``profile --policy``, batch for batch; a sample longer than the token budget, which the
   policy leaves out (``unbatchable_samples``), gets a batch of its own.
3. **Order.** Each bucket's batches are shuffled, then laid out by the interleaving planner
   (`gpu_profiler.analysis.interleave`): the longest same-bucket run is the least possible
   (or ``max_run``), and every bucket is spread evenly over the epoch. With ``groups`` (each
   sample's source), a bucket whose samples are mostly one source is that source's, and
   the planner also keeps the runs of one source's batches short.

With ``world_size`` ranks an optimizer step takes one micro-batch per rank. By default
(``align_ranks``) the ``world_size`` micro-batches of one step come from one bucket, so no
rank waits on another's longer batch: the planner lays out groups of ``world_size``
same-bucket batches, and rank ``r`` takes the ``r``-th of each group. A bucket's leftover
batches (fewer than ``world_size``) fill mixed steps at the end of the epoch (at most one
per bucket; they may lengthen a rank's last same-bucket run by one). Every rank
gets the same number of batches: with ``drop_last`` an incomplete last step is dropped;
otherwise the largest batches of that step are split in two until every rank has one
(``split_batches`` counts them), so every sample still comes exactly once. Gradient
accumulation takes consecutive steps, which the planner gives different buckets whenever
the counts allow: each optimizer step then averages several buckets, which is what flattens
the banded loss curve (one bucket per optimizer step would keep the bands).
"""

from __future__ import annotations

import hashlib
import json
import sys
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import asdict, replace
from typing import Any

import numpy as np

from gpu_profiler.analysis.interleave import early_buckets, interleave, longest_run, min_run
from gpu_profiler.cost import (
    batch_rows,
    batch_rows_array,
    budget_of,
    budget_words,
    cost_model,
    row_cost,
    squares,
    varlen_cost,
)
from gpu_profiler.errors import ProfilerError
from gpu_profiler.frozen import frozen
from gpu_profiler.labels import CODE, label_codes, on_host
from gpu_profiler.params import DEFAULT_BOUNDS, BucketParams, parse_bounds
from gpu_profiler.piles import shuffled_groups

SCHEMA = "gpu-profiler/sampler/v2"
POLICIES = ("fixed", "sorted", "packed")


@frozen
class EpochPlan:
    """Every batch of one epoch, all ranks together, in order.

    Attributes:
        layout: sample indices (int64), each bucket's samples together.
        start, end: batch ``j`` is ``layout[start[j]:end[j]]``; batches ``s * world_size ..
            s * world_size + world_size - 1`` make step ``s`` (one per rank).
        bucket: bucket of each batch (int32).
        world_size: ranks.
        dropped_samples: samples in no batch (``drop_last`` remainders, and samples outside
            every bucket: null, negative, or outside ``[bounds[0], bounds[-1])`` clipped).
        split_batches: batches split in two to give every rank a last batch.
        min_run: the least longest same-bucket run of any order of these batches (of
            steps, when ranks are aligned); the plan's is this, or ``max_run``.
        row_starts: ``packed`` only: where each packed row starts in the layout.
    """

    layout: np.ndarray
    start: np.ndarray
    end: np.ndarray
    bucket: np.ndarray
    world_size: int
    dropped_samples: int
    split_batches: int
    min_run: int = 0
    row_starts: np.ndarray | None = None

    @property
    def batches(self) -> int:
        return int(self.start.size)

    @property
    def steps(self) -> int:
        return self.batches // self.world_size

    def rows(self) -> np.ndarray:
        """Rows of each batch: its samples, or its packed rows (``packed``)."""
        if self.row_starts is None:
            return self.end - self.start
        r = self.row_starts
        inner = np.searchsorted(r, self.end) - np.searchsorted(r, self.start, "right")
        return inner + 1  # a split inside a row starts a row of its own

    def batch(self, j: int) -> np.ndarray:
        """The sample indices of batch ``j``."""
        return self.layout[self.start[j]:self.end[j]]

    def indices(self) -> tuple[np.ndarray, np.ndarray]:
        """``(indices, offsets)``: every sample index in batch order, and batch ``j`` as
        ``indices[offsets[j]:offsets[j + 1]]``."""
        sizes = self.end - self.start
        offsets = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
        index = np.repeat(self.start - offsets[:-1], sizes) + np.arange(offsets[-1])
        return self.layout[index], offsets


def plan_epoch(lengths: np.ndarray, params: BucketParams, *, policy: str = "fixed",
               seed: int = 0, epoch: int = 0, drop_last: bool = False,
               max_run: int | None = None, align_ranks: bool = True,
               sources: np.ndarray | None = None) -> EpochPlan:
    """The plan of one epoch (see the module docstring); ``params.world_size`` ranks;
    ``sources``: every sample's source (int codes), which the order interleaves too."""
    from gpu_profiler import native

    if policy not in POLICIES:
        raise ProfilerError(f"the sampler batches by policy fixed, sorted or packed, got "
                            f"{policy!r}")
    x = _as_lengths(lengths)
    p, cap = params, params.max_seq_len
    key = _key(seed, epoch)
    classes = None if sources is None else _classes(x, p, sources)
    if policy == "packed":
        from gpu_profiler.packing import pack_epoch

        packed = pack_epoch(x, p, key, drop_last)
        return _lay_out(packed.layout, packed.start, packed.end, packed.per_bucket,
                        p.world_size, drop_last, max_run, align_ranks, packed.dropped,
                        packed.row_offsets, classes)
    # Groups of samples shuffled together: a bucket (fixed) or one clipped length (sorted).
    lo, hi = min(p.bounds[0], cap + 1), min(p.bounds[-1], cap + 1)
    edges = np.minimum(np.asarray(p.bounds), cap + 1)
    group = _length_buckets(p)
    if policy == "sorted":
        group[lo:hi] = np.arange(lo, hi)
    groups = int(group.max()) + 1
    layout, _, counts = shuffled_groups(x, cap, group, groups, key)

    # Each bucket's batches as (start, end) in the layout, then shuffled within the bucket.
    clipped = counts[:cap + 1]
    starts, ends, dropped = [], [], int(x.size - layout.size)
    base = 0
    for blo, bhi in zip(edges[:-1], edges[1:], strict=True):
        values = np.flatnonzero(clipped[blo:bhi]) + blo
        n = int(clipped[blo:bhi].sum())
        cuts, lost = _cuts(values, clipped[values], n, p, policy, drop_last)
        dropped += lost
        starts.append(base + cuts[:, 0])
        ends.append(base + cuts[:, 1])
        base += n
    per_bucket = np.array([s.size for s in starts], np.int64)
    order = np.arange(int(per_bucket.sum()), dtype=np.int64)
    native.kernel("shuffle_segments")(order, np.concatenate(([0], np.cumsum(per_bucket))),
                                      key ^ 0x5EED)
    start = np.concatenate(starts)[order] if starts else np.zeros(0, np.int64)
    end = np.concatenate(ends)[order] if ends else np.zeros(0, np.int64)
    return _lay_out(layout, start, end, per_bucket, p.world_size, drop_last, max_run,
                    align_ranks, dropped, None, classes)


def _cuts(values: np.ndarray, cnt: np.ndarray, n: int, p: BucketParams, policy: str,
          drop_last: bool) -> tuple[np.ndarray, int]:
    """One bucket's batches as ``(start, end)`` rows from its first sample, and the samples
    dropped."""
    from gpu_profiler import native

    if not n:
        return np.zeros((0, 2), np.int64), 0
    if policy == "sorted":
        out = np.zeros((n + 1, 2), np.int64)  # at most one batch per sample
        c = p.cost
        varlen = np.array([c.attention_weight if c.varlen else 0.0,
                           float(budget_of(p)) / c.rows_per_sample], np.float64)
        nb, lost = native.kernel("sorted_cuts")(cnt.astype(np.int64),
                                                batch_rows_array(values, p), int(drop_last),
                                                values.astype(np.int64), varlen,
                                                p.max_batch_size, out)
        return out[:nb], lost
    size = batch_rows(int(values[-1]), p)
    if not size:  # a sample over the budget: the bucket's batch size would be 0
        over = int(cnt[batch_rows_array(values, p) == 0].sum())
        budget = "token_budget" if p.cost.budget is None else "cost_budget"
        warnings.warn(f"policy fixed: {over} samples of bucket [{values[0]}..{values[-1]}] are "
                      f"longer than the {budget_words(p)}, so each of the "
                      f"bucket's {n} samples gets a batch of its own; policy sorted batches "
                      f"the others under the budget (or raise {budget}, lower "
                      "max_seq_len)", stacklevel=4)
        size = 1
    full, rest = divmod(n, size)
    keep = full + (1 if rest and not drop_last else 0)
    start = np.arange(keep, dtype=np.int64) * size
    return np.stack([start, np.minimum(start + size, n)], axis=1), rest if drop_last else 0


def _lay_out(layout: np.ndarray, start: np.ndarray, end: np.ndarray, per_bucket: np.ndarray,
             world: int, drop_last: bool, max_run: int | None, align: bool,
             dropped: int, rows: np.ndarray | None, classes: np.ndarray | None) -> EpochPlan:
    """Order the batches (grouped by bucket, ``per_bucket`` each) with the planner and
    make every step hold one batch per rank (``rows``: where packed rows start in the
    layout, the places a packed batch is split at when it can be; ``classes``: the source
    making each bucket mostly, -1 none, interleaved as such)."""
    from gpu_profiler import native

    k = per_bucket.size
    first = np.concatenate(([0], np.cumsum(per_bucket)[:-1])).astype(np.int64)
    unit = world if align and world > 1 else 1
    units = per_bucket // unit
    seq = interleave(units, max_run, classes)  # the bucket of each group of `unit` batches
    chosen = np.empty(seq.size * unit + int((per_bucket - units * unit).sum()), np.int64)
    native.kernel("expand")(seq, first, unit, chosen, np.zeros(k, np.int64))
    # Leftovers (fewer than `unit` batches of a bucket) make mixed steps at the end.
    chosen[seq.size * unit:] = np.concatenate(
        [np.arange(first[b] + units[b] * unit, first[b] + per_bucket[b]) for b in range(k)])
    bucket_of = np.repeat(np.arange(k, dtype=np.int32), per_bucket)
    s, e, bk = start[chosen], end[chosen], bucket_of[chosen]
    split = 0
    short = s.size % world
    if short:
        if drop_last:
            dropped += int((e[-short:] - s[-short:]).sum())
            s, e, bk = s[:-short], e[:-short], bk[:-short]
        else:
            s, e, bk, split = _fill_last_step(s, e, bk, world, rows)
    return EpochPlan(layout, s, e, bk, world, dropped, split, min_run(units), rows)


def _length_buckets(p: BucketParams) -> np.ndarray:
    """The bucket of every clipped length ``0 .. max_seq_len`` (-1: none; one more entry,
    -1, where the counting sort puts negative lengths)."""
    cap = p.max_seq_len
    lo, hi = min(p.bounds[0], cap + 1), min(p.bounds[-1], cap + 1)
    bucket = np.full(cap + 2, -1, np.int64)
    bucket[lo:hi] = np.searchsorted(np.minimum(np.asarray(p.bounds), cap + 1),
                                    np.arange(lo, hi), side="right") - 1
    return bucket


def _classes(x: np.ndarray, p: BucketParams, sources: np.ndarray) -> np.ndarray:
    """Per bucket, the source making it mostly (by the rule of
    `gpu_profiler.analysis.mixture.dominant`), -1 for none: a bucket's mix is that of the
    samples whose clipped length falls in it, as ``profile --group-by`` and ``schedule``
    count it. One pass in sample order (no gather through the shuffled layout)."""
    from gpu_profiler import native
    from gpu_profiler.analysis.mixture import dominant

    cap, k, g = p.max_seq_len, len(p.bounds) - 1, int(sources.max(initial=0)) + 1
    counts = np.zeros(k * g, np.int64)
    native.kernel(f"source_counts_{'int32' if x.dtype == np.int32 else 'int64'}")(
        x, cap, _length_buckets(p), sources, g, counts)
    table = counts.reshape(k, g).astype(np.float64)
    whole = table.sum()
    return dominant(table, table.sum(axis=0) / whole * 100 if whole else np.zeros(g))


def _fill_last_step(s: np.ndarray, e: np.ndarray, bk: np.ndarray, world: int,
                    rows: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Split the largest batches of the last steps in two until the batches are a multiple
    of ``world`` (a split only removes rows, so it keeps both limits; a packed batch is
    split between two of its rows where it has several). The split-off halves go to the
    end, so every step before the last keeps its batches (and its bucket)."""
    tail = s.size % world
    need = world - tail
    take = tail
    while int((e[-take:] - s[-take:]).sum()) < take + need:  # not enough rows to split
        if take + world > s.size:
            raise ProfilerError(
                f"{int((e - s).sum())} samples in {s.size} batches cannot give each of {world} "
                f"ranks as many batches ({s.size + need} needed, one sample at least each): "
                "use drop_last or fewer ranks")
        take += world
    ts, te, tb = list(s[-take:]), list(e[-take:]), list(bk[-take:])
    for _ in range(need):
        j = max(range(len(ts)), key=lambda i: (te[i] - ts[i], -i))
        mid = ts[j] + (te[j] - ts[j] + 1) // 2
        if rows is not None:  # the row boundary inside the batch nearest its middle
            inside = rows[np.searchsorted(rows, ts[j], "right"):np.searchsorted(rows, te[j])]
            if inside.size:
                mid = int(inside[np.argmin(np.abs(inside - mid))])
        ts.append(mid)
        te.append(te[j])
        tb.append(tb[j])
        te[j] = mid
    cut = s.size - take
    return (np.concatenate((s[:cut], ts)).astype(np.int64),
            np.concatenate((e[:cut], te)).astype(np.int64),
            np.concatenate((bk[:cut], tb)).astype(np.int32), need)


def _as_lengths(lengths: Any) -> np.ndarray:
    """Lengths given in memory (numpy, pyarrow, a torch tensor on any device, a cupy array,
    a Python sequence) as one contiguous int32/int64 numpy array."""
    import pyarrow as pa

    x = lengths
    if isinstance(x, (pa.Array, pa.ChunkedArray)):
        from gpu_profiler.lengths import lengths as read

        x = read(x)
    try:
        x = np.asarray(on_host(x))
    except (TypeError, ValueError) as exc:
        raise ProfilerError(f"lengths must be a 1-D integer array: {exc}") from None
    if x.ndim != 1 or not (np.issubdtype(x.dtype, np.integer) or x.size == 0):
        raise ProfilerError(f"lengths must be a 1-D integer array, got {x.dtype}[{x.ndim}d]")
    if x.dtype == np.uint64 and x.size and int(x.max()) >= 2**63:
        raise ProfilerError("lengths above 2**63 - 1 are not lengths")
    return np.ascontiguousarray(x, np.int32 if x.dtype in (np.int8, np.int16, np.int32,
                                                           np.uint8, np.uint16) else np.int64)


def _digest(x: np.ndarray) -> str:
    """Names an array's values and dtype (what a resumed plan must be made from)."""
    h = hashlib.blake2b(x.data, digest_size=16)
    h.update(str(x.dtype).encode())
    return h.hexdigest()


def _group_codes(groups: Any, lengths: Any, source: dict[str, Any], n: int
                 ) -> tuple[np.ndarray | None, list[str]]:
    """Each of the ``n`` samples' source as int16 codes into names (`BucketBatchSampler`'s
    ``groups``): a column read from the same rows as the lengths (a source, ``source`` its
    fields), or labels in memory (`gpu_profiler.labels`)."""
    if groups is None:
        return None, []
    if not isinstance(groups, str):
        return label_codes(groups, n)
    if _in_memory(lengths):
        raise ProfilerError(f"groups={groups!r} names a column to read, but the lengths "
                            "were given in memory: pass each sample's group instead")
    from gpu_profiler.groups import sample_codes
    from gpu_profiler.request import Source

    codes, names, _ = sample_codes(lengths if isinstance(lengths, Source) else
                                   Source(lengths, **source), groups)
    if codes.size != n:
        raise ProfilerError(f"groups={groups!r}: {codes.size:,} rows, but {n:,} lengths")
    return codes.astype(CODE), names


def _in_memory(lengths: Any) -> bool:
    """Whether ``lengths`` holds the lengths themselves (not a source to read them from)."""
    if isinstance(lengths, (np.ndarray, list, tuple, range)):
        return True
    return type(lengths).__module__.split(".")[0] in ("pyarrow", "torch", "cupy") and \
        not type(lengths).__name__ == "Table"


def _key(seed: int, epoch: int) -> int:
    """A 64-bit stream key (as int64) for ``(seed, epoch)``: the same on every machine."""
    digest = hashlib.blake2b(f"{int(seed)}:{int(epoch)}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little", signed=True)


class BucketBatchSampler:
    """Batches of sample indices by length bucket, in the interleaved order; a batch
    sampler for ``torch.utils.data.DataLoader(ds, batch_sampler=sampler)`` (torch's
    BatchSampler protocol; torch is not needed).

    Args:
        lengths: per-sample lengths (numpy, pyarrow, a torch tensor, a cupy array or a
            Python sequence of integers), or a `Source` (or any source
            :func:`gpu_profiler.histogram` takes) to read them from with
            :func:`gpu_profiler.lengths`; ``**source`` are then its `Source` fields
            (``column``, ``split``, ``eot``, ...: an error with lengths in memory).
        bounds, max_seq_len, token_budget, max_batch_size: the bucket table's parameters.
        policy: ``fixed`` (the bucket table's batch size per bucket), ``sorted`` (filled
            under the token budget) or ``packed`` (rows of samples packed up to
            ``max_seq_len``, `gpu_profiler.packing`).
        order: ``stride`` (the interleaving planner) or ``random`` (a shuffle of all
            batches, or steps).
        seed: with the epoch (:meth:`set_epoch`), decides every shuffle.
        rank: this rank's batches only (a plain DDP loop, Lightning); ``None`` (default):
            every rank's batches, step by step (global batch ``j`` is step ``j //
            world_size``'s batch for rank ``j % world_size``): what accelerate's
            ``prepare`` and HF Trainer need, whose batch sampler shard deals batch ``j`` to
            process ``j % num_processes``.
        world_size: data-parallel ranks.
        drop_last: drop each bucket's incomplete batch and an incomplete last step.
        max_run: cap on same-bucket runs (default: the least possible).
        align_ranks: one bucket per step across ranks (see the module docstring).
        drop_outside: train without the samples no bucket holds (null or negative
            lengths, lengths outside ``[bounds[0], bounds[-1])`` once clipped to
            ``max_seq_len``); by default they are an error that says how many and why.
        attention_weight, cost_curve, cost_budget, cost_unit, varlen_attention: the cost
            model a batch is sized by
            (`gpu_profiler.cost`; ``cost_curve`` a file or ``(length, cost)`` pairs): a
            batch of ``rows`` rows, longest ``L``, costs at most the budget, ``rows x (L + A
            L^2)``, ``rows x L + A x sum(len^2)`` (``varlen_attention``: fills ``sorted``
            batches by it) or ``rows x curve(L)``. By default, ``rows x L <= token_budget``.
        rows_per_sample: rows each sample makes, each padded to the batch's longest (2: a
            DPO pair, its prompt with each answer): a batch of ``n`` samples is priced as
            ``n x rows_per_sample`` rows. Default: 2 for ``shape`` a DPO `Shape` (a source
            read with ``shape=gp.shape_of(dpo=...)``: its lengths are each pair's prompt
            with its longer answer), else 1.
        groups: each sample's source (a column name to read beside the lengths from a
            source, or one label per sample: strings or integers, numpy, pyarrow, torch):
            the order then interleaves the sources too. A bucket made mostly of one source
            (`gpu_profiler.analysis.mixture.dominant`) runs its batches as that source's,
            and the planner keeps the longest run of one source's batches as short as it
            can under the same cap of same-bucket runs (`gpu_profiler.analysis.interleave`).

    Iterating yields one list of sample indices (ints) per micro-batch.
    """

    def __init__(self, lengths: Any, *, bounds: Sequence[int] | str = DEFAULT_BOUNDS,
                 max_seq_len: int = BucketParams.max_seq_len,
                 token_budget: int = BucketParams.token_budget,
                 max_batch_size: int = BucketParams.max_batch_size, policy: str = "fixed",
                 order: str = "stride", seed: int = 0, rank: int | None = None,
                 world_size: int = 1, drop_last: bool = False, max_run: int | None = None,
                 align_ranks: bool = True, drop_outside: bool = False,
                 attention_weight: float = 0.0, cost_curve: Any = None,
                 cost_budget: float | None = None, cost_unit: str | None = None,
                 rows_per_sample: int | None = None, varlen_attention: bool = False,
                 groups: Any = None,
                 **source: Any) -> None:
        shape = source.get("shape")
        if rows_per_sample is None:
            rows_per_sample = getattr(shape, "rows_per_sample", 1)
        self.params = BucketParams(parse_bounds(bounds), max_seq_len, token_budget,
                                   max_batch_size, world_size=world_size,
                                   cost=cost_model(attention_weight, cost_curve, cost_budget,
                                                   cost_unit, rows_per_sample,
                                                   varlen_attention))
        if policy not in POLICIES:
            raise ProfilerError(f"policy must be fixed, sorted or packed, got {policy!r}")
        if order not in ("stride", "random"):
            raise ProfilerError(f"order must be stride or random, got {order!r}")
        if rank is not None and (isinstance(rank, bool) or not isinstance(rank, int)
                                 or not 0 <= rank < world_size):
            raise ProfilerError(f"rank must be None or in 0..{world_size - 1}, got {rank!r}")
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ProfilerError(f"seed must be an integer, got {seed!r}")
        if _in_memory(lengths):
            given = [name for name, value in source.items() if value not in (None, False)]
            if given:
                raise ProfilerError(f"{', '.join(given)}: options of a source to read; the "
                                    "lengths were given in memory")
            self.lengths = _as_lengths(lengths)
        else:
            from gpu_profiler.lengths import lengths as read

            self.lengths = _as_lengths(read(lengths, **source))
        #: Each sample's source (int16 codes into `group_names`), or None.
        self.groups, self.group_names = _group_codes(groups, lengths, source, self.lengths.size)
        self.policy, self.order, self.seed, self.rank = policy, order, seed, rank
        self.drop_last, self.max_run, self.align_ranks = drop_last, max_run, align_ranks
        self.drop_outside = drop_outside
        self.epoch = 0
        #: (world size, steps trained) of each earlier world this epoch ran under before a
        #: resume at another world size (see `load_state_dict`).
        self._worlds: tuple[tuple[int, int], ...] = ()
        self._resume = 0  # the step of this epoch every new iteration starts at
        self._cursor = 0  # the step after the last one the latest iteration handed out
        self._done = False  # an iteration handed out this epoch's last step
        self._ahead = 0  # batches a plain torch DataLoader's workers fetch ahead of training
        self._plan: tuple[tuple[int, tuple[tuple[int, int], ...]], EpochPlan] | None = None
        #: The digests of the lengths and the groups (None: no groups), once asked for.
        self._digests: tuple[str, str | None] | None = None
        if not drop_outside:
            _refuse_outside(self.lengths, self.params)
        if max_run is not None:
            self.plan()  # an infeasible max_run fails here, not mid-training

    # ------------------------------------------------ torch's BatchSampler protocol
    @property
    def world_size(self) -> int:
        return self.params.world_size

    @property
    def sampler(self) -> BucketBatchSampler:
        """The sampler itself: where accelerate's ``DataLoaderShard.set_epoch`` and
        Lightning look for ``set_epoch`` (``loader.batch_sampler[.batch_sampler].sampler``)."""
        return self

    #: Batches vary in size: wrappers (accelerate's batch sampler shard) must not assume one.
    batch_size = None

    @property
    def resume_step(self) -> int:
        """The step of the current epoch the next iteration starts at (0, or where
        `load_state_dict` resumed; the epoch's steps for a state saved at its end)."""
        return 0 if self._done else self._resume

    def set_epoch(self, epoch: int) -> None:
        """Reshuffle and re-plan for ``epoch`` (the same on every rank and machine). The
        current epoch again keeps a resume point (a resumed loop may name its epoch)."""
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise ProfilerError(f"epoch must be a non-negative integer, got {epoch!r}")
        if epoch != self.epoch:
            self._start_epoch(epoch)

    def _start_epoch(self, epoch: int) -> None:
        self.epoch, self._worlds = epoch, ()
        self._resume = self._cursor = 0
        self._done = False

    def plan(self) -> EpochPlan:
        """This epoch's plan, all ranks together (computed once per epoch)."""
        key = (self.epoch, self._worlds)
        if self._plan is None or self._plan[0] != key:
            self._plan = None  # the last epoch's plan goes before this one is built
            self._plan = (key, self._build(self.params.world_size, self._worlds))
        return self._plan[1]

    def _build(self, world: int, earlier: tuple[tuple[int, int], ...]) -> EpochPlan:
        """The epoch's plan at ``world`` ranks, over the samples the ``earlier`` worlds'
        steps left (each earlier world's plan being built the same way)."""
        params = replace(self.params, world_size=world)
        if earlier:
            *before, (w, steps) = earlier
            index, offsets = self._build(w, tuple(before)).indices()
            index = np.sort(index[offsets[steps * w]:])  # its batches' samples not trained
            plan = self._plan_of(self.lengths[index], params,
                                 None if self.groups is None else self.groups[index])
            return replace(plan, layout=index[plan.layout])
        return self._plan_of(self.lengths, params, self.groups)

    def _plan_of(self, x: np.ndarray, params: BucketParams, sources: np.ndarray | None
                 ) -> EpochPlan:
        plan = plan_epoch(x, params, policy=self.policy, seed=self.seed, epoch=self.epoch,
                          drop_last=self.drop_last, max_run=self.max_run,
                          align_ranks=self.align_ranks, sources=sources)
        if self.order == "random":
            plan = _shuffled_steps(plan, _key(self.seed, self.epoch))
        return plan

    def __len__(self) -> int:
        """The epoch's batches: this rank's (or every rank's, with ``rank=None``), from
        its first step, also in a resumed epoch (`resume_step` says where that starts):
        Lightning and HF Trainer count their own progress through an epoch and end it
        after ``len()`` batches."""
        return self.plan().steps * (self.world_size if self.rank is None else 1)

    def __iter__(self) -> Iterator[list[int]]:
        if self._done:  # the last iteration ended this epoch: this one is the next epoch
            self._start_epoch(self.epoch + 1)
        self._check_driver(sys._getframe(1))
        plan, world = self.plan(), self.world_size
        ranks = range(world) if self.rank is None else (self.rank,)
        self._cursor = self._resume
        for step in range(self._resume, plan.steps):
            for r in ranks:
                if r == ranks[-1]:  # the step is handed out once its last batch is
                    self._cursor = step + 1
                    self._done = self._cursor == plan.steps
                yield plan.batch(step * world + r).tolist()
        self._done = True  # also an iteration resumed at its epoch's end, which yields none

    def _check_driver(self, frame: Any) -> None:
        """Look at what iterates the sampler (the few frames above): refuse to be dealt
        to ranks twice (a rank's sampler inside accelerate's shard) or not at all (every
        rank's batches in a plain DDP loop), and note a torch DataLoader whose workers
        fetch ahead of training (then `state_dict` needs the loop's ``next_step``)."""
        dealer, self._ahead = None, 0
        for _ in range(6):
            if frame is None:
                break
            owner = frame.f_locals.get("self")
            name = type(owner).__name__
            if name == "BatchSamplerShard" and getattr(owner, "num_processes", 1) > 1:
                dealer = owner
            elif name == "_MultiProcessingDataLoaderIter" and \
                    type(owner).__module__.startswith("torch."):
                self._ahead = owner._num_workers * owner._prefetch_factor
            frame = frame.f_back
        if dealer is not None and self.rank is not None:
            raise ProfilerError(
                f"this sampler yields rank {self.rank}'s batches only, and accelerate's "
                f"prepare() deals them again to {dealer.num_processes} processes (each would "
                "train 1/world of its share): build it with rank=None")
        if dealer is None and self.rank is None and self.world_size > 1 and _distributed():
            raise ProfilerError(
                f"rank=None yields the batches of all {self.world_size} ranks, for "
                "accelerate's prepare() (HF Trainer) to deal; iterated directly in a "
                "distributed job every rank would train them all: pass rank=")

    # ------------------------------------------------------------ resume
    def _identity(self) -> dict[str, Any]:
        """What the plan depends on, but for the world size (a resume may change it)."""
        if self._digests is None:
            self._digests = (_digest(self.lengths),
                             None if self.groups is None else _digest(self.groups))
        lengths, groups = self._digests
        p = self.params
        return {"samples": int(self.lengths.size), "lengths": lengths,
                "bounds": list(p.bounds), "max_seq_len": p.max_seq_len,
                "token_budget": p.token_budget, "max_batch_size": p.max_batch_size,
                "policy": self.policy, "order": self.order, "seed": self.seed,
                "drop_last": self.drop_last, "max_run": self.max_run,
                "align_ranks": self.align_ranks, "drop_outside": self.drop_outside,
                **({} if p.cost.is_default else {"cost": p.cost.to_dict()}),
                **({} if groups is None else {"groups": groups})}

    def fingerprint(self) -> str:
        """Names the lengths and every parameter the plan depends on but the world size."""
        return hashlib.blake2b(json.dumps(self._identity()).encode(),
                               digest_size=16).hexdigest()

    def state_dict(self, next_step: int | None = None) -> dict[str, Any]:
        """Where training stands: the epoch and its next step. By default, the steps this
        sampler has handed out this epoch (right without workers, and under torchdata's
        ``StatefulDataLoader``, which asks as it fetches). A plain DataLoader's workers
        fetch ahead of training: there pass the steps the loop has trained this epoch (it
        is an error not to)."""
        if next_step is None:
            if self._ahead and 0 < self._cursor < self.plan().steps:
                raise ProfilerError(
                    f"a DataLoader's workers fetch up to {self._ahead} batches ahead of "
                    "training, so the steps this sampler handed out are not the steps "
                    "trained: pass state_dict(next_step=<steps trained this epoch>), or use "
                    "torchdata's StatefulDataLoader")
            step = self._cursor
        else:
            step = next_step
        if isinstance(step, bool) or not isinstance(step, int) or not \
                0 <= step <= self.plan().steps:
            raise ProfilerError(f"next_step must be an integer in 0..{self.plan().steps}, "
                                f"got {step!r}")
        return {"schema": SCHEMA, "fingerprint": self.fingerprint(), "plan": self._identity(),
                "epoch": self.epoch, "next_step": step, "epoch_steps": self.plan().steps,
                "world_size": self.world_size,
                "earlier_worlds": [list(w) for w in self._worlds]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume at the exact next step (nothing is replayed). A state saved at an epoch's
        end resumes there (the next iteration yields nothing, as a restored iterator of
        torch's samplers does), unless the loop has already named a later epoch (torchdata
        restores the state after the loop's ``set_epoch``: Lightning after an epoch-end
        checkpoint). A state made at another world size re-plans the rest of its epoch
        over the samples not yet trained (each exactly once); one made from other lengths
        or parameters is refused, naming them."""
        if not isinstance(state, dict) or state.get("schema") != SCHEMA:
            raise ProfilerError(f"not a BucketBatchSampler state (no schema {SCHEMA!r}; "
                                "states of older versions cannot be resumed)")
        made = state.get("plan")
        if not isinstance(made, dict):
            raise ProfilerError("bad sampler state: no plan parameters")
        ours = self._identity()
        # the cost model and the groups are keys only when given: a state made with one is
        # refused by a sampler without it, and the other way round
        differ = [k for k in {**made, **ours} if made.get(k) != ours.get(k)]
        if differ:
            said = ", ".join(
                "other lengths (another corpus, or another order or version of it)"
                if k == "lengths" else "other groups (each sample's source)" if k == "groups"
                else f"{k}={made.get(k)!r} (this sampler: {ours.get(k)!r})" for k in differ)
            raise ProfilerError(f"this sampler state was made with {said}; refusing to "
                                "resume")
        epoch: Any = state.get("epoch")
        step: Any = state.get("next_step")
        steps: Any = state.get("epoch_steps")
        world: Any = state.get("world_size")
        earlier: Any = state.get("earlier_worlds")
        if not (_count(epoch) and _count(step) and _count(steps) and step <= steps
                and _count(world) and world > 0
                and isinstance(earlier, list) and len(earlier) <= 64
                and all(isinstance(w, list) and len(w) == 2 and _count(w[0]) and w[0] > 0
                        and _count(w[1]) for w in earlier)):
            raise ProfilerError(f"bad sampler state: epoch {epoch!r}, next_step {step!r} of "
                                f"{steps!r}, world_size {world!r}, earlier_worlds {earlier!r}")
        ended = step == steps
        if ended and epoch < self.epoch:
            return  # the loop is past that epoch already: its next one starts whole
        self._start_epoch(epoch)
        if ended:
            self._resume = self._cursor = self.plan().steps  # at whatever world size
            return
        worlds = tuple((int(w), int(s)) for w, s in earlier)
        if world != self.world_size and step:
            worlds, step = (*worlds, (world, step)), 0
        self._worlds = worlds
        if step > self.plan().steps:
            raise ProfilerError(f"bad sampler state: next_step {step} of an epoch of "
                                f"{self.plan().steps} steps")
        self._resume = self._cursor = step


def _refuse_outside(x: np.ndarray, p: BucketParams) -> None:
    """A one-line error when some samples fit no bucket (they would never be trained),
    saying how many, why, and the fix."""
    from gpu_profiler import native

    cap = p.max_seq_len
    counts = np.zeros(cap + 2, np.int64)
    native.kernel(f"clip_counts_{'int32' if x.dtype == np.int32 else 'int64'}")(x, cap, counts)
    lo, hi = min(p.bounds[0], cap + 1), min(p.bounds[-1], cap + 1)
    negative, below, above = int(counts[cap + 1]), int(counts[:lo].sum()), \
        int(counts[hi:cap + 1].sum())
    if not negative + below + above:
        return
    why = []
    if above:
        cut = int(counts[cap]) if hi <= cap else 0
        why.append(f"{above:,} at or past the last bound {p.bounds[-1]}" + (
            f" ({cut:,} of them longer than max_seq_len {cap} and clipped to it: end the "
            f"bounds at {cap + 1} to train them truncated)" if cut else ""))
    if below:
        why.append(f"{below:,} shorter than the first bound {p.bounds[0]}")
    if negative:
        why.append(f"{negative:,} null or negative")
    n = negative + below + above
    raise ProfilerError(f"{n:,} of {x.size:,} samples ({100 * n / x.size:.2f}%) are in no "
                        f"bucket and would never be trained: {'; '.join(why)}; pass "
                        "drop_outside=True (plan --drop-outside) to train without them")


def _count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _distributed() -> bool:
    """Whether this process is one rank of several of an initialized torch.distributed."""
    dist = sys.modules.get("torch.distributed")
    return bool(dist is not None and dist.is_available() and dist.is_initialized()
                and dist.get_world_size() > 1)


def _shuffled_steps(plan: EpochPlan, key: int) -> EpochPlan:
    """The same batches with the steps in random order (the ``random`` order)."""
    from gpu_profiler import native

    w = plan.world_size
    steps = np.arange(plan.steps, dtype=np.int64)
    native.kernel("shuffle_segments")(steps, np.array([0, steps.size], np.int64), key ^ 0xACE)
    j = (steps[:, None] * w + np.arange(w)).reshape(-1)
    return EpochPlan(plan.layout, plan.start[j], plan.end[j], plan.bucket[j], w,
                     plan.dropped_samples, plan.split_batches, plan.min_run)


@frozen
class PlanSummary:
    """What one epoch's plan does (``gpu-profiler plan`` prints it), computed exactly from
    its batches."""

    params: BucketParams
    policy: str
    order: str
    seed: int
    epoch: int
    split: str | None
    samples: int
    batches: int
    steps: int
    bucket_batches: tuple[int, ...]
    longest_run: int
    min_run: int
    tokens: int
    padded_tokens: int
    padding_pct: float
    dropped_samples: int
    split_batches: int
    #: Buckets whose last batch runs before the epoch's final 2% (rank 0's batches): the
    #: counts leave no room there for every bucket (`gpu_profiler.analysis.interleave`).
    early_buckets: tuple[int, ...] = ()
    #: Micro-batches per optimizer step the plan was made for (``plan --grad-accum``: what
    #: ``diagnose`` aligns a loss log with; None: not said). The plan does not depend on it.
    grad_accum: int | None = None
    #: With a cost model (`gpu_profiler.cost`): the epoch's batches' cost, rows x row cost
    #: at each batch's longest (packed: at max_seq_len), in its unit (None without one).
    cost: float | None = None
    #: ``plan --group-by``: the column, and the plan's exact mix of its groups by step
    #: (`gpu_profiler.analysis.schedule.plan_mix`)
    group_by: str | None = None
    groups: Any = None

    def to_dict(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "params"
             and not (k == "cost" and self.cost is None)
             and not (k in ("group_by", "groups") and self.group_by is None)}
        if self.groups is not None:
            d["groups"] = asdict(self.groups)
        return {"schema": "gpu-profiler/plan/v1", "params": self.params.to_dict(), **d,
                "bucket_batches": list(self.bucket_batches),
                "early_buckets": list(self.early_buckets)}


def planned_sampler(source: Any, epoch: int = 0, **options: Any
                    ) -> tuple[BucketBatchSampler, str | None]:
    """The sampler ``gpu-profiler plan`` plans with, at ``epoch``, and the split it plans:
    over the lengths of ``source``'s analysed split (a `Source` or its data: its
    ``split``, else train, else the only one), ``options`` those of `BucketBatchSampler`
    (``group_by``: a column of that split naming each sample's source, its ``groups``)."""
    from gpu_profiler.lengths import analysed_lengths
    from gpu_profiler.request import Source

    shape, by = options.get("shape"), options.pop("group_by", None)
    src = source if isinstance(source, Source) else Source(source)
    x, split = analysed_lengths(src, shape)
    if options.get("rows_per_sample") is None:  # the lengths go in, not the shape
        options["rows_per_sample"] = getattr(shape, "rows_per_sample", 1)
    if by is not None:  # the same rows of the same split, in the same order
        import pyarrow as pa

        codes, names = _group_codes(by, src, {}, x.size)
        options["groups"] = pa.DictionaryArray.from_arrays(pa.array(codes), names)
    sampler = BucketBatchSampler(x, **{k: v for k, v in options.items() if k != "shape"})
    sampler.set_epoch(epoch)
    return sampler, split


def batch_tokens(sampler: BucketBatchSampler, indexed: tuple[np.ndarray, np.ndarray]
                 ) -> np.ndarray:
    """The tokens of each batch of ``sampler``'s current plan (``indexed``: its
    `EpochPlan.indices`): its samples' lengths clipped to ``max_seq_len``, summed."""
    index, offsets = indexed
    clipped = np.minimum(sampler.lengths[index], sampler.params.max_seq_len)
    return np.add.reduceat(clipped, offsets[:-1]).astype(np.int64) if index.size else \
        np.zeros(offsets.size - 1, np.int64)


def summarize(sampler: BucketBatchSampler, split: str | None = None,
              indexed: tuple[np.ndarray, np.ndarray] | None = None,
              grad_accum: int | None = None) -> PlanSummary:
    """The plan of ``sampler``'s current epoch, in numbers: its padding (rows x longest
    clipped row, summed over batches; packed rows x ``max_seq_len``), and its longest
    same-bucket run, per rank (``indexed``: the plan's `EpochPlan.indices`, when the
    caller has them already; ``grad_accum``: the optimizer step it is trained with)."""
    plan, p = sampler.plan(), sampler.params
    if grad_accum is not None:
        p = replace(p, grad_accum=grad_accum)
    index, offsets = indexed or plan.indices()
    clipped = np.minimum(sampler.lengths[index], p.max_seq_len)
    rows = np.diff(offsets)
    longest = np.maximum.reduceat(clipped, offsets[:-1]) if rows.size else rows
    runs = max((longest_run(plan.bucket[r::plan.world_size])[0]
                for r in range(plan.world_size)), default=0)
    tokens, padded = int(clipped.sum()), int((rows * longest).sum())
    cost = None
    if not p.cost.is_default:
        cost = float((rows * np.asarray(row_cost(longest, p.cost), np.float64)).sum())
    if plan.row_starts is not None:  # packed: every row is max_seq_len tokens computed
        padded = int(plan.rows().sum()) * p.max_seq_len
        if cost is not None:
            cost = int(plan.rows().sum()) * float(row_cost(p.max_seq_len, p.cost))
    if p.cost.varlen:  # the padded linear part, and each sample's own attention
        cost = varlen_cost(padded, squares(clipped), p.cost)
    per = np.bincount(plan.bucket, minlength=len(p.bounds) - 1)
    return PlanSummary(p, sampler.policy, sampler.order, sampler.seed, sampler.epoch, split,
                       int(index.size), plan.batches, plan.steps, tuple(int(b) for b in per),
                       runs, plan.min_run, tokens, padded,
                       (padded - tokens) / padded * 100 if padded else 0.0,
                       plan.dropped_samples, plan.split_batches,
                       tuple(early_buckets(plan.bucket[::plan.world_size], per.size)),
                       grad_accum, cost)
