"""Documents of flat token streams (`gpu_profiler.chunk.Documents`) on every backend: random
token streams cut into random chunks give, on numpy, numba (native and JIT) and cuda, the
histogram of the documents a plain Python loop finds, bit for bit. The cuda cases run on a
GPU when there is one, and under numba's CUDA simulator in a process of their own
(`test_cuda_cases_run_under_the_simulator`)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import SIMULATED, scaled
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from gpu_profiler import get_backend
from gpu_profiler.chunk import Chunk, Documents

REF = get_backend("numpy")
EOT = 3


def python_documents(tokens: list[int], eot: int, start: bool) -> list[int]:
    """Document lengths, the slow obvious way: a document is its tokens and its one EOT,
    which ends it (``start`` false) or begins it (``start`` true); a run with no EOT at the
    stream's end (or start) is a document too."""
    out: list[int] = []
    current = 0
    for t in tokens:
        if start and t == eot:
            if current:
                out.append(current)
            current = 0
        current += 1
        if not start and t == eot:
            out.append(current)
            current = 0
    if current:
        out.append(current)
    return out


def stream_chunks(x: np.ndarray, cuts: list[int], eot: int, start: bool) -> list[Chunk]:
    """``x`` cut at ``cuts`` into chunks, each carrying its place in the stream (the way
    the token reader makes them); empty chunks included."""
    edges = [0, *sorted(cuts), x.size]
    docs = Documents(eot, start=start, last=False)
    out = []
    for k, (a, b) in enumerate(zip(edges[:-1], edges[1:], strict=True)):
        here = Documents(eot, start, docs.carry, last=k == len(edges) - 2)
        out.append(Chunk(x[a:b], docs=here))
        docs = here.following(x[a:b])
    return out


