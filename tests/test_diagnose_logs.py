"""Loss logs as people have them, read as hostile input: TensorBoard event files written by
a real writer (tensorboardX's SummaryWriter; torch's is in tests/integration), CSV / JSONL /
Parquet tables as W&B, MLflow and TensorBoard export them; NaN/inf, resumed runs, truncated
files, ambiguous and missing series."""

from __future__ import annotations

import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gpu_profiler.errors import ProfilerError
from gpu_profiler.losslog import loss_log, pick_loss, read_loss_log

tensorboardX = pytest.importorskip("tensorboardX")


def write_tb(folder, series, *, start=0):
    """One event file under ``folder`` by tensorboardX: ``{tag: values}`` from step
    ``start``; returns its path."""
    before = set(folder.glob("*tfevents*")) if folder.exists() else set()
    writer = tensorboardX.SummaryWriter(str(folder), filename_suffix=f".{start}")
    for tag, values in series.items():
        for i, v in enumerate(values):
            writer.add_scalar(tag, v, start + i)
    writer.close()
    (made,) = set(folder.glob("*tfevents*")) - before
    return made


def test_tensorboard_run_directory_default_tag(tmp_path):
    loss = np.linspace(3, 2, 200)
    write_tb(tmp_path, {"train/loss": loss, "eval/loss": loss[:20], "lr": np.ones(200)})
    log = read_loss_log(tmp_path)
    assert (log.format, log.series) == ("tensorboard", "train/loss")
    assert log.steps.tolist() == list(range(200))
    assert log.loss == pytest.approx(loss, rel=1e-6)  # float32 in the file
    lr = read_loss_log(tmp_path, series="lr")
    assert lr.loss.tolist() == [1.0] * 200


def test_tensorboard_resumed_run_nan_and_truncation(tmp_path):
    """A crashed run (steps 0-149) resumed from step 100 in a second event file: steps
    100-149 of the first are replaced, as TensorBoard shows them; NaN/inf counted; the
    second file cut mid-record says so."""
    first = np.full(150, 3.0)
    first[[10, 20]] = [np.nan, np.inf]
    write_tb(tmp_path, {"loss": first})
    second = write_tb(tmp_path, {"loss": np.full(100, 2.0)}, start=100)
    size = os.path.getsize(second)
    with open(second, "r+b") as f:
        f.truncate(size - 7)
    log = read_loss_log(tmp_path)
    assert log.nonfinite == 2 and log.rewritten == 50
    assert log.steps[log.steps < 100].tolist() == [s for s in range(100) if s not in (10, 20)]
    assert log.steps[-1] == 198 and set(log.loss[log.steps >= 100]) == {2.0}
    assert len(log.warnings) == 1 and "not a whole event" in log.warnings[0]


def test_tensorboard_errors_are_one_line(tmp_path):
    write_tb(tmp_path / "a", {"train/loss": [1.0, 2.0], "train/aux_loss": [1.0, 2.0]})
    with pytest.raises(ProfilerError, match="several loss series .*--tag"):
        read_loss_log(tmp_path / "a")
    with pytest.raises(ProfilerError, match="no scalar values of tag 'nope'"):
        read_loss_log(tmp_path / "a", series="nope")
    write_tb(tmp_path / "b", {"accuracy": [0.5]})
    with pytest.raises(ProfilerError, match="2 runs"):
        read_loss_log(tmp_path)
    with pytest.raises(ProfilerError, match="no series named like a training loss"):
        read_loss_log(tmp_path / "b")
    junk = tmp_path / "c" / "events.out.tfevents.1.host"
    junk.parent.mkdir()
    junk.write_bytes(os.urandom(5000))
    with pytest.raises(ProfilerError, match="not a whole event"):
        read_loss_log(junk)
    (tmp_path / "d").mkdir()
    with pytest.raises(ProfilerError, match="no TensorBoard event files"):
        read_loss_log(tmp_path / "d")


