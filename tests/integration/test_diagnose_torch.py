"""``gpu-profiler diagnose`` on event files written by torch's own
``torch.utils.tensorboard.SummaryWriter`` (the default suite's are tensorboardX's): a loss
trained on a random and on a stride order of the same batches, simulated per batch."""

from __future__ import annotations

import numpy as np
import pytest

import gpu_profiler as gp
from gpu_profiler.analysis.schedule import batch_order

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("order, banded", [("random", True), ("stride", False)])
def test_torch_summary_writer_log(order, banded, tmp_path, stack):
    stack("torch", "tensorboard")
    from torch.utils.tensorboard import SummaryWriter

    buckets = batch_order([400, 200, 200, 800], order, seed=3).astype(np.int64)
    levels = np.log([2.8, 3.2, 3.5, 4.0])
    rng = np.random.default_rng(0)
    s = np.arange(buckets.size)
    loss = (1.5 + 2 * np.exp(-s / 300)) * np.exp(levels[buckets] - levels.mean()
                                               + rng.normal(0, 0.04, s.size))
    writer = SummaryWriter(str(tmp_path / "run"))
    for step, value in enumerate(loss):
        writer.add_scalar("Loss/train", float(value), step)
        writer.add_scalar("Loss/val", float(value), step)
    writer.close()
    r = gp.diagnose(tmp_path / "run", buckets=buckets)
    assert r.series == "Loss/train" and r.format == "tensorboard" and r.points == s.size
    assert r.banded is banded, r.verdict
    assert r.bucket_r2 > 0.8
