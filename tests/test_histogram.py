from __future__ import annotations

import json
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_profiler import LengthHistogram, ProfilerError, merge
from gpu_profiler.backends import get_backend
from gpu_profiler.chunk import Chunk
from gpu_profiler.histogram import PERCENTILES, Sum


def hist_of(values, cap):
    return get_backend("numpy").histogram_chunk(Chunk(np.asarray(values, np.int64)), cap)


def test_fields_and_derived_numbers():
    h = hist_of([0, 3, 3, 7, 12, 20, -1], cap=10)
    assert h.cap == 10
    assert h.counts[3] == 2 and h.counts[0] == 1 and h.counts[7] == 1
    assert (h.above_count, h.above_tokens, h.above_min, h.above_max) == (2, 32, 12, 20)
    assert h.invalid_count == 1 and h.null_count == 0
    assert h.valid == 6 and h.total == 7
    assert h.tokens == 0 + 3 + 3 + 7 + 12 + 20
    assert (h.min, h.max) == (0, 20)


def test_empty_histogram_has_no_min_max():
    h = LengthHistogram.empty(5)
    assert (h.min, h.max, h.valid, h.tokens) == (None, None, 0, 0)


def test_min_max_when_everything_is_above_cap():
    h = hist_of([50, 40], cap=10)
    assert (h.min, h.max) == (40, 50)


def test_merge_equals_histogram_of_concatenation():
    rng = np.random.default_rng(0)
    a, b = rng.integers(-3, 40, 500), rng.integers(-3, 40, 300)
    assert hist_of(a, 30) + hist_of(b, 30) == hist_of(np.concatenate([a, b]), 30)


def test_merge_pads_smaller_caps_when_nothing_is_above():
    a, b = [1, 2, 3], [1, 30]
    assert merge([hist_of(a, 3), hist_of(b, 30)]) == hist_of(a + b, 30)


def test_merge_refuses_to_invent_bins():
    with pytest.raises(ProfilerError, match="cannot raise"):
        merge([hist_of([1, 50], 10), hist_of([1], 60)])


def test_merge_refuses_to_invent_bins_in_either_order():
    low, high = hist_of([1, 50], 10), hist_of([1], 60)
    for pair in ([low, high], [high, low]):
        with pytest.raises(ProfilerError, match="cannot raise the histogram cap from 10 to 60"):
            merge(pair)


def test_a_running_sum_grows_its_bins_and_hands_out_copies():
    rng = np.random.default_rng(4)
    parts = [rng.integers(-2, 5 * (i + 1), 50) for i in range(6)]
    total = Sum()
    seen = []
    for i, x in enumerate(parts):
        total.add(hist_of(x, 5 * (i + 1)))
        seen.append(total.histogram())
    for i, h in enumerate(seen):  # each sum so far, unchanged by what was added after it
        assert h == hist_of(np.concatenate(parts[:i + 1]), 5 * (i + 1))
    with pytest.raises(ValueError, match="at least one"):
        merge([])


def test_a_sum_takes_a_first_histogram_as_it_is_and_never_changes_it():
    """A lone histogram is its own sum (its bins not copied); adding another copies them
    first, so neither it nor a sum handed out before changes."""
    a, b = hist_of([1, 2, 2], 5), hist_of([2, 5, 9], 5)
    total = Sum()
    total.add(a)
    one = total.histogram()
    assert one.counts is a.counts and merge([a]) is a
    total.add(b)
    total.add(b)
    assert a == one == hist_of([1, 2, 2], 5) and b == hist_of([2, 5, 9], 5)
    assert total.histogram() == hist_of([1, 2, 2, 2, 5, 9, 2, 5, 9], 5)


@pytest.mark.parametrize("cap", [0, 1, 5, 17, 40])
def test_with_cap_lowering_equals_direct_histogram(cap):
    values = np.random.default_rng(cap).integers(-2, 60, 400)
    assert hist_of(values, 40).with_cap(cap) == hist_of(values, cap)


