"""Worker: torchdata's StatefulDataLoader over BucketBatchSampler(rank=0, world_size=1),
one process, ``--workers`` loader workers. The loader's own state_dict() (which asks the
sampler for its state) is the checkpoint, with the model's and the optimizer's, every
``--ckpt-every`` steps (inside the loop) and, with ``--ckpt-epoch-end``, after each
epoch's loop has ended. ``--resume`` loads one in a new process; ``--peek`` takes
``next(iter(loader))`` after loading, before training. See harness.py for the records."""

from __future__ import annotations

import os
from typing import Any

from harness import SAMPLER_KW, Index, Killer, Recorder, corpus, quiet_env, worker_args

quiet_env()

import torch  # noqa: E402
from torchdata.stateful_dataloader import StatefulDataLoader  # noqa: E402

import gpu_profiler as gp  # noqa: E402
from gpu_profiler.sampler import SCHEMA  # noqa: E402


def sampler_states(obj: Any) -> list[dict[str, Any]]:
    """The sampler states found anywhere in the loader's state."""
    if isinstance(obj, dict):
        if obj.get("schema") == SCHEMA:
            return [obj]
        return [s for v in obj.values() for s in sampler_states(v)]
    if isinstance(obj, (list, tuple)):
        return [s for v in obj for s in sampler_states(v)]
    return []


def main() -> None:
    a = worker_args(("--ckpt-epoch-end", dict(action="store_true")),
                    ("--peek", dict(action="store_true")))
    torch.manual_seed(0)
    rec, killer = Recorder(a.out, a.tag, 0), Killer(a.out, a.tag, a.kill_after, 0)
    lengths = corpus()
    sampler = gp.BucketBatchSampler(lengths.tolist(), rank=0, world_size=1, **SAMPLER_KW)
    loader = StatefulDataLoader(Index(len(lengths)), batch_sampler=sampler,
                                num_workers=a.workers, prefetch_factor=4 if a.workers else None)
    model = torch.nn.Linear(1, 1)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    epoch0, step0, g = 0, 0, 0
    if a.resume:
        ck = torch.load(a.resume, weights_only=False)
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        loader.load_state_dict(ck["loader"])
        epoch0, step0, g = ck["epoch"], ck["step"], ck["g"]
        if a.peek:
            rec.note("peek", {"idx": next(iter(loader)).tolist(),
                              "resume_step": sampler.resume_step, "epoch": sampler.epoch})

    def save(epoch: int, step: int) -> None:
        state = loader.state_dict()
        path = os.path.join(a.out, f"ckpt-{a.tag}.pt")
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "loader": state,
                    "epoch": epoch, "step": step, "g": g}, path + ".tmp")
        os.replace(path + ".tmp", path)
        rec.checkpointed(g, path, epoch=epoch, step=step,
                         sampler_states=sampler_states(state))
        killer.checkpointed(g)

    for epoch in range(epoch0, a.epochs):
        sampler.set_epoch(epoch)
        step = step0 if epoch == epoch0 else 0
        for batch in loader:
            loss = model(batch.float()[:, None] / len(lengths)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            rec.record(g, epoch, step, batch)
            step, g = step + 1, g + 1
            if g % a.ckpt_every == 0:
                save(epoch, step)
            killer.after_step(g)
        if a.ckpt_epoch_end:
            save(epoch + 1, 0)


if __name__ == "__main__":
    main()
