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
   (or ``max_run``), and every bucket is spread evenly over the epoch.

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
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpu_profiler.analysis.interleave import early_buckets, interleave, longest_run, min_run
from gpu_profiler.analysis.policies import batch_size_for
from gpu_profiler.errors import ProfilerError
from gpu_profiler.params import DEFAULT_BOUNDS, BucketParams, parse_bounds

SCHEMA = "gpu-profiler/sampler/v1"
POLICIES = ("fixed", "sorted")
#: Samples per shuffled pile: 1 MiB of int64, a core's L2 here, small enough to shuffle in
#: cache with few enough piles to scatter into (bench/results/plan.md sweeps it).
PILE = 1 << 17


@dataclass(frozen=True)
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
    """

    layout: np.ndarray
    start: np.ndarray
    end: np.ndarray
    bucket: np.ndarray
    world_size: int
    dropped_samples: int
    split_batches: int
    min_run: int = 0

    @property
    def batches(self) -> int:
        return int(self.start.size)

    @property
    def steps(self) -> int:
        return self.batches // self.world_size

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
               max_run: int | None = None, align_ranks: bool = True) -> EpochPlan:
    """The plan of one epoch (see the module docstring); ``params.world_size`` ranks."""
    from gpu_profiler import native

    if policy not in POLICIES:
        raise ProfilerError(f"the sampler batches by policy fixed or sorted, got {policy!r}")
    x = _as_lengths(lengths)
    p, cap = params, params.max_seq_len
    key = _key(seed, epoch)
    kind = "int32" if x.dtype == np.int32 else "int64"
    counts = np.zeros(cap + 2, np.int64)
    native.kernel(f"clip_counts_{kind}")(x, cap, counts)
    # Groups of samples shuffled together: a bucket (fixed) or one clipped length (sorted).
    lo, hi = min(p.bounds[0], cap + 1), min(p.bounds[-1], cap + 1)
    group = np.full(cap + 2, -1, np.int64)
    edges = np.minimum(np.asarray(p.bounds), cap + 1)
    if policy == "fixed":
        group[lo:hi] = np.searchsorted(edges, np.arange(lo, hi), side="right") - 1
    else:
        group[lo:hi] = np.arange(lo, hi)
    inside = group >= 0
    sizes = np.bincount(group[inside], weights=counts[inside],
                        minlength=int(group.max()) + 1 if inside.any() else 0).astype(np.int64)
    piles = np.maximum(1, -(-sizes // PILE))
    first_pile = np.concatenate(([0], np.cumsum(piles)[:-1]))
    first = np.where(inside, first_pile[np.maximum(group, 0)], -1).astype(np.int64)
    per = np.where(inside, piles[np.maximum(group, 0)], 1).astype(np.int64)
    cursor = np.zeros(int(piles.sum()), np.int64)
    pile_sort = native.kernel(f"pile_sort_{kind}")
    pile_sort(x, cap, first, per, key, cursor, np.zeros(0, np.int64), 0)
    bounds = np.concatenate(([0], np.cumsum(cursor))).astype(np.int64)
    layout = np.empty(int(bounds[-1]), np.int64)
    cursor = bounds[:-1].copy()
    pile_sort(x, cap, first, per, key, cursor, layout, 1)
    native.kernel("shuffle_segments")(layout, bounds, key)

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
                    align_ranks, dropped)


def _cuts(values: np.ndarray, cnt: np.ndarray, n: int, p: BucketParams, policy: str,
          drop_last: bool) -> tuple[np.ndarray, int]:
    """One bucket's batches as ``(start, end)`` rows from its first sample, and the samples
    dropped."""
    from gpu_profiler import native

    if not n:
        return np.zeros((0, 2), np.int64), 0
    if policy == "sorted":
        out = np.zeros((n + 1, 2), np.int64)  # at most one batch per sample
        nb, lost = native.kernel("sorted_cuts")(values.astype(np.int64), cnt.astype(np.int64),
                                                p.token_budget, p.max_batch_size,
                                                int(drop_last), out)
        return out[:nb], lost
    size = batch_size_for(int(values[-1]), p) or 1  # over budget: one sample a batch
    full, rest = divmod(n, size)
    keep = full + (1 if rest and not drop_last else 0)
    start = np.arange(keep, dtype=np.int64) * size
    return np.stack([start, np.minimum(start + size, n)], axis=1), rest if drop_last else 0


def _lay_out(layout: np.ndarray, start: np.ndarray, end: np.ndarray, per_bucket: np.ndarray,
             world: int, drop_last: bool, max_run: int | None, align: bool,
             dropped: int) -> EpochPlan:
    """Order the batches (grouped by bucket, ``per_bucket`` each) with the planner and
    make every step hold one batch per rank."""
    from gpu_profiler import native

    k = per_bucket.size
    first = np.concatenate(([0], np.cumsum(per_bucket)[:-1])).astype(np.int64)
    unit = world if align and world > 1 else 1
    groups = per_bucket // unit
    seq = interleave(groups, max_run)  # the bucket of each group of `unit` batches
    chosen = np.empty(seq.size * unit + int((per_bucket - groups * unit).sum()), np.int64)
    native.kernel("expand")(seq, first, unit, chosen, np.zeros(k, np.int64))
    # Leftovers (fewer than `unit` batches of a bucket) make mixed steps at the end.
    chosen[seq.size * unit:] = np.concatenate(
        [np.arange(first[b] + groups[b] * unit, first[b] + per_bucket[b]) for b in range(k)])
    bucket_of = np.repeat(np.arange(k, dtype=np.int32), per_bucket)
    s, e, bk = start[chosen], end[chosen], bucket_of[chosen]
    split = 0
    short = s.size % world
    if short:
        if drop_last:
            dropped += int((e[-short:] - s[-short:]).sum())
            s, e, bk = s[:-short], e[:-short], bk[:-short]
        else:
            s, e, bk, split = _fill_last_step(s, e, bk, world)
    return EpochPlan(layout, s, e, bk, world, dropped, split, min_run(groups))


def _fill_last_step(s: np.ndarray, e: np.ndarray, bk: np.ndarray, world: int
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Split the largest batches of the last steps in two until the batches are a multiple
    of ``world`` (a split only removes rows, so it keeps both limits). The split-off halves
    go to the end, so every step before the last keeps its batches (and its bucket)."""
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
        ts.append(mid)
        te.append(te[j])
        tb.append(tb[j])
        te[j] = mid
    cut = s.size - take
    return (np.concatenate((s[:cut], ts)).astype(np.int64),
            np.concatenate((e[:cut], te)).astype(np.int64),
            np.concatenate((bk[:cut], tb)).astype(np.int32), need)


