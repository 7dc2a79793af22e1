"""`pack_epoch` and `PackedCollator`: exactly the rows `pack_rows` counts (and the row fills
of a naive best-fit-decreasing), every bucketed sample once, rows a greedy cut gives back,
the profile's packing efficiency, batches by bucket, per-key shuffles; the collator on a
real `datasets` Dataset against inputs built independently from the packer's rows."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import sft_lengths
from hypothesis import given, settings
from hypothesis import strategies as st

import gpu_profiler as gp
from gpu_profiler.analysis.policies import evaluate_policy, pack_rows
from gpu_profiler.collate import PackedCollator
from gpu_profiler.packing import pack_epoch
from gpu_profiler.params import BucketParams


def naive_bfd(items, cap):
    """Best-fit-decreasing the slow, obvious way: the fill of every row, sorted."""
    fills = []
    for item in sorted(items, reverse=True):
        fits = [i for i, f in enumerate(fills) if f + item <= cap]
        if fits:
            best = min(fits, key=lambda i: cap - fills[i])
            fills[best] += item
        else:
            fills.append(item)
    return sorted(fills)


def inside(x, p):
    """Which samples some bucket holds."""
    c = np.minimum(x, p.max_seq_len)
    return (x >= 0) & (c >= p.bounds[0]) & (c < p.bounds[-1])


def bucket_of(c, p):
    return np.searchsorted(np.asarray(p.bounds), c, side="right") - 1


def check(x, p, key, drop_last):
    """Every property of one packing; returns it."""
    x = np.asarray(x)
    pk = pack_epoch(x, p, key, drop_last)
    cap, c = p.max_seq_len, np.minimum(x, p.max_seq_len)
    held = np.flatnonzero(inside(x, p))
    values, counts = np.unique(c[held], return_counts=True)
    assert pk.rows == pack_rows(values, counts, cap, "bfd")
    assert pk.tokens == int(c[held].sum())
    # every held sample at most once (exactly once without drop_last); the rest dropped
    assert np.unique(pk.layout).size == pk.layout.size
    assert np.isin(pk.layout, held).all()
    if not drop_last:
        assert np.array_equal(np.sort(pk.layout), held)
        assert pk.row_offsets.size - 1 == pk.rows
    assert pk.dropped == x.size - pk.layout.size
    # batches tile the layout, grouped by bucket
    assert pk.start.size == pk.end.size == int(pk.per_bucket.sum())
    assert pk.per_bucket.size == len(p.bounds) - 1
    assert np.array_equal(pk.start[1:], pk.end[:-1])
    assert pk.start.size == 0 or (pk.start[0] == 0 and pk.end[-1] == pk.layout.size)
    offsets = pk.row_offsets
    assert offsets[0] == 0 and offsets[-1] == pk.layout.size and (np.diff(offsets) > 0).all()
    sizes = pk.batch_rows()
    assert (1 <= sizes).all() and (sizes <= pk.rows_per_batch).all()
    assert pk.rows_per_batch == (min(p.token_budget // cap, p.max_batch_size) or 1)
    buckets = np.repeat(np.arange(pk.per_bucket.size), pk.per_bucket)
    for b in range(pk.per_bucket.size):
        short = sizes[buckets == b] < pk.rows_per_batch
        assert short.sum() <= (0 if drop_last else 1) and not short[:-1].any()
    for j in range(pk.start.size):
        batch = c[pk.layout[pk.start[j]:pk.end[j]]]
        cuts = offsets[(offsets >= pk.start[j]) & (offsets <= pk.end[j])] - pk.start[j]
        assert cuts.size - 1 == sizes[j]
        firsts = []
        for lo, hi in zip(cuts[:-1], cuts[1:], strict=True):
            row = batch[lo:hi]
            assert row.sum() <= cap and (np.diff(row) <= 0).all()  # fits; longest first
            firsts.append(row[0])
        assert (bucket_of(np.array(firsts), p) == buckets[j]).all()
        greedy, fill = [0], cap + 1
        for i, length in enumerate(batch.tolist()):
            if fill + length > cap:
                greedy.append(i)
                fill = 0
            fill += length
        assert greedy[1:] == cuts[:-1].tolist()
    return pk


lengths = st.lists(st.one_of(st.integers(-3, 70), st.sampled_from([0, 1, 32, 64, 65])),
                   max_size=300)


@st.composite
def params(draw):
    cap = draw(st.sampled_from([1, 2, 7, 32, 64]))
    edges = sorted(draw(st.sets(st.integers(0, 80), min_size=2, max_size=5)))
    return BucketParams(tuple(edges), max_seq_len=cap,
                        token_budget=draw(st.integers(1, 6 * cap)),
                        max_batch_size=draw(st.integers(1, 5)))


@settings(max_examples=300, deadline=None)
@given(lengths, params(), st.integers(-2**63, 2**63 - 1), st.booleans())
def test_packing_properties(x, p, key, drop_last):
    pk = check(np.array(x, np.int64), p, key, drop_last)
    if not drop_last:  # the same rows as a naive best-fit-decreasing, fill by fill
        c = np.minimum(x, p.max_seq_len)[inside(np.array(x, np.int64), p)]
        fills = np.add.reduceat(np.minimum(np.array(x), p.max_seq_len)[pk.layout],
                                pk.row_offsets[:-1]) if pk.rows else np.zeros(0)
        expected = naive_bfd([int(v) for v in c if v], p.max_seq_len)
        if not expected and c.size:  # only zero-length samples: one row of them
            expected = [0]
        assert sorted(fills.tolist()) == expected


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 200), st.integers(1, 2000)), min_size=1,
                max_size=40, unique_by=lambda t: t[0]),
       st.sampled_from([200, 256, 1000]))
def test_many_samples_of_few_lengths(pairs, cap):
    x = np.repeat([v for v, _ in pairs], [n for _, n in pairs])
    check(x, BucketParams((0, 50, 120, cap + 1), max_seq_len=cap, token_budget=4 * cap),
          7, False)


@pytest.mark.parametrize("x, rows", [([5], 1), ([8], 1), ([8] * 9, 9), ([0], 1),
                                     ([0, 0, 3], 1), ([8, 0, 8], 2), ([], 0),
                                     ([-1, 3, 100], 2), ([4, 4, 3, 3, 2], 2),
                                     ([4, 3, 3, 2, 2, 2], 3)])  # best fit, not the best: 3
def test_edge_cases(x, rows):
    p = BucketParams((0, 4, 9), max_seq_len=8, token_budget=16, max_batch_size=2)
    pk = check(np.array(x, np.int64), p, 1, False)
    assert pk.rows == rows
    if x == [0, 0, 3]:  # zero-length samples ride along in the one row
        assert pk.rows == 1 and pk.layout.tolist()[0] == 2


def test_zero_length_samples_are_dealt_over_the_rows():
    x = np.array([0] * 20 + [8] * 10)
    pk = check(x, BucketParams((0, 9), max_seq_len=8, token_budget=16), 4, False)
    assert (np.diff(pk.row_offsets) == 3).all()  # each row: its 8, then two empties


@pytest.mark.parametrize("drop_last", [False, True])
def test_efficiency_equals_the_profile(drop_last):
    x = sft_lengths(30_000, seed=4)
    x[:50] = -1
    p = BucketParams()
    pk = check(x, p, 3, drop_last)
    pol = evaluate_policy(gp.histogram(x, cap=8192), "packed", p, drop_last=drop_last)
    assert pk.efficiency == pol.packing_efficiency
    assert pk.rows == pol.rows and pk.rows_per_batch == pol.rows_per_batch
    if not drop_last:
        assert pk.tokens == pol.tokens


def test_outside_the_bounds_is_dropped():
    x = np.array([-5, -1, 3, 10, 50, 99, 100, 500, 20, 0])
    p = BucketParams((10, 60, 100), max_seq_len=64, token_budget=128)
    pk = check(x, p, 2, False)
    assert sorted(pk.layout.tolist()) == [3, 4, 5, 6, 7, 8]  # 99, 100, 500 clip to 64
    assert pk.dropped == 4


def test_drop_last_drops_each_buckets_short_batch():
    x = sft_lengths(5000, seed=9)
    p = BucketParams()
    whole, cut = pack_epoch(x, p, 11, False), pack_epoch(x, p, 11, True)
    rows = whole.batch_rows()
    full = rows == whole.rows_per_batch
    assert (~full).sum() >= 2  # several buckets with a short batch: the test means something
    keep = [tuple(whole.layout[s:e]) for s, e, f in zip(whole.start, whole.end, full,
                                                        strict=True) if f]
    assert [tuple(cut.layout[s:e]) for s, e in zip(cut.start, cut.end, strict=True)] == keep
    lost = int((whole.end - whole.start)[~full].sum())
    assert cut.dropped == lost and cut.rows == whole.rows
    assert cut.efficiency == whole.efficiency


def test_a_key_decides_everything():
    x = sft_lengths(20_000, seed=1)
    p = BucketParams()
    a, b, other = (pack_epoch(x, p, k, False) for k in (5, 5, 6))
    for field in ("layout", "start", "end", "per_bucket", "row_offsets"):
        assert np.array_equal(getattr(a, field), getattr(b, field))
    assert a.rows == other.rows
    assert not np.array_equal(a.layout, other.layout)
    same = np.full(1000, 100)  # which sample of a length goes where is random
    assert not np.array_equal(pack_epoch(same, p, 1, False).layout,
                              pack_epoch(same, p, 2, False).layout)


def test_native_and_jit_kernels_agree(kernels):
    x = sft_lengths(3000, seed=2).astype(np.int32)
    pk = check(x, BucketParams(), 99, False)
    expected = pack_epoch(x.astype(np.int64), BucketParams(), 99, False)
    assert np.array_equal(pk.layout, expected.layout)
    assert np.array_equal(pk.start, expected.start)


# ---------------------------------------------------------------- the collator
def expected_inputs(rows, cap, flat):
    """Model inputs built from the packer's rows (lists of token lists), independently."""
    if flat:
        rows, cap = [[s for r in rows for s in r]], sum(len(s) for r in rows for s in r)
    ids, pos, labels, bounds = [], [], [], [0]
    for r, row in enumerate(rows):
        i_row, p_row, l_row = [], [], []
        for s in row:
            i_row += s
            p_row += list(range(len(s)))
            l_row += ([-100] + s[1:]) if s else []
            if s:
                bounds.append(r * cap + len(i_row))
        if len(i_row) < cap:
            bounds.append((r + 1) * cap)
        pad = cap - len(i_row)
        ids.append(i_row + [0] * pad)
        pos.append(p_row + [0] * pad)
        labels.append(l_row + [-100] * pad)
    return ids, pos, labels, bounds


