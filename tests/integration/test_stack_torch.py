"""Plain torch DataLoader, one process, without and with loader workers: a job SIGKILLed
mid-epoch resumes from its checkpoint and trains exactly the plan."""

from __future__ import annotations

import numpy as np
import pytest
from harness import (
    SAMPLER_KW,
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


def test_corpus_is_skewed():
    """The corpus every stack trains: one bucket makes 40-60% of the batches, and at 2
    ranks the steps of one bucket are all but the few leftover steps at an epoch's end."""
    for world in (1, 2):
        for p in plans(world, 2):
            share = np.bincount(p.bucket, minlength=len(SAMPLER_KW["bounds"]) - 1) / p.batches
            assert 0.4 <= share.max() <= 0.6 and (share > 0.05).all(), share
            b = p.bucket.reshape(p.steps, world)
            assert int((b != b[:, :1]).any(axis=1).sum()) <= 2


@pytest.mark.parametrize("workers", [0, 2])
def test_torch_dataloader_sigkill_resume(tmp_path, stack, workers):
    stack("torch")
    ps = plans(1, EPOCHS)
    job = ("w_torch.py", "--out", tmp_path, "--workers", workers, "--epochs", EPOCHS)
    run_and_kill(python_cmd(*job, "--tag", "a", "--kill-after", ps[0].steps + ps[1].steps // 3),
                 tmp_path, "killed", tmp_path / "ready-a")
    ck = read_json(tmp_path / "ckpt-a.json")
    assert ck["epoch"] == 1 and 0 < ck["step"] < ps[1].steps, ck
    note = read_json(tmp_path / "no-next-step-a.json")
    if workers:
        assert note["raised"], "sampler.state_dict() without next_step= under a loader " \
                               "with workers did not raise"
        assert "\n" not in note["raised"].strip(), note["raised"]
    else:
        assert note["plain"] == note["given"], note

    killed = committed(read_records(tmp_path, "a", 1), ck["g"])
    check_run([killed[0][:ps[0].steps]], 1, 1, "killed run, epoch 0")

    run_job(python_cmd(*job, "--tag", "b", "--resume", ck["path"]), tmp_path, "resumed")
    loaded = read_json(tmp_path / "loaded-b.json")
    assert (loaded["epoch"], loaded["resume_step"], loaded["len"]) == (  # len: the epoch's
        1, ck["step"], ps[1].steps), loaded
    resumed = read_records(tmp_path, "b", 1)
    check_run([killed[0] + resumed[0]], 1, EPOCHS, f"workers={workers}: killed + resumed")
