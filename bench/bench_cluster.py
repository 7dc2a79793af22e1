"""Sharded-scan benchmark (issue 15, items 3-5): task sizing, Dask overhead, cache reuse.

1. Tasks for 100,000 shards of 2 MB (sparse files: sizes without the bytes) and for
   smaller corpora: how many tasks `cluster.groups` makes for a cluster of 8 and 64
   worker threads (the issue: 100k shards -> a few thousand tasks, not 100k).
2. Planning one huge Arrow IPC shard into record-batch tasks (`ipc.batch_ranges`, what
   `cluster.groups` calls for a shard larger than a task): a 4 GB stream and a 4 GB file of
   1e9 int32 lengths in 100 batches (sparse files: the bodies are holes, zeros), and a
   250 MB stream of 25,000 small batches (10,000 bytes of lengths each), planned
   ``--repeat`` x 3 times warm (median; the first call, which loads the native kernels,
   apart), with ``GPU_PROFILER_IO=auto`` (the default: the sparse files look cold, so
   metadata is read with O_DIRECT, each read reaching the device) and ``buffered`` (through
   the page cache), and the most memory one call allocates (`tracemalloc`'s peak: Python objects
   and numpy buffers).
3. Side by side in one run, ``--repeat`` rounds alternated, medians: the same Parquet
   corpus (``--shards`` shards of ``--rows`` int32 lengths) scanned by one process
   (`gp.histogram`), on a local `distributed.LocalCluster` of 2 worker processes (started
   once, outside the timing; its start-up is reported apart), with ``cache_dir`` filling a
   fresh cache, and with ``cache_dir`` reusing a full one. Every histogram is checked equal
   to the single-process one (exit 1 otherwise).

Writes bench/results/cluster.md and cluster.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import gpu_profiler as gp
from gpu_profiler import cluster
from gpu_profiler.io import pread
from gpu_profiler.readers import Reading, ipc, resolve_spec

RESULTS = Path(__file__).parent / "results"


def task_counts(folder: Path) -> list[dict]:
    """Tasks made for sparse HF-shard listings of various sizes."""
    out = []
    reading = Reading(resolve_spec(pa.schema([("length", pa.int32())]), None, None, "x"))
    for shards, size in ((100_000, 2 << 20), (100_000, 64 << 10), (4_000, 2 << 20)):
        d = folder / f"{shards}x{size}"
        d.mkdir()
        items = []
        for i in range(shards):
            p = d / f"data-{i:06}.arrow"
            with open(p, "wb") as f:
                f.truncate(size)
            items.append(("", ipc.IpcPart(p, "stream")))
        for threads in (8, 64):
            tasks = cluster.groups(items, threads, reading)
            out.append({"shards": shards, "shard_bytes": size, "threads": threads,
                        "tasks": len(tasks),
                        "largest_task_shards": max(len(ps) for _, ps in tasks)})
        shutil.rmtree(d)
    return out


class _Sparse:
    """A file object for pyarrow's IPC writers that leaves large runs of zeros as holes."""

    def __init__(self, path: Path) -> None:
        self.f = open(path, "wb")  # noqa: SIM115 (closed by close(), which pyarrow calls)

    def write(self, data) -> int:
        view = memoryview(data)
        if view.nbytes >= 1 << 20 and not np.frombuffer(view, np.uint8).any():
            self.f.seek(view.nbytes, os.SEEK_CUR)
        else:
            self.f.write(view)
        return view.nbytes

    def close(self) -> None:
        self.f.truncate(self.f.tell())  # a trailing hole still counts toward the size
        self.f.close()

    closed = False
    flush = tell = None  # pyarrow's PythonFile asks for these when they exist


