"""Megatron-LM blends (``gpu-profiler blend``, `gp.blend`): the spec read as Megatron-LM's
``get_blend_from_list`` reads it, the samples drawn from each source as its
``build_blending_indices`` draws them (both reimplemented here line for line from
megatron/core/datasets/utils.py and helpers.cpp: megatron-core needs torch), and every
token share checked against the tokens of the samples those indices draw."""

from __future__ import annotations

import json
import math
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import run_cli

import gpu_profiler as gp
from gpu_profiler import ProfilerError
from gpu_profiler.analysis import blend as b

sys.path.insert(0, str(Path(__file__).parent))
from test_megatron import build  # noqa: E402 (Megatron-LM's index writer, reimplemented)


# ---------------------------------------------------------------- Megatron-LM, reimplemented
def get_blend_from_list(blend):
    """megatron/core/datasets/utils.py, as written (its ``map`` iterator quirk included)."""
    if len(blend) % 2 == 1:
        weight_per_dataset = None
        raw_prefix_per_dataset = blend
    else:
        raw_weight_per_dataset, raw_prefix_per_dataset = zip(
            *[(blend[i], blend[i + 1]) for i in range(0, len(blend), 2)], strict=True)
        weight_per_dataset = []
        for rwpd in raw_weight_per_dataset:
            try:
                weight = float(rwpd)
            except ValueError:
                weight = None
            weight_per_dataset.append(weight)
        is_none = map(lambda _: _ is None, weight_per_dataset)
        if any(is_none):
            assert all(is_none)
            weight_per_dataset = None
            raw_prefix_per_dataset = blend
    return [p.strip() for p in raw_prefix_per_dataset], weight_per_dataset


def build_blending_indices(weights, size):
    """helpers.cpp ``build_blending_indices``: (dataset_index, dataset_sample_index)."""
    dataset_index = np.zeros(size, np.int16)
    dataset_sample_index = np.zeros(size, np.int64)
    current = [0] * len(weights)
    for sample_idx in range(size):
        x = max(float(sample_idx), 1.0)
        max_error_index = 0
        max_error = weights[0] * x - float(current[0])
        for d in range(1, len(weights)):
            error = weights[d] * x - float(current[d])
            if error > max_error:
                max_error, max_error_index = error, d
        dataset_index[sample_idx] = max_error_index
        dataset_sample_index[sample_idx] = current[max_error_index]
        current[max_error_index] += 1
    return dataset_index, dataset_sample_index


def megatron_draws(weights, sizes, train_samples):
    """The builder and BlendedDataset: (dataset_index, dataset_sample_index) of the blend
    of datasets of ``sizes`` samples (``weights`` None: weighted by their sizes)."""
    if weights is None:
        w = np.array(sizes, np.float64)
        size = min(train_samples, sum(sizes))
        return build_blending_indices(list(w / w.sum()), size)
    w = np.array(weights, np.float64)
    w = list(w / np.sum(w))  # normalize, in the builder
    size = sum(int(math.ceil(train_samples * x)) for x in w)  # _get_size_per_split_per_dataset
    w2 = np.array(w, np.float64)
    return build_blending_indices(list(w2 / np.sum(w2)), size)  # normalized again


def brute_tokens(lengths, dataset_index, dataset_sample_index):
    """Tokens of every drawn sample, per dataset: sample s of dataset d is its sample
    ``s % n`` of epoch ``s // n``; the last, partial epoch counted by its expectation
    (each of its samples drawn with probability r / n), as a Fraction."""
    out = []
    for d, lens in enumerate(lengths):
        picks = dataset_sample_index[dataset_index == d]
        n = len(lens)
        whole, r = divmod(len(picks), n)
        total = sum(int(lens[s % n]) for s in picks[:whole * n])
        out.append(Fraction(total) + Fraction(r * int(np.sum(lens)), n))
    return out


def megatron_source(tmp_path, name, lengths):
    return str(build(tmp_path / name, [[int(x)] for x in lengths]))


