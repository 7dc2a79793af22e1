"""The CUDA kernels and the cuda backend under numba's CUDA simulator, against the numpy
reference, bit for bit: every kernel, both histogram paths, every integer dtype, chunk and
piece boundaries, nulls, negatives, above-cap values, cap=None growth, data already "on the
device", several lanes, and the public API and CLI as a user runs them.

How the simulator is arranged: ``NUMBA_ENABLE_CUDASIM`` must be set before ``numba.cuda`` is
first imported, and it switches the whole process. So this module never sets it in the test
process: the simulator runs in one spawned worker process (started with the variable set,
shared by the module's tests), and the CLI tests run ``gpu-profiler`` in a subprocess with it
set. The test process keeps the real ``numba.cuda`` for the PTX and real-GPU tests. Do not
export ``NUMBA_ENABLE_CUDASIM=1`` for the whole suite.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import re
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from gpu_profiler import histogram, profile
from gpu_profiler.backends.numpy_backend import NumpyBackend
from gpu_profiler.chunk import Chunk
from gpu_profiler.errors import ProfilerError

pytestmark = pytest.mark.cudasim
SIM_ENV = "NUMBA_ENABLE_CUDASIM"


# ---------------------------------------------------------------- worker-side functions
def _is_simulated() -> bool:
    from gpu_profiler.backends.cuda_backend import probe, simulated

    return simulated() and probe() is None


def _backend_hist(chunks, cap, options):
    """Run CudaBackend.histogram in the simulator; also return the kernel launch counts."""
    from gpu_profiler.backends.cuda_backend import CudaBackend

    backend = CudaBackend(**options)
    hist = backend.histogram([Chunk(d, v, o) for d, v, o in chunks], cap)
    return hist, dict(backend.launches)


def _reuse_after_error(good, cap):
    """A failed histogram() (its reader fails mid-scan, as on a corrupt shard) leaves
    nothing behind in the backend for the next one."""
    from gpu_profiler.backends.cuda_backend import CudaBackend

    def failing():
        yield Chunk(good)
        yield Chunk(good * 1000)  # widens the auto cap first
        raise ProfilerError("shard 2: corrupt")

    backend = CudaBackend()
    try:
        backend.histogram(failing(), None)
    except ProfilerError as exc:
        error = str(exc)
    return error, backend.histogram([Chunk(good)], cap)


def _backend_max(data, valid, offsets):
    from gpu_profiler.backends.cuda_backend import CudaBackend

    return CudaBackend(chunk_bytes=256).max_length(Chunk(data, valid, offsets))


def _device_source_hist(data, cap, backend="cuda"):
    """histogram() of an array already in (simulated) device memory."""
    from numba import cuda

    return histogram(cuda.to_device(data), backend=backend, cap=cap)


def _api_profile(source, kwargs):
    return profile(source, backend="cuda", **kwargs).to_dict()


# ---------------------------------------------------------------- fixtures and helpers
@pytest.fixture(scope="module")
def sim():
    """One worker process with the simulator on (see the module docstring)."""
    pytest.importorskip("numba_cuda")
    old = os.environ.get(SIM_ENV)
    os.environ[SIM_ENV] = "1"
    pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
    try:  # the worker starts on the first submit and inherits the variable
        assert pool.submit(_is_simulated).result(timeout=300)
    finally:
        if old is None:
            del os.environ[SIM_ENV]
        else:
            os.environ[SIM_ENV] = old
    yield pool
    pool.shutdown()


def call(pool, fn, *args):
    return pool.submit(fn, *args).result(timeout=600)


def reference(chunks, cap):
    return NumpyBackend().histogram([Chunk(d, v, o) for d, v, o in chunks], cap)


def assert_same(got, exp):
    assert got.cap == exp.cap
    np.testing.assert_array_equal(got.counts, exp.counts)
    assert got._scalars() == exp._scalars()


def lengths(rng, n, dtype, cap):
    """Values spanning the dtype: negatives (when signed), 0, cap, cap+1, above cap."""
    info = np.iinfo(dtype)
    lo = max(info.min, -3 * cap) if info.min < 0 else 0
    x = rng.integers(lo, min(info.max, 3 * cap), n, endpoint=True).astype(dtype)
    special = [0, cap, cap + 1, info.max, info.min if info.min < 0 else 1]
    x[: len(special)] = np.array([min(s, info.max) for s in special], dtype=dtype)
    return x


DTYPES = [np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64]
CASES = [(d, "shared") for d in DTYPES] + [
    (d, "global") for d in (np.int8, np.uint16, np.int32, np.int64, np.uint64)]


# ---------------------------------------------------------------- kernels via the backend
@pytest.mark.parametrize(("dtype", "path"), CASES,
                         ids=[f"{np.dtype(d).name}-{p}" for d, p in CASES])
def test_values_every_dtype_both_paths(sim, dtype, path):
    rng = np.random.default_rng(np.dtype(dtype).itemsize * 10 + (path == "global"))
    cap = 100
    x = lengths(rng, 700, dtype, cap)
    valid = rng.random(700) > 0.15
    chunks = [(x, valid, False), (x[:37], None, False), (x[37:38], None, False)]
    options = {"chunk_bytes": 512}  # several pieces per chunk: piece boundaries
    if path == "global":
        options["shared_mem_budget"] = 64  # bins cannot fit: forces the global kernel
    got, launches = call(sim, _backend_hist, chunks, cap, options)
    assert_same(got, reference(chunks, cap))
    assert set(launches) == {f"hist_{path}"} and launches[f"hist_{path}"] >= 4


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint64])
@pytest.mark.parametrize("path", ["shared", "global"])
def test_offsets_fused_kernel(sim, dtype, path):
    rng = np.random.default_rng(7)
    lens = rng.integers(0, 400, 900)
    lens[::50] = 0
    off = np.concatenate([[5], 5 + np.cumsum(lens)]).astype(dtype)  # not starting at 0
    valid = rng.random(900) > 0.1
    chunks = [(off, valid, True), (off[100:260], None, True)]
    options = {"chunk_bytes": 512, **({"shared_mem_budget": 64} if path == "global" else {})}
    got, launches = call(sim, _backend_hist, chunks, 250, options)
    assert_same(got, reference(chunks, 250))
    assert set(launches) == {f"hist_{path}"}


def test_decreasing_offsets_are_invalid(sim):
    off = np.array([0, 10, 4, 4, 2**40, 7], np.int64)  # lengths 10, -6, 0, huge, negative
    chunks = [(off, None, True)]
    got, _ = call(sim, _backend_hist, chunks, 16, {})
    assert_same(got, reference(chunks, 16))
    assert got.invalid_count == 2 and got.above_count == 1


def test_cap_none_grows_across_chunks_and_pieces(sim):
    rng = np.random.default_rng(3)
    a = rng.integers(-4, 50, 300).astype(np.int32)
    b = rng.integers(0, 900, 300).astype(np.int64)
    lens = rng.integers(0, 70, 200)
    off = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    for chunks in ([(a, None, False), (b, rng.random(300) > 0.3, False)], [(off, None, True)]):
        got, launches = call(sim, _backend_hist, chunks, None, {"chunk_bytes": 256})
        exp = reference(chunks, None)
        assert_same(got, exp)
        assert got.cap == exp.max and launches["max_length"] >= 2


def test_edge_cases(sim):
    wrap = np.array([2**62, 2**62, 2**62, 5, -1, 2**63 - 1], np.int64)  # token sum wraps
    cases = [
        [],
        [(np.zeros(0, np.int32), None, False)],
        [(np.arange(5, dtype=np.int64), np.zeros(5, bool), False)],  # all null
        [(np.array([0], np.int64), None, True)],  # one offset: no sample
        [(wrap, None, False)],
        [(wrap.view(np.uint64), None, False)],  # >= 2**63 read as int64: invalid
        [(np.full(33, -7, np.int16), None, False)],  # only invalid
    ]
    for chunks in cases:
        huge = any(d.size and d.astype(np.int64).max() > 1 << 16 for d, _, _ in chunks)
        for cap in (10,) if huge else (10, None):  # huge auto caps: test_backends
            exp = reference(chunks, cap)
            got, _ = call(sim, _backend_hist, chunks, cap, {})
            assert_same(got, exp)


def test_backend_reusable_after_error(sim):
    good = np.arange(-2, 40, dtype=np.int32)
    error, got = call(sim, _reuse_after_error, good, 30)
    assert error == "shard 2: corrupt"
    assert_same(got, reference([(good, None, False)], 30))


def test_max_length_kernel(sim):
    rng = np.random.default_rng(11)
    x = rng.integers(-100, 5000, 800).astype(np.int32)
    valid = rng.random(800) > 0.5
    exp = int(x[valid].max())
    x[~valid] = 10**6  # nulls never count
    assert call(sim, _backend_max, x, valid, False) == exp
    assert call(sim, _backend_max, np.full(9, -3, np.int64), None, False) == -1
    off = np.array([0, 3, 3, 40, 41], np.uint32)
    assert call(sim, _backend_max, off, None, True) == 37


def test_bigger_input_default_pieces(sim):
    """20k samples through the default configuration (one piece, a full grid)."""
    rng = np.random.default_rng(5)
    x = np.clip(rng.lognormal(np.log(400), 1.2, 20_000), -5, 60_000).astype(np.int64)
    x[::97] = -1
    chunks = [(x, rng.random(x.size) > 0.02, False)]
    got, launches = call(sim, _backend_hist, chunks, 8192, {})
    assert_same(got, reference(chunks, 8192))
    assert launches == {"hist_shared": 1}


# ---------------------------------------------------------------- public API, as a user
def test_device_resident_source(sim):
    rng = np.random.default_rng(2)
    x = rng.integers(-3, 3000, 1500).astype(np.int32)
    got = call(sim, _device_source_hist, x, 2048)
    assert_same(got, histogram(x, backend="numpy", cap=2048))
    with pytest.raises(ProfilerError, match="^<device array> is in GPU memory: use the cuda "
                                            "backend, not 'numba'$"):
        call(sim, _device_source_hist, x, 2048, "numba")


def _profile_equal(got: dict, exp: dict) -> None:
    for key in ("seconds", "backend"):
        got.pop(key), exp.pop(key)
    assert got == exp


@pytest.mark.parametrize("kwargs", [
    {}, {"offsets_of": "input_ids", "max_seq_len": 4096},
    {"backend_options": {"devices": [0, 0], "chunk_bytes": 2048}},
], ids=["length", "offsets", "two-lanes"])
def test_profile_hf_dir_matches_numpy(sim, hf_dir, kwargs):
    path, _ = hf_dir
    got = call(sim, _api_profile, str(path), kwargs)
    assert got["backend"] == "cuda"
    exp = profile(str(path), backend="numpy",
                  **{k: v for k, v in kwargs.items() if k != "backend_options"}).to_dict()
    _profile_equal(got, exp)


def _cli(args, tmp_path):
    env = {**os.environ, SIM_ENV: "1"}
    exe = Path(sys.executable).with_name("gpu-profiler")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-c",
                                            "from gpu_profiler.cli import main; main()"]
    return subprocess.run(cmd + [str(a) for a in args], env=env, capture_output=True,
                          text=True, timeout=600, cwd=tmp_path)


def test_cli_profile_backend_cuda(sim, hf_dir, tmp_path):
    path, _ = hf_dir
    out = tmp_path / "cuda.json"
    r = _cli(["profile", path, "--backend", "cuda", "--devices", "0,0", "-f", "json", "-q",
              "-o", out], tmp_path)
    assert r.returncode == 0, r.stderr
    got = json.loads(out.read_text())
    exp = profile(str(path), backend="numpy").to_dict()
    _profile_equal(got, exp)


def test_cli_backends_and_bad_device(sim, hf_dir, tmp_path):
    r = _cli(["backends"], tmp_path)
    assert r.returncode == 0 and "cuda   available" in r.stdout
    assert "CUDA simulator" in r.stdout and "48 KiB shared memory per block" in r.stdout
    path, _ = hf_dir
    r = _cli(["profile", path, "--backend", "cuda", "--device", "3", "-q"], tmp_path)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip() == ("gpu-profiler: error: no GPU 3: this machine has 1 "
                                "(device ids 0..0)")


def test_every_backend_case_runs_under_the_simulator():
    """tests/test_backends.py's cases (one body per backend) rerun with the cuda backend
    under the simulator, in a process of their own, so CI runs every case on the CUDA
    kernels that the CPU backends run (a GPU runs them in-process)."""
    env = {**os.environ, SIM_ENV: "1"}
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        "-k", "cuda", str(Path(__file__).parent / "test_backends.py")],
                       env=env, capture_output=True, text=True, timeout=600)
    tail = p.stdout.strip().splitlines()[-1] if p.stdout.strip() else p.stderr[-2000:]
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]
    passed = re.search(r"(\d+) passed", tail)
    assert passed and int(passed.group(1)) >= 8 and "skipped" not in tail, tail
