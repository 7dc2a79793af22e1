"""`BucketTrainer`: a ``transformers.Trainer`` that trains in a `BucketBatchSampler`'s order.

The Trainer builds its own train DataLoader from a per-sample sampler and a fixed batch
size; this one hands its DataLoader the bucket batch sampler instead, built with
``rank=None`` so that accelerate's ``prepare`` deals step ``s``'s batch for rank ``r`` to
process ``r`` (the plan's rank alignment kept, nothing sharded twice). The sampler's epoch
follows the Trainer's, also in an epoch resumed mid-way from a checkpoint, where the
Trainer's batch skipping wraps the loader so that its ``set_epoch`` no longer reaches the
sampler.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any

import datasets
import torch
from transformers import Trainer, TrainerCallback
from transformers.trainer_utils import seed_worker

from gpu_profiler.errors import ProfilerError
from gpu_profiler.sampler import BucketBatchSampler


class _FollowEpochs(TrainerCallback):
    """Sets the sampler's epoch at each epoch's start (the Trainer's progress is ``epoch +
    steps done / steps``, so its floor is the epoch, resumed or not)."""

    def __init__(self, sampler: BucketBatchSampler) -> None:
        self.sampler = sampler

    def on_epoch_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.sampler.set_epoch(int(math.floor(state.epoch or 0)))


class BucketTrainer(Trainer):
    """``Trainer(..., train_dataset=ds)`` whose training batches are ``sampler``'s.

    Args:
        sampler: a `BucketBatchSampler` over ``train_dataset``'s rows, with ``rank=None``
            and ``world_size`` the number of processes (``args.world_size``).
        *args, **kwargs: those of ``transformers.Trainer``. ``per_device_train_batch_size``
            and ``dataloader_drop_last`` do not apply: the sampler decides the batches.
    """

    def __init__(self, *args: Any, sampler: BucketBatchSampler, **kwargs: Any) -> None:
        if not isinstance(sampler, BucketBatchSampler):
            raise ProfilerError(f"sampler must be a BucketBatchSampler, got {type(sampler)}")
        if sampler.rank is not None:
            raise ProfilerError("BucketTrainer needs the sampler built with rank=None: the "
                                "Trainer's accelerator deals the batches to the processes")
        super().__init__(*args, **kwargs)
        if sampler.world_size != self.args.world_size:
            raise ProfilerError(f"the sampler plans for world_size={sampler.world_size}, "
                                f"this Trainer runs {self.args.world_size} processes")
        self.bucket_sampler = sampler
        self.add_callback(_FollowEpochs(sampler))

    def get_train_dataloader(self) -> torch.utils.data.DataLoader:
        if self.train_dataset is None:
            raise ValueError("Trainer: training requires a train_dataset.")
        dataset, collate = self.train_dataset, self.data_collator
        if isinstance(dataset, datasets.Dataset):
            dataset = self._remove_unused_columns(dataset, description="training")
        else:
            collate = self._get_collator_with_removed_columns(collate, description="training")
        args = self.args
        loader = torch.utils.data.DataLoader(
            dataset, batch_sampler=self.bucket_sampler, collate_fn=collate,
            num_workers=args.dataloader_num_workers, pin_memory=args.dataloader_pin_memory,
            persistent_workers=args.dataloader_persistent_workers,
            prefetch_factor=args.dataloader_prefetch_factor,
            worker_init_fn=partial(seed_worker, num_workers=args.dataloader_num_workers,
                                   rank=args.process_index))
        return self.accelerator.prepare(loader)