@st.composite
def streams(draw, max_tokens=3000):
    """A token stream (uint16 or uint32) whose EOTs are dense, sparse or absent, cut into
    up to 6 chunks at random places."""
    dtype = draw(st.sampled_from([np.uint16, np.uint32]))
    vocab = draw(st.sampled_from([4, 30, 2000]))  # EOT = 3: one id in 4, 30 or 2000
    n = draw(st.integers(0, scaled(max_tokens, max_tokens // 10)))
    x = draw(hnp.arrays(dtype, n, elements=st.integers(0, vocab - 1)))
    if draw(st.booleans()) and n:  # long runs of EOTs, or an EOT at either end
        x[draw(st.sampled_from([0, n - 1]))] = EOT
    cuts = draw(st.lists(st.integers(0, n), max_size=6))
    start = draw(st.booleans())
    return x, cuts, start


def histogram_of(lengths: list[int], cap: int | None):
    longest = max(lengths, default=0)
    return REF.histogram_chunk(Chunk(np.array(lengths, np.int64)),
                               longest if cap is None else cap)


@settings(max_examples=300, deadline=None)
@given(stream=streams())
def test_numpy_reference_matches_a_python_loop(stream):
    x, cuts, start = stream
    want = python_documents(x.tolist(), EOT, start)
    chunks = stream_chunks(x, cuts, EOT, start)
    got = [int(v) for c in chunks for v in c.docs.lengths(c.data)]
    assert got == want
    assert sum(got) == x.size  # every token in exactly one document


@settings(max_examples=scaled(200, 8), deadline=None)
@given(stream=streams(), cap=st.sampled_from([None, 0, 1, 7, 100, 8192]))
def test_every_backend_matches_a_python_loop(backend, stream, cap):
    x, cuts, start = stream
    want = histogram_of(python_documents(x.tolist(), EOT, start), cap)
    chunks = stream_chunks(x, cuts, EOT, start)
    assert backend.histogram(iter(chunks), cap) == want


@settings(max_examples=scaled(60, 4), deadline=None)
@given(stream=streams(max_tokens=2000), cap=st.sampled_from([None, 5, 8192]))
def test_backend_splits_chunks_anywhere(backend, stream, cap):
    """The pieces a backend splits a chunk into (numba's blocks, one per thread; cuda's
    staging pieces) start inside documents anywhere: the result never changes."""
    from gpu_profiler.backends import numba_backend

    x, cuts, start = stream
    want = histogram_of(python_documents(x.tolist(), EOT, start), cap)
    chunks = stream_chunks(x, cuts, EOT, start)
    with pytest.MonkeyPatch.context() as mp:
        split = backend
        if backend.name == "numba":
            mp.setattr(numba_backend, "_MIN_BLOCK", 7)
            split = get_backend("numba", threads=5)
        elif backend.name == "cuda":
            split = get_backend("cuda", chunk_bytes=64)  # 32 uint16 or 16 uint32 ids a piece
        assert split.histogram(iter(chunks), cap) == want


def test_documents_spanning_many_chunks_and_blocks(backend):
    """A 3M-token stream (600 for the simulator) of documents from 1 token to longer than
    a chunk, cut into 30 chunks (6): the same histogram as one chunk."""
    rng = np.random.default_rng(11)
    n = scaled(3_000_000, 600)
    lengths = np.minimum(rng.geometric(1 / rng.choice([3, 800, 300_000], 200), 200), n)
    x = rng.integers(4, 50_000, n).astype(np.uint16)
    x[np.cumsum(lengths)[np.cumsum(lengths) < n]] = EOT
    cuts = list(range(0, n, n // scaled(30, 6)))
    for start in (False, True):
        want = REF.histogram_chunk(Chunk(x, docs=Documents(EOT, start)), 8192)
        got = backend.histogram(iter(stream_chunks(x, cuts, EOT, start)), 8192)
        assert got == want
        assert got.valid == len(python_documents(x.tolist(), EOT, start))


def test_documents_across_tiles_and_blocks(backend):
    """One chunk of many CUDA tiles (512 ids each under the simulator, 4096 on a GPU; more
    tiles than blocks): documents shorter than a tile, as long as a few, and longer than
    the grid's sweep, so the search back from a tile for the cut before it runs from one
    id to several tiles; the same with chunk starts inside documents (a carry)."""
    rng = np.random.default_rng(12)
    n = scaled(400_000, 2600)
    cut = [n // 3, n // 3 + 1, 2 * n // 3]
    for i, every in enumerate((3, 700, 1500, 100_000)):
        x = rng.integers(4, 60_000, n).astype(np.uint16)
        x[rng.random(n) < 1 / every] = EOT
        # the simulator (3 s a scan) gives each stream one of the four ways (EOT position
        # by chunk cuts), not all of them
        ways = [(i % 2 == 1, cut if i // 2 else [])] if SIMULATED else \
            [(s, c) for s in (False, True) for c in ([], cut)]
        for start, cuts in ways:
            want = histogram_of(python_documents(x.tolist(), EOT, start), 2000)
            assert backend.histogram(iter(stream_chunks(x, cuts, EOT, start)), 2000) == want


def test_a_stream_without_an_eot_is_one_document(backend):
    x = np.full(scaled(100_000, 400), 9, np.uint32)
    for start in (False, True):
        h = backend.histogram(iter(stream_chunks(x, [5, 300], EOT, start)), 100)
        assert (h.valid, h.above_count, h.above_max) == (1, 1, x.size)


def test_empty_streams_have_no_documents(backend):
    for cuts in ([], [0, 0]):
        h = backend.histogram(iter(stream_chunks(np.zeros(0, np.uint16), cuts, EOT, True)), 9)
        assert h.valid == 0


def test_int32_ids_read_as_uint32(backend):
    """An .npy of int32 ids is handed over as is: the kernels see the same bits as uint32."""
    x = np.array([5, EOT, -7, -7, EOT, 1], np.int32)
    chunk = Chunk(x, docs=Documents(EOT))
    assert backend.histogram_chunk(chunk, 10).counts[[2, 3, 1]].tolist() == [1, 1, 1]


def test_a_token_chunk_counts_no_samples_before_it_is_histogrammed():
    """Documents are found by the backend: the chunk says 0 (progress counts them after)."""
    assert Chunk(np.array([1, EOT, 2], np.uint16), docs=Documents(EOT)).samples == 0


def test_the_carry_search_looks_back_about_a_document():
    """`Documents.last_cut` searches back from the end: a chunk costs its last document,
    not its size (a view of a huge array is searched only near its end)."""
    x = np.zeros(1 << 26, np.uint16)  # 128 MiB of ids, one EOT near the end
    x[-10] = EOT
    assert Documents(EOT).last_cut(x) == x.size - 9
    assert Documents(EOT, start=True).last_cut(x) == x.size - 10
    assert Documents(EOT).last_cut(x[:-10]) == -1
    head, tail = Documents(EOT, carry=4).split(x, x.size - 100)
    assert (head.last, tail.carry, tail.last) == (False, 4 + x.size - 100, True)


@pytest.mark.cudasim
@pytest.mark.skipif(SIMULATED, reason="already under the simulator")
def test_cuda_cases_run_under_the_simulator():
    """This file's cuda cases rerun under numba's CUDA simulator, in a process of their
    own (the simulator switches the whole process), so CI runs the CUDA document kernels
    on every case the CPU backends run."""
    pytest.importorskip("numba_cuda")
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1"}
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        "-k", "cuda and not simulator", str(Path(__file__))],
                       env=env, capture_output=True, text=True, timeout=900)
    tail = p.stdout.strip().splitlines()[-1] if p.stdout.strip() else p.stderr[-2000:]
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]
    passed = re.search(r"(\d+) passed", tail)
    assert passed and int(passed.group(1)) >= 7 and "skipped" not in tail, tail
