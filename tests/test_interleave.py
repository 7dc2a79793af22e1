"""The interleaving planner: least runs, even spread, every bucket ending together, against
the lower bound and an exhaustive search; with sources (classes of buckets), their runs
against an exhaustive search too."""

from __future__ import annotations

import math
from functools import cache

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_profiler import ProfilerError
from gpu_profiler.analysis.interleave import class_run, early_buckets, interleave, min_run


def longest_run(order: np.ndarray) -> int:
    if not order.size:
        return 0
    change = np.flatnonzero(np.diff(order) != 0)
    return int(np.diff(np.concatenate(([-1], change, [order.size - 1]))).max())


def lower_bound(counts: list[int]) -> int:
    """The issue's bound, computed independently: the other batches leave N - m + 1 gaps."""
    n = sum(counts)
    return max((math.ceil(m / (n - m + 1)) for m in counts if m), default=0)


def spread(order: np.ndarray, counts: list[int]) -> float:
    """The furthest any bucket's running count strays from its share t * m / N."""
    n = order.size
    t = np.arange(1, n + 1)
    return max((float(np.abs(np.cumsum(order == b) - t * m / n).max())
                for b, m in enumerate(counts) if m), default=0.0)


# Count vectors the way corpora make them: one bucket with up to 99% of the batches, many
# tiny buckets, equal buckets, empty buckets.
dominant = st.builds(lambda big, rest: [big, *rest], st.integers(1, 20_000),
                     st.lists(st.integers(0, 60), max_size=8))
tiny = st.lists(st.integers(0, 3), min_size=1, max_size=40)
equal = st.builds(lambda m, k: [m] * k, st.integers(0, 500), st.integers(1, 12))
anything = st.lists(st.integers(0, 2_000), max_size=10)
vectors = st.one_of(dominant, tiny, equal, anything,
                    st.builds(lambda v: [0, 0, *v, 0], anything))


@settings(max_examples=400, deadline=None)
@given(counts=vectors, slack=st.sampled_from([0, 0, 1, 3]))
def test_least_run_exhaustion_and_spread(counts, slack):
    least = lower_bound(counts)
    assert min_run(counts) == least
    cap = least + slack if slack and least else None
    order = interleave(counts, cap)
    assert np.bincount(order, minlength=len(counts)).tolist() == counts  # each batch once
    assert longest_run(order) == least if cap is None else longest_run(order) <= cap
    buckets = sum(1 for m in counts if m)
    assert spread(order, counts) <= max((cap or least) + buckets - 1, 0)
    assert np.array_equal(order, interleave(counts, cap))  # deterministic


@cache
def ends_fit(counts: tuple[int, ...], cap: int, tail: int) -> bool:
    """Exhaustive search: is there an order with runs <= cap whose last ``tail`` batches
    hold every bucket's last batch?"""
    n = sum(counts)

    @cache
    def go(left: tuple[int, ...], last: int, run: int) -> bool:
        t = n - sum(left)
        if t == n:
            return True
        for b, r in enumerate(left):
            if not r or (b == last and run == cap) or (r == 1 and t < n - tail):
                continue
            nxt = left[:b] + (r - 1,) + left[b + 1:]
            if go(nxt, b, run + 1 if b == last else 1):
                return True
        return False

    return go(counts, -1, 0)


@settings(max_examples=300, deadline=None)
@given(counts=st.lists(st.integers(0, 7), min_size=1, max_size=4).map(
           lambda v: [v[0] + 8, *v[1:]] if len(v) < 3 else v),
       extra=st.integers(0, 2), tail_pct=st.sampled_from([10, 20, 30]))
def test_every_bucket_ends_in_the_tail_whenever_some_order_can(counts, extra, tail_pct):
    if not sum(counts):
        return
    cap = lower_bound(counts) + extra
    order = interleave(counts, cap)
    tail = max(1, math.ceil(sum(counts) * tail_pct / 100))
    if ends_fit(tuple(counts), cap, tail):
        assert early_buckets(order, len(counts), tail) == []


