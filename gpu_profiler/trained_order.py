"""The batch order a run trained in, for ``gpu-profiler diagnose``: the bucket of every
batch, one row per plan step (one batch per rank), read from ``gpu-profiler plan`` files
(one per epoch, in training order), planned again from the corpus as ``plan`` plans it, or
read from a file of the bucket of every batch (what ``plan`` and ``schedule --emit-order``
write: one per line, or numpy ``.npy``)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from gpu_profiler.errors import ProfilerError, first_line
from gpu_profiler.frozen import frozen

if TYPE_CHECKING:
    from gpu_profiler.sampler import BucketBatchSampler

#: Bucket indices past this are no bucket table's (and would make the per-bucket sums huge).
MAX_BUCKETS = 1 << 15
#: The most epochs planned again from a corpus to cover a log.
MAX_EPOCHS = 1000


@frozen
class TrainedOrder:
    """Batch ``s * world_size + r`` of the run is rank ``r``'s micro-batch of plan step
    ``s``, of bucket ``bucket[s, r]``.

    Attributes:
        epochs: plan steps of each epoch, in order (an optimizer step never spans two).
        source: where the order was read, for messages.
        length: each batch's mean sample length (clipped tokens / samples), as ``bucket``
            (None: not known).
        grad_accum: plan steps per optimizer step, as the plan recorded it (None: not).
    """

    bucket: np.ndarray
    epochs: tuple[int, ...]
    source: str
    length: np.ndarray | None = None
    grad_accum: int | None = None

    @property
    def world_size(self) -> int:
        return int(self.bucket.shape[1])

    @property
    def buckets(self) -> int:
        return int(self.bucket.max()) + 1 if self.bucket.size else 0


def order_of(buckets: Sequence[int] | np.ndarray, world_size: int = 1, *,
             epochs: Sequence[int] | None = None, source: str = "<memory>",
             length: Sequence[float] | np.ndarray | None = None,
             grad_accum: int | None = None) -> TrainedOrder:
    """A `TrainedOrder` from the bucket of every batch in training order (``world_size``
    consecutive batches per plan step); ``epochs`` splits it into epochs (plan steps each;
    default: one); ``length``: each batch's mean sample length."""
    b = np.asarray(buckets)
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ProfilerError(f"--world-size must be a positive integer, got {world_size!r}")
    if b.ndim != 1 or (b.size and b.dtype.kind not in "iu"):
        raise ProfilerError(f"{source}: the bucket order must be one integer per batch")
    if b.size and (int(b.min()) < 0 or int(b.max()) >= MAX_BUCKETS):
        raise ProfilerError(f"{source}: bucket indices must lie in 0..{MAX_BUCKETS - 1}, "
                            f"found {int(b.min()) if b.min() < 0 else int(b.max())}")
    if b.size == 0:
        raise ProfilerError(f"{source}: the bucket order is empty")
    if b.size % world_size:
        raise ProfilerError(f"{source}: {b.size:,} batches are not whole steps of "
                            f"{world_size} ranks (--world-size)")
    rows = b.size // world_size
    spans = tuple(int(e) for e in epochs) if epochs is not None else (rows,)
    if sum(spans) != rows or min(spans) < 1:
        raise ProfilerError(f"{source}: epochs of {list(spans)} plan steps do not make the "
                            f"order's {rows:,}")
    shaped = None
    if length is not None:
        shaped = np.asarray(length, dtype=np.float64)
        if shaped.shape != b.shape or not bool((shaped > 0).all()):
            raise ProfilerError(f"{source}: the batch lengths must be one positive number "
                                "per batch")
        shaped = shaped.reshape(rows, world_size)
    return TrainedOrder(b.astype(np.int32).reshape(rows, world_size), spans, source, shaped,
                        grad_accum)


def read_plans(paths: Sequence[str | os.PathLike[str]]) -> TrainedOrder:
    """The order of ``gpu-profiler plan`` files, one per epoch in the order given."""
    from gpu_profiler.plan_file import load_plan

    plans = [load_plan(os.fspath(p)) for p in paths]
    worlds, accums = {p.world_size for p in plans}, {p.grad_accum for p in plans}
    for name, values in (("world sizes", worlds), ("grad_accum", accums)):
        if len(values) > 1:
            raise ProfilerError(f"the plans are for different {name} "
                                f"({', '.join(map(str, values))})")
    tokens = [p.tokens for p in plans if p.tokens is not None]
    length = np.concatenate([np.maximum(t, 1) / np.diff(p.offsets) for t, p in zip(
        tokens, plans, strict=True)]) if len(tokens) == len(plans) else None
    return order_of(np.concatenate([p.bucket for p in plans]), worlds.pop(),
                    epochs=[p.steps for p in plans],
                    source=", ".join(os.fspath(p) for p in paths), length=length,
                    grad_accum=accums.pop())


def sampled_order(sampler: BucketBatchSampler, steps: int, grad_accum: int, source: str
                  ) -> TrainedOrder:
    """The order ``sampler`` trains from its epoch on (as ``plan`` writes each epoch), the
    fewest epochs that hold ``steps`` optimizer steps of ``grad_accum`` plan steps (none
    spans two epochs; at most `MAX_EPOCHS`)."""
    from gpu_profiler.sampler import batch_tokens

    buckets: list[np.ndarray] = []
    lengths: list[np.ndarray] = []
    epochs: list[int] = []
    first = sampler.epoch
    while sum(-(-e // grad_accum) for e in epochs) < steps:
        if len(epochs) == MAX_EPOCHS or (epochs and not epochs[-1]):
            raise ProfilerError(f"{source}: {len(epochs)} epochs of {epochs[-1]:,} plan "
                                f"steps do not reach the log's {steps:,} optimizer steps")
        sampler.set_epoch(first + len(epochs))
        plan = sampler.plan()
        indexed = plan.indices()
        buckets.append(plan.bucket)
        lengths.append(np.maximum(batch_tokens(sampler, indexed), 1) / np.diff(indexed[1]))
        epochs.append(plan.steps)
    return order_of(np.concatenate(buckets), sampler.world_size, epochs=epochs,
                    source=source, length=np.concatenate(lengths), grad_accum=grad_accum)


def read_bucket_order(path: str | os.PathLike[str], world_size: int = 1) -> TrainedOrder:
    """The order in a file of the bucket of every batch: numpy ``.npy`` (integers), or
    text with one integer per line."""
    path = os.fspath(path)
    try:
        if path.endswith(".npy"):
            b = np.load(path, allow_pickle=False)
        else:
            with open(path, "rb") as f:
                b = np.array(f.read().split(), dtype=np.int64)
    except (OSError, ValueError, EOFError) as exc:
        raise ProfilerError(f"{path}: not a bucket order (one integer per batch: "
                            f"{first_line(exc)})") from None
    return order_of(b, world_size, source=path)