def huge_shards(folder: Path) -> dict[str, tuple[ipc.IpcPart, int]]:
    """Name -> (part, batches): 4 GB of int32 zeros in 100 record batches, as an IPC stream
    and an IPC file, and 25,000 batches of 2,500 int32 lengths as a stream."""
    batch = pa.record_batch([pa.array(np.zeros(10_000_000, np.int32))], names=["length"])
    parts = {}
    for kind, opener in (("stream", pa.ipc.new_stream), ("file", pa.ipc.new_file)):
        path = folder / f"huge.{'arrows' if kind == 'stream' else 'arrow'}"
        sink = pa.PythonFile(_Sparse(path), mode="w")
        with opener(sink, batch.schema) as w:
            for _ in range(100):
                w.write_batch(batch)
        sink.close()
        parts[kind] = ipc.IpcPart(path, kind), 100
    small = pa.record_batch([pa.array(np.arange(2_500, dtype=np.int32))], names=["length"])
    with pa.ipc.new_stream(folder / "small.arrows", small.schema) as w:
        for _ in range(25_000):
            w.write_batch(small)
    parts["stream of small batches"] = ipc.IpcPart(folder / "small.arrows", "stream"), 25_000
    return parts


def plan_huge(folder: Path, repeat: int) -> list[dict]:
    """Time `ipc.batch_ranges` on each huge shard (see the module)."""
    spec = resolve_spec(pa.schema([("length", pa.int32())]), None, None, "x")
    out = []
    for name, (part, batches) in huge_shards(folder).items():
        for io in ("auto", "buffered"):
            os.environ[pread.IO_ENV] = io
            first, ranges = timed(lambda p=part: ipc.batch_ranges(p, cluster.TASK_BYTES, spec))
            warm = [timed(lambda p=part: ipc.batch_ranges(p, cluster.TASK_BYTES, spec))[0]
                    for _ in range(3 * repeat)]
            tracemalloc.start()
            again = ipc.batch_ranges(part, cluster.TASK_BYTES, spec)
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            if [r.span for r in ranges] != [r.span for r in again] or \
                    ranges[-1].stop != batches:
                sys.exit(f"{name}: the ranges do not cover the batches the same way each time")
            out.append({"shard": name, "io": io, "bytes": part.nbytes, "batches": batches,
                        "ranges": len(ranges), "first_s": first,
                        "median_s": statistics.median(warm), "max_s": max(warm),
                        "peak_alloc_bytes": peak})
        part.path.unlink()
    del os.environ[pread.IO_ENV]
    return out


def corpus(folder: Path, shards: int, rows: int) -> Path:
    d = folder / "pq"
    d.mkdir()
    rng = np.random.default_rng(15)
    for i in range(shards):
        x = np.clip(rng.lognormal(6.4, 1.1, rows), 1, 131072).astype(np.int32)
        pq.write_table(pa.table({"length": x}), d / f"s{i:05}.parquet")
    return d


