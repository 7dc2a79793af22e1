"""Every CUDA kernel compiles for both targets (H200: sm_90; RTX PRO 6000 Blackwell: sm_120)
with ``numba.cuda.compile_ptx`` (NVVM from numba-cuda's cu12 extra; no GPU needed), and
``ptxas -v`` says its registers and static shared memory fit at the launch configuration
the backend uses; the dynamic shared memory budget arithmetic is checked against the same
numbers.

The PTX is compiled in spawned worker processes (one per target, simulator off):
``compile_ptx`` resolves the kernels' device helpers for "the current device", which does
not exist here, so the worker answers that question with the target's compute capability.
"""

from __future__ import annotations

import multiprocessing
import os
import re
import shutil
import subprocess
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from gpu_profiler.kernels import cuda as k

pytestmark = pytest.mark.slow  # ptxas on every kernel: make test-slow

#: Per-target limits from the CUDA programming guide (compute capability tables). The
#: backend itself queries these from the device at run time; here they are test data.
TARGETS = {
    "sm_90": {"cc": (9, 0), "shared_per_block": 227 << 10, "shared_per_sm": 228 << 10,
              "threads_per_sm": 2048, "regs_per_sm": 65536},
    "sm_120": {"cc": (12, 0), "shared_per_block": 99 << 10, "shared_per_sm": 100 << 10,
               "threads_per_sm": 1536, "regs_per_sm": 65536},
}
DTYPES = ["int32", "int64", "uint16"]


def _compile(cc: tuple[int, int]) -> dict[tuple[str, str], str]:
    """PTX of every kernel for every dtype in DTYPES (runs in a worker process)."""
    import types

    import numba.cuda.dispatcher as dispatcher
    from numba import cuda

    dispatcher.get_current_device = lambda: types.SimpleNamespace(compute_capability=cc)
    return {(name, dt): cuda.compile_ptx(fn, k.signature(name, dt), cc=cc)[0]
            for name, fn in k.PY_FUNCS.items() for dt in DTYPES}


def find_ptxas() -> Path | None:
    """ptxas from the pip CUDA toolkit (nvidia-cuda-nvcc), else from PATH."""
    try:
        import nvidia.cuda_nvcc as nvcc

        for root in nvcc.__path__:
            candidate = Path(root) / "bin" / "ptxas"
            if candidate.is_file():
                return candidate
    except ImportError:
        pass
    found = shutil.which("ptxas")
    return Path(found) if found else None


@pytest.fixture(scope="session")
def ptx() -> dict[str, dict[tuple[str, str], str]]:
    pytest.importorskip("numba_cuda")
    old = os.environ.pop("NUMBA_ENABLE_CUDASIM", None)
    try:
        with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"),
                                 max_tasks_per_child=1) as pool:
            futures = {t: pool.submit(_compile, spec["cc"]) for t, spec in TARGETS.items()}
            return {t: f.result(timeout=600) for t, f in futures.items()}
    finally:
        if old is not None:
            os.environ["NUMBA_ENABLE_CUDASIM"] = old


@pytest.fixture(scope="session")
def ptxas() -> Path:
    path = find_ptxas()
    if path is None:
        pytest.skip("ptxas not found (pip install nvidia-cuda-nvcc-cu12)")
    return path


def run_ptxas(ptxas: Path, text: str, target: str, tmp_path: Path) -> dict[str, int]:
    src = tmp_path / "kernel.ptx"
    src.write_text(text)
    r = subprocess.run([str(ptxas), f"-arch={target}", "-v", str(src), "-o",
                        str(tmp_path / "kernel.cubin")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    log = r.stderr + r.stdout
    entry = log[log.index("Compiling entry function"):]
    used = re.search(r"Used (\d+) registers.*?(\d+) bytes smem", entry)
    assert used, log
    spills = [int(v) for v in re.findall(r"(\d+) bytes spill (?:stores|loads)", log)]
    return {"regs": int(used.group(1)), "smem": int(used.group(2)), "spills": sum(spills)}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", list(k.PY_FUNCS))
def test_kernel_fits_target(ptx, ptxas, tmp_path, target, name):
    spec = TARGETS[target]
    for dt in DTYPES:
        text = ptx[target][(name, dt)]
        assert f".target {target}" in text
        info = run_ptxas(ptxas, text, target, tmp_path)
        assert info["spills"] == 0, (dt, info)
        assert info["regs"] * k.THREADS <= spec["regs_per_sm"] and info["regs"] <= 255, info
        if name == "max_length":
            assert info["smem"] == 8
            caps = [0]
        else:  # the budget arithmetic uses (DOC_)STATIC_SHARED: it must be the real number
            static = k.DOC_STATIC_SHARED if name.startswith("docs_") else k.STATIC_SHARED
            assert info["smem"] == static, info
            biggest = (spec["shared_per_block"] - static) // 4 - 1
            caps = [8193, biggest] if name.endswith("_shared") else [131072]
        for cap in caps:
            dynamic = k.shared_bytes(cap) if name.endswith("_shared") else 0
            assert info["smem"] + dynamic <= spec["shared_per_block"]
            blocks = k.blocks_per_sm(info["regs"], info["smem"], dynamic, k.THREADS,
                                     spec["threads_per_sm"], spec["regs_per_sm"],
                                     spec["shared_per_sm"])
            # 8k context: several resident blocks per SM; the biggest shared cap: one
            assert blocks >= (2 if cap == 8193 else 1), (dt, cap, info, blocks)


@pytest.mark.parametrize("target", TARGETS)
def test_shared_or_global_plan(target):
    """Which histogram kernel each cap gets, and the boundary between the two."""
    limit = TARGETS[target]["shared_per_block"]
    assert k.plan(8192, limit) == ("hist_shared", 8193 * 4)
    assert k.plan(131072, limit) == ("hist_global", 0)
    biggest = (limit - k.STATIC_SHARED) // 4 - 1
    assert k.plan(biggest, limit) == ("hist_shared", (biggest + 1) * 4)
    assert k.plan(biggest + 1, limit)[0] == "hist_global"
    assert k.STATIC_SHARED + k.shared_bytes(biggest) <= limit
    docs = (limit - k.DOC_STATIC_SHARED) // 4 - 1  # the document kernels' own boundary
    assert k.plan(docs, limit, documents=True) == ("docs_shared", (docs + 1) * 4)
    assert k.plan(docs + 1, limit, documents=True)[0] == "docs_global"


def test_signatures_match_lazy_dispatch():
    """The PTX is compiled for the types a launch really dispatches on (C-contiguous 1-D
    device arrays, Python ints and bools)."""
    from numba import typeof, types

    x = np.zeros(4, np.int32)
    got = k.signature("hist_shared", "int32")
    assert got[0] == typeof(x) and got[1] == typeof(np.zeros(1, np.bool_))
    assert got[2] == typeof(True) and got[4] == typeof(5) == types.int64
