"""Adapters for the training stacks whose own loops need more than a batch sampler.

- `BucketTrainer` (:mod:`gpu_profiler.integrations.transformers`): HF ``Trainer`` training
  in a `BucketBatchSampler`'s order. Imported on first use: transformers is not a dependency.

accelerate, Lightning and torchdata need no adapter: the README shows the one line each.
"""

from __future__ import annotations

from typing import Any

__all__ = ["BucketTrainer"]


def __getattr__(name: str) -> Any:
    if name == "BucketTrainer":
        from gpu_profiler.integrations.transformers import BucketTrainer

        return BucketTrainer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
