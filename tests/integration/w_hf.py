"""Worker (one rank of a ``torch.distributed.run`` job): HF ``transformers.Trainer``
through ``gpu_profiler.integrations.BucketTrainer``, on the CPU (``use_cpu``, gloo). The
``datasets`` dataset at ``--data`` has ``idx`` and ``length``; the sampler reads its
lengths from that path. A tiny model's forward records the ``idx`` it is given, labelled
with the Trainer's global step. Checkpoints every ``--ckpt-every`` steps (``save_steps``);
``--resume`` is ``trainer.train(resume_from_checkpoint=...)``."""

from __future__ import annotations

import os
from typing import Any

from harness import SAMPLER_KW, Killer, Recorder, finish, quiet_env, worker_args

quiet_env()

import datasets  # noqa: E402
import torch  # noqa: E402
from transformers import TrainerCallback, TrainingArguments  # noqa: E402

import gpu_profiler as gp  # noqa: E402
from gpu_profiler.integrations import BucketTrainer  # noqa: E402


class Tiny(torch.nn.Module):
    """One weight; its forward records the batch's sample indices."""

    def __init__(self, rec: Recorder, steps: int, n: int) -> None:
        super().__init__()
        self.w = torch.nn.Linear(1, 1)
        self.rec, self.steps, self.n, self.g = rec, steps, n, 0

    def forward(self, idx: torch.Tensor, labels: Any = None) -> dict[str, torch.Tensor]:
        if self.training:
            self.rec.record(self.g, self.g // self.steps, self.g % self.steps, idx)
        return {"loss": self.w(idx.float()[:, None] / self.n).pow(2).mean()}


class Steps(TrainerCallback):
    def __init__(self, model: Tiny, rec: Recorder, killer: Killer, rank: int) -> None:
        self.model, self.rec, self.killer, self.rank = model, rec, killer, rank

    def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        self.model.g = state.global_step

    def on_save(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        g = state.global_step
        if self.rank == 0:
            path = os.path.join(args.output_dir, f"checkpoint-{g}")
            self.rec.checkpointed(g, path, epoch=g // self.model.steps,
                                  step=g % self.model.steps)
        self.killer.checkpointed(g)

    def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        self.killer.after_step(state.global_step)


def main() -> None:
    a = worker_args(("--data", dict(required=True)))
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    rec, killer = Recorder(a.out, a.tag, rank), Killer(a.out, a.tag, a.kill_after, rank)
    ds = datasets.load_from_disk(a.data)
    sampler = gp.BucketBatchSampler(a.data, column="length", world_size=world, **SAMPLER_KW)
    model = Tiny(rec, sampler.plan().steps, len(ds))
    args = TrainingArguments(
        output_dir=os.path.join(a.out, "trainer"), num_train_epochs=a.epochs,
        per_device_train_batch_size=8, learning_rate=1e-3, save_strategy="steps",
        save_steps=a.ckpt_every, logging_strategy="no", report_to=[], use_cpu=True,
        ddp_backend="gloo", dataloader_num_workers=a.workers, disable_tqdm=True, seed=0)
    trainer = BucketTrainer(model=model, args=args, train_dataset=ds, sampler=sampler)
    trainer.add_callback(Steps(model, rec, killer, rank))
    trainer.train(resume_from_checkpoint=a.resume)
    finish()


if __name__ == "__main__":
    main()
