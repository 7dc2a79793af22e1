"""``gpu-profiler diagnose`` end to end: a real plan (``gpu-profiler plan`` on a Parquet
corpus, 2 ranks, grad_accum 2), a training loss simulated on its batches and written by a
real TensorBoard writer, every output format, the schema, the plot, the de-banded curve,
the gates, and every bad input as one line and exit 2."""

from __future__ import annotations

import csv
import json

import jsonschema
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import run_cli

import gpu_profiler as gp
from gpu_profiler.analysis.diagnose import trained_order
from gpu_profiler.losslog import loss_log
from gpu_profiler.plan_file import load_plan
from gpu_profiler.schemas import load
from gpu_profiler.trained_order import read_plans

tensorboardX = pytest.importorskip("tensorboardX")
LEVELS = np.log([2.9, 3.2, 3.4, 3.6, 3.7, 4.0])


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    rng = np.random.default_rng(7)
    lengths = np.clip(rng.lognormal(np.log(1500), 0.9, 60_000), 1, 8192).astype(np.int64)
    path = tmp_path_factory.mktemp("diagnose") / "corpus.parquet"
    pq.write_table(pa.table({"length": lengths}), path)
    return path


@pytest.fixture(scope="module")
def runs(corpus, tmp_path_factory):
    """Per order: its plan file and a TensorBoard log of the loss trained on it (each
    optimizer step: the mean of its 2 x 2 batches' losses, logged every step)."""
    from gpu_profiler.cli import main

    out = {}
    for order in ("random", "stride"):
        folder = tmp_path_factory.mktemp(order)
        plan = folder / "plan.npz"
        with pytest.raises(SystemExit) as exc:
            main(["plan", str(corpus), "-q", "--order", order, "--world-size", "2",
                  "--grad-accum", "2", "-o", str(plan), "-f", "json"])
        assert exc.value.code == 0
        bucket = load_plan(str(plan)).bucket
        rng = np.random.default_rng(1)
        steps = bucket.size // 4
        per_step = bucket[:steps * 4].reshape(steps, 4)
        s = np.arange(steps)
        loss = ((2 + 2.5 * np.exp(-s / 200))[:, None]
                * np.exp(LEVELS[per_step] + rng.normal(0, 0.05, per_step.shape))).mean(axis=1)
        writer = tensorboardX.SummaryWriter(str(folder / "run"))
        for i, v in enumerate(loss):
            writer.add_scalar("train/loss", v, i + 1)  # HF-style: counted after the step
            writer.add_scalar("train/learning_rate", 1e-4, i + 1)
        writer.close()
        out[order] = (plan, folder / "run")
    return out


def test_random_order_banded_stride_clean_with_a_real_plan(runs, capsys):
    docs = {}
    for order, (plan, log) in runs.items():
        rc, out, err = run_cli(["diagnose", log, "--plan", plan, "--grad-accum", "2", "-f",
                                "json"], capsys)
        assert rc == 0, err
        docs[order] = d = json.loads(out)
        jsonschema.validate(d, load("diagnose"), cls=jsonschema.Draft202012Validator)
        assert d["alignment"]["grad_accum"] == 2 and d["alignment"]["world_size"] == 2
        assert d["alignment"]["step_offset"] == 1 and d["series"] == "train/loss"
        got = np.log([b["loss"] / (b["loss"] - b["effect"]) for b in d["buckets"]])
        want = LEVELS[[b["index"] for b in d["buckets"]]]
        shares = np.array([b["share"] for b in d["buckets"]])
        want = want - shares @ want / shares.sum()
        assert np.abs(got - want).max() < 0.05
    assert docs["random"]["banded"] and not docs["stride"]["banded"]
    assert docs["random"]["bucket_r2"] > 0.5
    assert docs["random"]["predicted_window_std"] < docs["random"]["window_std"]