def parquet_source(tmp_path, name, lengths):
    path = tmp_path / f"{name}.parquet"
    pq.write_table(pa.table({"length": np.asarray(lengths, np.int64)}), path)
    return str(path)


# ---------------------------------------------------------------- the spec
@pytest.mark.parametrize("items", [
    ["a"], ["a", "b"], ["a", "b", "c"], ["0.3", "a", "0.7", "b"], ["30", " a ", "70", "b"],
    ["1e2", "a"], ["0.5", "a", "0.25", "b", "0.25", "c"], ["x", "a", "y", "b"]])
def test_spec_read_as_megatron_reads_it(items):
    prefixes, weights = get_blend_from_list(items)
    spec = b.parse_blend(items)
    assert list(spec.prefixes) == prefixes
    assert (spec.weights is None) == (weights is None)
    if weights is not None:
        assert list(spec.weights) == weights


@pytest.mark.parametrize("items, match", [
    ([], "empty"), (["x", "a", "0.5", "b"], "weight 'x' of pair 1 is not a number"),
    (["0.5", "a", "x", "b"], "weight 'x' of pair 2"), (["-0.3", "a", "0.7", "b"], "positive"),
    (["0", "a", "0", "b"], "positive"), (["0", "a", "1", "b"], "positive"),
    (["nan", "a", "1", "b"], "positive"), (["inf", "a"], "positive")])
def test_bad_specs_are_refused(items, match):
    with pytest.raises(ProfilerError, match=match):
        b.parse_blend(items)


def test_normalize_and_sizes_follow_megatron():
    w = b.normalize([0.3, 0.7])
    assert w.tolist() == (np.array([0.3, 0.7]) / np.sum([0.3, 0.7])).tolist()
    assert b.target_sizes(w, 1000) == [int(math.ceil(1000 * x)) for x in w]
    assert b.target_sizes(w, 1000, b.SURPLUS) == [
        int(math.ceil(math.ceil(1000 * x) * 1.005)) for x in w]


# ---------------------------------------------------------------- the draws
def test_blending_counts_equal_megatron_indices():
    rng = np.random.default_rng(3)
    for _ in range(60):
        k = int(rng.integers(1, 7))
        w = rng.random(k) ** 3 + 1e-3
        w = w / w.sum()
        size = int(rng.integers(0, 3000))
        index, _ = build_blending_indices(list(w), size)
        want = np.bincount(index, minlength=k)
        assert b.blending_counts(w, size).tolist() == want.tolist()
    # equal weights: ties go to the lower index, as in helpers.cpp
    assert b.blending_counts(np.full(3, 1 / 3), 7).tolist() == [3, 2, 2]


def test_repeated_histogram_has_whole_epochs_and_the_partial_one_rounded():
    """Every count is its expectation rounded down or up, the total exact, and the tokens
    within half the span of lengths of their expectation."""
    lengths = np.random.default_rng(4).integers(1, 500, 777)
    h = gp.histogram(lengths, backend="numpy")
    for drawn in (0, 1, 776, 777, 778, 3 * 777 + 123):
        r = b.repeated(h, drawn)
        q, rest = divmod(drawn, 777)
        assert r.valid == drawn
        assert np.all(r.counts >= q * h.counts[:r.counts.size])
        assert np.all(r.counts <= (q + (rest > 0)) * h.counts[:r.counts.size])
        expected = h.counts * float(Fraction(drawn, 777))
        assert np.all(np.abs(r.counts - expected) < 1)
        assert abs(r.tokens - Fraction(drawn * h.tokens, 777)) <= (h.max - h.min) / 2
    assert b.repeated(h, 2 * 777) == gp.merge([h, h])


