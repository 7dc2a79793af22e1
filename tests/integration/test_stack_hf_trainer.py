"""HF ``transformers.Trainer`` through ``gpu_profiler.integrations.BucketTrainer``, 2
processes (torch.distributed.run, gloo, CPU): what the model's forward saw on each rank is
the plan, also when the job is SIGKILLed mid-epoch and resumed with
``trainer.train(resume_from_checkpoint=...)``."""

from __future__ import annotations

import pytest
from harness import (
    N,
    check_run,
    committed,
    corpus,
    plans,
    read_json,
    read_records,
    run_and_kill,
    run_job,
    torchrun_cmd,
)

pytestmark = pytest.mark.integration
EPOCHS, WORLD = 3, 2


@pytest.mark.parametrize(("where", "workers"), [("mid-epoch", 0), ("mid-epoch", 2),
                                               ("epoch-end", 0)])
def test_bucket_trainer_two_processes_sigkill_resume(tmp_path, stack, where, workers):
    stack("torch", "transformers", "accelerate", "datasets")
    import datasets

    data = tmp_path / "data"
    datasets.Dataset.from_dict({"idx": list(range(N)), "length": corpus().tolist()}
                               ).save_to_disk(str(data))
    ps = plans(WORLD, EPOCHS)
    if where == "mid-epoch":
        every, kill_after = 10, ps[0].steps + ps[1].steps // 3
    else:  # save_steps = an epoch's steps: the first checkpoint lands on epoch 0's end
        every, kill_after = ps[0].steps, ps[0].steps
    job = ("--out", tmp_path, "--data", data, "--workers", workers, "--epochs", EPOCHS,
           "--ckpt-every", every)
    run_and_kill(torchrun_cmd("w_hf.py", WORLD, *job, "--tag", "a", "--kill-after",
                              kill_after),
                 tmp_path, "killed", tmp_path / "ready-a")
    ck = read_json(tmp_path / "ckpt-a.json")
    if where == "mid-epoch":
        assert ck["epoch"] == 1 and 0 < ck["step"] < ps[1].steps, ck
    else:
        assert ck["g"] == ps[0].steps, ck
    killed = committed(read_records(tmp_path, "a", WORLD), ck["g"])
    check_run([r[:ps[0].steps] for r in killed], WORLD, 1, "killed run, epoch 0")
    run_job(torchrun_cmd("w_hf.py", WORLD, *job, "--tag", "b", "--resume", ck["path"]),
            tmp_path, "resumed")
    resumed = read_records(tmp_path, "b", WORLD)
    check_run([k + r for k, r in zip(killed, resumed, strict=True)], WORLD, EPOCHS,
              f"{where}, workers={workers}: killed + resumed")
