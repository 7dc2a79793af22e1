"""Many shards and one huge file (issue 15, items 1 and 2).

(a) Many small shards: ``--shards`` (default 4,000) Parquet files of ``--rows`` (25,000)
    int64 ``length`` rows, and the same samples as an HF ``save_to_disk`` dir of as many
    shards (written by ``datasets``); plus the same samples in one Parquet file and in a
    one-shard HF dir. Side by side in one run, ``--repeat`` times in turn, each in a fresh
    process (page cache warm): ``gpu_profiler.histogram`` (with ``cap=8192``), and the
    plain per-file loop a user would write (``pq.read_table(f, columns=["length"])``;
    ``pa.ipc.open_stream(pa.memory_map(f)).read_all()`` for the HF shards). Medians.
    Targets: shards >= 2x faster than the loop, and >= 0.9x the throughput of the one file.
(b) One huge file: a 4 GB Arrow IPC file (1e9 int32 lengths in 100 record batches),
    written in /tmp and deleted afterwards; peak RSS of a fresh process profiling it
    (its own ``VmHWM``, from ``/proc/self/status``). Target: <= 512 MiB.

Every scan's histogram is checked against numpy's on the same samples. Writes
bench/results/shards.md and shards.json.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

BENCH = Path(__file__).resolve().parent
RESULTS = BENCH / "results"
CAP = 8192
MIB = 1 << 20
TARGETS = {"vs_loop": 2.0, "vs_one_file": 0.9, "rss_mib": 512}

#: Child programs: each prints one JSON line {"seconds": ..., "samples": ..., ...}. Each
#: first reads a small corpus of the same format (``argv[2]``, when given: `warm`),
#: untimed, so that what it times is the scan, not what a process pays once (imports,
#: pyarrow's and the kernels' start-up): the loops' imports are not timed either.
#: Peak RSS is the child's own VmHWM: its ``ru_maxrss`` would start from the parent's RSS
#: at the fork (Linux keeps it across exec), and the parent holds the corpora it wrote.
PROFILE = """
import json, sys, time
import gpu_profiler as gp
if len(sys.argv) > 2:
    gp.histogram(sys.argv[2], cap={cap})
t = time.perf_counter()
h = gp.histogram(sys.argv[1], cap={cap})
s = time.perf_counter() - t
tokens = int((h.counts * range(h.cap + 1)).sum())
status = open("/proc/self/status").read().split("VmHWM:")[1]
rss = int(status.split()[0]) / 1024
print(json.dumps({{"seconds": s, "samples": h.total, "sum": tokens, "rss_mib": rss}}))
"""
PARQUET_LOOP = """
import glob, json, sys, time
import numpy as np, pyarrow.parquet as pq
files = sorted(glob.glob(sys.argv[1] + "/*.parquet"))
for f in glob.glob(sys.argv[2] + "/*.parquet"):
    pq.read_table(f, columns=["length"])
t = time.perf_counter()
n = 0
for f in files:
    n += pq.read_table(f, columns=["length"]).num_rows
print(json.dumps({"seconds": time.perf_counter() - t, "samples": n}))
"""
HF_LOOP = """
import glob, json, sys, time
import pyarrow as pa
files = sorted(glob.glob(sys.argv[1] + "/*.arrow"))
for f in glob.glob(sys.argv[2] + "/*.arrow"):
    pa.ipc.open_stream(pa.memory_map(f)).read_all()
t = time.perf_counter()
n = 0
for f in files:
    n += pa.ipc.open_stream(pa.memory_map(f)).read_all().num_rows
