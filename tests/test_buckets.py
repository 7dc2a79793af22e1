"""The bucket table against an independent pure-Python implementation of docs/design.md."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_matches_reference, reference_table, sft_lengths
from hypothesis import given, settings
from hypothesis import strategies as st

import gpu_profiler as gp
from gpu_profiler import BucketParams, ProfilerError

BOUNDS = [0, 770, 1216, 1728, 2432, 3296, 8193]


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_matches_reference_on_sft_lengths(backend):
    x = sft_lengths(20_000)
    got = gp.profile(x, backend=backend).to_dict()
    assert_matches_reference(got, reference_table(x.tolist(), BOUNDS))


@settings(max_examples=80, deadline=None)
@given(
    lengths=st.lists(st.one_of(st.none(), st.integers(-5, 400)), max_size=200),
    bounds=st.lists(st.integers(0, 450), min_size=2, max_size=6, unique=True).map(sorted),
    max_seq_len=st.integers(1, 400),
    token_budget=st.integers(1, 2000),
    max_batch_size=st.integers(1, 70),
    grad_accum=st.integers(1, 8),
    world_size=st.integers(1, 8),
)
def test_matches_reference_on_arbitrary_inputs(lengths, bounds, max_seq_len, token_budget,
                                               max_batch_size, grad_accum, world_size):
    import pyarrow as pa

    kw = dict(max_seq_len=max_seq_len, token_budget=token_budget,
              max_batch_size=max_batch_size, grad_accum=grad_accum, world_size=world_size)
    got = gp.profile(pa.array(lengths, pa.int64()), bounds=bounds, backend="numpy", **kw)
    assert_matches_reference(got.to_dict(), reference_table(lengths, bounds, **kw))


def test_empty_source_gives_zeros():
    t = gp.profile(np.zeros(0, np.int64)).table
    assert t.total_samples == 0 and t.total_est_batches == 0 and t.steps_per_epoch == 0
    assert all(b.samples == 0 and b.batch_pct == 0 and b.est_batch_size == 64
               for b in t.buckets)


def test_over_budget_bucket_is_flagged_and_warned():
    t = gp.profile(np.array([100, 9000]), token_budget=5000, max_seq_len=16384,
                   bounds=[0, 1000, 16385]).table
    assert t.buckets[1].est_batch_size == 0 and t.buckets[1].over_budget
    assert t.buckets[1].est_batches == 1.0
    assert any("exceeds the token budget" in w for w in t.warnings)


def test_dominant_bucket_warning_names_the_fix():
    t = gp.profile(np.array([100] * 10 + [8000] * 60)).table
    assert t.buckets[-1].batch_pct > 40
    assert any("gpu-profiler schedule --order stride" in w for w in t.warnings)


def test_unbucketed_samples_are_reported():
    t = gp.profile(np.array([5, 50, 500]), bounds=[10, 100]).table
    assert t.unbucketed_samples == 2 and t.buckets[0].samples == 1
    assert t.buckets[0].sample_pct == pytest.approx(100 / 3)


def test_profile_from_histogram_needs_no_rescan():
    x = sft_lengths(5000)
    h = gp.histogram(x, cap=8192)
    a = gp.profile(h, token_budget=65536, bounds=[0, 1024, 8193]).to_dict()
    b = gp.profile(x, token_budget=65536, bounds=[0, 1024, 8193]).to_dict()
    assert a["buckets"] == b["buckets"]


def test_histogram_with_too_small_cap_is_refused():
    h = gp.histogram(np.array([1, 5000]), cap=1000)
    with pytest.raises(ProfilerError, match="cannot raise"):
        gp.profile(h, max_seq_len=8192)


@pytest.mark.parametrize("kw, msg", [
    (dict(bounds=[0, 5, 5]), "strictly increasing"),
    (dict(bounds=[9, 3]), "strictly increasing"),
    (dict(bounds=[4]), "at least two"),
    (dict(bounds=[-1, 4]), "non-negative"),
    (dict(token_budget=0), "token-budget"),
    (dict(max_batch_size=-3), "max-batch-size"),
    (dict(max_seq_len=0), "max-seq-len"),
    (dict(grad_accum=0), "grad-accum"),
])
def test_bad_params(kw, msg):
    with pytest.raises(ProfilerError, match=msg):
        BucketParams(**kw)


def test_a_column_of_implausible_lengths_says_so_with_its_range():
    stamps = np.array([1_600_000_000, 1_650_000_000, 1_700_000_000], np.int64)
    said = gp.profile(stamps).table.warnings
    assert any("lengths range from 1,600,000,000 to 1,700,000,000" in w and "--column" in w
               for w in said), said
    assert not any("plausible" in w for w in gp.profile(np.array([5, 70_000])).table.warnings)