def _as_lengths(lengths: Any) -> np.ndarray:
    import pyarrow as pa

    x = lengths
    if isinstance(x, (pa.Array, pa.ChunkedArray)):
        from gpu_profiler.lengths import lengths as read

        x = read(x)
    x = np.asarray(x)
    if x.ndim != 1 or not (np.issubdtype(x.dtype, np.integer) or x.size == 0):
        raise ProfilerError(f"lengths must be a 1-D integer array, got {x.dtype}[{x.ndim}d]")
    if x.dtype == np.uint64 and x.size and int(x.max()) >= 2**63:
        raise ProfilerError("lengths above 2**63 - 1 are not lengths")
    return np.ascontiguousarray(x, np.int32 if x.dtype in (np.int8, np.int16, np.int32,
                                                           np.uint8, np.uint16) else np.int64)


def _key(seed: int, epoch: int) -> int:
    """A 64-bit stream key (as int64) for ``(seed, epoch)``: the same on every machine."""
    digest = hashlib.blake2b(f"{int(seed)}:{int(epoch)}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little", signed=True)


class BucketBatchSampler:
    """Batches of sample indices by length bucket, in the interleaved order; a batch
    sampler for ``torch.utils.data.DataLoader(ds, batch_sampler=sampler)`` (torch's Sampler
    protocol; torch is not needed).

    Args:
        lengths: per-sample lengths (numpy or pyarrow integer array), or any source
            :func:`gpu_profiler.histogram` takes, read with :func:`gpu_profiler.lengths`
            (``column``, ``offsets_of``, ``split``, ``format``, and for Megatron-LM
            datasets and token streams ``unit``, ``eot``, ``eot_position``,
            ``token_dtype``; given with an array of lengths, they are an error).
        bounds, max_seq_len, token_budget, max_batch_size: the bucket table's parameters.
        policy: ``fixed`` (the bucket table's batch size per bucket) or ``sorted`` (filled
            under the token budget).
        order: ``stride`` (the interleaving planner) or ``random`` (a shuffle of all
            batches, or steps).
        seed: with the epoch (:meth:`set_epoch`), decides every shuffle.
        rank, world_size: this rank of ``world_size`` data-parallel ranks.
        drop_last: drop each bucket's incomplete batch and an incomplete last step.
        max_run: cap on same-bucket runs (default: the least possible).
        align_ranks: one bucket per step across ranks (see the module docstring).

    Iterating yields one list of sample indices (ints) per micro-batch of this rank.
    """

    def __init__(self, lengths: Any, *, bounds: Sequence[int] | str = DEFAULT_BOUNDS,
                 max_seq_len: int = BucketParams.max_seq_len,
                 token_budget: int = BucketParams.token_budget,
                 max_batch_size: int = BucketParams.max_batch_size, policy: str = "fixed",
                 order: str = "stride", seed: int = 0, rank: int = 0, world_size: int = 1,
                 drop_last: bool = False, max_run: int | None = None,
                 align_ranks: bool = True, column: str | None = None,
                 offsets_of: str | None = None, split: str | None = None,
                 format: str | None = None, unit: str | None = None, eot: int | None = None,
                 eot_position: str | None = None, token_dtype: str | None = None) -> None:
        self.params = BucketParams(parse_bounds(bounds), max_seq_len, token_budget,
                                   max_batch_size, world_size=world_size)
        if policy not in POLICIES:
            raise ProfilerError(f"policy must be fixed or sorted, got {policy!r}")
        if order not in ("stride", "random"):
            raise ProfilerError(f"order must be stride or random, got {order!r}")
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < world_size:
            raise ProfilerError(f"rank must be in 0..{world_size - 1}, got {rank!r}")
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ProfilerError(f"seed must be an integer, got {seed!r}")
        source: dict[str, Any] = {
            "column": column, "offsets_of": offsets_of, "split": split, "format": format,
            "unit": unit, "eot": eot, "eot_position": eot_position, "token_dtype": token_dtype}
        if isinstance(lengths, np.ndarray) or type(lengths).__module__.startswith("pyarrow"):
            given = [name for name, value in source.items() if value is not None]
            if given:
                raise ProfilerError(f"{', '.join(given)}: options of a source to read; the "
                                    "lengths were given as an array")
            self.lengths = _as_lengths(lengths)
        else:
            from gpu_profiler.lengths import lengths as read

            self.lengths = _as_lengths(read(lengths, **source))
        self.policy, self.order, self.seed, self.rank = policy, order, seed, rank
        self.drop_last, self.max_run, self.align_ranks = drop_last, max_run, align_ranks
        self.epoch, self._start, self._position = 0, 0, 0
        self._plan: tuple[int, EpochPlan] | None = None
        self._fingerprint: str | None = None
        if max_run is not None:
            self.plan()  # an infeasible max_run fails here, not mid-training

    @property
    def world_size(self) -> int:
        return self.params.world_size

    def set_epoch(self, epoch: int) -> None:
        """Reshuffle and re-plan for ``epoch`` (the same on every rank and machine)."""
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise ProfilerError(f"epoch must be a non-negative integer, got {epoch!r}")
        if epoch != self.epoch:
            self.epoch, self._start, self._position = epoch, 0, 0

    def plan(self) -> EpochPlan:
        """This epoch's plan, all ranks together (computed once per epoch)."""
        if self._plan is None or self._plan[0] != self.epoch:
            self._plan = None  # the last epoch's plan goes before this one is built
            plan = plan_epoch(self.lengths, self.params, policy=self.policy, seed=self.seed,
                              epoch=self.epoch, drop_last=self.drop_last,
                              max_run=self.max_run, align_ranks=self.align_ranks)
            if self.order == "random":
                plan = _shuffled_steps(plan, _key(self.seed, self.epoch))
            self._plan = (self.epoch, plan)
        return self._plan[1]

    def __len__(self) -> int:
        return self.plan().steps

    def __iter__(self) -> Iterator[list[int]]:
        plan = self.plan()
        start, self._start = self._start, 0
        for step in range(start, plan.steps):
            self._position = step + 1
            yield plan.batch(step * plan.world_size + self.rank).tolist()

    # ------------------------------------------------------------ resume
    def fingerprint(self) -> str:
        """Names the lengths and every parameter the plan depends on (not the rank)."""
        if self._fingerprint is None:
            h = hashlib.blake2b(digest_size=16)
            h.update(json.dumps([SCHEMA, self.params.to_dict(), self.policy, self.order,
                                 self.seed, self.drop_last, self.max_run,
                                 self.align_ranks, str(self.lengths.dtype)]).encode())
            h.update(self.lengths.data)
            self._fingerprint = h.hexdigest()
        return self._fingerprint

    def state_dict(self, next_step: int | None = None) -> dict[str, Any]:
        """Where iteration stands: the epoch and the next step (by default, the batches
        yielded so far this epoch; a DataLoader that prefetches runs ahead of training, so
        pass the steps the training loop has taken instead). Save it with the model."""
        step = self._position if next_step is None else next_step
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise ProfilerError(f"next_step must be a non-negative integer, got {step!r}")
        return {"schema": SCHEMA, "fingerprint": self.fingerprint(), "epoch": self.epoch,
                "next_step": step}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume at the exact next batch (O(1): nothing is replayed). Refuses a state made
        from other lengths or parameters."""
        if not isinstance(state, dict) or state.get("schema") != SCHEMA:
            raise ProfilerError("not a BucketBatchSampler state (no "
                                f"schema {SCHEMA!r})")
        if state.get("fingerprint") != self.fingerprint():
            raise ProfilerError("this sampler state was made from other lengths or "
                                "parameters (its plan fingerprint differs); refusing to resume")
        epoch, step = state.get("epoch"), state.get("next_step")
        if not (isinstance(epoch, int) and isinstance(step, int) and epoch >= 0 and step >= 0):
            raise ProfilerError(f"bad sampler state: epoch {epoch!r}, next_step {step!r}")
        self.epoch, self._start, self._position = epoch, step, step


def _shuffled_steps(plan: EpochPlan, key: int) -> EpochPlan:
    """The same batches with the steps in random order (the ``random`` order)."""
    from gpu_profiler import native

    w = plan.world_size
    steps = np.arange(plan.steps, dtype=np.int64)
    native.kernel("shuffle_segments")(steps, np.array([0, steps.size], np.int64), key ^ 0xACE)
    j = (steps[:, None] * w + np.arange(w)).reshape(-1)
    return EpochPlan(plan.layout, plan.start[j], plan.end[j], plan.bucket[j], w,
                     plan.dropped_samples, plan.split_batches, plan.min_run)


@dataclass(frozen=True)
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

    def to_dict(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "params"}
        return {"schema": "gpu-profiler/plan/v1", "params": self.params.to_dict(), **d,
                "bucket_batches": list(self.bucket_batches),
                "early_buckets": list(self.early_buckets)}


def summarize(sampler: BucketBatchSampler, split: str | None = None,
              indexed: tuple[np.ndarray, np.ndarray] | None = None) -> PlanSummary:
    """The plan of ``sampler``'s current epoch, in numbers: its padding (rows x longest
    clipped row, summed over batches), and its longest same-bucket run, per rank
    (``indexed``: the plan's `EpochPlan.indices`, when the caller has them already)."""
    plan, p = sampler.plan(), sampler.params
    index, offsets = indexed or plan.indices()
    clipped = np.minimum(sampler.lengths[index], p.max_seq_len)
    rows = np.diff(offsets)
    longest = np.maximum.reduceat(clipped, offsets[:-1]) if rows.size else rows
    runs = max((longest_run(plan.bucket[r::plan.world_size])[0]
                for r in range(plan.world_size)), default=0)
    tokens, padded = int(clipped.sum()), int((rows * longest).sum())
    per = np.bincount(plan.bucket, minlength=len(p.bounds) - 1)
    return PlanSummary(p, sampler.policy, sampler.order, sampler.seed, sampler.epoch, split,
                       int(index.size), plan.batches, plan.steps, tuple(int(b) for b in per),
                       runs, plan.min_run, tokens, padded,
                       (padded - tokens) / padded * 100 if padded else 0.0,
                       plan.dropped_samples, plan.split_batches,
                       tuple(early_buckets(plan.bucket[::plan.world_size], per.size)))


def save_plan(path: str, plan: EpochPlan, summary: PlanSummary,
              indexed: tuple[np.ndarray, np.ndarray] | None = None) -> None:
    """Write ``plan`` as ``.npz``: ``indices`` (int64, every sample index in batch order),
    ``offsets`` (batch ``j`` is ``indices[offsets[j]:offsets[j + 1]]``), ``bucket`` (per
    batch) and ``params`` (the summary, as JSON text); atomically (``indexed`` as in
    :func:`summarize`)."""
    import io

    from gpu_profiler.render.output import write_atomic

    index, offsets = indexed or plan.indices()
    buf = io.BytesIO()
    np.savez(buf, indices=index, offsets=offsets, bucket=plan.bucket,
             params=np.array(json.dumps(summary.to_dict())))
    write_atomic(path, buf.getvalue())
