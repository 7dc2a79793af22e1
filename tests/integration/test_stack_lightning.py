"""Lightning, ``Trainer(devices=2, strategy="ddp", accelerator="cpu",
use_distributed_sampler=False)`` with the sampler built in ``train_dataloader()``
(``rank=self.global_rank``) under a StatefulDataLoader: every rank's ``training_step``
sees the plan, and a job SIGKILLed mid-epoch, or after a checkpoint at an epoch's last
step, resumes with ``trainer.fit(ckpt_path=...)`` and trains exactly the plan."""

from __future__ import annotations

import pytest
from harness import (
    check_run,
    child_env,
    committed,
    free_port,
    plans,
    python_cmd,
    read_json,
    read_records,
    run_and_kill,
    run_job,
)

pytestmark = pytest.mark.integration
EPOCHS, WORLD = 3, 2


@pytest.mark.parametrize("where", ["mid-epoch", "epoch-end"])
def test_lightning_ddp_two_processes_sigkill_resume(tmp_path, stack, where):
    stack("torch", "lightning", "torchdata")
    ps = plans(WORLD, EPOCHS)
    if where == "mid-epoch":
        every, kill_after = 10, ps[0].steps + ps[1].steps // 3
    else:  # a checkpoint every epoch's steps: the first lands on epoch 0's last step
        every, kill_after = ps[0].steps, ps[0].steps
    job = ("w_lightning.py", "--out", tmp_path, "--epochs", EPOCHS, "--ckpt-every", every)
    env = child_env(tmp_path, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    run_and_kill(python_cmd(*job, "--tag", "a", "--kill-after", kill_after), tmp_path,
                 "killed", tmp_path / "ready-a", env=env)
    ck = read_json(tmp_path / "ckpt-a.json")
    if where == "mid-epoch":
        assert ck["epoch"] == 1 and 0 < ck["step"] < ps[1].steps, ck
    else:
        assert ck["g"] == ps[0].steps, ck
    killed = committed(read_records(tmp_path, "a", WORLD), ck["g"])
    check_run([r[:ps[0].steps] for r in killed], WORLD, 1, "killed run, epoch 0")
    env["MASTER_PORT"] = str(free_port())
    run_job(python_cmd(*job, "--tag", "b", "--resume", ck["path"]), tmp_path, "resumed",
            env=env)
    resumed = read_records(tmp_path, "b", WORLD)
    check_run([k + r for k, r in zip(killed, resumed, strict=True)], WORLD, EPOCHS,
              f"{where}: killed + resumed")