@pytest.mark.slow  # (every format and a plot, ~3 s: the default suite stays under 5 minutes)
def test_every_format_plot_and_debanded(runs, tmp_path, capsys):
    plan, log = runs["random"]
    (tmp_path / "o.txt").write_text("".join(f"{b}\n" for b in load_plan(str(plan)).bucket))
    rc, out, err = run_cli(["diagnose", log, "--plan", plan, "--grad-accum", "2"], capsys)
    assert rc == 0 and "Banded:" in out and "fix: train in the stride order" in out
    rc, out, _ = run_cli(["diagnose", log, "--bucket-order", tmp_path / "o.txt", "--world-size",
                          "2", "--grad-accum", "2", "-f", "markdown"], capsys)
    assert rc == 0 and "| bucket | batches % |" in out
    rc, out, _ = run_cli(["diagnose", log, "-f", "csv"], capsys)
    rows = list(csv.DictReader(out.splitlines()))
    assert rc == 0 and rows and {r["kind"] for r in rows} == {"band"}
    rc, _, err = run_cli(["diagnose", log, "--plan", plan, "--grad-accum", "2", "--plot",
                          tmp_path / "d.png",
                          "--debanded", tmp_path / "d.csv", "-o", tmp_path / "d.txt"],
                         capsys)
    assert rc == 0, err
    assert (tmp_path / "d.png").read_bytes()[:4] == b"\x89PNG"
    curve = list(csv.DictReader((tmp_path / "d.csv").read_text().splitlines()))
    assert len(curve) > 800 and curve[0]["debanded"] and curve[0]["bucket"]
    assert "Banded:" in (tmp_path / "d.txt").read_text()


def test_gates(runs, capsys):
    plan, log = runs["random"]
    rc, _, err = run_cli(["diagnose", log, "--plan", plan, "--grad-accum", "2", "--fail-if",
                          "banded==1", "--fail-if", "band_r2>0.3"], capsys)
    assert rc == 1 and "failed: banded==1 (banded = 1)" in err and "band_r2>0.3" in err
    plan, log = runs["stride"]
    rc, _, err = run_cli(["diagnose", log, "--plan", plan, "--grad-accum", "2", "--fail-if",
                          "banded==1"], capsys)
    assert rc == 0, err  # its composition is most of a calm curve's swing, interleaved
    rc, _, err = run_cli(["diagnose", log, "--fail-if", "banded_r2>1"], capsys)
    assert rc == 2 and "unknown metric" in err


def test_report_has_a_loss_curve_section(corpus, runs, tmp_path, capsys):
    plan, log = runs["random"]
    rc, _, err = run_cli(["report", corpus, "-q", "--world-size", "2", "--grad-accum", "2",
                          "--log", log, "--log-plan", plan, "-o", tmp_path / "r.html"], capsys)
    assert rc == 0, err
    html = (tmp_path / "r.html").read_text()
    assert html.index("<h2>Loss curve</h2>") < html.index("<h2>Command</h2>")
    assert "<b>Banded:" in html and 'id="diagnose-buckets"' in html
    assert f"--log-plan {plan}" in html


def test_the_api(runs):
    plan, log = runs["stride"]
    r = gp.diagnose(log, plan=plan, grad_accum=2)
    assert not r.banded and r.order == str(plan) and r.alignment.grad_accum == 2


def test_source_plans_the_order_plan_wrote(corpus, runs, tmp_path, capsys):
    """Diagnosing with the corpus and plan's options gives what --plan on the file gives
    (which needs no --grad-accum: the plan records it), and plans as many epochs as the
    log needs, each as plan --epoch writes it."""
    plan, log = runs["random"]
    shape = ["--world-size", "2", "--grad-accum", "2"]
    docs = []
    for args in (["--plan", plan], [corpus, "-q", "--order", "random", *shape]):
        rc, out, err = run_cli(["diagnose", log, *args, "-f", "json"], capsys)
        assert rc == 0 and "warning: --grad-accum" not in err, err
        docs.append(json.loads(out))
    assert docs[0].pop("order") == str(plan) and docs[1].pop("order") == str(corpus)
    assert docs[0] == docs[1] and docs[0]["bucket_length_r2"] is not None
    options = ["--order", "random", "--policy", "sorted", "--seed", "5", "--mixed-steps", *shape]
    plans = []
    for epoch in (0, 1):
        plans.append(tmp_path / f"p{epoch}.npz")
        rc, _, err = run_cli(["plan", corpus, "-q", *options, "--epoch", str(epoch), "-o",
                              plans[-1]], capsys)
        assert rc == 0, err
    saved = read_plans(plans)
    steps = sum(saved.epochs) // 2  # optimizer steps of both epochs
    loss = loss_log(np.arange(1, steps), np.full(steps - 1, 2.0))
    got = trained_order(
        loss, source=str(corpus), order="random", policy="sorted", seed=5, align_ranks=False,
        world_size=2, grad_accum=2)
    assert got.epochs == saved.epochs and np.array_equal(got.bucket, saved.bucket)
    assert np.allclose(got.length, saved.length) and got.grad_accum == saved.grad_accum == 2