def timed(fn) -> tuple[float, gp.LengthHistogram]:
    t0 = time.perf_counter()
    h = fn()
    return time.perf_counter() - t0, h


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shards", type=int, default=400)
    ap.add_argument("--rows", type=int, default=25_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    import distributed

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        counts = task_counts(folder)
        planning = plan_huge(folder, args.repeat)
        src = corpus(folder, args.shards, args.rows)
        nbytes = sum(p.stat().st_size for p in src.iterdir())
        t0 = time.perf_counter()
        with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                      dashboard_address=":0") as lc, \
                distributed.Client(lc) as client:
            startup = time.perf_counter() - t0
            reference = gp.histogram(src, cap=8192)
            gp.histogram(src, cap=8192, client=client)  # warm the workers (imports)
            times: dict[str, list[float]] = {k: [] for k in (
                "one process", "LocalCluster, 2 workers", "cache_dir, filling",
                "cache_dir, all reused")}
            for r in range(args.repeat):
                cache = folder / f"cache{r}"
                cases = {
                    "one process": lambda: gp.histogram(src, cap=8192),
                    "LocalCluster, 2 workers": lambda: gp.histogram(src, cap=8192,
                                                                     client=client),
                    "cache_dir, filling": lambda c=cache: gp.histogram(src, cap=8192,
                                                                       cache_dir=str(c)),
                    "cache_dir, all reused": lambda c=cache: gp.histogram(src, cap=8192,
                                                                          cache_dir=str(c)),
                }
                for name, fn in cases.items():
                    s, h = timed(fn)
                    if h != reference:
                        sys.exit(f"{name}: histogram differs from the single-process one")
                    times[name].append(s)
    samples = args.shards * args.rows
    rows = [{"case": k, "median_s": statistics.median(v), "min_s": min(v), "max_s": max(v),
             "samples_per_s": samples / statistics.median(v)} for k, v in times.items()]
    base = rows[0]["median_s"]
    meta = {"git": subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True,
                                  text=True).stdout.strip(),
            "python": platform.python_version(), "cpus": os.cpu_count(),
            "load": os.getloadavg()[0], "shards": args.shards, "rows": args.rows,
            "bytes": nbytes, "repeat": args.repeat, "cluster_startup_s": startup,
            "distributed": distributed.__version__}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "cluster.json").write_text(json.dumps(
        {"meta": meta, "tasks": counts, "huge_ipc_planning": planning, "scans": rows},
        indent=1) + "\n")
    lines = [
        "# Sharded scans (issue 15: Dask tasks, cache)", "",
        f"Generated by `python bench/bench_cluster.py --shards {args.shards} --rows "
        f"{args.rows} --repeat {args.repeat}` at git `{meta['git']}`; {meta['cpus']} cores "
        f"shared with other work (1-minute load {meta['load']:.1f} at the end), Python "
        f"{meta['python']}, distributed {meta['distributed']}.", "",
        "## Tasks per listing (`cluster.groups`)", "",
        "| shards | shard size | worker threads | tasks | most shards in a task |",
        "|--:|--:|--:|--:|--:|"]
    lines += [f"| {c['shards']:,} | {c['shard_bytes'] >> 10:,} KiB | {c['threads']} | "
              f"{c['tasks']:,} | {c['largest_task_shards']:,} |" for c in counts]
    lines += ["", "## Planning one huge IPC shard into record-batch tasks (`ipc.batch_ranges`)",
              "", f"Tasks of {cluster.TASK_BYTES >> 20} MiB; warm: median and worst of "
              f"{3 * args.repeat} calls; first: the process' first call (loads the native "
              "kernels).", "",
              "| shard | size | batches | ranges | I/O | warm median ms | warm max ms | "
              "first ms | peak allocated |", "|---|--:|--:|--:|---|--:|--:|--:|--:|"]
    lines += [f"| {p['shard']} | {p['bytes'] / 1e9:.2f} GB | {p['batches']:,} | {p['ranges']} | "
              f"{p['io']} | "
              f"{p['median_s'] * 1e3:.2f} | {p['max_s'] * 1e3:.2f} | {p['first_s'] * 1e3:.1f} | "
              f"{p['peak_alloc_bytes'] / 2**20:.1f} MiB |" for p in planning]
    lines += ["", f"## Scans of {args.shards} Parquet shards x {args.rows:,} int32 lengths "
              f"({nbytes / 2**20:.0f} MiB), medians of {args.repeat} alternated rounds", "",
              f"LocalCluster start-up (2 processes, not in the times): {startup:.2f} s. "
              "Every histogram equal to the single-process one.", "",
              "| case | median s | min-max s | M samples/s | vs one process |",
              "|---|--:|--:|--:|--:|"]
    lines += [f"| {r['case']} | {r['median_s']:.2f} | {r['min_s']:.2f}-{r['max_s']:.2f} | "
              f"{r['samples_per_s'] / 1e6:.1f} | {base / r['median_s']:.2f}x |" for r in rows]
    (RESULTS / "cluster.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
