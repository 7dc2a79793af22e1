"""The cuda backend outside the simulator: what a user sees without a GPU or without the
``[gpu]`` extra (one clear line, exit code 2), option parsing, and - marked ``gpu``, run only
where a real device exists - the real kernels and pipeline against the numpy reference."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from gpu_profiler import histogram, profile
from gpu_profiler.backends.cuda_backend import probe, simulated
from gpu_profiler.backends.numpy_backend import NumpyBackend
from gpu_profiler.chunk import Chunk
from gpu_profiler.cli import main

REASON = probe()
HAVE_GPU = REASON is None and not simulated()
gpu = pytest.mark.gpu
needs_gpu = pytest.mark.skipif(not HAVE_GPU, reason=f"no CUDA device: {REASON}")


def run(args, capsys):
    with pytest.raises(SystemExit) as exc:
        main([str(a) for a in args])
    out, err = capsys.readouterr()
    return exc.value.code, out, err


# ---------------------------------------------------------------- without a GPU / extra
@pytest.mark.skipif(HAVE_GPU, reason="a GPU is present")
def test_backend_cuda_without_gpu_is_one_line_exit_2(hf_dir, capsys):
    path, _ = hf_dir
    rc, out, err = run(["profile", path, "--backend", "cuda", "-q"], capsys)
    assert rc == 2 and out == ""
    assert err == f"gpu-profiler: error: backend 'cuda' is not available: {REASON}\n"
    rc, out, _ = run(["backends"], capsys)
    assert rc == 0 and f"cuda   unavailable: {REASON}" in out


def test_without_numba_cuda(tmp_path):
    """No ``[gpu]`` extra: the package imports, --help works, cuda says why it is missing."""
    script = textwrap.dedent("""
        import sys
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name == "numba_cuda" or name.startswith(("numba_cuda.", "numba.cuda")):
                    raise ModuleNotFoundError(name)
        sys.meta_path.insert(0, Block())
        import gpu_profiler
        from gpu_profiler.backends import available_backends
        print(available_backends()["cuda"])
        from gpu_profiler.cli import main
        main(sys.argv[1:])
    """)
    r = subprocess.run([sys.executable, "-c", script, "--help"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0] == ("numba-cuda is not installed "
                                        "(pip install 'gpu-profiler[gpu]')")
    assert "profile" in r.stdout
    r = subprocess.run([sys.executable, "-c", script, "profile", str(tmp_path), "-b", "cuda"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    assert r.stderr == ("gpu-profiler: error: backend 'cuda' is not available: numba-cuda is "
                        "not installed (pip install 'gpu-profiler[gpu]')\n")


@pytest.mark.parametrize(("args", "message"), [
    (["--backend", "numpy", "--device", "1"], "--device/--devices need the cuda backend, "
                                              "not 'numpy'"),
    (["--devices", "0,x"], "--devices must list GPU ids like 0,1,2, got '0,x'"),
    (["--devices", ","], "--devices must list GPU ids like 0,1,2, got ','"),
    (["--device", "-1"], "--device must be a GPU id >= 0, got -1"),
])
def test_device_option_errors(hf_dir, capsys, args, message):
    path, _ = hf_dir
    rc, out, err = run(["profile", path, "-q", *args], capsys)
    assert rc == 2 and out == "" and err == f"gpu-profiler: error: {message}\n"


# ---------------------------------------------------------------- on a real GPU
def _data(n, dtype, seed=0):
    rng = np.random.default_rng(seed)
    x = np.clip(rng.lognormal(np.log(600), 1.3, n), 0, 300_000).astype(dtype)
    if np.dtype(dtype).kind == "i":
        x[::1009] = -2
    return x, rng.random(n) > 0.01


def _same(got, exp):
    assert got.cap == exp.cap and np.array_equal(got.counts, exp.counts)
    assert got._scalars() == exp._scalars()


@gpu
@needs_gpu
@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint16])
@pytest.mark.parametrize("cap", [8192, 40_000, 131_072, None],
                         ids=["shared", "shared-optin", "global", "auto"])
def test_gpu_matches_numpy(dtype, cap):
    from gpu_profiler.backends.cuda_backend import CudaBackend

    x, valid = _data(3_000_000, dtype)
    chunks = [Chunk(x, valid), Chunk(x[:12345])]
    backend = CudaBackend(chunk_bytes=4 << 20)  # several pieces per chunk through 3 streams
    _same(backend.histogram(chunks, cap), NumpyBackend().histogram(chunks, cap))
    if cap == 131_072:
        assert "hist_global" in backend.launches and "hist_shared" not in backend.launches
    elif cap is not None:
        assert "hist_shared" in backend.launches and "hist_global" not in backend.launches


@gpu
@needs_gpu
def test_gpu_offsets_and_forced_global_path():
    from gpu_profiler.backends.cuda_backend import CudaBackend

    lens, valid = _data(1_000_000, np.int64, seed=1)
    off = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    chunks = [Chunk(off, valid, offsets=True)]
    backend = CudaBackend(shared_mem_budget=1024)
    _same(backend.histogram(chunks, 8192), NumpyBackend().histogram(chunks, 8192))
    assert set(backend.launches) == {"hist_global"}


@gpu
@needs_gpu
def test_gpu_device_resident_sources():
    from numba import cuda

    x, _ = _data(2_000_000, np.int32, seed=2)
    exp = histogram(x, backend="numpy", cap=8192)
    _same(histogram(cuda.to_device(x), backend="cuda", cap=8192), exp)
    cupy = pytest.importorskip("cupy")
    _same(histogram(cupy.asarray(x), backend="cuda", cap=8192), exp)


@gpu
@needs_gpu
def test_gpu_profile_and_cli(hf_dir, capsys):
    from numba import cuda

    path, _ = hf_dir
    exp = profile(str(path), backend="numpy").to_dict()
    devices = list(range(min(len(cuda.gpus), 2))) * (2 if len(cuda.gpus) < 2 else 1)
    rc, out, err = run(["profile", path, "--backend", "cuda", "--devices",
                        ",".join(map(str, devices)), "-f", "json", "-q"], capsys)
    assert rc == 0, err
    got = json.loads(out)
    for d in (got, exp):
        d.pop("seconds"), d.pop("backend")
    assert got == exp
    rc, out, _ = run(["backends"], capsys)
    assert "cuda   available" in out and "gpu 0: " in out and "KiB shared memory" in out