# ---------------------------------------------------------------- token shares
def test_token_shares_equal_the_drawn_samples_tokens(tmp_path):
    """Sources whose samples all have one length each: every drawn sample's tokens are
    known whatever the shuffle, so the shares are exact for any size."""
    lens = [np.full(50, 100), np.full(70, 1000), np.full(30, 7)]
    paths = [megatron_source(tmp_path, f"d{i}", x) for i, x in enumerate(lens)]
    for weights, train in (([0.5, 0.3, 0.2], 1000), ([1, 1, 1], 77), ([3, 1, 1], 12345)):
        spec = [str(x) for pair in zip(weights, paths, strict=True) for x in pair]
        got = gp.blend(spec, train_samples=train, backend="numpy")
        index, sample = megatron_draws(weights, [50, 70, 30], train)
        want = brute_tokens(lens, index, sample)
        assert [s.drawn for s in got.sources] == np.bincount(index, minlength=3).tolist()
        assert [s.tokens_drawn for s in got.sources] == [int(t) for t in want]
        total = sum(want)
        assert [s.token_share for s in got.sources] == pytest.approx(
            [float(t / total) for t in want], rel=1e-12)
        assert got.size == len(index)
        assert got.histogram.valid == len(index)
        assert got.histogram.tokens == int(total)


def test_token_shares_of_varied_lengths(tmp_path):
    """Varied lengths: whole epochs are exact; the partial epoch is its expectation
    rounded cumulatively, so each source's tokens are within half its span of lengths of
    the drawn samples' expected tokens."""
    rng = np.random.default_rng(7)
    lens = [rng.integers(1, 200, 400), rng.integers(500, 4000, 90)]
    paths = [megatron_source(tmp_path, "short", lens[0]),
             parquet_source(tmp_path, "long", lens[1])]
    for train in (400 * 2 + 90 * 2, 1999, 50_000):
        got = gp.blend(["1", paths[0], "1", paths[1]], train_samples=train, backend="numpy")
        index, sample = megatron_draws([1, 1], [400, 90], train)
        want = brute_tokens(lens, index, sample)
        for s, w, x in zip(got.sources, want, lens, strict=True):
            assert abs(s.tokens_drawn - w) <= (int(x.max()) - int(x.min())) / 2
            if s.drawn % s.samples == 0:
                assert s.tokens_drawn == w
        shares = [float(w / sum(want)) for w in want]
        assert [s.token_share for s in got.sources] == pytest.approx(shares, rel=1e-3)
        # 1:1 samples, ~1:20 tokens: the long source's share is far above its weight
        assert got.sources[1].share_ratio > 1.8
        assert any("tokens for a weight of 50.0%" in w for w in got.warnings)


def test_paths_without_weights_are_weighted_by_their_samples(tmp_path):
    lens = [np.full(120, 10), np.full(40, 30)]
    paths = [megatron_source(tmp_path, f"d{i}", x) for i, x in enumerate(lens)]
    for train in (50, 160, 10_000):
        got = gp.blend(paths, train_samples=train, backend="numpy")
        index, sample = megatron_draws(None, [120, 40], train)
        assert got.size == min(train, 160)
        assert [s.drawn for s in got.sources] == np.bincount(index, minlength=2).tolist()
        assert [s.tokens_drawn for s in got.sources] == [
            int(t) for t in brute_tokens(lens, index, sample)]
        assert all(s.weight is None and s.requested is None for s in got.sources)
        assert max(s.epochs for s in got.sources) <= 1


def test_one_path_is_no_blend(tmp_path):
    path = megatron_source(tmp_path, "one", np.arange(1, 11))
    got = gp.blend([path], train_samples=25, backend="numpy")
    assert got.size == 25 and got.sources[0].drawn == 25
    assert got.sources[0].epochs == 2.5
    assert got.sources[0].token_share == 1.0
    # two epochs and half of one: 5 of the lengths 1..10, 27.5 tokens expected
    assert got.histogram.valid == 25
    assert np.all((got.histogram.counts[1:] == 2) | (got.histogram.counts[1:] == 3))
    assert abs(got.histogram.tokens - (2 * 55 + 27.5)) <= (10 - 1) / 2


