"""Worker (one rank of a ``torch.distributed.run`` job): accelerate on the CPU (gloo),
``accelerator.prepare(DataLoader(ds, batch_sampler=BucketBatchSampler(lengths,
world_size=accelerator.num_processes)))`` (rank=None: accelerate deals batch j to process
j % num_processes), ``loader.set_epoch(e)`` each epoch. Checkpoints with
``accelerator.save_state`` every ``--ckpt-every`` steps; ``--resume DIR`` loads one and
skips the epoch's trained steps with ``accelerator.skip_first_batches`` after set_epoch.
(``accelerate launch --cpu --num_processes 2`` starts one process without mpirun: hence
torch.distributed.run, which is what accelerate's own multi-process launcher runs.)"""

from __future__ import annotations

import json
import os

from harness import SAMPLER_KW, Index, Killer, Recorder, corpus, finish, quiet_env, worker_args

quiet_env()

import torch  # noqa: E402
from accelerate import Accelerator  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

import gpu_profiler as gp  # noqa: E402


def main() -> None:
    a = worker_args()
    acc = Accelerator(cpu=True)
    rank, world = acc.process_index, acc.num_processes
    assert world == int(os.environ["WORLD_SIZE"]) > 1, (world, os.environ.get("WORLD_SIZE"))
    torch.manual_seed(0)
    rec, killer = Recorder(a.out, a.tag, rank), Killer(a.out, a.tag, a.kill_after, rank)
    lengths = corpus()
    sampler = gp.BucketBatchSampler(torch.from_numpy(lengths), world_size=world, **SAMPLER_KW)
    loader = acc.prepare(DataLoader(Index(len(lengths)), batch_sampler=sampler,
                                    num_workers=a.workers))
    model = torch.nn.Linear(1, 1)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    model, opt = acc.prepare(model, opt)
    epoch0, step0, g = 0, 0, 0
    if a.resume:
        acc.load_state(a.resume)
        with open(os.path.join(a.resume, "loop.json")) as f:
            loop = json.load(f)
        epoch0, step0, g = loop["epoch"], loop["step"], loop["g"]

    for epoch in range(epoch0, a.epochs):
        loader.set_epoch(epoch)
        step = step0 if epoch == epoch0 else 0
        batches = acc.skip_first_batches(loader, step) if step else loader
        for batch in batches:
            loss = model(batch.float()[:, None] / len(lengths)).pow(2).mean()
            acc.backward(loss)
            opt.step()
            opt.zero_grad()
            rec.record(g, epoch, step, batch)
            step, g = step + 1, g + 1
            if g % a.ckpt_every == 0:
                path = os.path.join(a.out, f"ckpt-{a.tag}-{g}")
                acc.save_state(path)
                acc.wait_for_everyone()
                if acc.is_main_process:
                    with open(os.path.join(path, "loop.json"), "w") as f:
                        json.dump({"epoch": epoch, "step": step, "g": g}, f)
                    rec.checkpointed(g, path, epoch=epoch, step=step)
                killer.checkpointed(g)
            killer.after_step(g)
    acc.wait_for_everyone()
    acc.end_training()
    finish()


if __name__ == "__main__":
    main()