def test_the_issue_corpora():
    # A 72% bucket: runs of 3 (the least), not the 10 the old stride order made.
    counts = [210, 420, 660, 900, 1300, 9000]
    order = interleave(counts)
    assert longest_run(order) == lower_bound(counts) == 3
    assert early_buckets(order, len(counts)) == []
    # 53.5% of 11,951 batches: 2; 47%: 1.
    for share, least in ((0.535, 2), (0.47, 1)):
        big = round(11_951 * share)
        rest = 11_951 - big
        counts = [big, rest // 3, rest // 3, rest - 2 * (rest // 3)]
        order = interleave(counts)
        assert longest_run(order) == least


def test_infeasible_max_run_names_the_minimum():
    with pytest.raises(ProfilerError, match=r"--max-run 2 is infeasible.*at least 3"):
        interleave([720, 100, 100, 80], 2)
    for bad in (0, -1, True, 2.5):
        with pytest.raises(ProfilerError, match="--max-run must be a positive integer"):
            interleave([3, 3], bad)


def test_degenerate_vectors():
    assert interleave([]).size == 0 and interleave([0, 0]).size == 0
    assert interleave([5]).tolist() == [0] * 5 and min_run([5]) == 5
    with pytest.raises(ProfilerError, match="non-negative integers"):
        interleave([3, -1])


@cache
def least_class_run(counts: tuple[int, ...], classes: tuple[int, ...], cap: int) -> int:
    """Exhaustive search: the shortest longest run of one class's batches (-1: no class)
    over every order whose same-bucket runs are at most ``cap``."""
    @cache
    def go(left: tuple[int, ...], last: int, run: int, crun: int) -> int:
        if not any(left):
            return 0
        best = 1 << 30
        for b, r in enumerate(left):
            if not r or (b == last and run == cap):
                continue
            c = classes[b]
            nc = 0 if c < 0 else crun + 1 if last >= 0 and classes[last] == c else 1
            nxt = left[:b] + (r - 1,) + left[b + 1:]
            best = min(best, max(nc, go(nxt, b, run + 1 if b == last else 1, nc)))
        return best

    return go(counts, -1, 0, 0)


def runs_of(order: np.ndarray, classes: list[int]) -> int:
    """The longest run of one class in ``order``, counted here independently."""
    best = run = 0
    prev = None
    for b in order.tolist():
        c = classes[b]
        run = 0 if c < 0 else run + 1 if c == prev else 1
        prev, best = c, max(best, run)
    return best


@settings(max_examples=400, deadline=None)
@given(counts=st.lists(st.integers(0, 6), min_size=2, max_size=5),
       labels=st.lists(st.sampled_from([-1, 0, 1, 7]), min_size=5, max_size=5),
       slack=st.sampled_from([0, 0, 1]))
def test_sources_run_no_longer_than_in_any_order(counts, labels, slack):
    """Small epochs: the longest run of one source's batches is the least any order with
    the same cap on same-bucket runs can have (exhaustive search)."""
    if not 0 < sum(counts) <= 16:
        return
    classes = labels[:len(counts)]
    least = lower_bound(counts)
    cap = least + slack if slack else None
    order = interleave(counts, cap, classes)
    assert np.bincount(order, minlength=len(counts)).tolist() == counts
    assert longest_run(order) <= (cap or least)
    best = least_class_run(tuple(counts), tuple(classes), cap or least)
    assert runs_of(order, classes) == class_run(order, np.array(classes)) == best
    assert np.array_equal(order, interleave(counts, cap, classes))  # deterministic


@settings(max_examples=150, deadline=None)
@given(counts=st.one_of(dominant, anything, tiny),
       labels=st.lists(st.integers(-1, 3), min_size=41, max_size=41))
def test_sources_never_run_longer_than_without_them(counts, labels):
    """Any epoch: the same cap on same-bucket runs, every batch once, and runs of one
    source no longer than the order that ignores the sources."""
    classes = labels[:len(counts)]
    order = interleave(counts, None, classes)
    assert np.bincount(order, minlength=len(counts)).tolist() == counts
    assert longest_run(order) == lower_bound(counts)
    assert runs_of(order, classes) <= runs_of(interleave(counts), classes)


def test_sources_interleaved_on_a_three_source_mix():
    """Code makes the two short buckets' batches, web the two longest, the middle ones are
    mixed: ignoring sources the stride runs 3 batches of one in a row, with them 1 (the
    least), and the buckets keep their least run and their common end."""
    counts = [120, 260, 90, 180, 150, 200]
    classes = [1, 1, -1, -1, 0, 0]
    plain, mixed = interleave(counts), interleave(counts, None, classes)
    n, code = sum(counts), 380
    assert runs_of(mixed, classes) == math.ceil(code / (n - code + 1)) == 1
    assert runs_of(plain, classes) == 3
    assert longest_run(mixed) == longest_run(plain) == lower_bound(counts)
    assert early_buckets(mixed, len(counts)) == []
    with pytest.raises(ProfilerError, match="one per bucket"):
        interleave(counts, None, classes[:-1])