def test_train_tokens_and_the_default_size(tmp_path):
    lens = [np.full(100, 10), np.full(100, 90)]
    paths = [megatron_source(tmp_path, f"d{i}", x) for i, x in enumerate(lens)]
    spec = ["0.25", paths[0], "0.75", paths[1]]
    got = gp.blend(spec, train_tokens=100_000, backend="numpy")
    per_sample = Fraction(1, 4) * 10 + Fraction(3, 4) * 90  # the expected tokens of a sample
    assert got.train_samples == math.ceil(Fraction(100_000) / per_sample)
    assert got.tokens_drawn >= 100_000
    assert gp.blend(spec, backend="numpy").train_samples == 200  # every sample, once
    with pytest.raises(ProfilerError, match="not both"):
        gp.blend(spec, train_samples=1, train_tokens=1)


def test_the_trained_histogram_is_bucketed(tmp_path):
    rng = np.random.default_rng(8)
    paths = [parquet_source(tmp_path, "a", rng.integers(1, 3000, 300)),
             megatron_source(tmp_path, "b", rng.integers(2000, 9000, 100))]
    got = gp.blend(["0.5", paths[0], "0.5", paths[1]], train_samples=2000, backend="numpy",
                   bounds="0,1024,4096,8193", max_seq_len=8192)
    assert got.table.total_samples == got.size == got.histogram.valid
    assert got.table.total_tokens == got.tokens_drawn
    assert [r.lo for r in got.table.buckets] == [0, 1024, 4096]
    assert got.table.truncated_samples == int(got.histogram.counts[8193:].sum())


def test_a_repeated_source_warns(tmp_path):
    paths = [megatron_source(tmp_path, "small", np.full(10, 5)),
             megatron_source(tmp_path, "big", np.full(1000, 5))]
    got = gp.blend(["0.5", paths[0], "0.5", paths[1]], train_samples=1000, backend="numpy")
    assert got.sources[0].epochs == 50
    assert any("repeated 50.00 epochs, more than 4" in w for w in got.warnings)
    quiet = gp.blend(["0.5", paths[0], "0.5", paths[1]], train_samples=1000,
                     backend="numpy", warn_epochs=100)
    assert not any("repeated" in w for w in quiet.warnings)


def test_an_hf_dir_in_a_blend(tmp_path):
    datasets = pytest.importorskip("datasets")
    rng = np.random.default_rng(10)
    lens = [rng.integers(1, 100, 300), rng.integers(100, 1000, 100)]
    hf = tmp_path / "hf"
    datasets.Dataset.from_dict({"length": lens[0].tolist()}).save_to_disk(str(hf))
    mega = megatron_source(tmp_path, "mega", lens[1])
    got = gp.blend(["2", str(hf), "1", mega], train_samples=3000, backend="numpy")
    index, sample = megatron_draws([2, 1], [300, 100], 3000)
    want = brute_tokens(lens, index, sample)
    assert [s.drawn for s in got.sources] == np.bincount(index, minlength=2).tolist()
    for s, w, x in zip(got.sources, want, lens, strict=True):
        assert abs(s.tokens_drawn - w) <= (int(x.max()) - int(x.min())) / 2


def test_nulls_are_no_samples_and_said_so():
    with_nulls = gp.histogram(pa.array([5, None, 7, -1, 9], pa.int64()), backend="numpy")
    plain = gp.histogram(np.array([10, 20]), backend="numpy")
    got = b.blend(b.parse_blend(["1", "x", "1", "y"]), [with_nulls, plain], train_samples=6)
    assert got.sources[0].samples == 3 and got.sources[0].drawn == 3
    assert got.histogram.null_count == 0 and got.histogram.valid == 6
    assert any("1 null and 1 negative lengths" in w for w in got.warnings)


def test_one_blend_is_given():
    with pytest.raises(ProfilerError, match="give one blend"):
        gp.blend(["a"], data_args_path="f")
    with pytest.raises(ProfilerError, match="split must be one of"):
        gp.blend(per_split_data_args_path="f", data_split="training")


# ---------------------------------------------------------------- files, CLI, schema
@pytest.fixture
def two(tmp_path):
    rng = np.random.default_rng(9)
    return [megatron_source(tmp_path, "web", rng.integers(1, 300, 500)),
            parquet_source(tmp_path, "code", rng.integers(200, 3000, 200))]