def test_a_plan_file_of_an_earlier_version_still_diagnoses(runs, tmp_path):
    """Without tokens and grad_accum (as plan wrote before): --grad-accum as trained, the
    same numbers, and no length term."""
    plan, log = runs["random"]
    with np.load(plan) as z:
        arrays = {k: z[k] for k in ("indices", "offsets", "bucket")}
        summary = json.loads(str(z["params"][()]))
    del summary["grad_accum"]
    np.savez(tmp_path / "old.npz", **arrays, params=np.array(json.dumps(summary)))
    old = gp.diagnose(log, plan=tmp_path / "old.npz", grad_accum=2)
    new = gp.diagnose(log, plan=plan)
    assert old.bucket_length_r2 is None and old.length_slope is None
    assert not any("--grad-accum" in w for w in old.warnings)
    assert old.bucket_r2 == new.bucket_r2 and new.bucket_length_r2 >= new.bucket_r2


def test_plan_records_grad_accum_and_batch_tokens(corpus, runs):
    plan = load_plan(str(runs["stride"][0]))
    assert plan.grad_accum == 2 and plan.summary["params"]["grad_accum"] == 2
    lengths = pq.read_table(corpus)["length"].to_numpy()
    for j in (0, 7, plan.offsets.size - 2):
        batch = plan.indices[plan.offsets[j]:plan.offsets[j + 1]]
        assert plan.tokens[j] == np.minimum(lengths[batch], 8192).sum()


def test_bad_combinations_are_one_line(corpus, runs, capsys):
    plan, log = runs["random"]
    one_line_error([log, corpus, "--plan", plan], capsys, "not the plan and the SOURCE")
    one_line_error([log, corpus, "--bucket-order", plan], capsys, "bucket order and the SOURCE")
    one_line_error([log, "--plan", plan, "--order", "random", "--seed", "3"], capsys,
                   "--order, --seed: options of planning a SOURCE")
    one_line_error([log, "--bounds", "0,100,8193"], capsys, "--bounds: options of planning")
    one_line_error([log, "--plan", plan, "--world-size", "4"], capsys,
                   "the plan is for 2 ranks")
    one_line_error([log, corpus, "-q", "--world-size", "2", "--policy", "nope"], capsys,
                   "policy must be fixed, sorted or packed")
    one_line_error([log, corpus, "-q", "--grad-accum", "0"], capsys,
                   "--grad-accum must be a positive integer")
    rc, out, err = run_cli(["diagnose", log, "--plan", plan, "--grad-accum", "1"], capsys)
    assert rc == 0 and "--grad-accum 1 overrides the 2 recorded" in out


def one_line_error(args, capsys, match):
    rc, out, err = run_cli(["diagnose", *args], capsys)
    assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert match in err, err


def test_bad_input_is_one_line(runs, tmp_path, capsys):
    plan, log = runs["random"]
    one_line_error([tmp_path / "missing.csv"], capsys, "no such file")
    (tmp_path / "text.csv").write_text("step,loss\n1,a\n")
    one_line_error([tmp_path / "text.csv"], capsys, "is not numeric")
    (tmp_path / "empty.csv").write_text("step,loss\n")
    one_line_error([tmp_path / "empty.csv"], capsys, "too few to diagnose")
    (tmp_path / "nan.csv").write_text("step,loss\n" + "".join(f"{i},nan\n" for i in range(50)))
    one_line_error([tmp_path / "nan.csv"], capsys, "50 NaN/inf dropped")
    (tmp_path / "acc.csv").write_text("step,accuracy\n1,0.5\n")
    one_line_error([tmp_path / "acc.csv"], capsys, "--tag")
    one_line_error([log, "--tag", "nope"], capsys, "no scalar values of tag 'nope'")
    long = tmp_path / "long.csv"
    long.write_text("step,loss\n" + "".join(f"{i},2.0\n" for i in range(1, 100_000, 7)))
    one_line_error([long, "--plan", plan], capsys, "do not fall in the order")
    one_line_error([log, "--plan", plan, "--bucket-order", long], capsys, "give one batch order")
    one_line_error([long, "-o", long], capsys, "-o")
    one_line_error([long, "--plan", long], capsys, "not a readable plan file")
    one_line_error([long, "--bucket-order", long], capsys, "not a bucket order")
    one_line_error([long, "--logged", "maybe"], capsys, "--logged")
    one_line_error([long, "--plan", plan, "--rank", "5"], capsys, "--rank 5")
