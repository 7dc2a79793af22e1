"""``--sft`` / ``--dpo`` / ``--sft-labels`` / ``--sft-mask``: every sample's parts counted
exactly, on every format with columns, and each bucket's samples, rows, tokens and loss
tokens after truncation checked against a per-sample computation on the raw rows."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import run_cli

import gpu_profiler as gp
from gpu_profiler.schemas import load
from gpu_profiler.shapes import Shape, shape_of

BOUNDS = [0, 512, 1024, 2048, 4097]
MSL = 4096


def parts(n: int, k: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.lognormal(6, 0.9, (n, k)).astype(np.int64) + rng.integers(0, 2, (n, k))


def want(rows: np.ndarray, dpo: bool) -> dict:
    """Per bucket (samples, rows, tokens, loss tokens, prompt tokens), one sample at a time:
    right truncation to MSL keeps the prompt and cuts each answer."""
    out = {b: [0, 0, 0, 0, 0] for b in range(len(BOUNDS) - 1)}
    for r in rows.tolist():
        p, answers = r[0], r[1:]
        memory = min(p + max(answers), MSL)
        b = int(np.searchsorted(BOUNDS, memory, "right")) - 1
        kept = [max(0, min(a, MSL - p)) for a in answers]
        each = 2 if dpo else 1
        t = out[b]
        t[0] += 1
        t[1] += each
        t[2] += min(p, MSL) * each + sum(kept)
        t[3] += sum(kept)
        t[4] += min(p, MSL) * each
    return out


def check(result, rows, dpo=False) -> None:
    ref = want(rows, dpo)
    for b in result.shape.buckets:
        assert [b.samples, b.rows, b.tokens, b.loss_tokens, b.prompt_tokens] == ref[b.index]
    memory = rows[:, 0] + rows[:, 1:].max(axis=1)
    assert np.array_equal(result.histogram.counts, np.bincount(memory))
    for j, name in enumerate(("prompt", "completion") if not dpo else
                             ("prompt", "chosen", "rejected")):
        assert result.shape.parts[name]["tokens"] == rows[:, j].sum()
        assert result.shape.parts[name]["max"] == rows[:, j].max()
    heat = np.array(result.shape.heatmap["counts"])
    assert heat.sum() == len(rows)


@pytest.mark.parametrize("kind", ["lengths", "lists"])
def test_sft_two_columns_parquet(tmp_path, kind):
    rows = parts(3_000, 2, seed=1)
    path = tmp_path / "sft.parquet"
    cols = {"p": rows[:, 0], "c": rows[:, 1]} if kind == "lengths" else \
        {"p": [[7] * v for v in rows[:, 0].tolist()], "c": [[8] * v for v in rows[:, 1].tolist()]}
    pq.write_table(pa.table(cols), path, row_group_size=700)
    r = gp.profile(path, shape=shape_of(sft="p,c"), max_seq_len=MSL, bounds=BOUNDS)
    check(r, rows)
    assert r.shape.samples == r.shape.rows == 3_000


@pytest.mark.parametrize("count", ["labels", "mask"])
def test_sft_one_list_column_of_labels_or_a_mask(tmp_path, count):
    datasets = pytest.importorskip("datasets")
    rows = parts(1_500, 2, seed=2)
    rng = np.random.default_rng(3)
    seqs = []
    for p, c in rows.tolist():
        if count == "labels":  # -100 on the prompt, token ids (0 among them) on the answer
            seqs.append([-100] * p + rng.integers(0, 5, c).tolist())
        else:
            seqs.append([0] * p + [1] * c)
    path = tmp_path / "hf"
    datasets.Dataset.from_dict({"input_ids": [[1] * (p + c) for p, c in rows.tolist()],
                                "seq": seqs}).save_to_disk(str(path), num_shards=3)
    shape = shape_of(labels="seq") if count == "labels" else shape_of(loss_mask="seq")
    check(gp.profile(path, shape=shape, max_seq_len=MSL, bounds=BOUNDS), rows)


@pytest.mark.parametrize("fmt", ["ipc", "jsonl", "table"])
def test_dpo_triples(tmp_path, fmt):
    rows = parts(2_000, 3, seed=4)
    table = pa.table({"prompt": rows[:, 0], "chosen": rows[:, 1], "rejected": rows[:, 2]})
    if fmt == "ipc":
        source = tmp_path / "dpo.arrow"
        with pa.ipc.new_file(source, table.schema) as w:
            w.write_table(table, max_chunksize=300)
    elif fmt == "jsonl":
        source = tmp_path / "dpo.jsonl"
        names = ("prompt", "chosen", "rejected")
        source.write_text("".join(json.dumps(dict(zip(names, r, strict=True))) + "\n"
                                  for r in rows.tolist()))
    else:
        source = table
    r = gp.profile(source, shape=shape_of(dpo="prompt,chosen,rejected"), max_seq_len=MSL,
                   bounds=BOUNDS)
    check(r, rows, dpo=True)
    assert r.shape.rows == 2 * r.shape.samples == 4_000


def test_nulls_and_negative_parts_are_counted_apart():
    t = pa.table({"p": [3, None, 5, -1, 2], "c": [[1, 2], [3], None, [4], []]})
    r = gp.profile(t, shape=shape_of(sft=["p", "c"]))
    assert r.histogram.null_count == 2 and r.histogram.invalid_count == 1
    assert r.shape.samples == 2 and r.histogram.counts.tolist() == [0, 0, 1, 0, 0, 1]


def test_cli_json_validates_text_and_markdown(tmp_path, capsys):
    import jsonschema

    rows = parts(800, 3, seed=5)
    path = tmp_path / "dpo.parquet"
    pq.write_table(pa.table({"a": rows[:, 0], "b": rows[:, 1], "c": rows[:, 2]}), path)
    rc, out, err = run_cli(["profile", path, "--dpo", "a,b,c", "-f", "json"], capsys)
    assert rc == 0, err
    doc = json.loads(out)
    jsonschema.validate(doc, load("profile"), cls=jsonschema.Draft202012Validator)
    assert doc["shape"]["shape"] == {"kind": "dpo", "columns": ["a", "b", "c"], "count": None}
    assert doc["total_samples"] == doc["shape"]["samples"] == 800
    for fmt in ("table", "markdown"):
        rc, out, err = run_cli(["profile", path, "--dpo", "a,b,c", "-f", fmt], capsys)
        assert rc == 0 and "loss tokens" in out and "DPO samples" in out, err
    png = tmp_path / "s.png"
    pytest.importorskip("matplotlib")
    rc, _, err = run_cli(["profile", path, "--dpo", "a,b,c", "--plot", png], capsys)
    assert rc == 0 and png.read_bytes()[:4] == b"\x89PNG", err


@pytest.mark.parametrize("args, message", [
    (["--sft", "p"], "--sft needs 2 column names"),
    (["--dpo", "p,c"], "--dpo needs 3 column names"),
    (["--sft", "p,nope"], "no column 'nope' for --sft"),
    (["--sft", "p,t"], "column 't' has type string; --sft takes an integer or list column"),
    (["--sft-labels", "p"], "column 'p' has type int64; --sft-labels takes a list column"),
    (["--sft", "p,c", "--dpo", "p,c,c"], "--sft and --dpo: give one sample shape"),
    (["--sft", "p,c", "--group-by", "t"], "not with --group-by"),
])
def test_bad_shapes_are_one_line(tmp_path, capsys, args, message):
    path = tmp_path / "x.parquet"
    pq.write_table(pa.table({"p": [1, 2], "c": [[1], [2, 3]], "t": ["a", "b"]}), path)
    rc, out, err = run_cli(["profile", path, *args], capsys)
    assert rc == 2 and message in err and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1


def test_a_shape_names_its_parts():
    assert Shape("dpo", ("a", "b", "c")).parts == ("prompt", "chosen", "rejected")
    assert shape_of() is None


def test_per_sample_lengths_in_row_order(tmp_path):
    rows = parts(2_500, 3, seed=7)
    path = tmp_path / "dpo.parquet"
    pq.write_table(pa.table({"p": rows[:, 0], "c": [[1] * v for v in rows[:, 1].tolist()],
                             "r": rows[:, 2]}), path, row_group_size=600)
    got = gp.lengths(path, shape=shape_of(dpo="p,c,r"))
    assert np.array_equal(got, rows[:, 0] + rows[:, 1:].max(axis=1))
    t = pa.table({"p": [3, None, 5, -1], "c": [1, 2, 3, 4]})
    assert gp.lengths(t, shape=shape_of(sft="p,c")).tolist() == [4, -1, 8, -1]


def test_dpo_pairs_are_batched_two_rows_each(tmp_path):
    rows = parts(3_000, 3, seed=9)
    path = tmp_path / "dpo.parquet"
    pq.write_table(pa.table({"p": rows[:, 0], "c": rows[:, 1], "r": rows[:, 2]}), path)
    memory = rows[:, 0] + rows[:, 1:].max(axis=1)
    budget = 32_768
    for policy in ("fixed", "sorted"):
        s = gp.BucketBatchSampler(path, shape=shape_of(dpo="p,c,r"), token_budget=budget,
                                  max_seq_len=MSL, bounds=BOUNDS, policy=policy,
                                  drop_outside=True)
        batches = list(s)
        seen = np.concatenate(batches)
        assert np.array_equal(np.sort(seen), np.arange(len(rows)))  # each pair once
        for b in batches:  # each pair is two rows padded to the batch's longest
            assert 2 * len(b) * min(memory[b].max(), MSL) <= budget
        single = gp.BucketBatchSampler(memory, token_budget=budget, max_seq_len=MSL,
                                       bounds=BOUNDS, policy=policy, drop_outside=True)
        assert len(single) < len(s)  # one row a sample: fewer, larger batches
    r = gp.profile(path, shape=shape_of(dpo="p,c,r"), token_budget=budget, max_seq_len=MSL,
                   bounds=BOUNDS)
    for b in r.table.buckets:
        if b.max_len:
            assert b.est_batch_size == min(budget // (2 * b.max_len), 64)


def test_plan_writes_dpo_pairs_within_the_budget(tmp_path, capsys):
    rows = parts(1_200, 3, seed=10)
    path = tmp_path / "dpo.parquet"
    pq.write_table(pa.table({"p": rows[:, 0], "c": rows[:, 1], "r": rows[:, 2]}), path)
    out = tmp_path / "plan.npz"
    rc, _, err = run_cli(["plan", path, "--dpo", "p,c,r", "-o", out, "--max-seq-len", MSL,
                          "--bounds", ",".join(map(str, BOUNDS)), "--token-budget", 20_000],
                         capsys)
    assert rc == 0, err
    plan = gp.load_plan(out)
    memory = np.minimum(rows[:, 0] + rows[:, 1:].max(axis=1), MSL)
    index, offsets = plan.indices, plan.offsets
    assert np.array_equal(np.sort(index), np.arange(len(rows)))
    for lo, hi in zip(offsets[:-1], offsets[1:], strict=True):
        assert 2 * (hi - lo) * memory[index[lo:hi]].max() <= 20_000


def test_report_has_the_samples_section(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    rows = parts(1_000, 2, seed=11)
    path = tmp_path / "sft.parquet"
    pq.write_table(pa.table({"p": rows[:, 0], "c": rows[:, 1]}), path)
    page = tmp_path / "r.html"
    rc, _, err = run_cli(["report", path, "--sft", "p,c", "-o", page, "--max-seq-len", MSL,
                          "--bounds", ",".join(map(str, BOUNDS))], capsys)
    assert rc == 0, err
    html = page.read_text()
    ref = want(rows, dpo=False)
    for b, (samples, _, tokens, loss, _) in ref.items():  # each bucket's row, exact
        assert (f'<td data-field="samples">{samples:,}</td><td data-field="rows">{samples:,}'
                f'</td><td data-field="tokens">{tokens:,}</td><td data-field="loss_tokens">'
                f'{loss:,}</td>') in html, b
    assert "<h2>Samples</h2>" in html and html.count("<svg") == 4