def _json(args, capsys):
    rc, out, err = run_cli(["blend", *args, "-q", "-f", "json"], capsys)
    assert rc == 0, err
    return json.loads(out)


def test_arg_file_and_per_split_json_read_the_same_blend(two, tmp_path, capsys):
    pairs = ["0.7", two[0], "0.3", two[1]]
    direct = _json([*pairs, "--train-samples", "5000"], capsys)
    args = tmp_path / "blend.txt"
    args.write_text(f"0.7 {two[0]}\n  0.3\t{two[1]}\n")
    from_file = _json(["--data-args-path", args, "--train-samples", "5000"], capsys)
    split = tmp_path / "splits.json"
    split.write_text(json.dumps({"train": " ".join(pairs), "valid": [two[0]], "test": None}))
    per_split = _json(["--per-split-data-args-path", split, "--train-samples", "5000"], capsys)
    valid = _json(["--per-split-data-args-path", split, "--data-split", "valid",
                   "--train-samples", "5000"], capsys)
    for d in (from_file, per_split):
        assert {k: v for k, v in d.items() if k != "spec"} == {
            k: v for k, v in direct.items() if k != "spec"}
    assert from_file["spec"]["form"] == "data-args-path"
    assert per_split["spec"]["split"] == "train"
    assert valid["spec"]["prefixes"] == [two[0]] and valid["size"] == 5000
    rc, _, err = run_cli(["blend", "--per-split-data-args-path", split, "--data-split",
                          "test"], capsys)
    assert rc == 2 and "no blend (null)" in err


def test_json_validates_and_gates(two, tmp_path, capsys):
    import jsonschema

    from gpu_profiler.schemas import load

    d = _json(["1", two[0], "1", two[1], "--train-samples", "9000"], capsys)
    jsonschema.validate(d, load("blend"), cls=jsonschema.Draft202012Validator)
    assert d["schema"] == "gpu-profiler/blend/v1"
    assert d["max_epochs"] == max(s["epochs"] for s in d["sources"])
    rc, out, err = run_cli(["blend", "1", two[0], "1", two[1], "--train-samples", "9000",
                            "-q", "--fail-if", "max_epochs>4"], capsys)
    assert rc == 1 and "max_epochs" in err and "blend sources" in out
    saved = tmp_path / "web.hist.json"
    gp.histogram(two[0], backend="numpy").save(saved)
    from_saved = _json(["1", saved, "1", two[1], "--train-samples", "9000"], capsys)
    assert from_saved["sources"][0]["tokens_drawn"] == d["sources"][0]["tokens_drawn"]


def test_text_markdown_and_csv(two, capsys):
    rc, out, _ = run_cli(["blend", "1", two[0], "1", two[1], "-q", "--width", "200"], capsys)
    assert rc == 0
    assert "blend sources" in out and "the blend as trained" in out and "warning:" in out
    rc, out, _ = run_cli(["blend", "1", two[0], "1", two[1], "-q", "-f", "markdown"], capsys)
    assert rc == 0 and out.startswith("| source | weight |") and "est cost" not in out
    rc, out, _ = run_cli(["blend", "1", two[0], "1", two[1], "-q", "-f", "markdown",
                          "--attention-weight", "0.001"], capsys)  # priced as the terminal's
    assert rc == 0 and "| est cost | % cost |" in out
    rc, out, _ = run_cli(["blend", "1", two[0], "1", two[1], "-q", "-f", "csv"], capsys)
    rows = out.splitlines()
    assert rc == 0 and rows[0].startswith("index,path,weight,") and len(rows) == 4
    assert rows[-1].startswith("all,")


