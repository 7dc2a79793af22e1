"""Every backend matches the numpy reference bit for bit: one test body per case over the
`backend` fixture (numpy, numba native and JIT, and cuda: on a GPU, or under numba's CUDA
simulator when tests/test_cuda_sim.py reruns this file), so a GPU runs every case the CPU
does; then the numba backend's own options and internals."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from conftest import scaled
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from gpu_profiler import ProfilerError, available_backends, get_backend
from gpu_profiler.chunk import Chunk

INT_DTYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]
REF = get_backend("numpy")
NUMBA = get_backend("numba")


@st.composite
def chunks(draw, elements=None):
    dtype = draw(st.sampled_from(INT_DTYPES))
    offsets = draw(st.booleans())
    n = draw(st.integers(0, 300))
    data = draw(hnp.arrays(dtype, n + (1 if offsets else 0), elements=elements))
    if offsets and draw(st.booleans()):
        data = np.sort(data)  # realistic monotone offsets; unsorted ones give negatives
    valid = None
    if draw(st.booleans()):
        valid = draw(hnp.arrays(np.bool_, n))
    return Chunk(data, valid, offsets=offsets)


@st.composite
def small_chunks(draw):
    """Chunks of signed lengths up to 3000 (invalid ones too), with or without nulls."""
    data = draw(hnp.arrays(st.sampled_from([np.int32, np.int64]), st.integers(0, 300),
                           elements=st.integers(-3, 3000)))
    valid = draw(st.none() | hnp.arrays(np.bool_, data.size))
    return Chunk(data, valid)


@settings(max_examples=scaled(300, 15), deadline=None)
@given(chunk=chunks(), cap=st.sampled_from([0, 1, 7, 100, 255, 8192]))
def test_matches_numpy(backend, chunk, cap):
    assert backend.histogram_chunk(chunk, cap) == REF.histogram_chunk(chunk, cap)


def _wrap64(v: int) -> int:
    return (v + 2**63) % 2**64 - 2**63


def _by_hand(chunk: Chunk, cap: int) -> tuple:
    """The histogram's fields from a plain Python loop over the chunk's samples, in int64
    arithmetic (values and offset differences wrap as they do in the kernels)."""
    data = [_wrap64(int(v)) for v in chunk.data]
    n = chunk.samples
    lengths = [_wrap64(data[i + 1] - data[i]) for i in range(n)] if chunk.offsets else data
    valid = [True] * n if chunk.valid is None else [bool(v) for v in chunk.valid]
    kept = [v for v, ok in zip(lengths, valid, strict=True) if ok]
    counts = [0] * (cap + 1)
    above = []
    for v in kept:
        if 0 <= v <= cap:
            counts[v] += 1
        elif v > cap:
            above.append(v)
    return (counts, len(above), _wrap64(sum(above)), min(above, default=-1), max(above, default=-1),
            n - sum(valid), sum(v < 0 for v in kept))


@settings(max_examples=300, deadline=None)
@given(chunk=chunks(), cap=st.sampled_from([0, 1, 7, 100, 255]))
def test_numpy_reference_matches_a_python_loop(chunk, cap):
    h = REF.histogram_chunk(chunk, cap)
    got = (h.counts.tolist(), h.above_count, h.above_tokens, h.above_min, h.above_max,
           h.null_count, h.invalid_count)
    assert got == _by_hand(chunk, cap)


@settings(max_examples=scaled(60, 8), deadline=None)
@given(parts=st.lists(chunks(elements=st.integers(0, 100)), min_size=0, max_size=5))
def test_auto_cap_matches_across_backends(backend, parts):
    a = REF.histogram(iter(parts), None)
    assert backend.histogram(iter(parts), None) == a
    assert a.above_count == 0  # the cap grew to cover every length


@st.composite
def segmented(draw):
    """A chunk whose lengths are pieces of a larger buffer (as read in place)."""
    dtype = draw(st.sampled_from(INT_DTYPES))
    data = draw(hnp.arrays(dtype, draw(st.integers(0, 400))))
    pieces = draw(st.lists(st.tuples(st.integers(0, data.size), st.integers(0, 60)),
                           max_size=8))
    pieces = [(a, min(n, data.size - a)) for a, n in pieces]
    starts = np.array([a for a, _ in pieces], np.int64)
    counts = np.array([n for _, n in pieces], np.int64)
    return Chunk(data, segments=(starts, counts))


@settings(max_examples=scaled(300, 10), deadline=None)
@given(chunk=segmented(), cap=st.sampled_from([0, 1, 7, 100, 255, 8192]))
def test_segmented_chunks(backend, chunk, cap):
    """Backends that take segmented chunks histogram them in place; readers gather them
    for the others."""
    starts, counts = chunk.segments
    plain = Chunk(np.array([v for a, n in zip(starts, counts, strict=True)
                            for v in chunk.data[a:a + n]], chunk.data.dtype))
    np.testing.assert_array_equal(chunk.gathered().data, plain.data)
    assert chunk.samples == plain.samples
    given_chunk = chunk if backend.segmented else chunk.gathered()
    assert backend.histogram_chunk(given_chunk, cap) == REF.histogram_chunk(plain, cap)


def test_segments_outside_the_data_are_refused():
    chunk = Chunk(np.arange(10), segments=(np.array([4]), np.array([7])))
    with pytest.raises(ValueError, match="segments outside"):
        NUMBA.histogram_chunk(chunk, 10)


def test_many_segments_span_many_blocks(kernels):
    x = np.random.default_rng(5).integers(-100, 20_000, 3_000_000).astype(np.int32)
    starts = np.arange(0, x.size - 1000, 1500)
    counts = np.full(starts.size, 1000)
    chunk = Chunk(x, segments=(starts, counts))
    assert NUMBA.histogram_chunk(chunk, 8192) == REF.histogram_chunk(chunk.gathered(), 8192)


@settings(max_examples=scaled(100, 8), deadline=None)
@given(parts=st.lists(hnp.arrays(np.int64, st.integers(0, 50),
                                 elements=st.integers(-3, 5000)), max_size=6))
def test_auto_cap_equals_one_pass_at_the_longest_length(backend, parts):
    """cap=None bins each chunk up to the longest length so far and again when a chunk
    holds a longer one: the result is the histogram of everything at the overall maximum."""
    flat = np.concatenate([np.zeros(0, np.int64), *parts])
    longest = max(int(flat.max()), 0) if flat.size else 0
    want = REF.histogram_chunk(Chunk(flat), longest)
    assert backend.histogram((Chunk(p) for p in parts), None) == want


@settings(max_examples=scaled(100, 8), deadline=None)
@given(parts=st.lists(hnp.arrays(st.sampled_from([np.int64, np.uint32]), st.integers(2, 60),
                                 elements=st.integers(0, 300_000)), min_size=1, max_size=6))
def test_auto_cap_widens_over_offsets_as_numpy(backend, parts):
    """cap=None over chunks of offsets (int64, and uint32 whose negative differences are
    invalid): a later chunk's longer lengths widen the bins (the numba backend bins only
    those again, `_above`) to the numpy reference's result."""
    chunks = [Chunk(np.sort(p) if k % 2 else p, offsets=True) for k, p in enumerate(parts)]
    assert backend.histogram(iter(chunks), None) == REF.histogram(iter(chunks), None)


