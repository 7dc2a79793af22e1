"""Diagnose the ladder bench's real loss logs (CPU, about a minute).

`bench/bench_ladder.py` trained a tiny causal LM for one epoch on the same corpus in each
batch order and kept seed 0's loss and bucket of every step (``bench/results/ladder.json``,
``seed0_steps``). This writes each run's loss as a TensorBoard event file with torch's own
``SummaryWriter`` (tensorboardX's when torch is absent), and its bucket per step as
``--emit-order`` writes it, then runs ``gpu-profiler diagnose`` on each: from the loss
alone, and with the order. Expected: gpu-profiler's random order, HF's LengthGroupedSampler
and its batches shuffled are banded; the stride order is not.

It also times the readers and the analysis on a million-step log (a CSV and a Parquet table
of step and loss), and reads TensorBoard event files of 100,000 and 1,000,000 steps x 2 tags
written by the same SummaryWriter two ways: gpu-profiler's reader (a native kernel frames
the records, checks both CRC32Cs and decodes the scalar events; median of 5) and
tensorboard's own record loader with protobuf (the CRCs in Python; median of 3, once at a
million steps: a minute), checking that both give the same numbers; and `gpu-profiler
diagnose` on the million-step event file as a command (median of 3). The load average is
recorded around each. Writing the million-step file takes the writer ~2 min.

Writes ``<out>/diagnose.json`` and ``<out>/diagnose.md``. Run: ``PYTHONPATH=. python
bench/bench_diagnose.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

import gpu_profiler as gp
from gpu_profiler.losslog import _tensorboard_loader, read_loss_log

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
import common  # noqa: E402

LABELS = {"random": 'gpu_profiler order="random"', "hf_length_grouped":
          "HF LengthGroupedSampler", "stride": 'gpu_profiler order="stride"',
          "hf_shuffled": "LengthGroupedSampler's batches, shuffled"}


def writer(folder: Path) -> Any:
    try:
        from torch.utils.tensorboard import SummaryWriter

        return "torch", SummaryWriter(str(folder))
    except ImportError:
        from tensorboardX import SummaryWriter as XWriter

        return "tensorboardX", XWriter(str(folder))


def write_log(folder: Path, loss: list[float]) -> str:
    name, w = writer(folder)
    for step, value in enumerate(loss):
        w.add_scalar("train/loss", value, step)
        w.add_scalar("train/lr", 3e-3, step)
    w.close()
    return name


def summary(r: Any) -> dict[str, Any]:
    keys = ("banded", "verdict", "band_r2", "persistence", "period", "period_share",
            "period_p", "longest_ladder", "ladders", "expected_ladders", "window_std",
            "bucket_r2", "debanded_window_std", "predicted_window_std", "longest_run",
            "stride_longest_run", "fix")
    d = r.to_dict()
    out = {k: d[k] for k in keys}
    out["bands"] = [{"share": b["share"], "level": b["level"]} for b in d["bands"]]
    out["buckets"] = [{"index": b["index"], "loss": b["loss"], "effect": b["effect"]}
                      for b in d["buckets"]]
    return out


def timed(fn: Any) -> tuple[Any, float]:
    start = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - start


def big_logs(folder: Path) -> tuple[dict[str, float], np.ndarray]:
    """Seconds to read and diagnose a million-step log (CSV, Parquet), and its loss."""
    import pyarrow as pa
    import pyarrow.csv as pc
    import pyarrow.parquet as pq

    rng = np.random.default_rng(0)
    n = 1_000_000
    buckets = rng.permutation(np.repeat(np.arange(6), [n // 6] * 5 + [n - 5 * (n // 6)]))
    s = np.arange(n)
    loss = (2 + 2.5 * np.exp(-s / 30_000)) * np.exp(
        np.log([2.9, 3.2, 3.4, 3.6, 3.7, 4.0])[buckets] - 1.25 + rng.normal(0, 0.05, n))
    table = pa.table({"step": s, "train/loss": loss})
    pc.write_csv(table, folder / "big.csv")
    pq.write_table(table, folder / "big.parquet")
    np.save(folder / "big.npy", buckets)
    out = {}
    for name in ("big.csv", "big.parquet"):
        log, out[f"read_{name}"] = timed(lambda name=name: read_loss_log(folder / name))
    _, out["diagnose_alone"] = timed(lambda: gp.diagnose(log))
    _, out["diagnose_with_order"] = timed(lambda: gp.diagnose(log, buckets=folder / "big.npy"))
    return out, loss


def median_of(fn: Any, runs: int) -> dict[str, Any]:
    """The median and every run's seconds of ``fn()``, and the 1-minute load average before
    and after them."""
    before = os.getloadavg()[0]
    runs_s = [timed(fn)[1] for _ in range(runs)]
    return {"median_s": float(np.median(runs_s)), "runs_s": runs_s,
            "load_before": before, "load_after": os.getloadavg()[0]}


def tensorboard_reads(folder: Path, loss: np.ndarray) -> dict[str, Any]:
    """TensorBoard event files of 1e5 and 1e6 steps x 2 tags read by gpu-profiler's reader
    and by tensorboard's loader (the same numbers checked), and diagnosed by the command."""
    out: dict[str, Any] = {}
    for steps in (100_000, 1_000_000):
        tb = folder / f"tb_{steps}"
        began = time.perf_counter()
        write_log(tb, loss[:steps].tolist())  # two tags: 2 events a step
        print(f"wrote {steps:,} steps in {time.perf_counter() - began:.0f} s", flush=True)
        ours, theirs = read_loss_log(tb), _tensorboard_loader(str(tb), None)
        assert (np.array_equal(ours.steps, theirs.steps) and np.array_equal(ours.loss, theirs.loss)
                and (ours.series, ours.warnings) == (theirs.series, theirs.warnings))
        row = {"events": 2 * steps, "bytes": sum(f.stat().st_size for f in tb.iterdir()),
               "native": median_of(lambda tb=tb: read_loss_log(tb), 5),
               "loader": median_of(lambda tb=tb: _tensorboard_loader(str(tb), None),
                                   3 if steps <= 100_000 else 1)}
        if steps == 1_000_000:
            cli = [str(Path(sys.executable).with_name("gpu-profiler")), "diagnose", str(tb)]
            row["diagnose_command"] = median_of(
                lambda cli=cli: subprocess.run(cli, check=True, capture_output=True), 3)
        out[str(steps)] = row
        print(f"{steps:,} steps: native {row['native']['median_s']:.2f} s, tensorboard's "
              f"loader {row['loader']['median_s']:.2f} s", flush=True)
    return out


