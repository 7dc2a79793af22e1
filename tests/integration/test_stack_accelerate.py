"""accelerate, 2 processes (torch.distributed.run, gloo, CPU): the sampler with
rank=None inside ``accelerator.prepare``; a job SIGKILLed mid-epoch resumes from
``accelerator.save_state`` with ``skip_first_batches`` after ``set_epoch`` and trains
exactly the plan, every step's micro-batches from one bucket on both ranks."""

from __future__ import annotations

import pytest
from harness import (
    check_run,
    committed,
    plans,
    read_json,
    read_records,
    run_and_kill,
    run_job,
    torchrun_cmd,
)

pytestmark = pytest.mark.integration
EPOCHS, WORLD = 3, 2


@pytest.mark.parametrize("workers", [0, 2])
def test_accelerate_two_processes_sigkill_resume(tmp_path, stack, workers):
    stack("torch", "accelerate")
    ps = plans(WORLD, EPOCHS)
    job = ("--out", tmp_path, "--workers", workers, "--epochs", EPOCHS)
    run_and_kill(torchrun_cmd("w_accelerate.py", WORLD, *job, "--tag", "a", "--kill-after",
                              ps[0].steps + ps[1].steps // 3),
                 tmp_path, "killed", tmp_path / "ready-a")
    ck = read_json(tmp_path / "ckpt-a.json")
    assert ck["epoch"] == 1 and 0 < ck["step"] < ps[1].steps, ck
    killed = committed(read_records(tmp_path, "a", WORLD), ck["g"])
    check_run([r[:ps[0].steps] for r in killed], WORLD, 1, "killed run, epoch 0")
    run_job(torchrun_cmd("w_accelerate.py", WORLD, *job, "--tag", "b", "--resume", ck["path"]),
            tmp_path, "resumed")
    resumed = read_records(tmp_path, "b", WORLD)
    check_run([k + r for k, r in zip(killed, resumed, strict=True)], WORLD, EPOCHS,
              f"workers={workers}: killed + resumed")
