"""Worker: Lightning, ``Trainer(devices=2, strategy="ddp", accelerator="cpu",
use_distributed_sampler=False)`` (Lightning starts the second process itself), the
sampler built in ``train_dataloader()`` with ``rank=self.global_rank,
world_size=self.trainer.world_size`` under a torchdata StatefulDataLoader (Lightning
checkpoints its state). ``ModelCheckpoint(every_n_train_steps=--ckpt-every)``;
``--resume`` is ``trainer.fit(model, ckpt_path=...)``. ``training_step`` records what it
is given."""

from __future__ import annotations

import argparse
import os
from typing import Any

from harness import (
    SAMPLER_KW,
    Index,
    Killer,
    Recorder,
    corpus,
    finish,
    mark_checkpoint,
    quiet_env,
    worker_args,
)

quiet_env()

import lightning as L  # noqa: E402
import torch  # noqa: E402
from lightning.pytorch.callbacks import Callback, ModelCheckpoint  # noqa: E402
from torchdata.stateful_dataloader import StatefulDataLoader  # noqa: E402

import gpu_profiler as gp  # noqa: E402


class Model(L.LightningModule):
    def __init__(self, a: argparse.Namespace) -> None:
        super().__init__()
        self.a = a
        self.w = torch.nn.Linear(1, 1)
        self.rec: Recorder | None = None
        self.n = len(corpus())

    def train_dataloader(self) -> StatefulDataLoader:
        sampler = gp.BucketBatchSampler(corpus(), rank=self.global_rank,
                                        world_size=self.trainer.world_size, **SAMPLER_KW)
        return StatefulDataLoader(Index(self.n), batch_sampler=sampler,
                                  num_workers=self.a.workers,
                                  prefetch_factor=4 if self.a.workers else None)

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
        if self.rec is None:
            self.rec = Recorder(self.a.out, self.a.tag, self.global_rank)
        self.rec.record(self.global_step, self.current_epoch, batch_idx, batch)
        return self.w(batch.float()[:, None] / self.n).pow(2).mean()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=1e-3)


class Checkpoints(ModelCheckpoint):
    """ModelCheckpoint that says, once a checkpoint is written, which it is."""

    def __init__(self, killer: Killer, a: argparse.Namespace, **kw: Any) -> None:
        super().__init__(**kw)
        self.killer, self.a = killer, a

    def _save_checkpoint(self, trainer: L.Trainer, filepath: str) -> None:
        super()._save_checkpoint(trainer, filepath)
        trainer.strategy.barrier()
        g = trainer.global_step
        if trainer.global_rank == 0:
            mark_checkpoint(self.a.out, self.a.tag, g, filepath, epoch=trainer.current_epoch,
                            step=trainer.fit_loop.epoch_loop.batch_progress.current.completed)
        self.killer.checkpointed(g)


class Kill(Callback):
    def __init__(self, killer: Killer) -> None:
        self.killer = killer

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        self.killer.after_step(trainer.global_step)


def main() -> None:
    a = worker_args()
    rank = int(os.environ.get("LOCAL_RANK", 0))  # Lightning sets it in the process it starts
    killer = Killer(a.out, a.tag, a.kill_after, rank)
    torch.manual_seed(0)
    trainer = L.Trainer(
        devices=2, strategy="ddp", accelerator="cpu", use_distributed_sampler=False,
        max_epochs=a.epochs, logger=False, enable_progress_bar=False,
        enable_model_summary=False, default_root_dir=a.out, num_sanity_val_steps=0,
        callbacks=[Kill(killer), Checkpoints(killer, a, dirpath=os.path.join(a.out, "ckpts"),
                                             filename=f"{a.tag}-{{step}}", save_top_k=-1,
                                             every_n_train_steps=a.ckpt_every)])
    trainer.fit(Model(a), ckpt_path=a.resume)
    finish()


if __name__ == "__main__":
    main()