@pytest.mark.parametrize("spec, match", [
    (["x", "{0}", "0.5", "{1}"], "weight 'x' of pair 1 is not a number"),
    (["0.3", "{0}", "0.7"], "odd number of items"),
    (["0.3", "{0}", "0.7", "{missing}"], "missing"),
    (["-0.3", "{0}", "0.7", "{1}"], "must be a positive number"),
    (["0", "{0}", "0", "{1}"], "must be a positive number"),
    ([], "give one blend"), (["1", "{0}", "--trian-samples", "5"], "no such option")])
def test_bad_blends_exit_2_with_one_line(two, tmp_path, capsys, spec, match):
    args = [s.format(*two, missing=tmp_path / "missing") for s in spec]
    rc, out, err = run_cli(["blend", *args, "-q"], capsys)
    assert rc == 2, err
    assert match in err
    assert err.count("\n") == 1 and "Traceback" not in err and out == ""


def test_the_blend_report_page(tmp_path, capsys):
    """--report writes one offline page: every source's row with its exact draws, the
    blend's bucket table, both figures; nothing else is written."""
    pytest.importorskip("matplotlib")
    lens = [np.full(50, 100), np.arange(1, 71) * 40]
    paths = [megatron_source(tmp_path, f"d{i}", x) for i, x in enumerate(lens)]
    page = tmp_path / "blend.html"
    rc, out, err = run_cli(["blend", "0.8", paths[0], "0.2", paths[1], "--train-samples",
                            "500", "--report", page, "-f", "json"], capsys)
    assert rc == 0, err
    doc = json.loads(out)
    html = page.read_text()
    assert html.startswith("<!DOCTYPE html>") and html.count("<svg") == 2
    for s in doc["sources"]:
        assert f'<td data-field="drawn">{s["drawn"]:,}</td>' in html
    assert f'<td data-field="samples">{doc["table"]["buckets"][0]["samples"]:,}</td>' in html
    assert "http" not in html.replace("http-equiv", "").replace("http://www.w3.org", "")
    idx = f"{paths[0]}.idx"
    before = Path(idx).read_bytes()
    rc, _, err = run_cli(["blend", "0.8", paths[0], "0.2", paths[1], "--report", idx], capsys)
    assert rc == 2 and "--report" in err, err  # never written onto an input
    assert Path(idx).read_bytes() == before


# ---------------------------------------------------------------- GPTDataset windows
def gpt_windows_per_epoch(lengths, seq_length):
    """GPTDataset's samples in one epoch, by cutting them: the documents' tokens
    concatenated, a window of ``seq_length`` tokens and the next one every ``seq_length``
    tokens (``add_extra_token_to_sequence``), the last partial one dropped."""
    tokens, start, count = int(np.sum(lengths)), 0, 0
    while start + seq_length + 1 <= tokens:
        count, start = count + 1, start + seq_length
    return count


@pytest.mark.parametrize("weights, train", [([0.5, 0.3, 0.2], 1000), (None, 10**6),
                                            (None, 50), ([1, 1, 5], 7)])
def test_gpt_windows_drawn_as_megatron_draws_them(tmp_path, weights, train):
    rng = np.random.default_rng(len(str(weights)) + train)
    lens = [rng.integers(1, 3000, 400), rng.integers(1, 300, 900), rng.integers(500, 9000, 60)]
    paths = [megatron_source(tmp_path, f"d{i}", x) for i, x in enumerate(lens)]
    spec = paths if weights is None else \
        [str(x) for pair in zip(weights, paths, strict=True) for x in pair]
    seq = 1024
    per_epoch = [gpt_windows_per_epoch(x, seq) for x in lens]
    got = gp.blend(spec, train_samples=train, seq_length=seq, backend="numpy")
    index, _ = megatron_draws(weights, per_epoch, train)
    drawn = np.bincount(index, minlength=3).tolist()
    assert [s.windows for s in got.sources] == per_epoch
    assert [s.drawn for s in got.sources] == drawn and got.size == len(index)
    assert [s.tokens_drawn for s in got.sources] == [d * seq for d in drawn]
    assert [s.token_share for s in got.sources] == pytest.approx(
        [d / len(index) for d in drawn], rel=1e-12)
    assert [s.epochs for s in got.sources] == pytest.approx(
        [d * seq / int(np.sum(x)) for d, x in zip(drawn, lens, strict=True)], rel=1e-12)
    assert got.seq_length == seq and got.tokens_drawn == len(index) * seq
    # the documents the windows hold: each source's drawn share of its tokens, in documents
    want_docs = sum(d * seq * len(x) // int(np.sum(x)) for d, x in zip(drawn, lens,
                                                                         strict=True))
    assert got.histogram.valid == want_docs