@pytest.mark.parametrize("flat", [False, True])
def test_collator_on_a_dataset(flat):
    datasets = pytest.importorskip("datasets")
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.integers(1, 70, 400), [0, 0, 64, 64, 90, 200]])
    ds = datasets.Dataset.from_dict({"input_ids": [rng.integers(1, 1000, n).tolist()
                                                   for n in x]})
    cap = 64
    p = BucketParams((0, 16, 40, 65), max_seq_len=cap, token_budget=4 * cap)
    pk = check(x, p, 123, False)
    collate = PackedCollator(cap, rows="flat" if flat else "fixed")
    for j in range(pk.start.size):
        batch = pk.layout[pk.start[j]:pk.end[j]]
        out = collate([ds[int(i)] for i in batch])
        offsets = pk.row_offsets[(pk.row_offsets >= pk.start[j]) & (pk.row_offsets
                                                                    <= pk.end[j])]
        rows = [[ds[int(i)]["input_ids"][:cap] for i in pk.layout[lo:hi]]
                for lo, hi in zip(offsets[:-1], offsets[1:], strict=True)]
        ids, pos, labels, bounds = expected_inputs(rows, cap, flat)
        assert out["input_ids"].tolist() == ids
        assert out["position_ids"].tolist() == pos
        assert out["labels"].tolist() == labels
        assert out["cu_seqlens"].dtype == np.int32 and out["cu_seqlens"].tolist() == bounds
        assert out["cu_seqlens"][-1] == out["input_ids"].size
        assert out["max_seqlen"] == max(np.diff(bounds))
        if not flat:
            assert out["input_ids"].shape == (pk.batch_rows()[j], cap)


def test_collator_truncates_and_pads():
    out = PackedCollator(4, pad_id=7)([{"input_ids": [1, 2, 3, 4, 5]}, {"input_ids": []},
                                       {"input_ids": [6]}, {"input_ids": [8, 9, 10, 11]}])
    assert out["input_ids"].tolist() == [[1, 2, 3, 4], [6, 7, 7, 7], [8, 9, 10, 11]]
    assert out["position_ids"].tolist() == [[0, 1, 2, 3], [0, 0, 0, 0], [0, 1, 2, 3]]
    assert out["labels"].tolist() == [[-100, 2, 3, 4], [-100, -100, -100, -100],
                                      [-100, 9, 10, 11]]
    assert out["cu_seqlens"].tolist() == [0, 4, 5, 8, 12] and out["max_seqlen"] == 4