def test_widening_bins_every_length_past_the_cap(backend):
    """The lengths just past the bins the first chunk sized (and far past them, and below
    them, and a negative difference of uint32 offsets) in a later chunk of values or
    offsets: widened bins hold each once, as numpy's one pass does."""
    from gpu_profiler.backends.numba_backend import _roomy

    top = _roomy(1000)
    for dtype in (np.int64, np.uint32):
        lengths = np.array([top, top + 1, top + 2, 5 * top, 3], np.int64)
        for offsets in (False, True):
            first = np.array([1000, 7], dtype)
            later = lengths.astype(dtype)
            if offsets:
                first = np.concatenate([[0], np.cumsum(first)]).astype(dtype)
                later = np.concatenate([[50, 0], np.cumsum(lengths)]).astype(dtype)
            chunks = [Chunk(first, offsets=offsets), Chunk(later, offsets=offsets)]
            want = REF.histogram(iter(chunks), None)
            assert backend.histogram(iter(chunks), None) == want
            assert all(want.counts[v] == 1 for v in (top, top + 1, top + 2, 5 * top))


def test_auto_cap_is_sized_by_lengths_only(backend):
    """cap=None sizes its bins by the first chunk's lengths (the numba backend by their
    max, before binning them): a value under a null, outside the segments read, an offset
    (its differences are), a negative difference of unsigned offsets or a uint64 past 2**63
    (invalid) is no length, and must not widen them."""
    big = 1 << 20
    x = np.array([3, big, 7, 1], np.int64)
    first = [Chunk(x, np.array([True, False, True, True])),
             Chunk(x, segments=(np.array([2]), np.array([2]))),
             Chunk(np.array([100, 105, 112], np.int64), offsets=True),
             Chunk(np.array([5, 3, 10], np.uint32), offsets=True),  # -2 is no 2**32 - 2
             Chunk(np.array([4, 2**63 + 9], np.uint64)),
             Chunk(np.zeros(3, np.int32))]
    for chunk in first:
        parts = [chunk, Chunk(np.array([2, 30], np.int32))]
        if chunk.segments is not None and not backend.segmented:
            parts[0] = chunk.gathered()
        want = REF.histogram(iter([parts[0].gathered(), parts[1]]), None)
        got = backend.histogram(iter(parts), None)
        assert got == want and got.cap == 30, chunk


