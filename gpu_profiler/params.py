"""`BucketParams`: the bucket and batching parameters, validated once."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from gpu_profiler.cost import CostModel
from gpu_profiler.errors import ProfilerError
from gpu_profiler.frozen import frozen

DEFAULT_BOUNDS = (0, 770, 1216, 1728, 2432, 3296, 8193)


@frozen
class BucketParams:
    """Bucket bounds and the batching budget (docs/design.md, "the seed-compatible bucket table").

    Attributes:
        bounds: strictly increasing bucket edges; bucket b holds ``bounds[b] <= c < bounds[b+1]``
            where ``c = min(length, max_seq_len)``.
        max_seq_len: lengths are clipped to this (longer samples are truncated).
        token_budget: tokens per batch (rows x longest sample).
        max_batch_size: rows per batch at most.
        grad_accum: micro-batches per optimizer step.
        world_size: data-parallel ranks.
        cost: what a batch costs and its budget (`gpu_profiler.cost`; the default:
            ``rows x longest`` under ``token_budget``, which ``to_dict`` then leaves out).
    """

    bounds: tuple[int, ...] = DEFAULT_BOUNDS
    max_seq_len: int = 8192
    token_budget: int = 49152
    max_batch_size: int = 64
    grad_accum: int = 4
    world_size: int = 1
    cost: CostModel = CostModel()

    def __post_init__(self) -> None:
        bounds = tuple(int(b) for b in self.bounds)
        object.__setattr__(self, "bounds", bounds)
        if len(bounds) < 2:
            raise ProfilerError(f"bounds need at least two edges, got {list(bounds)}")
        if any(b < 0 for b in bounds):
            raise ProfilerError(f"bounds must be non-negative, got {list(bounds)}")
        bad = [i for i in range(1, len(bounds)) if bounds[i] <= bounds[i - 1]]
        if bad:
            i = bad[0]
            raise ProfilerError(f"bounds must be strictly increasing: {bounds[i - 1]} then "
                                f"{bounds[i]} (position {i})")
        for name in ("max_seq_len", "token_budget", "max_batch_size", "grad_accum",
                     "world_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ProfilerError(f"{name.replace('_', '-')} must be a positive integer, "
                                    f"got {value!r}")
        if not isinstance(self.cost, CostModel):
            raise ProfilerError(f"cost must be a CostModel, got {type(self.cost).__name__}")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["bounds"] = list(self.bounds)
        if self.cost.is_default:
            del d["cost"]
        else:
            d["cost"] = self.cost.to_dict()
        return d


def parse_bounds(text: str | Sequence[int]) -> tuple[int, ...]:
    """``"0,770,8193"`` -> ``(0, 770, 8193)`` with a clear error for junk."""
    if not isinstance(text, str):
        return tuple(int(b) for b in text)
    try:
        return tuple(int(tok) for tok in text.replace(" ", "").split(",") if tok != "")
    except ValueError:
        raise ProfilerError(f"--bounds must be comma-separated integers, got {text!r}") from None