def write_md(path: Path, res: dict[str, Any]) -> None:
    env = res["environment"]
    lines = [
        "# Diagnose: the ladder bench's loss logs", "",
        f"Generated by `{res['command']}` (`bench/bench_diagnose.py`) on {env['date']}, git "
        f"`{env['git']}`; {env['cpu']}. The logs: `bench/results/ladder.json`, seed "
        f"0's loss per step of a 1-layer LM trained one epoch in each order (written as "
        f"TensorBoard event files by {res['writer']}'s SummaryWriter), and the bucket of "
        "each step. Windows of 10 steps; banded = composition carries >= 25% of the "
        "windows' variance and keeps >= 0.7 of a random order's swing.", "",
        "| order | loss alone: banded | bands | period (steps) | with the order: banded | "
        "bucket R^2 | band_r2 | persistence | window std | de-banded | stride predicted |",
        "|---|---|--:|--:|---|--:|--:|--:|--:|--:|--:|"]
    for order, r in res["orders"].items():
        a, o = r["alone"], r["with_order"]
        period = f"{a['period']:.1f} (p={a['period_p']:.1g})" if a["period_p"] < 1e-3 else "none"
        lines.append(
            f"| {LABELS[order]} | {'**yes**' if a['banded'] else 'no'} | {len(a['bands'])} | "
            f"{period} | {'**yes**' if o['banded'] else 'no'} | {o['bucket_r2']:.2f} | "
            f"{o['band_r2']:.2f} | {o['persistence']:.2f} | {o['window_std']:.3f} | "
            f"{o['debanded_window_std']:.3f} | {o['predicted_window_std']:.3f} |")
    lines += ["", "Verdicts (with the order):", ""]
    lines += [f"- {LABELS[o]}: {r['with_order']['verdict']}" for o, r in res["orders"].items()]
    t = res["timings_s"]
    lines += ["", "Big logs (seconds): a million steps of step and loss read from CSV "
              f"{t['read_big.csv']:.2f}, from Parquet {t['read_big.parquet']:.2f}; diagnosed "
              f"from the loss alone {t['diagnose_alone']:.2f}, with the order (one bucket per "
              f"step, .npy) {t['diagnose_with_order']:.2f}.", "",
              f"TensorBoard event files ({res['writer']}'s SummaryWriter, `train/loss` and "
              "`train/lr` every step), read in process: gpu-profiler's reader (a native "
              "kernel frames the records, checks both CRC32Cs and decodes the scalar events; "
              "median of 5) and tensorboard's own record loader with protobuf, as diagnose "
              "read them before (median of 3, one run at a million steps); both give the "
              "same steps and values. Load average (1 min) before / after each.", "",
              "| steps x 2 tags | events | MB | gpu-profiler | load | tensorboard's loader | "
              "load | speed-up |", "|--:|--:|--:|--:|--:|--:|--:|--:|"]
    for steps, r in res["tensorboard"].items():
        a, b = r["native"], r["loader"]
        lines.append(f"| {int(steps):,} | {r['events']:,} | {r['bytes'] / 1e6:.1f} | "
                     f"{a['median_s']:.2f} s | {a['load_before']:.1f} / {a['load_after']:.1f} "
                     f"| {b['median_s']:.2f} s | {b['load_before']:.1f} / "
                     f"{b['load_after']:.1f} | {b['median_s'] / a['median_s']:.0f}x |")
    c = res["tensorboard"]["1000000"]["diagnose_command"]
    lines += ["", f"`gpu-profiler diagnose` on the million-step event file, as a command "
              f"(a new process: start-up, read, diagnosis from the loss alone): "
              f"{c['median_s']:.2f} s (median of 3; load {c['load_before']:.1f} / "
              f"{c['load_after']:.1f})."]
    path.write_text("\n".join(lines) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--ladder", default=str(ROOT / "bench" / "results" / "ladder.json"))
    ap.add_argument("--out", default="bench/results")
    args = ap.parse_args()
    steps = json.loads(Path(args.ladder).read_text())["seed0_steps"]
    res: dict[str, Any] = {"schema": "gpu-profiler/bench-diagnose/v1",
                           "command": "PYTHONPATH=. python bench/bench_diagnose.py"
                           + "".join(f" {a}" for a in sys.argv[1:]),
                           "environment": common.machine(), "orders": {}}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for order, run in steps.items():
            res["writer"] = write_log(folder / order, run["loss"])
            (folder / f"{order}.txt").write_text("".join(f"{b}\n" for b in run["bucket"]))
            alone = gp.diagnose(folder / order)
            with_order = gp.diagnose(folder / order, buckets=folder / f"{order}.txt")
            res["orders"][order] = {"alone": summary(alone),
                                    "with_order": summary(with_order)}
            print(f"{order:18s} alone {alone.banded!s:5} with order {with_order.banded!s:5} "
                  f"R^2 {with_order.bucket_r2:.2f}: {with_order.verdict}", flush=True)
        res["timings_s"], loss = big_logs(folder)
        print(res["timings_s"], flush=True)
        res["tensorboard"] = tensorboard_reads(folder, loss)
    out = Path(args.out)
    (out / "diagnose.json").write_text(json.dumps(res, indent=1) + "\n")
    write_md(out / "diagnose.md", res)
    print(f"wrote {out / 'diagnose.json'}, {out / 'diagnose.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