def test_gpt_windows_sized_by_tokens_and_small_sources(tmp_path):
    rng = np.random.default_rng(3)
    big = megatron_source(tmp_path, "big", rng.integers(100, 2000, 500))
    tiny = megatron_source(tmp_path, "tiny", [300, 200])  # 500 tokens: no window of 1,024
    got = gp.blend(["0.5", big, "0.5", tiny], train_tokens=10**6, seq_length=1024,
                   backend="numpy")
    assert got.train_samples == math.ceil(10**6 / 1024)
    small = got.sources[1]
    assert small.windows == 0 and small.drawn > 0  # drawn across repeated epochs
    assert small.epochs == pytest.approx(small.drawn * 1024 / 500)
    assert any("tiny" in w and "epochs" in w for w in got.warnings)
    with pytest.raises(ProfilerError, match="no window in an epoch"):
        gp.blend([big, tiny], seq_length=1024, backend="numpy")
    with pytest.raises(ProfilerError, match="--seq-length must be a positive integer"):
        gp.blend([big], seq_length=0, backend="numpy")


def test_gpt_windows_cli_json_text_and_csv(two, capsys):
    import csv
    import io

    import jsonschema

    from gpu_profiler.schemas import load

    args = ["0.7", two[0], "0.3", two[1], "--seq-length", "512", "--train-samples", "300"]
    d = _json(args, capsys)
    jsonschema.validate(d, load("blend"), cls=jsonschema.Draft202012Validator)
    assert d["seq_length"] == 512 and all(s["windows"] is not None for s in d["sources"])
    assert d["table"]["warnings"] == [] and d["table"]["advice"] is None
    assert sum(s["token_share"] for s in d["sources"]) == pytest.approx(1.0)
    rc, out, err = run_cli(["blend", *args, "--width", "200"], capsys)
    assert rc == 0 and "windows" in out and "GPTDataset windows of 512 tokens" in out, err
    assert "the documents the blend's windows hold" in out
    # the documents' bucket table is no batching: its advice is not the blend's
    assert out.count("warning:") == len(d["warnings"])
    rc, out, err = run_cli(["blend", *args, "-f", "csv"], capsys)
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [int(r["windows"]) for r in rows[:-1]] == [s["windows"] for s in d["sources"]]
    rc, _, err = run_cli(["blend", *args[:4], "--seq-length", "0"], capsys)
    assert rc == 2 and "--seq-length must be a positive integer" in err, err
    plain = _json(args[:4] + ["--train-samples", "300"], capsys)
    assert plain["seq_length"] is None and plain["sources"][0]["windows"] is None


# ---------------------------------------------------------------- --megatron-split
def megatron_split_rows(split, which, rows):
    """parse_and_normalize_split, convert_split_vector_to_split_matrix and
    _build_megatron_dataset_splits (megatron/core/datasets), line for line."""
    import functools
    import re

    vector = list(map(float, re.findall(r"[.0-9]+", split)))
    vector = vector + [0.0 for _ in range(3 - len(vector))]
    assert len(vector) == 3 and all(map(lambda _: _ >= 0.0, vector))
    w = np.array(vector, dtype=np.float64)
    vector = (w / np.sum(w)).tolist()
    expansion = functools.reduce(lambda a, b: a + [a[len(a) - 1] + b], [[0], *vector])
    bookends = list(zip(expansion[:-1], expansion[1:], strict=True))
    matrix = [None if lo == hi else (lo, hi) for lo, hi in bookends]
    i = ("train", "valid", "test").index(which)
    if matrix[i] is None:
        return None
    return int(round(matrix[i][0] * float(rows))), int(round(matrix[i][1] * float(rows)))


