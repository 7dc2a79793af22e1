"""In a real 2-process job (torch.distributed.run, gloo, CPU), the two spellings that would
silently train the wrong data are one-line errors that say the fix: a rank sampler dealt
again by accelerate's ``prepare``, and a ``rank=None`` sampler iterated directly."""

from __future__ import annotations

import pytest
from harness import run_job, torchrun_cmd

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("mode, says", [("sharded-twice", "build it with rank=None"),
                                        ("undealt", "pass rank=")])
def test_a_sampler_spelled_for_the_wrong_stack_refuses_to_train(tmp_path, stack, mode, says):
    stack("torch", "accelerate")
    run_job(torchrun_cmd("w_mistakes.py", 2, "--out", tmp_path, "--mode", mode), tmp_path, mode)
    for rank in (0, 1):
        said = (tmp_path / f"said-{mode}-rank{rank}.txt").read_text()
        assert says in said and "\n" not in said.strip(), said
