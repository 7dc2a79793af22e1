"""The sampler's ``groups`` and ``plan --group-by``: the order interleaves the sources as
well as the buckets. Checked on the plan's own steps (each step's samples by their rows'
source, read back from the plan file): every sample once, the same cap of same-bucket
runs, and runs of one source's steps cut to the least the planner finds, where the order
that ignores sources runs them long."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import run_cli

import gpu_profiler as gp
from gpu_profiler import ProfilerError
from gpu_profiler.analysis.interleave import class_run, interleave, longest_run
from gpu_profiler.analysis.schedule import plan_mix

BOUNDS = [0, 256, 512, 1024, 2048, 4096, 8193]


def three_sources(n: int, seed: int):
    """``code`` long (2000 and up, ~30% of the rows), ``web`` short, ``wiki`` anywhere."""
    rng = np.random.default_rng(seed)
    pick = rng.choice(3, n, p=[0.3, 0.5, 0.2])
    lengths = np.select([pick == 0, pick == 1],
                        [rng.integers(2000, 8000, n), rng.integers(1, 600, n)],
                        rng.integers(1, 8000, n))
    return lengths, np.array(["code", "web", "wiki"], object)[pick]


def step_run(sampler: gp.BucketBatchSampler, codes: np.ndarray, names: list[str]) -> int:
    """The plan's longest run of steps made mostly of one source (`plan_mix`, checked
    against the rows in tests/test_schedule_groups.py)."""
    return plan_mix(*sampler.plan().indices(), sampler.world_size, codes, names).longest_run


@pytest.mark.parametrize("world, policy", [(1, "fixed"), (2, "sorted"), (3, "packed")])
def test_sources_are_interleaved_and_every_sample_comes_once(world, policy):
    """The order is the planner's on the buckets' sources counted from the rows (buckets 4-5
    mostly code: 24 and 20 steps of code in a row without the sources, 10 with them)."""
    x, labels = three_sources(40_000, seed=world)
    names = sorted(set(labels))
    codes = np.array([names.index(v) for v in labels], np.int32)
    kw = dict(bounds=BOUNDS, world_size=world, policy=policy, seed=3, token_budget=32768)
    plain = gp.BucketBatchSampler(x, **kw)
    mixed = gp.BucketBatchSampler(x, groups=labels, **kw)
    got = np.concatenate([np.array(b) for b in mixed])
    assert np.array_equal(np.sort(got), np.arange(x.size))  # each sample exactly once
    p, q = plain.plan(), mixed.plan()
    assert np.array_equal(np.bincount(q.bucket, minlength=len(BOUNDS) - 1),
                          np.bincount(p.bucket, minlength=len(BOUNDS) - 1))
    assert step_run(mixed, codes, names) <= step_run(plain, codes, names)
    if policy == "packed":  # a pack's bucket is not its samples' own
        return
    bucket = np.searchsorted(BOUNDS, np.minimum(x, 8192), side="right") - 1
    counts = np.zeros((len(BOUNDS) - 1, len(names)))
    np.add.at(counts, (bucket, codes), 1)
    share = counts / counts.sum(axis=1, keepdims=True) * 100
    corpus = counts.sum(axis=0) / counts.sum() * 100
    top = share.argmax(axis=1)
    classes = np.where((share.max(axis=1) > 50) & (share.max(axis=1) - corpus[top] >= 20),
                       top, -1)
    # the batches as planned: the last step's split-off halves come last
    per_bucket = np.bincount(q.bucket[:q.batches - q.split_batches], minlength=len(BOUNDS) - 1)
    units = per_bucket // world
    steps = q.bucket[::world][:units.sum()]  # one bucket a step (aligned ranks)
    assert np.array_equal(steps, interleave(units, None, classes))
    assert longest_run(steps)[0] == longest_run(p.bucket[::world][:units.sum()])[0]
    assert class_run(steps, classes) < class_run(p.bucket[::world][:units.sum()], classes)


def test_plan_group_by_is_the_sampler_with_the_rows_sources(tmp_path, capsys):
    x, labels = three_sources(20_000, seed=7)
    path = tmp_path / "mix.parquet"
    pq.write_table(pa.table({"length": x, "source": labels}), path, row_group_size=6_000)
    bounds = ",".join(map(str, BOUNDS))
    rc, out, err = run_cli(["plan", path, "--group-by", "source", "--bounds", bounds,
                            "--world-size", "2", "-o", tmp_path / "p.npz", "-f", "json"],
                           capsys)
    assert rc == 0, err
    d = json.loads(out)
    saved = np.load(tmp_path / "p.npz")
    api = gp.BucketBatchSampler(x, bounds=BOUNDS, world_size=2, groups=labels)
    index, offsets = api.plan().indices()
    assert np.array_equal(saved["indices"], index) and np.array_equal(saved["offsets"],
                                                                      offsets)
    assert d["groups"]["longest_run"] == step_run(api, api.groups, api.group_names)
    rc, out, err = run_cli(["plan", path, "--bounds", bounds, "--world-size", "2", "-o",
                            tmp_path / "q.npz"], capsys)
    assert rc == 0, err
    assert not np.array_equal(np.load(tmp_path / "q.npz")["indices"], index)
    # a source read by path: the column names each row's group
    by_path = gp.BucketBatchSampler(str(path), bounds=BOUNDS, world_size=2, groups="source")
    assert np.array_equal(by_path.plan().indices()[0], index)


def test_every_kind_of_label_gives_the_same_plan():
    x, labels = three_sources(5_000, seed=11)
    names = sorted(set(labels))
    ints = np.array([names.index(v) * 10 + 5 for v in labels])
    want = gp.BucketBatchSampler(x, bounds=BOUNDS, groups=labels).plan().indices()[0]
    for g in (list(labels), pa.array(labels.tolist()), pa.chunked_array(
            [pa.array(labels[:100].tolist()).dictionary_encode(),
             pa.array(labels[100:].tolist()).dictionary_encode()]), ints, ints.tolist()):
        got = gp.BucketBatchSampler(x, bounds=BOUNDS, groups=g).plan().indices()[0]
        assert np.array_equal(got, want), type(g)
    with_nulls = labels.copy()
    with_nulls[::50] = None
    s = gp.BucketBatchSampler(x, bounds=BOUNDS, groups=list(with_nulls))
    assert sorted(s.group_names[:-1]) == ["code", "web", "wiki"] and s.group_names[-1] == "(null)"
    for bad, said in ((labels[:-1], "4,999 labels for 5,000 samples"),
                      (np.linspace(0, 1, x.size), "one label"),
                      ([[1]] * x.size, "one label")):
        with pytest.raises(ProfilerError, match=said):
            gp.BucketBatchSampler(x, bounds=BOUNDS, groups=bad)
    with pytest.raises(ProfilerError, match="given in memory"):
        gp.BucketBatchSampler(x, bounds=BOUNDS, groups="source")


def test_a_resume_needs_the_same_sources_and_replans_them_at_another_world_size():
    x, labels = three_sources(8_000, seed=13)
    before = gp.BucketBatchSampler(x, bounds=BOUNDS, world_size=2, seed=1, groups=labels)
    trained = [b for j, b in enumerate(before) if j < 2 * 9]
    state = before.state_dict(next_step=9)
    other = labels.copy()
    other[:10] = "web"
    for groups in (None, other):
        with pytest.raises(ProfilerError, match="groups"):
            gp.BucketBatchSampler(x, bounds=BOUNDS, world_size=2, seed=1,
                                  groups=groups).load_state_dict(state)
    after = gp.BucketBatchSampler(x, bounds=BOUNDS, world_size=3, seed=1, groups=labels)
    after.load_state_dict(state)
    rest = list(after)
    flat = np.concatenate([np.concatenate(trained)] + [np.array(b) for b in rest])
    assert np.array_equal(np.sort(flat), np.arange(x.size))  # each sample exactly once


def test_labels_are_renumbered_in_value_order_whatever_their_kind():
    from gpu_profiler.labels import TABLE_SPAN, label_codes

    for values in ([5, -3, 5, 7], np.array([5, -3, 5, 7], np.int8),
                   np.array([2**40 + 5, 2**40 - 3, 2**40 + 5, 2**40 + 7], np.int64),
                   np.array([5, 0, 5, TABLE_SPAN * 3], np.uint64)):
        codes, names = label_codes(values, 4)
        assert codes.dtype == np.int16 and codes.tolist() == [1, 0, 1, 2], values
        assert names == [str(v) for v in sorted(set(np.asarray(values).tolist()))]
    codes, names = label_codes(pa.array(["b", None, "a", "b"]), 4)
    assert [names[c] for c in codes] == ["b", "(null)", "a", "b"]
    codes, names = label_codes(pa.array([3, None, 3, 9]), 4)
    assert [names[c] for c in codes] == ["3", "(null)", "3", "9"]
    assert label_codes(np.zeros(0, np.int64), 0)[0].size == 0
    with pytest.raises(ProfilerError, match="more than 1,000"):
        label_codes(np.arange(5000), 5000)
    with pytest.raises(ProfilerError, match="one label"):
        label_codes(pa.array([1.5, 2.5]), 2)


def test_labels_at_the_ends_of_their_types():
    from gpu_profiler.labels import label_codes

    for values in (np.array([-128, 127, 0], np.int8), np.array([2**64 - 1, 2**64 - 5, 2**64 - 1],
                   np.uint64), np.array([-2**63, 2**63 - 1, -2**63], np.int64)):
        codes, names = label_codes(values, values.size)
        assert [names[c] for c in codes] == [str(v) for v in values.tolist()]


def test_null_and_float_labels():
    from gpu_profiler.labels import label_codes

    codes, names = label_codes([None, None, None], 3)
    assert codes.tolist() == [0, 0, 0] and names == ["(null)"]
    for bad in (pa.array([0.5, 1.5]).dictionary_encode(), pa.array([b"x", b"y"])):
        with pytest.raises(ProfilerError, match="one label"):
            label_codes(bad, 2)
    # a null in a dictionary is the one null group, as --group-by names it; a value a
    # dictionary repeats is one group
    d = pa.DictionaryArray.from_arrays(pa.array([0, 1, None, 2, 1, 3]),
                                       pa.array(["a", None, "b", "a"]))
    codes, names = label_codes(d, 6)
    assert names == ["a", "b", "(null)"] and codes.tolist() == [0, 2, 2, 1, 2, 0]
