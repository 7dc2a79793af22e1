"""`compare`: distances between two length distributions against brute-force references
from the raw samples, and the command end to end."""

from __future__ import annotations

import json
from fractions import Fraction

import numpy as np
import pytest
from conftest import run_cli
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_profiler.analysis.compare import compare, distances
from gpu_profiler.backends import get_backend
from gpu_profiler.chunk import Chunk
from gpu_profiler.histogram import PERCENTILES
from gpu_profiler.params import BucketParams


def hist(values, cap=None):
    x = np.asarray(values, np.int64)
    cap = int(x.max(initial=0)) if cap is None else cap
    return get_backend("numpy").histogram_chunk(Chunk(x), cap)


def brute(a, b):
    """ks, tv and w1 from the samples, in exact fractions: the empirical CDFs at every
    length seen, the point masses, and w1 as the area between the quantile functions."""
    na, nb = len(a), len(b)
    points = sorted(set(a) | set(b))
    ks = max(abs(Fraction(sum(x <= t for x in a), na) - Fraction(sum(x <= t for x in b), nb))
             for t in points)
    tv = sum(abs(Fraction(a.count(t), na) - Fraction(b.count(t), nb)) for t in points) / 2
    sa, sb = sorted(a), sorted(b)
    cuts = sorted({Fraction(i, na) for i in range(na + 1)} | {Fraction(j, nb)
                                                              for j in range(nb + 1)})
    w1 = Fraction(0)
    for lo, hi in zip(cuts, cuts[1:], strict=False):  # both quantile functions are constant inside
        mid = (lo + hi) / 2
        w1 += (hi - lo) * abs(sa[int(mid * na)] - sb[int(mid * nb)])
    return float(ks), float(tv), float(w1)


@settings(max_examples=150, deadline=None)
@given(a=st.lists(st.integers(0, 60), min_size=1, max_size=25),
       b=st.lists(st.integers(0, 90), min_size=1, max_size=25))
def test_distances_equal_brute_force(a, b):
    d = distances(hist(a), hist(b))
    assert (d.ks, d.tv, d.w1) == pytest.approx(brute(a, b), abs=1e-12) and d.exact
    assert distances(hist(b), hist(a)) == d  # symmetric


def test_distances_on_known_shapes():
    d = distances(hist([10] * 4), hist([13] * 4))  # a shift of 3 tokens
    assert (d.ks, d.tv, d.w1) == (1.0, 1.0, 3.0)
    assert distances(hist([1, 2, 3]), hist([3, 2, 1, 1, 2, 3])).ks == 0.0  # same shares
    assert distances(hist([]), hist([5])) == distances(hist([5]), hist([5]))


def test_unbinned_lengths_make_distances_inexact():
    params = BucketParams(bounds=(0, 50, 101), max_seq_len=100)
    c = compare(hist([1, 2, 300], cap=100), hist([1, 2, 3]), params, params)
    assert not c.distances.exact and c.warnings


def test_compare_against_a_numpy_reference():
    rng = np.random.default_rng(4)
    x, y = rng.integers(1, 9000, 500), rng.integers(1, 12000, 700)
    params = BucketParams()
    c = compare(hist(x), hist(y), params, params).to_dict()
    for k, q in zip(PERCENTILES, (50, 90, 95, 99, 99.9), strict=True):
        want = np.percentile(y, q, method="inverted_cdf") - np.percentile(
            x, q, method="inverted_cdf")
        assert c[f"{k}_shift"] == want
    bounds = np.array(params.bounds)
    cx = np.histogram(np.minimum(x, 8192), bounds)[0]
    cy = np.histogram(np.minimum(y, 8192), bounds)[0]
    assert [b["samples_delta"] for b in c["buckets"]] == (cy - cx).tolist()
    assert c["mean_len_shift"] == pytest.approx(y.mean() - x.mean())
    ks, tv, w1 = brute(x.tolist(), y.tolist())
    assert (c["ks"], c["tv"], c["w1"]) == pytest.approx((ks, tv, w1), rel=1e-12)




@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """Two saved histograms: one corpus, and a longer one."""
    rng = np.random.default_rng(7)
    d = tmp_path_factory.mktemp("cmp")
    hist(rng.lognormal(6.5, 1.0, 3000).astype(np.int64)).save(d / "a.json")
    hist(rng.lognormal(7.0, 1.0, 2000).astype(np.int64)).save(d / "b.json")
    return d / "a.json", d / "b.json"


def test_a_corpus_against_itself_is_all_zero(saved, capsys):
    rc, out, err = run_cli(["compare", saved[0], saved[0], "-f", "json"], capsys)
    d = json.loads(out)
    assert rc == 0, err
    assert d["schema"] == "gpu-profiler/compare/v1" and (d["ks"], d["tv"], d["w1"]) == (0, 0, 0)
    assert all(v == 0 for k, v in d.items() if k.endswith("_shift"))
    assert all(b[f"{k}_delta"] == 0 for b in d["buckets"]
               for k in ("samples", "batches", "padding_pct"))


def test_two_corpora_and_two_bucketings(saved, capsys):
    rc, out, _ = run_cli(["compare", *saved, "-f", "json"], capsys)
    d = json.loads(out)
    a, b = (json.loads(run_cli(["profile", s, "-f", "json"], capsys)[1]) for s in saved)
    assert rc == 0 and d["p99_shift"] == b["percentiles"]["p99"] - a["percentiles"]["p99"]
    assert d["steps_per_epoch_shift"] == pytest.approx(b["steps_per_epoch"]
                                                       - a["steps_per_epoch"])
    assert 0 < d["ks"] <= d["tv"] <= 1 and d["w1"] > 0
    rc, out, _ = run_cli(["compare", saved[0], "--bounds-b", "0,1000,8193", "-f", "json"], capsys)
    d = json.loads(out)
    assert rc == 0 and d["ks"] == 0 and [len(d[s]["bounds"]) for s in "ab"] == [7, 3]
    assert d["buckets"][-1]["lo_b"] is None  # B has fewer buckets
    for fmt, mark in (("table", "distances: ks"), ("markdown", "| p99.9 |"),
                      ("csv", "bucket,lo_a,hi_a")):
        rc, out, _ = run_cli(["compare", *saved, "-f", fmt], capsys)
        assert rc == 0 and mark in out


def test_corpora_whose_length_columns_differ(tmp_path, capsys):
    """An HF dir's input_ids offsets against a JSONL file's length field (compare took one
    set of source options for both)."""
    datasets = pytest.importorskip("datasets")
    rng = np.random.default_rng(8)
    n = rng.integers(1, 400, 300)
    datasets.Dataset.from_dict({"input_ids": [[7] * int(k) for k in n]}).save_to_disk(
        str(tmp_path / "hf"))
    (tmp_path / "b.jsonl").write_text("".join(f'{{"length": {int(k)}, "t": "x"}}\n' for k in n))
    args = ["compare", tmp_path / "hf", tmp_path / "b.jsonl", "--offsets-of", "input_ids",
            "-q", "-f", "json"]
    code, _, err = run_cli(args, capsys)
    assert code == 2 and "--offsets-of does not apply" in err  # B read with A's options
    code, out, err = run_cli([*args, "--column-b", "length"], capsys)
    assert code == 0, err
    d = json.loads(out)
    assert d["ks"] == 0 and d["total_samples_shift"] == 0 and d["b"]["total_samples"] == n.size
    code, _, err = run_cli(["compare", tmp_path / "hf", "--column-b", "x", "-q"], capsys)
    assert code == 2 and "name it" in err
