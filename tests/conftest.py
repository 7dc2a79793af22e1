"""Shared fixtures: real corpora written with `datasets` and pyarrow, and an independent
pure-Python implementation of the docs/design.md bucket table to check against."""

from __future__ import annotations

import os
import pty
import subprocess
from contextlib import contextmanager

import numpy as np
import pytest


def reference_table(lengths, bounds, max_seq_len=8192, token_budget=49152, max_batch_size=64,
                    grad_accum=4, world_size=1):
    """The docs/design.md table computed the slow, obvious way from a list of lengths
    (None = null), as the reference script does: one Python loop per bucket."""
    valid = [int(x) for x in lengths if x is not None and x >= 0]
    clipped = [min(x, max_seq_len) for x in valid]
    total = len(clipped)
    rows = []
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        members = [c for c in clipped if lo <= c < hi]
        samples = len(members)
        tokens = sum(members)
        max_len = max(members) if members else 0
        size = min(token_budget // max_len, max_batch_size) if max_len else max_batch_size
        rows.append({"lo": lo, "hi": hi, "samples": samples, "tokens": tokens,
                     "max_len": max_len, "avg_len": tokens / samples if samples else 0.0,
                     "sample_pct": samples / total * 100 if total else 0.0,
                     "est_batch_size": size, "est_batches": samples / max(size, 1)})
    batches = sum(r["est_batches"] for r in rows)
    for r in rows:
        r["batch_pct"] = r["est_batches"] / batches * 100 if batches else 0.0
    return {
        "buckets": rows, "total_samples": total, "total_est_batches": batches,
        "steps_per_epoch": batches / (grad_accum * world_size),
        "null_samples": sum(1 for x in lengths if x is None),
        "invalid_samples": sum(1 for x in lengths if x is not None and x < 0),
        "unbucketed_samples": total - sum(r["samples"] for r in rows),
        "truncated_samples": sum(1 for x in valid if x > max_seq_len),
        "truncated_tokens": sum(x - max_seq_len for x in valid if x > max_seq_len),
    }


def assert_matches_reference(got: dict, ref: dict) -> None:
    """Counts and maxima exactly; averages and percentages to 1e-9."""
    for key in ("total_samples", "null_samples", "invalid_samples", "unbucketed_samples",
                "truncated_samples", "truncated_tokens"):
        assert got[key] == ref[key], key
    assert got["total_est_batches"] == pytest.approx(ref["total_est_batches"], rel=1e-9, abs=1e-9)
    assert got["steps_per_epoch"] == pytest.approx(ref["steps_per_epoch"], rel=1e-9, abs=1e-9)
    assert len(got["buckets"]) == len(ref["buckets"])
    for g, r in zip(got["buckets"], ref["buckets"], strict=True):
        for key in ("lo", "hi", "samples", "tokens", "max_len", "est_batch_size"):
            assert g[key] == r[key], (key, g, r)
        for key in ("avg_len", "sample_pct", "est_batches", "batch_pct"):
            assert g[key] == pytest.approx(r[key], rel=1e-9, abs=1e-9), (key, g, r)


def sft_lengths(n: int, seed: int = 0) -> np.ndarray:
    """Long-tailed SFT-like lengths, some above an 8k context."""
    rng = np.random.default_rng(seed)
    short = np.clip(rng.lognormal(np.log(400), 0.9, n), 1, None)
    long_docs = rng.uniform(3000, 12000, n)
    return np.where(rng.random(n) < 0.1, long_docs, short).astype(np.int64)


def token_lists(lengths, seed: int = 1):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 50_000, int(n), dtype=np.int32).tolist() for n in lengths]


@pytest.fixture(scope="session")
def hf_dir(tmp_path_factory):
    """A real `datasets` save_to_disk dir (2 shards) with `input_ids` and `length`."""
    datasets = pytest.importorskip("datasets")  # absent on some GPU images: skip, not error

    lengths = sft_lengths(3000, seed=7)
    ds = datasets.Dataset.from_dict({"input_ids": token_lists(lengths),
                                     "length": lengths.tolist()})
    path = tmp_path_factory.mktemp("hf") / "ds"
    ds.save_to_disk(str(path), num_shards=2)
    return path, lengths


@contextmanager
def jit_kernels():
    """Run the CPU kernels through numba's JIT instead of the native library (the same
    code; every test that runs both ways checks that they agree)."""
    from gpu_profiler import native

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(native, "kernel", native._Jit)
        yield


#: Under numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``; tests/test_cuda_sim.py reruns
#: the `backend` cases so) kernels run in Python: sizes and example counts are cut down.
SIMULATED = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"


def jit_param(name: str) -> object:
    """The JIT's case of a test over the ways the CPU kernels run, in the slow group: on a
    fresh clone every kernel compiles through numba first (~1 min of the default suite),
    while the native library, which every scan uses, is tested by default."""
    return pytest.param(name, marks=pytest.mark.slow)


def scaled(n: int, simulated: int = 2_000) -> int:
    """``n`` samples (or examples), or at most ``simulated`` under the CUDA simulator."""
    return min(n, simulated) if SIMULATED else n


@pytest.fixture(scope="module", params=["numpy", "numba", jit_param("numba-jit"), "cuda"])
def backend(request):
    """Every backend, for one test body each (the CuPy way): numpy (the reference), numba
    with native kernels and through the JIT, and cuda where it runs: on a GPU, or under
    the simulator when tests/test_cuda_sim.py reruns these cases."""
    from gpu_profiler.backends import available_backends, get_backend

    name = request.param.split("-")[0]
    reason = available_backends()[name]
    if reason is not None:
        pytest.skip(f"{name}: {reason}")
    if request.param == "numba-jit":
        with jit_kernels():
            yield get_backend(name)
    else:
        yield get_backend(name)


@pytest.fixture(params=["native", jit_param("jit")])
def kernels(request):
    """Parametrizes a test over the two ways the CPU kernels run."""
    from gpu_profiler import native

    if request.param == "native":
        assert native.library() is not None, native.status()  # never silently the JIT
        yield request.param
    else:
        with jit_kernels():
            yield request.param


def run_cli(args, capsys) -> tuple[int, str, str]:
    """``gpu-profiler ARGS`` in this process: (exit code, stdout, stderr)."""
    from gpu_profiler.cli import main

    with pytest.raises(SystemExit) as exc:
        main([str(a) for a in args])
    out, err = capsys.readouterr()
    return exc.value.code, out, err


def run_on_a_terminal(cmd: list[str], env: dict[str, str] | None = None,
                      timeout: float = 120) -> tuple[int, bytes, bytes]:
    """Run ``cmd`` with its stderr on a pty (a terminal) and stdout on a pipe; returns
    (exit code, stdout, stderr)."""
    master, slave = pty.openpty()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=slave, stdin=subprocess.DEVNULL,
                         env=env)
    os.close(slave)
    err = b""
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        err += data
    out = p.stdout.read()
    os.close(master)
    return p.wait(timeout=timeout), out, err


@pytest.fixture(scope="session")
def chromium() -> str:
    """The path of a headless-capable Chromium (`make test-slow` installs Debian's). Without
    one the test is skipped, except in CI (``CI`` set), where it fails: the report must be
    checked in a real browser there."""
    import shutil

    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if not found:
        why = "no chromium on PATH (make chromium installs Debian's)"
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    return found


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test that drives Chromium is in the ``browser`` group (`make test-slow`)."""
    for item in items:
        if "chromium" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.browser)