@pytest.mark.parametrize("split", ["969,30,1", "99,1", "1", "0.9,0.1,0", "98, 2, 0", "1,1,1",
                                   "7,0,3"])
def test_split_rows_are_megatrons(split):
    for rows in (0, 1, 7, 1000, 12_345, 10**9 + 7):
        for which in ("train", "valid", "test"):
            want = megatron_split_rows(split, which, rows)
            if want is None:
                with pytest.raises(ProfilerError, match="holds no rows"):
                    b.split_rows(split, which, rows)
            else:
                assert b.split_rows(split, which, rows) == want, (split, rows, which)


@pytest.mark.parametrize("bad", ["", "abc", ".", "0,0,0", "1,2,3,4", "1..2"])
def test_bad_megatron_splits_are_refused(bad):
    with pytest.raises(ProfilerError, match="--megatron-split"):
        b.split_rows(bad, "train", 100)


def test_megatron_split_takes_each_sources_rows(tmp_path, capsys):
    rng = np.random.default_rng(11)
    lens = [rng.integers(1, 3000, 1000), rng.integers(1, 300, 3333)]
    paths = [megatron_source(tmp_path, f"s{i}", x) for i, x in enumerate(lens)]
    spec = ["0.6", paths[0], "0.4", paths[1]]
    for which in ("train", "valid", "test"):
        got = gp.blend(spec, megatron_split="969,30,1", data_split=which, train_samples=500,
                       backend="numpy")
        for s, x in zip(got.sources, lens, strict=True):
            beg, end = megatron_split_rows("969,30,1", which, len(x))
            assert (s.samples, s.tokens) == (end - beg, int(x[beg:end].sum())), which
        assert (got.megatron_split, got.data_split) == ("969,30,1", which)
    whole = gp.blend(spec, train_samples=500, backend="numpy")
    assert [s.samples for s in whole.sources] == [1000, 3333]
    rc, out, err = run_cli(["blend", *spec, "--megatron-split", "969,30,1", "--data-split",
                            "valid", "-f", "json", "-q"], capsys)
    assert rc == 0, err
    d = json.loads(out)
    assert (d["megatron_split"], d["data_split"]) == ("969,30,1", "valid")
    assert [s["samples"] for s in d["sources"]] == [30, 100]
    saved = tmp_path / "h.json"
    gp.histogram(paths[0]).save(saved)
    for args, message in ((["--megatron-split", "99,1,0", "--data-split", "test"],
                           "holds no rows"),
                          (["--megatron-split", "1,2,3,4"], "--megatron-split"),
                          (["--megatron-split", "99,1", "--unit", "document"],
                           "not with --unit document")):
        rc, _, err = run_cli(["blend", *spec, *args], capsys)
        assert rc == 2 and message in err and len(err.strip().splitlines()) == 1, err
    rc, _, err = run_cli(["blend", "0.5", saved, "0.5", paths[1], "--megatron-split", "99,1"],
                         capsys)
    assert rc == 2 and "no row order" in err, err


def test_gpt_windows_edge_sizes(tmp_path):
    """One unweighted source too small for a window still gives every window asked for
    (weight 1, no NaN); no window anywhere and no size given is one line; a size past
    what Megatron-LM could index is refused before any drawing."""
    tiny = parquet_source(tmp_path, "tiny", [30, 40])
    got = gp.blend([tiny], seq_length=4096, train_samples=10, backend="numpy")
    assert got.sources[0].normalized_weight == 1.0 and got.size == 10
    assert json.dumps(got.to_dict(), allow_nan=False)
    with pytest.raises(ProfilerError, match="no source holds a window of 4,096 tokens"):
        gp.blend([tiny], seq_length=4096, backend="numpy")
    with pytest.raises(ProfilerError, match="a blend is checked for"):
        gp.blend(["0.5", tiny, "0.5", tiny], train_samples=10**17, backend="numpy")
