"""Worker: a plain torch DataLoader over BucketBatchSampler(rank=0, world_size=1), one
process, ``--workers`` loader workers (prefetch_factor 4). Checkpoints the model, the
optimizer and the sampler's state (``next_step=`` the steps trained this epoch: with
workers the loader fetches ahead of training) every ``--ckpt-every`` steps; resumes from
``--resume``. See harness.py for what it records."""

from __future__ import annotations

import os

from harness import SAMPLER_KW, Index, Killer, Recorder, corpus, quiet_env, worker_args

quiet_env()

import torch  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

import gpu_profiler as gp  # noqa: E402


def main() -> None:
    a = worker_args()
    torch.manual_seed(0)
    rec, killer = Recorder(a.out, a.tag, 0), Killer(a.out, a.tag, a.kill_after, 0)
    lengths = corpus()
    sampler = gp.BucketBatchSampler(lengths, rank=0, world_size=1, **SAMPLER_KW)
    loader = DataLoader(Index(len(lengths)), batch_sampler=sampler, num_workers=a.workers,
                        prefetch_factor=4 if a.workers else None)
    model = torch.nn.Linear(1, 1)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    g = 0
    if a.resume:
        ck = torch.load(a.resume, weights_only=False)
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        sampler.load_state_dict(ck["sampler"])
        g = ck["g"]
        rec.note("loaded", {"epoch": sampler.epoch, "resume_step": sampler.resume_step,
                            "len": len(sampler), "state": ck["sampler"]})
    checked_raise = False

    def save(epoch: int, step: int) -> None:
        nonlocal checked_raise
        if a.workers and not checked_raise:
            # workers fetch ahead of training: the sampler cannot tell where training is
            try:
                sampler.state_dict()
                raised = None
            except gp.ProfilerError as exc:
                raised = str(exc)
            rec.note("no-next-step", {"raised": raised})
            checked_raise = True
        state = sampler.state_dict(next_step=step)
        if not a.workers and not checked_raise:
            rec.note("no-next-step", {"plain": sampler.state_dict(), "given": state})
            checked_raise = True
        path = os.path.join(a.out, f"ckpt-{a.tag}.pt")
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "sampler": state,
                    "g": g}, path + ".tmp")
        os.replace(path + ".tmp", path)
        rec.checkpointed(g, path, epoch=epoch, step=step)
        killer.checkpointed(g)

    for epoch in range(sampler.epoch, a.epochs):
        sampler.set_epoch(epoch)
        step = sampler.resume_step
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


if __name__ == "__main__":
    main()