print(json.dumps({"seconds": time.perf_counter() - t, "samples": n}))
"""


def lengths(i: int, rows: int) -> np.ndarray:
    rng = np.random.default_rng([15, i])
    return np.clip(rng.lognormal(math.log(600), 1.124, rows), 1, 131072).astype(np.int64)


def build(root: Path, shards: int, rows: int) -> tuple[dict[str, Path], np.ndarray]:
    """The four corpora of (a) and the reference histogram (numpy, clipped at CAP). Kept
    in ``root`` and taken from there when a run left them (``--corpora``)."""
    import datasets

    corpora = {"parquet shards": root / "parquet", "parquet, one file": root / "one.parquet",
               "hf shards": root / "hf", "hf, one shard": root / "hf1"}
    done = root / "ref.npy"
    if done.exists():
        return corpora, np.load(done)
    datasets.disable_progress_bars()
    pq_dir = root / "parquet"
    pq_dir.mkdir()
    ref = np.zeros(CAP + 2, np.int64)
    blocks = []
    for i in range(shards):
        x = lengths(i, rows)
        pq.write_table(pa.table({"length": x}), pq_dir / f"part-{i:05d}.parquet")
        ref += np.bincount(np.minimum(x, CAP + 1), minlength=CAP + 2)
        blocks.append(x)
    table = pa.table({"length": np.concatenate(blocks)})
    del blocks
    pq.write_table(table, root / "one.parquet")
    datasets.Dataset(table).save_to_disk(str(root / "hf"), num_shards=shards)
    datasets.Dataset(table).save_to_disk(str(root / "hf1"), num_shards=1)
    np.save(done, ref)
    return corpora, ref


#: Shards of the small corpus a child of a many-shard runner reads first: as many as make
#: a scan read shards together.
WARM_SHARDS = 8


def warm(path: Path) -> Path:
    """The small corpus a child reads first, untimed (see `PROFILE`): of ``path``'s
    format and shape (`WARM_SHARDS` shards for a corpus of shards, one for one file), so
    that the warm-up imports and starts what the timed scan uses; written next to the
    corpora the first time."""
    fmt = "parquet" if "parquet" in path.name else "hf"
    shards = WARM_SHARDS if path.name in ("parquet", "hf") else 1
    where = path.parent / f"warm-{shards}" / fmt
    if not where.exists():
        import datasets

        datasets.disable_progress_bars()
        tiny = pa.table({"length": lengths(0, 1000 * shards)})
        if fmt == "parquet":
            where.mkdir(parents=True)
            for i in range(shards):
                pq.write_table(tiny.slice(1000 * i, 1000), where / f"part-{i}.parquet")
        else:
            datasets.Dataset(tiny).save_to_disk(str(where), num_shards=shards)
    return where


def child(code: str, *args: str) -> dict:
    out = subprocess.run([sys.executable, "-c", code, *args], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def run_many(corpora: dict[str, Path], ref: np.ndarray, repeat: int) -> dict:
    """(a): every runner on its corpus, in turn, ``repeat`` times; medians."""
    expect_sum = int((ref[:CAP + 1] * np.arange(CAP + 1)).sum())
    runners = {f"gpu-profiler: {name}": (PROFILE.format(cap=CAP), path)
               for name, path in corpora.items()}
    runners["pq.read_table loop: parquet shards"] = (PARQUET_LOOP, corpora["parquet shards"])
    runners["ipc read_all loop: hf shards"] = (HF_LOOP, corpora["hf shards"])
    times: dict[str, list[float]] = {k: [] for k in runners}
    samples = int(ref.sum())
    for _ in range(repeat):
        for name, (code, path) in runners.items():
            got = child(code, str(path), str(warm(path)))
            if got["samples"] != samples or got.get("sum", expect_sum) != expect_sum:
                raise SystemExit(f"{name}: wrong result {got}")
            times[name].append(got["seconds"])
    return {name: {"median_s": statistics.median(t), "runs_s": t,
                   "samples_per_s": samples / statistics.median(t)}
            for name, t in times.items()}


def run_huge(root: Path, batches: int) -> dict:
    """(b): the 4 GB IPC file (``batches`` of 1e7 lengths), profiled in a fresh process;
    peak RSS."""
    path = root / "huge.arrow"
    schema = pa.schema([("length", pa.int32())])
    n = 10_000_000
    ref = np.zeros(CAP + 1, np.int64)
    with pa.OSFile(str(path), "wb") as f, pa.ipc.new_file(f, schema) as w:
        for i in range(batches):
            x = np.random.default_rng([15, 1, i]).integers(1, CAP + 1, n, dtype=np.int32)
            ref += np.bincount(x, minlength=CAP + 1)
            w.write_batch(pa.record_batch([pa.array(x)], schema=schema))
    try:
        got = child(PROFILE.format(cap=CAP), str(path))
        if got["samples"] != int(ref.sum()) or \
                got["sum"] != int((ref * np.arange(CAP + 1)).sum()):
            raise SystemExit(f"huge file: wrong result {got}")
        return {"bytes": path.stat().st_size, "samples": int(ref.sum()), **got}
    finally:
        path.unlink()


def report(many: dict, huge: dict, args: argparse.Namespace) -> str:
    t = {k: v["median_s"] for k, v in many.items()}
    checks = []
    for fmt, loop in (("parquet", "pq.read_table loop: parquet shards"),
                      ("hf", "ipc read_all loop: hf shards")):
        shards = t[f"gpu-profiler: {fmt} shards"]
        one = t[f"gpu-profiler: {fmt}, one {'file' if fmt == 'parquet' else 'shard'}"]
        checks.append((f"{fmt} shards: >= {TARGETS['vs_loop']}x faster than the {loop}",
                       t[loop] / shards, TARGETS["vs_loop"]))
        checks.append((f"{fmt} shards: >= {TARGETS['vs_one_file']}x the throughput of one "
                       "file", one / shards, TARGETS["vs_one_file"]))
    rows = [f"| {what} | {got:.2f}x | {'PASS' if got >= need else 'MISS'} |"
            for what, got, need in checks]
    rss = huge["rss_mib"]
    rows.append(f"| 4 GB IPC file: peak RSS <= {TARGETS['rss_mib']} MiB | {rss:.0f} MiB | "
                f"{'PASS' if rss <= TARGETS['rss_mib'] else 'MISS'} |")
    table = [f"| {k} | {v['median_s']:.2f} s | {v['samples_per_s'] / 1e6:.0f} M/s | "
             + ", ".join(f"{x:.2f}" for x in v["runs_s"]) + " |" for k, v in many.items()]
    return textwrap.dedent(f"""\
        # Many shards, one huge file

        `python bench/bench_shards.py --shards {args.shards} --rows {args.rows} --repeat \
{args.repeat}` on {platform.processor() or platform.machine()} ({os.cpu_count()} cores,
        shared with other work: load average {args.load[0]:.1f} at start, \
{os.getloadavg()[0]:.1f} at end), {time.strftime('%Y-%m-%d %H:%M')}, git {args.git}.

        | target | measured | |
        |---|---|---|
        """) + "\n".join(rows) + textwrap.dedent(f"""

        ## (a) {args.shards:,} shards of {args.rows:,} int64 lengths vs the same samples in one file

        Each run a fresh process, page cache warm, runners in turn; scan time measured inside
        the process, after an untimed scan of a small corpus of the same format and shape
        ({WARM_SHARDS} shards of 1,000 lengths for the shards, one for one file: what a
        process pays once, imports included, is not timed; the loops' imports are not
        either). Every result checked against numpy's histogram.

        | runner: corpus | median | samples/s | runs (s) |
        |---|---:|---:|---|
        """) + "\n".join(table) + textwrap.dedent(f"""

        ## (b) One {huge['bytes'] / 1e9:.1f} GB Arrow IPC file \