@given(st.lists(st.integers(-3, 300), max_size=200), st.integers(0, 320))
@settings(max_examples=150, deadline=None)
def test_the_numbers_read_from_the_present_bins_are_the_whole_bins(values, cap):
    """tokens, min, max, valid, the percentiles and a lowered cap, read through `present`,
    against the same numbers computed over every bin (and the values themselves)."""
    import pickle
    from fractions import Fraction
    from math import ceil

    h = hist_of(values, cap)
    valid = sorted(v for v in values if v >= 0)
    assert (h.valid, h.tokens, h.min, h.max) == (len(valid), sum(valid), min(valid, default=None),
                                                 max(valid, default=None))
    assert h.valid == int(h.counts.sum()) + h.above_count
    assert h.tokens == int(h.counts @ np.arange(h.cap + 1)) + h.above_tokens
    cum = np.cumsum(h.counts)
    for k, v in h.percentiles().items():
        rank = max(1, ceil(Fraction(k[1:]) * len(valid) / 100))
        if valid and rank <= cum[-1]:
            assert v == int(np.searchsorted(cum, rank))
    for low in {0, cap // 2, max(cap - 1, 0)}:
        assert h.with_cap(low) == hist_of(values, low)
    assert not any(a.flags.writeable for a in h.present)
    for protocol in (4, 5):  # (4: the bins come back as a fresh array)
        copy = pickle.loads(pickle.dumps(h, protocol=protocol))
        assert copy == h and "present" in h.__dict__ and "present" not in copy.__dict__
        assert not copy.counts.flags.writeable
        before = copy.counts.copy()
        merge([copy, h])  # a sum never writes into its first histogram's bins
        assert np.array_equal(copy.counts, before)


def test_dict_and_file_round_trip(tmp_path):
    h = hist_of([0, 5, 5, 9, 100, -4], cap=10)
    assert LengthHistogram.from_dict(h.to_dict()) == h
    h.save(tmp_path / "h.json")
    assert LengthHistogram.load(tmp_path / "h.json") == h


def test_saved_histograms_are_known_by_their_schema_tag(tmp_path):
    h = hist_of([0, 5, 5, 9, 100, -4], cap=10)
    h.save(tmp_path / "h.json")
    assert (tmp_path / "h.json").read_text().startswith('{"schema": "gpu-profiler/histogram/v1"')
    assert LengthHistogram.is_saved(tmp_path / "h.json")
    legacy = {k: v for k, v in h.to_dict().items() if k != "schema"}  # written before v1
    (tmp_path / "old.json").write_text(json.dumps(legacy))
    assert LengthHistogram.is_saved(tmp_path / "old.json")
    assert LengthHistogram.load(tmp_path / "old.json") == h
    # a JSONL corpus starts with "{" too; a FIFO is never opened (it would block)
    (tmp_path / "c.jsonl").write_text('{"length": 5}\n{"length": 7}\n')
    os.mkfifo(tmp_path / "fifo")
    for path in ("c.jsonl", "fifo", "missing"):
        assert not LengthHistogram.is_saved(tmp_path / path)
    (tmp_path / "v9.json").write_text(json.dumps({**h.to_dict(), "schema": "x/v9"}))
    with pytest.raises(ProfilerError, match="v9.json.*schema"):
        LengthHistogram.load(tmp_path / "v9.json")


def test_load_rejects_garbage(tmp_path):
    (tmp_path / "x.json").write_text("{not json")
    with pytest.raises(ProfilerError, match="x.json"):
        LengthHistogram.load(tmp_path / "x.json")


def test_counts_are_read_only():
    h = hist_of([1, 2], 3)
    with pytest.raises(ValueError):
        h.counts[0] = 5


def nearest_rank(values, q):
    """Brute force: sort, take the ceil(q% of n)-th (at least the first), exactly."""
    from fractions import Fraction

    s = sorted(values)
    rank = max(1, -(-Fraction(str(q)) * len(s) // 100))
    return s[int(rank) - 1]


@settings(max_examples=200, deadline=None)
@given(values=st.lists(st.integers(0, 300), min_size=1, max_size=60),
       q=st.sampled_from([0, 1, 10, 25, 50, 90, 95, 99, 99.9, 100]))
def test_percentile_is_the_nearest_rank(values, q):
    h = hist_of(values, cap=300)
    assert h.percentile(q) == nearest_rank(values, q)
    assert h.percentile_range(q) == (nearest_rank(values, q),) * 2


def test_percentiles_equal_numpys_on_random_corpora():
    """numpy's ``inverted_cdf`` is the same definition (in floats: sizes where q% of n is
    an integer, as 99.9% of 1000, can round up there); lengths above max_seq_len count."""
    rng = np.random.default_rng(16)
    for n in (1, 7, 1001, 12_345):
        x = rng.lognormal(7, 1.2, n).astype(np.int64)
        h = hist_of(x, cap=int(x.max()))  # what a scan bins: the whole range
        want = np.percentile(x, [50, 90, 95, 99, 99.9], method="inverted_cdf")
        assert list(h.percentiles().values()) == [int(v) for v in want]
        assert (h.min, h.max) == (x.min(), x.max()) and h.mean == pytest.approx(x.mean())


def test_percentiles_above_cap_are_exact_at_the_ends_and_bounded_between():
    h = hist_of([1, 2, 3, 4, 5, 100, 200], cap=4)
    assert h.percentile_range(70) == (5, 5)  # the shortest above cap
    assert h.percentile_range(80) == (5, 200) and h.percentile(80) is None
    assert h.percentile(100) == 200  # the longest
    assert h.percentiles()["p50"] == 4


def test_percentiles_of_nothing_are_none():
    h = hist_of([-1], cap=3)
    assert h.percentiles() == dict.fromkeys(PERCENTILES) and h.mean is None
    with pytest.raises(ValueError, match="0..100"):
        h.percentile(101)


def test_percentiles_are_exact_where_numpys_float_rank_is_off_by_one():
    """p99.9 of 300,000 samples is the 299,700th shortest; numpy's inverted_cdf computes
    that rank in floating point and can take the next sample."""
    from fractions import Fraction

    rng = np.random.default_rng(0)
    rng.integers(1, 100_000, 300_000)  # (the first draw has no off-by-one)
    x = np.sort(rng.integers(1, 100_000, 300_000))
    h = get_backend("numpy").histogram_chunk(Chunk(x), int(x.max()))
    for q in ("50", "90", "99", "99.9"):
        rank = -(-Fraction(q) * x.size // 100)
        assert h.percentile(q) == x[int(rank) - 1], q
    assert np.percentile(x, 99.9, method="inverted_cdf") != h.percentile("99.9")
