"""GPU benchmark (issue 3): one run on one GPU, every number measured side by side.

  1. device memory bandwidth: a device-to-device copy (bytes read + written per second);
  2. host-to-device copy bandwidth from pinned (and, for reference, pageable) memory;
  3. histogram kernel throughput, GB/s of input, on device-resident lengths: int32 and int64,
     caps 8193 (shared-memory kernel) and 131072 (global-memory kernel), 1e8 and 1e9
     samples; ``cupy.bincount`` on the same array as the peer (and as the independent check:
     every histogram must match it bit for bit);
  4. end to end from host memory: ``gpu_profiler.histogram(numpy array, backend="cuda")``
     (pageable memory, as users have it), with the numba CPU backend for reference;
  5. end to end from a Hugging Face save_to_disk dir written here with pyarrow (an int64
     ``length`` column in 1000-row record batches, as ``datasets`` writes them; read from the
     page cache), cuda and numba backends.
Lengths are SFT-like: log-normal, median 600, sigma 1.124, clipped to [1, 131072].

Writes bench/results/gpu.json and gpu.md; exits 1 when any histogram differs from its
reference. ``--smoke`` uses tiny sizes and writes gpu-smoke.* (it runs under
``NUMBA_ENABLE_CUDASIM=1`` to check this script end to end on a machine without a GPU).
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parents[2]
SEED = 20261130
CAPS = (8193, 131072)
SIZES = {
    "full": {"kernel": (10**8, 10**9), "copy": 4 << 30, "h2d": 2 << 30, "host": 10**9,
             "hf": 2 * 10**8, "reps": 5},
    "smoke": {"kernel": (3000, 6000), "copy": 1 << 16, "h2d": 1 << 16, "host": 5000,
              "hf": 4000, "reps": 2},
}
TARGETS = {"kernel_vs_d2d": 0.5, "e2e_host_vs_pinned_h2d": 0.8}
T0 = time.perf_counter()


def log(msg: str) -> None:
    print(f"[{time.perf_counter() - T0:6.1f}s] {msg}", file=sys.stderr, flush=True)


def median_time(fn: Callable[[], Any], reps: int, sync: Callable[[], None]) -> float:
    """Median wall time of ``fn`` (after one warm-up call), the GPU drained around each."""
    fn()
    sync()
    times = []
    for _ in range(reps):
        sync()
        t = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def gbps(nbytes: int, seconds: float) -> float:
    return nbytes / seconds / 1e9


# --------------------------------------------------------------------------- data
def make_lengths(n: int, cp: Any, cuda: Any) -> Any:
    """n SFT-like int64 lengths in device memory (cupy when present, else numba)."""
    if cp is not None:
        rs = cp.random.RandomState(SEED)
        x = cp.empty(n, cp.int64)
        step = 1 << 28
        for lo in range(0, n, step):
            m = min(step, n - lo)
            x[lo:lo + m] = cp.clip(rs.lognormal(math.log(600), 1.124, m), 1, 131072)
        return x
    rng = np.random.default_rng(SEED)
    host = np.clip(rng.lognormal(math.log(600), 1.124, n), 1, 131072).astype(np.int64)
    return cuda.to_device(host)


def to_host(x: Any) -> np.ndarray:
    return x.get() if hasattr(x, "get") else x.copy_to_host()


def astype32(x: Any, cp: Any, cuda: Any) -> Any:
    if cp is not None:
        return x.astype(cp.int32)
    return cuda.to_device(to_host(x).astype(np.int32))


def reference(x: Any, cap: int, cp: Any) -> Any:
    """The expected histogram, computed independently: cupy.bincount on the device, or the
    numpy backend on a host copy when cupy is absent."""
    from gpu_profiler import LengthHistogram
    from gpu_profiler.backends.numpy_backend import NumpyBackend
    from gpu_profiler.chunk import Chunk

    if cp is None:
        return NumpyBackend().histogram_chunk(Chunk(to_host(x)), cap)
    bc = cp.bincount(x)
    counts = cp.zeros(cap + 1, cp.int64)
    counts[:min(cap + 1, bc.size)] = bc[:cap + 1]
    tail = bc[cap + 1:]
    if not int(tail.sum()):
        return LengthHistogram(counts.get())
    nz = cp.flatnonzero(tail)
    values = cp.arange(cap + 1, bc.size, dtype=cp.int64)
    return LengthHistogram(counts.get(), int(tail.sum()), int((tail * values).sum()),
                           cap + 1 + int(nz[0]), cap + 1 + int(nz[-1]))


def write_hf_dir(path: Path, lengths: np.ndarray, shards: int) -> None:
    """A Dataset.save_to_disk layout (state.json + IPC stream shards of 1000-row batches)."""
    path.mkdir(parents=True)
    files = []
    for i, part in enumerate(np.array_split(lengths, shards)):
        name = f"data-{i:05d}-of-{shards:05d}.arrow"
        table = pa.table({"length": pa.array(part)})
        with pa.OSFile(str(path / name), "wb") as sink, \
                pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table, max_chunksize=1000)
        files.append({"filename": name})
    (path / "state.json").write_text(json.dumps({
        "_data_files": files, "_fingerprint": "bench", "_format_columns": None,
        "_format_kwargs": {}, "_format_type": None, "_output_all_columns": False,
        "_split": None}))
    (path / "dataset_info.json").write_text(json.dumps(
        {"features": {"length": {"dtype": "int64", "_type": "Value"}}}))


# --------------------------------------------------------------------------- measurements
def d2d_seconds(cuda: Any, nbytes: int, reps: int, sync: Callable[[], None]) -> float:
    src = cuda.device_array(nbytes, np.uint8)
    dst = cuda.device_array(nbytes, np.uint8)
    return median_time(lambda: dst.copy_to_device(src), reps, sync)


def bandwidths(cuda: Any, sizes: dict, sync: Callable[[], None]) -> dict[str, float]:
    reps = sizes["reps"]
    out = {"d2d_copy_GBps": gbps(2 * sizes["copy"], d2d_seconds(cuda, sizes["copy"], reps,
                                                                 sync))}  # read + write
    pinned = cuda.pinned_array(sizes["h2d"], np.uint8)
    pinned[:] = 1
    pageable = np.ones(sizes["h2d"], np.uint8)
    dev = cuda.device_array(sizes["h2d"], np.uint8)
    out["h2d_pinned_GBps"] = gbps(sizes["h2d"], median_time(
        lambda: dev.copy_to_device(pinned), reps, sync))
    out["h2d_pageable_GBps"] = gbps(sizes["h2d"], median_time(
        lambda: dev.copy_to_device(pageable), reps, sync))
    return out


def kernels(x64: Any, x32: Any, cp: Any, sizes: dict, sync: Callable[[], None],
            failures: list[str]) -> list[dict]:
    from gpu_profiler.backends.cuda_backend import CudaBackend
    from gpu_profiler.chunk import Chunk

    rows = []
    for name, x in (("int32", x32), ("int64", x64)):
        for n in sizes["kernel"]:
            data = x[:n]
            for cap in CAPS:
                backend = CudaBackend()
                chunk = Chunk(data)
                t = median_time(lambda b=backend, c=chunk, cap=cap: b.accumulate(c, cap),
                                sizes["reps"], sync)
                backend.collect(cap)  # drain the timed runs
                backend.accumulate(chunk, cap)
                ok = backend.collect(cap) == reference(data, cap, cp)
                if not ok:
                    failures.append(f"kernel {name} n={n} cap={cap}")
                row = {"dtype": name, "samples": n, "cap": cap, "bytes": n * data.dtype.itemsize,
                       "kernel": "+".join(sorted(k for k in backend.launches)),
                       "seconds": t, "GBps": gbps(n * data.dtype.itemsize, t), "exact": ok}
                if cp is not None:
                    tc = median_time(lambda d=data: cp.bincount(d), sizes["reps"], sync)
                    row.update(cupy_bincount_seconds=tc,
                               cupy_bincount_GBps=gbps(row["bytes"], tc),
                               speedup_vs_cupy=tc / t)
                rows.append(row)
                log(f"kernel {name} n={n:.0e} cap={cap}: {row['GBps']:.0f} GB/s "
                    f"({row['kernel']}), exact={ok}")
    return rows


def end_to_end(x64: Any, x32: Any, cp: Any, sizes: dict, sync: Callable[[], None],
               failures: list[str], workdir: Path) -> dict[str, dict]:
    from gpu_profiler import histogram

    out: dict[str, dict] = {}
    host = to_host(x32[:sizes["host"]])  # pageable numpy memory
    expected = reference(x32[:sizes["host"]], 8193, cp)
    for backend in ("cuda", "numba"):
        t = median_time(lambda b=backend: histogram(host, backend=b, cap=8193),
                        3 if backend == "cuda" else 1, sync)
        ok = histogram(host, backend=backend, cap=8193) == expected
        if not ok:
            failures.append(f"host memory, {backend}")
        out[f"host_{backend}"] = {"samples": host.size, "bytes": host.nbytes, "seconds": t,
                                  "GBps": gbps(host.nbytes, t), "exact": ok}
        log(f"end to end from host memory, {backend}: {gbps(host.nbytes, t):.1f} GB/s")
    lengths = to_host(x64[:sizes["hf"]])
    path = workdir / "hf"
    write_hf_dir(path, lengths, shards=8)
    expected = reference(x64[:sizes["hf"]], 8193, cp)
    for backend in ("cuda", "numba"):
        t = median_time(lambda b=backend: histogram(str(path), backend=b, cap=8193), 1, sync)
        ok = histogram(str(path), backend=backend, cap=8193) == expected
        if not ok:
            failures.append(f"HF dir, {backend}")
        out[f"hf_{backend}"] = {"samples": lengths.size, "bytes": lengths.nbytes,
                                "seconds": t, "GBps": gbps(lengths.nbytes, t),
                                "samples_per_s": lengths.size / t, "exact": ok}
        log(f"end to end from an HF dir, {backend}: {lengths.size / t / 1e6:.0f} M samples/s")
    return out


# --------------------------------------------------------------------------- report
def environment(cuda: Any, cp: Any) -> dict[str, Any]:
    import numba

    from gpu_profiler.backends.cuda_backend import device_info, simulated

    info = device_info(0)
    env = {"gpu": info.describe(), "simulated": simulated(), "python": platform.python_version(),
           "numba": numba.__version__, "cupy": getattr(cp, "__version__", None)}
    try:
        import numba_cuda

        env["numba_cuda"] = numba_cuda.__version__
    except (ImportError, AttributeError):
        pass
    if not env["simulated"]:
        env["cuda_runtime"] = ".".join(map(str, cuda.runtime.get_version()))
    return env


def criteria(result: dict) -> dict[str, Any]:
    bw = result["bandwidth"]
    rows = [r for r in result["kernels"] if r["cap"] == 8193 and r["samples"] == max(
        row["samples"] for row in result["kernels"])]
    best = max(rows, key=lambda r: r["GBps"])
    e2e = result["end_to_end"]["host_cuda"]["GBps"]
    out = {
        "kernel_vs_d2d": {"value": best["GBps"] / bw["d2d_copy_GBps"],
                          "target": TARGETS["kernel_vs_d2d"], "dtype": best["dtype"]},
        "e2e_host_vs_pinned_h2d": {"value": e2e / bw["h2d_pinned_GBps"],
                                   "target": TARGETS["e2e_host_vs_pinned_h2d"]},
    }
    for v in out.values():
        v["met"] = v["value"] >= v["target"]
    if all("speedup_vs_cupy" in r for r in rows):
        slowest = min(r["speedup_vs_cupy"] for r in rows)
        out["faster_than_cupy_bincount"] = {"value": slowest, "target": 1.0,
                                            "met": slowest > 1.0}
    return out


def markdown(result: dict) -> str:
    env, bw = result["environment"], result["bandwidth"]
    lines = [f"# GPU benchmark{' (smoke run, simulator sizes)' if result['smoke'] else ''}", "",
             f"{env['gpu']}; numba {env['numba']}, numba-cuda {env.get('numba_cuda')}, "
             f"cupy {env['cupy']}, CUDA runtime {env.get('cuda_runtime')}.", "",
             "| copy | GB/s |", "|---|---:|",
             f"| device to device (read + write) | {bw['d2d_copy_GBps']:.1f} |",
             f"| host to device, pinned | {bw['h2d_pinned_GBps']:.1f} |",
             f"| host to device, pageable | {bw['h2d_pageable_GBps']:.1f} |", "",
             "| lengths on the GPU | samples | cap | kernel | GB/s | vs D2D | cupy.bincount "
             "GB/s | speedup | exact |", "|---|---:|---:|---|---:|---:|---:|---:|---|"]
    for r in result["kernels"]:
        cupy = (f"{r['cupy_bincount_GBps']:.1f} | {r['speedup_vs_cupy']:.2f}x"
                if "cupy_bincount_GBps" in r else "- | -")
        lines.append(f"| {r['dtype']} | {r['samples']:.0e} | {r['cap']} | {r['kernel']} | "
                     f"{r['GBps']:.1f} | {r['GBps'] / bw['d2d_copy_GBps']:.2f} | {cupy} | "
                     f"{r['exact']} |")
    lines += ["", "| end to end | samples | GB/s | samples/s | exact |", "|---|---:|---:|---:|---|"]
    for name, r in result["end_to_end"].items():
        lines.append(f"| {name.replace('_', ', ')} | {r['samples']:.0e} | {r['GBps']:.2f} | "
                     f"{r['samples'] / r['seconds'] / 1e6:.0f} M | {r['exact']} |")
    lines += ["", "| criterion | value | target | met |", "|---|---:|---:|---|"]
    for name, c in result["criteria"].items():
        lines.append(f"| {name} | {c['value']:.2f} | {c['target']} | {c['met']} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (simulator check)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args()
    from numba import cuda

    from gpu_profiler.backends.cuda_backend import probe

    reason = probe()
    if reason is not None:
        print(f"bench_gpu: the cuda backend is unavailable: {reason}", file=sys.stderr)
        return 2
    try:
        import cupy as cp
    except ImportError:
        cp = None
        log("cupy not installed: no cupy.bincount peer; references from numpy")
    sizes = SIZES["smoke" if args.smoke else "full"]
    sync = cuda.synchronize
    failures: list[str] = []
    result: dict[str, Any] = {"smoke": args.smoke, "environment": environment(cuda, cp),
                              "sizes": sizes}
    log(result["environment"]["gpu"])
    result["bandwidth"] = bandwidths(cuda, sizes, sync)
    log(f"bandwidth: {result['bandwidth']}")
    x64 = make_lengths(max(sizes["kernel"] + (sizes["host"], sizes["hf"])), cp, cuda)
    x32 = astype32(x64, cp, cuda)
    result["kernels"] = kernels(x64, x32, cp, sizes, sync, failures)
    workdir = Path(tempfile.mkdtemp(prefix="gpu-profiler-bench-"))
    try:
        result["end_to_end"] = end_to_end(x64, x32, cp, sizes, sync, failures, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    result["criteria"] = criteria(result)
    result["failures"] = failures
    result["seconds"] = time.perf_counter() - T0
    stem = "gpu-smoke" if args.smoke else "gpu"
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{stem}.json").write_text(json.dumps(result, indent=2) + "\n")
    (args.out / f"{stem}.md").write_text(markdown(result))
    print(markdown(result))
    if failures:
        print(f"bench_gpu: histograms differ from the reference: {failures}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
