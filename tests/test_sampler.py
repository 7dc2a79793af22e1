"""`BucketBatchSampler`: the batches equal the policies, every index once across ranks,
budgets kept, resume exact, epochs reshuffled by seed; driven against a real `datasets`
Dataset (and torch's DataLoader where torch is installed)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from conftest import jit_kernels, sft_lengths
from hypothesis import given, settings
from hypothesis import strategies as st

import gpu_profiler as gp
from gpu_profiler import ProfilerError, piles
from gpu_profiler import sampler as sampler_module
from gpu_profiler.analysis.interleave import interleave
from gpu_profiler.analysis.policies import evaluate_policy
from gpu_profiler.analysis.schedule import simulate_schedule
from gpu_profiler.collate import _greedy_rows
from gpu_profiler.params import BucketParams


def every_batch(lengths, world_size=1, **kw):
    """Each rank's batches, as lists."""
    return [list(gp.BucketBatchSampler(lengths, world_size=world_size, rank=r, **kw))
            for r in range(world_size)]


def check_budget(lengths, batch, p=None, packed=False):
    p = p or BucketParams()
    clipped = np.minimum(lengths[batch], p.max_seq_len)
    if packed:  # rows as the collator cuts them, each max_seq_len tokens computed
        rows = len(_greedy_rows([np.zeros(c) for c in clipped], p.max_seq_len))
        assert rows == 1 or rows <= min(p.token_budget // p.max_seq_len, p.max_batch_size)
        return
    rows = len(batch)
    assert 1 <= rows <= p.max_batch_size
    assert rows * int(clipped.max()) <= p.token_budget or rows == 1


@pytest.mark.parametrize("policy", ["fixed", "sorted"])
@pytest.mark.parametrize("drop_last", [False, True])
def test_batches_equal_the_policy(policy, drop_last):
    x = sft_lengths(6000, seed=3)
    hist = gp.histogram(x, cap=8192)
    pol = evaluate_policy(hist, policy, BucketParams(), drop_last=drop_last)
    s = gp.BucketBatchSampler(x, policy=policy, drop_last=drop_last)
    plan = s.plan()
    assert np.bincount(plan.bucket, minlength=6).tolist() == [b.batches for b in pol.buckets]
    assert len(s) == pol.total_batches
    batches = list(s)
    flat = np.concatenate(batches)
    assert flat.size == np.unique(flat).size == pol.samples
    for b in batches:
        check_budget(x, b)
    summary = sampler_module.summarize(s)
    assert summary.tokens == pol.tokens or drop_last and policy == "fixed"
    if policy == "sorted":  # exact padding, batch for batch
        assert summary.padded_tokens == pol.padded_tokens and summary.tokens == pol.tokens


@pytest.mark.parametrize("policy", ["fixed", "sorted"])
def test_samples_longer_than_the_budget_get_a_batch_each(policy):
    x = np.array([100] * 50 + [3000] * 7 + [5000] * 3)
    s = gp.BucketBatchSampler(x, bounds=[0, 1000, 8193], token_budget=4096, policy=policy)
    if policy == "fixed":  # the whole bucket's batch size shrinks to 1: said, not silent
        with pytest.warns(UserWarning, match="3 samples .* each of the bucket's 10 samples"):
            s.plan()
    pol = evaluate_policy(gp.histogram(x, cap=8192), policy,
                          BucketParams((0, 1000, 8193), token_budget=4096))
    batches = list(s)
    over = [b for b in batches if x[b].max() > 4096]
    assert len(over) == 3 and all(len(b) == 1 for b in over)
    assert len(batches) == pol.total_batches + pol.unbatchable_samples
    for b in batches:
        check_budget(x, b, BucketParams((0, 1000, 8193), token_budget=4096))


def test_the_sampler_trains_in_the_order_schedule_profiles():
    x = sft_lengths(20_000, seed=5)
    r = simulate_schedule(gp.histogram(x, cap=8192), "stride")
    plan = gp.BucketBatchSampler(x).plan()
    assert np.array_equal(plan.bucket, interleave(r.batches))
    assert sampler_module.summarize(gp.BucketBatchSampler(x)).longest_run == \
        r["stride"].longest_run == r.min_run


lengths_arrays = st.lists(st.integers(0, 9000), min_size=1, max_size=400).map(np.array)


@settings(max_examples=300, deadline=None)
@given(x=lengths_arrays, world=st.integers(1, 8),
       policy=st.sampled_from(["fixed", "sorted", "packed"]),
       align=st.booleans(), drop_last=st.booleans(), pile=st.sampled_from([2, 7, 1 << 17]))
def test_every_index_once_across_ranks_and_equal_batches_per_rank(x, world, policy, align,
                                                                  drop_last, pile):
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(piles, "PILE", pile)
        try:
            ranks = every_batch(x, world, policy=policy, align_ranks=align,
                                drop_last=drop_last, bounds=[0, 300, 1500, 8193])
        except ProfilerError as exc:  # too few samples to split into whole steps
            single = len(gp.BucketBatchSampler(x, policy=policy, bounds=[0, 300, 1500, 8193]))
            assert "as many batches" in str(exc) and not drop_last
            assert x.size < -(-single // world) * world
            return
    assert len({len(r) for r in ranks}) == 1
    flat = np.concatenate([np.array(b, np.int64) for r in ranks for b in r] or [[]])
    assert flat.size == np.unique(flat).size  # none twice
    if not drop_last:
        assert flat.size == x.size  # none missing
    for r in ranks:
        for b in r:
            check_budget(x, b, packed=policy == "packed")
    if align and world > 1:  # the planned steps are one bucket each; leftovers come last
        kw = dict(policy=policy, drop_last=drop_last, bounds=[0, 300, 1500, 8193])
        plan = gp.BucketBatchSampler(x, world_size=world, **kw).plan()
        per_bucket = np.bincount(gp.BucketBatchSampler(x, **kw).plan().bucket, minlength=3)
        steps = plan.bucket.reshape(-1, world)
        planned = int((per_bucket // world).sum())
        assert (steps[:planned].min(axis=1) == steps[:planned].max(axis=1)).all()
        assert steps.shape[0] - planned == -(-int((per_bucket % world).sum()) // world) \
            or drop_last


def test_resume_equals_an_uninterrupted_run():
    x = sft_lengths(5000, seed=1)
    whole = gp.BucketBatchSampler(x, world_size=2, rank=1, seed=7)
    whole.set_epoch(3)
    expected = list(whole)
    s = gp.BucketBatchSampler(x, world_size=2, rank=1, seed=7)
    s.set_epoch(3)
    head = list(itertools.islice(iter(s), 11))
    state = s.state_dict()
    resumed = gp.BucketBatchSampler(x, world_size=2, rank=1, seed=7)
    resumed.load_state_dict(state)
    assert head + list(resumed) == expected
    # a DataLoader prefetches ahead of training: the loop says where it is
    behind = gp.BucketBatchSampler(x, world_size=2, rank=1, seed=7)
    behind.load_state_dict(s.state_dict(next_step=5))
    assert list(behind) == expected[5:]
    after = gp.BucketBatchSampler(x, world_size=2, rank=1, seed=7)
    after.set_epoch(4)
    assert list(resumed) == list(after)  # the epoch ended: the next pass is the next epoch
    for other in (gp.BucketBatchSampler(x[:-1], world_size=2, rank=1, seed=7),
                  gp.BucketBatchSampler(x, world_size=2, rank=1, seed=8),
                  gp.BucketBatchSampler(x, world_size=2, rank=1, seed=7, token_budget=40000)):
        with pytest.raises(ProfilerError, match="state was made with"):
            other.load_state_dict(state)
    with pytest.raises(ProfilerError, match="not a BucketBatchSampler state"):
        resumed.load_state_dict({"epoch": 1})


def test_epochs_reshuffle_and_repeat_by_seed():
    x = sft_lengths(3000, seed=2)

    def epoch(e, seed=0):
        s = gp.BucketBatchSampler(x, seed=seed)
        s.set_epoch(e)
        return list(s)

    first = epoch(0)
    assert epoch(0) == first and epoch(1) != first and epoch(0, seed=1) != first
    assert sorted(map(sorted, epoch(1))) != sorted(map(sorted, first))  # new batch contents


def test_native_and_jit_plans_are_identical():
    x = sft_lengths(4000, seed=4)

    groups = np.where(x > 1500, "long", np.where(x < 300, "short", "mid"))
    kinds = [dict(), dict(groups=groups),
             dict(attention_weight=1 / 4096, cost_budget=60_000, varlen_attention=True)]

    def plans():
        out = []
        for policy in ("fixed", "sorted"):
            for kw in kinds:
                plan = gp.BucketBatchSampler(x, policy=policy, world_size=3, seed=11,
                                             **kw).plan()
                out.append((plan.layout.tobytes(), plan.start.tobytes(), plan.end.tobytes(),
                            plan.bucket.tobytes()))
        return out

    native_plans = plans()
    with jit_kernels():
        assert plans() == native_plans


def test_shuffle_is_uniform():
    # one bucket of 4 samples split over several piles: all 24 orders, about equally often
    x = np.full(4, 10)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(piles, "PILE", 2)
        seen = {}
        for e in range(2400):
            s = gp.BucketBatchSampler(x)
            s.set_epoch(e)
            key = tuple(next(iter(s)))
            seen[key] = seen.get(key, 0) + 1
    assert len(seen) == 24
    chi2 = sum((c - 100) ** 2 / 100 for c in seen.values())
    assert chi2 < 60  # 23 degrees of freedom: p < 1e-4 above 57


def test_bad_arguments_are_one_line_errors():
    x = np.arange(1, 100)
    for kw, says in (({"policy": "x"}, "fixed, sorted or packed"), ({"order": "x"}, "stride or"),
                     ({"rank": 2, "world_size": 2}, "rank must be"),
                     ({"max_run": 0}, "--max-run must be"), ({"seed": 1.5}, "seed must be")):
        with pytest.raises(ProfilerError, match=says):
            gp.BucketBatchSampler(x, **kw)
    with pytest.raises(ProfilerError, match="1-D integer"):
        gp.BucketBatchSampler(np.ones(3))
    with pytest.raises(ProfilerError, match="is infeasible"):
        gp.BucketBatchSampler(np.full(100, 10), bounds=[0, 5, 20], max_run=1)


def test_a_real_dataset(hf_dir):
    datasets = pytest.importorskip("datasets")
    path, x = hf_dir
    ds = datasets.load_from_disk(str(path))
    s = gp.BucketBatchSampler(path, column="length", world_size=2, rank=0)
    by_offsets = gp.BucketBatchSampler(path, offsets_of="input_ids", world_size=2, rank=0)
    assert list(s) == list(by_offsets)
    for batch in s:
        rows = ds[batch]
        assert rows["length"] == x[batch].tolist()
        assert [len(ids) for ids in rows["input_ids"]] == rows["length"]


# ------------------------------------------------ inside the training stacks' loops
def test_rank_none_yields_every_ranks_batches_in_the_order_a_shard_deals_them():
    x = sft_lengths(4000, seed=8)
    every = list(gp.BucketBatchSampler(x, world_size=3, seed=2))
    ranks = every_batch(x, 3, seed=2)
    assert len(every) == len(gp.BucketBatchSampler(x, world_size=3)) == 3 * len(ranks[0])
    for r in range(3):  # accelerate's BatchSamplerShard: batch j to process j % 3
        assert every[r::3] == ranks[r]
    s = gp.BucketBatchSampler(x, world_size=3)
    assert s.sampler is s and s.batch_size is None and s.drop_last is False


def test_a_peek_keeps_the_resume_point_and_len_counts_the_whole_epoch():
    x = sft_lengths(3000, seed=9)
    whole = gp.BucketBatchSampler(x, seed=1)
    whole.set_epoch(2)
    expected = list(whole)
    s = gp.BucketBatchSampler(x, seed=1)
    s.load_state_dict({**whole.state_dict(next_step=0), "epoch": 2, "next_step": 40})
    # len() stays the epoch's: Lightning and HF Trainer end an epoch after len() batches
    assert s.resume_step == 40 and s.epoch == 2 and len(s) == len(expected)
    assert next(iter(s)) == expected[40]  # a peek ...
    s.set_epoch(2)  # ... and the loop naming the epoch it resumes
    assert list(s) == expected[40:]  # ... start where the state said
    assert s.resume_step == 0 and len(s) == len(expected)  # the next pass: epoch 3, whole


def test_a_state_saved_at_an_epochs_end():
    x = sft_lengths(2000, seed=10)
    s = gp.BucketBatchSampler(x, seed=4)
    list(s)
    state = s.state_dict()
    assert (state["epoch"], state["next_step"]) == (0, state["epoch_steps"])

    def epoch(e):
        one = gp.BucketBatchSampler(x, seed=4)
        one.set_epoch(e)
        return list(one)

    # a loop that resumes inside the epoch it checkpointed at its last step: that epoch
    # yields nothing more (a checkpoint interval that divides the epoch), the next is whole
    inside = gp.BucketBatchSampler(x, seed=4)
    inside.set_epoch(0)
    inside.load_state_dict(state)
    assert inside.resume_step == len(inside) and list(inside) == []
    inside.set_epoch(1)
    assert list(inside) == epoch(1)
    # Lightning after an epoch-end checkpoint: the loop names the next epoch before
    # torchdata restores the state, which then changes nothing
    after = gp.BucketBatchSampler(x, seed=4)
    after.set_epoch(1)
    after.load_state_dict(state)
    assert after.resume_step == 0 and list(after) == epoch(1)
    again = gp.BucketBatchSampler(x, seed=4)  # no set_epoch at all: epochs advance alone
    assert list(again) == epoch(0) and list(again) == epoch(1) and again.epoch == 1


def test_refused_states_name_what_differs():
    x = sft_lengths(1000, seed=11)
    state = gp.BucketBatchSampler(x, token_budget=40000).state_dict()
    with pytest.raises(ProfilerError, match=r"token_budget=40000 \(this sampler: 49152\)"):
        gp.BucketBatchSampler(x).load_state_dict(state)
    with pytest.raises(ProfilerError, match="other lengths"):
        gp.BucketBatchSampler(x[::-1].copy(), token_budget=40000).load_state_dict(state)
    for bad in ({**state, "next_step": -1}, {**state, "earlier_worlds": [[0, 1]]},
                {**state, "epoch": True}, {**state, "next_step": 10**9}):
        with pytest.raises(ProfilerError, match="bad sampler state"):
            gp.BucketBatchSampler(x, token_budget=40000).load_state_dict(bad)


@pytest.mark.parametrize("old, new", [(2, 3), (4, 1), (1, 2)])
@pytest.mark.parametrize("policy", ["fixed", "sorted"])
def test_resuming_at_another_world_size_trains_the_rest_once(old, new, policy):
    x = sft_lengths(3000, seed=12)
    before = gp.BucketBatchSampler(x, world_size=old, seed=5, policy=policy)
    before.set_epoch(1)
    done = 7
    trained = [b for j, b in enumerate(before) if j < done * old]
    state = before.state_dict(next_step=done)
    after = [gp.BucketBatchSampler(x, world_size=new, rank=r, seed=5, policy=policy)
             for r in range(new)]
    for s in after:
        s.load_state_dict(state)
    rest = [list(s) for s in after]
    assert len({len(r) for r in rest}) == 1  # every rank as many steps
    flat = np.concatenate([np.concatenate(trained)] + [np.array(b) for r in rest for b in r])
    assert np.array_equal(np.sort(flat), np.arange(x.size))  # each sample exactly once
    mid = after[0].state_dict(next_step=3)  # a state of the re-planned epoch resumes too
    again = gp.BucketBatchSampler(x, world_size=new, rank=0, seed=5, policy=policy)
    again.load_state_dict(mid)
    assert list(again) == rest[0][3:]


def test_samples_no_bucket_holds_are_an_error_or_dropped_on_request():
    x = np.array([100] * 90 + [600] * 10 + [-1] * 2)
    with pytest.raises(ProfilerError, match=r"12 of 102 samples .* 10 at or past the last "
                       r"bound 512 \(10 of them longer than max_seq_len 512 .* end the bounds "
                       r"at 513 .*2 null or negative; pass drop_outside=True"):
        gp.BucketBatchSampler(x, bounds=[0, 256, 512], max_seq_len=512)
    s = gp.BucketBatchSampler(x, bounds=[0, 256, 512], max_seq_len=512, drop_outside=True)
    assert sum(map(len, s)) == 90 and s.plan().dropped_samples == 12
    kept = gp.BucketBatchSampler(x[x >= 0], bounds=[0, 256, 513], max_seq_len=512)
    assert sum(map(len, kept)) == 100
    # profile says the same of the same lengths: how many, and the fix
    said = gp.profile(x[x >= 0], bounds=[0, 256, 512], max_seq_len=512).table.warnings
    assert any("10 samples fall outside every bucket" in w and "end the bounds at 513" in w
               for w in said), said


def test_lengths_from_python_sequences():  # torch tensors: tests/integration
    x = sft_lengths(500, seed=13)
    want = list(gp.BucketBatchSampler(x))
    assert list(gp.BucketBatchSampler(x.tolist())) == want
    assert list(gp.BucketBatchSampler(tuple(x.tolist()))) == want
    with pytest.raises(ProfilerError, match="1-D integer"):
        gp.BucketBatchSampler([1, 2.5, 3])


@pytest.mark.parametrize("world", [1, 2, 5])
def test_packed_batches_are_the_rows_profile_packed_measures(world):
    x = sft_lengths(8000, seed=14)
    s = gp.BucketBatchSampler(x, policy="packed", world_size=world, seed=3)
    pol = evaluate_policy(gp.histogram(x, cap=8192), "packed", BucketParams(world_size=world))
    summary = sampler_module.summarize(s)
    assert int(s.plan().rows().sum()) == pol.rows  # the same rows ...
    assert summary.padded_tokens == pol.rows * 8192 and summary.tokens == pol.tokens
    assert summary.padding_pct == pytest.approx(100 * (1 - pol.packing_efficiency))  # ... same
    batches = list(s)
    flat = np.concatenate(batches)
    assert np.array_equal(np.sort(flat), np.arange(x.size))  # every sample once
    for b in batches:  # the collator's greedy cut gives the planned rows back
        check_budget(x, b, packed=True)
    assert len(batches) - pol.total_batches in range(0, 6 + s.plan().split_batches)
    assert s.plan().steps == len(batches) // world