def test_tables_csv_jsonl_parquet(tmp_path):
    steps = np.arange(0, 1000, 10)
    loss = np.linspace(3, 2, 100)
    loss[5] = np.nan
    (tmp_path / "log.csv").write_text("step,train/loss\n" + "".join(
        f"{s},{v}\n" for s, v in zip(steps, loss, strict=True)))
    (tmp_path / "log.jsonl").write_text("".join(
        json.dumps({"_step": int(s), "train_loss": float(v)}) + "\n"
        for s, v in zip(steps, loss, strict=True)))
    pq.write_table(pa.table({"global_step": steps, "loss": loss}), tmp_path / "log.parquet")
    for name, fmt in (("log.csv", "csv"), ("log.jsonl", "jsonl"), ("log.parquet", "parquet")):
        log = read_loss_log(tmp_path / name)
        assert log.format == fmt and log.nonfinite == 1 and log.steps.size == 99, name
        assert log.steps[:6].tolist() == [0, 10, 20, 30, 40, 60]


def test_wandb_and_tensorboard_exports(tmp_path):
    """W&B: Step, a run-prefixed loss with __MIN/__MAX companions, empty cells where
    another metric was logged; TensorBoard's CSV: Wall time, Step, Value."""
    (tmp_path / "wandb.csv").write_text(
        "Step,run-1 - train/loss,run-1 - train/loss__MIN,run-1 - train/loss__MAX,"
        "run-1 - eval/loss\n1,2.5,2.4,2.6,\n2,2.4,2.3,2.5,3.0\n3,,,,2.9\n4,2.2,2.1,2.3,\n")
    log = read_loss_log(tmp_path / "wandb.csv", step_column="Step")
    assert log.series == "run-1 - train/loss" and log.steps.tolist() == [1, 2, 4]
    (tmp_path / "tb.csv").write_text("Wall time,Step,Value\n1.0,0,2.5\n2.0,5,2.4\n")
    log = read_loss_log(tmp_path / "tb.csv", step_column="Step")
    assert log.series == "Value" and log.steps.tolist() == [0, 5]


def test_table_errors_are_one_line(tmp_path):
    (tmp_path / "text.csv").write_text("step,loss\n1,0.5\n2,abc\n")
    with pytest.raises(ProfilerError, match="column 'loss' is not numeric"):
        read_loss_log(tmp_path / "text.csv")
    (tmp_path / "nostep.csv").write_text("loss\n0.5\n0.4\n")
    log = read_loss_log(tmp_path / "nostep.csv")
    assert log.steps.tolist() == [0, 1] and "row i is taken as step i" in log.warnings[0]
    (tmp_path / "empty.csv").write_text("")
    with pytest.raises(ProfilerError, match="not a readable csv log"):
        read_loss_log(tmp_path / "empty.csv")
    (tmp_path / "bad.parquet").write_bytes(b"PAR1 not really")
    with pytest.raises(ProfilerError, match="not a readable parquet log"):
        read_loss_log(tmp_path / "bad.parquet")
    (tmp_path / "log.txt").write_text("1,2\n")
    with pytest.raises(ProfilerError, match="--log-format"):
        read_loss_log(tmp_path / "log.txt")
    with pytest.raises(ProfilerError, match="no such file"):
        read_loss_log(tmp_path / "missing.csv")
    (tmp_path / "frac.csv").write_text("step,loss\n0.5,1\n")
    with pytest.raises(ProfilerError, match="whole numbers"):
        read_loss_log(tmp_path / "frac.csv")


def test_picking_the_loss():
    assert pick_loss(["lr", "train/loss", "val/loss", "validation_loss"], "x", "--tag") == \
        "train/loss"
    assert pick_loss(["loss", "eval_loss", "test-loss"], "x", "--tag") == "loss"
    with pytest.raises(ProfilerError, match="several"):
        pick_loss(["loss_a", "loss_b"], "x", "--tag")


def test_a_resume_replaces_what_came_after_it():
    log = loss_log([0, 1, 2, 3, 2, 3, 4], [1, 1, 1, 1, 2, 2, 2])
    assert log.steps.tolist() == [0, 1, 2, 3, 4] and log.loss.tolist() == [1, 1, 2, 2, 2]
    assert log.rewritten == 2