({huge['samples']:.1e} int32 lengths, {args.huge_batches} record batches)

        Fresh process, `gp.histogram(path, cap={CAP})`: {huge['seconds']:.2f} s, peak RSS
        {rss:.0f} MiB (the child's own `VmHWM`: its `ru_maxrss` would count the parent's RSS
        at the fork, which Linux keeps across exec); the file is written in /tmp and deleted
        afterwards.
        """)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shards", type=int, default=4000)
    ap.add_argument("--rows", type=int, default=25_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--huge-batches", type=int, default=100, help="of 1e7 int32 lengths")
    ap.add_argument("--corpora", type=Path, help="keep the corpora of (a) in this new "
                    "directory, or take them from it (written by an earlier run with the "
                    "same --shards and --rows)")
    ap.add_argument("--skip-huge", action="store_true", help="leave out (b)")
    args = ap.parse_args()
    args.load = os.getloadavg()
    args.git = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=BENCH,
                              capture_output=True, text=True).stdout.strip()
    root = args.corpora or Path(tempfile.mkdtemp(prefix="gp-shards-", dir="/tmp"))
    root.mkdir(exist_ok=True)
    try:
        corpora, ref = build(root, args.shards, args.rows)
        many = run_many(corpora, ref, args.repeat)
        huge = None if args.skip_huge else run_huge(root, args.huge_batches)
    finally:
        if args.corpora is None:
            shutil.rmtree(root)
    if huge is None:
        print(json.dumps(many, indent=2))
        return
    (RESULTS / "shards.json").write_text(json.dumps(
        {"shards": args.shards, "rows": args.rows, "repeat": args.repeat, "git": args.git,
         "targets": TARGETS, "many": many, "huge": huge}, indent=2) + "\n")
    (RESULTS / "shards.md").write_text(report(many, huge, args))
    print((RESULTS / "shards.md").read_text())


if __name__ == "__main__":
    main()