@settings(max_examples=60, deadline=None)
@given(parts=st.lists(small_chunks(), min_size=1, max_size=8),
       cap=st.sampled_from([None, 0, 100, 2999]), fold=st.sampled_from([50, 1 << 31]))
def test_numba_tally_over_many_chunks(parts, cap, fold):
    """The numba backend keeps its int32 rows from chunk to chunk: folding them into int64
    before they could overflow (here after every ``fold`` samples) and widening them as
    cap=None finds longer lengths give the numpy reference's result."""
    from gpu_profiler.backends import numba_backend

    want = REF.histogram(iter(parts), cap)
    old = numba_backend.FOLD_AFTER
    numba_backend.FOLD_AFTER = fold
    try:
        for backend in (NUMBA, get_backend("numba", threads=3)):
            assert backend.histogram(iter(parts), cap) == want
        tally, biggest = numba_backend._Tally(2, 3000), 0
        for c in parts:  # no row holds more than the limit (or one chunk, if more)
            tally.add(c)
            biggest = max(biggest, c.samples)
            assert tally.rows.sum(axis=1).max() <= max(fold, biggest)
    finally:
        numba_backend.FOLD_AFTER = old


def test_large_array_spans_many_blocks(backend):
    x = np.random.default_rng(3).integers(-100, 20_000, scaled(3_000_001))
    valid = np.random.default_rng(4).random(x.size) > 0.01
    for c in (Chunk(x), Chunk(x, valid), Chunk(np.cumsum(x % 50), valid[:-1], offsets=True)):
        assert backend.histogram_chunk(c, 8192) == REF.histogram_chunk(c, 8192)


def test_uint64_beyond_int64_counts_as_invalid(backend):
    x = np.array([5, 2**63, 2**64 - 1], dtype=np.uint64)
    h = backend.histogram_chunk(Chunk(x), 10)
    assert (h.invalid_count, h.counts[5], h.valid) == (2, 1, 1)


def test_registry_reports_and_refuses():
    avail = available_backends()
    assert avail["numpy"] is None and avail["numba"] is None
    assert get_backend("auto").name in ("cuda", "numba")
    with pytest.raises(ProfilerError, match="unknown backend 'nope'"):
        get_backend("nope")


def test_auto_cap_stops_at_max_auto_cap(backend, monkeypatch):
    """Lengths past MAX_AUTO_CAP are summarized above it, so memory stays bounded, whether
    they come first or after the cap has grown."""
    monkeypatch.setattr(sys.modules["gpu_profiler.histogram"], "MAX_AUTO_CAP", 100)
    parts = [np.array([5, 1 << 40, 300]), np.array([7, 150, 99]), np.array([101, 3])]
    flat = np.concatenate(parts)
    for order in (parts, parts[::-1]):
        got = backend.histogram((Chunk(p) for p in order), None)
        assert got == REF.histogram_chunk(Chunk(flat), 100)


def test_the_api_and_cli_give_the_same_profile(backend, hf_dir, capsys):
    """A user's run, end to end: every backend reports the same table."""
    import json

    from gpu_profiler import profile
    from gpu_profiler.cli import main

    path, _ = hf_dir
    want = profile(path, backend="numpy", offsets_of="input_ids").to_dict()
    got = profile(path, backend=backend.name, offsets_of="input_ids").to_dict()
    for d in (want, got):
        d.pop("seconds"), d.pop("backend")
    assert got == want
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        main(["profile", str(path), "-q", "-b", backend.name, "-f", "json", "--offsets-of",
              "input_ids"])
    cli = json.loads(capsys.readouterr().out)
    assert exc.value.code == 0 and cli["buckets"] == want["buckets"]


def test_numba_threads_option():
    x = np.random.default_rng(6).integers(-10, 9000, 1_000_000)
    want = REF.histogram_chunk(Chunk(x), 8192)
    for n in (1, 3):
        assert get_backend("numba", threads=n).histogram_chunk(Chunk(x), 8192) == want
    for bad in (0, True, 5000):
        with pytest.raises(ProfilerError, match="threads must be"):
            get_backend("numba", threads=bad)


def test_numba_leaves_the_read_ahead_thread_a_core():
    from gpu_profiler.backends.numba_backend import cores

    assert NUMBA.beside_reader()._threads == max(1, cores() - 1)
    chosen = get_backend("numba", threads=2)
    assert chosen.beside_reader() is chosen  # an explicit choice is kept
    assert REF.beside_reader() is REF
