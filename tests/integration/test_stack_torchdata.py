"""torchdata's StatefulDataLoader (which saves and loads the sampler's state itself), one
process, without and with loader workers: SIGKILLed mid-epoch, or after a checkpoint at
an epoch's end, a job resumes in a new process and trains exactly the plan; a peek
(``next(iter(loader))``) after loading moves nothing."""

from __future__ import annotations

import pytest
from harness import (
    check_run,
    committed,
    plans,
    python_cmd,
    read_json,
    read_records,
    run_and_kill,
    run_job,
)

pytestmark = pytest.mark.integration
EPOCHS = 3


def _kill_and_resume(tmp_path, workers: int, kill_after: int, *opts, peek: bool = False):
    job = ("w_torchdata.py", "--out", tmp_path, "--workers", workers, "--epochs", EPOCHS,
           *opts)
    run_and_kill(python_cmd(*job, "--tag", "a", "--kill-after", kill_after), tmp_path,
                 "killed", tmp_path / "ready-a")
    ck = read_json(tmp_path / "ckpt-a.json")
    assert ck["sampler_states"], ("the StatefulDataLoader's state holds no "
                                  "BucketBatchSampler state (it did not call state_dict())")
    killed = committed(read_records(tmp_path, "a", 1), ck["g"])
    run_job(python_cmd(*job, "--tag", "b", "--resume", ck["path"], *(["--peek"] * peek)),
            tmp_path, "resumed")
    resumed = read_records(tmp_path, "b", 1)
    check_run([killed[0] + resumed[0]], 1, EPOCHS, f"workers={workers}: killed + resumed")
    return ck, resumed


@pytest.mark.parametrize("workers", [0, 2])
def test_torchdata_mid_epoch_sigkill_resume_and_peek(tmp_path, stack, workers):
    stack("torch", "torchdata")
    ps = plans(1, EPOCHS)
    ck, resumed = _kill_and_resume(tmp_path, workers, ps[0].steps + ps[1].steps // 3,
                                   peek=True)
    assert ck["epoch"] == 1 and 0 < ck["step"] < ps[1].steps, ck
    peek = read_json(tmp_path / "peek-b.json")
    assert peek["idx"] == ps[1].batch(ck["step"]).tolist(), (
        "the peek after loading is not the batch at the resume point")
    assert resumed[0][0]["idx"] == peek["idx"], "the peek moved the resume point"


@pytest.mark.parametrize("workers", [0, 2])
def test_torchdata_epoch_end_checkpoint_resume(tmp_path, stack, workers):
    """The checkpoint after epoch 0's loop has ended: the resumed job starts epoch 1."""
    stack("torch", "torchdata")
    ps = plans(1, EPOCHS)
    ck, _ = _kill_and_resume(tmp_path, workers, ps[0].steps, "--ckpt-every", 10**9,
                             "--ckpt-epoch-end")
    assert (ck["epoch"], ck["step"], ck["g"]) == (1, 0, ps[0].steps), ck


def test_torchdata_checkpoint_at_last_step_resume(tmp_path, stack):
    """The checkpoint taken inside the loop, right after epoch 0's last step (a
    checkpoint every N steps lands there whenever N divides the epoch): the resumed loop
    finishes epoch 0 (nothing left) and goes on with epoch 1, 2 as before."""
    stack("torch", "torchdata")
    ps = plans(1, EPOCHS)
    ck, _ = _kill_and_resume(tmp_path, 0, ps[0].steps, "--ckpt-every", ps[0].steps)
    assert (ck["epoch"], ck["step"], ck["g"]) == (0, ps[0].steps, ps[0].steps), ck
