"""I/O benchmark (issue 4): bytes read from a cold page cache, a billion samples on one
machine, and the peers a user would reach for, on the same files.

(a) Cold cache: an HF ``save_to_disk`` dir whose shards hold ``input_ids`` (list<int32>) and
    ``length`` (int64), built with ``datasets``. Every file is evicted with
    ``posix_fadvise(POSIX_FADV_DONTNEED)`` (checked with ``fincore``), then the CLI runs in a
    child that reports its own ``/proc/self/io`` ``read_bytes`` at exit. Compared with the
    bytes of the length column's own buffers in the files (values, or list offsets for
    ``--offsets-of``); limit: 1.2 x column + 1 MiB. Both IPC readers run (selective, and
    pyarrow's over a memory map) and must print the same table.
(b) ``--samples`` (default 1e9) int32 lengths (log-normal, median 600, clipped to
    [1, 131072]), generated block by block (never more than 16M in memory) into a Parquet
    file (1Mi-row row groups, pyarrow defaults) and an HF dir (500 MB shards of 1000-row
    record batches, as ``datasets`` writes them). ``gpu-profiler profile`` runs as a whole
    process on each, page cache warm: wall time, scan time (the JSON ``seconds``),
    samples/s and peak RSS (``wait4`` rusage of the child); and, in one Python process, a
    second scan after a first (imports, kernel library and allocator already warm).
(c) Peers on the same files, each in its own process (scan time measured inside it, peak
    RSS from rusage): the Python-list reference loop (``ds[:n]["length"]`` looped once per
    bucket, on a 1e6 subset, time scaled to the corpus), ``datasets`` +
    ``with_format("numpy")`` + ``np.bincount``, pyarrow + ``np.bincount`` (HF via a memory
    map, Parquet via the threaded dataset scanner), polars (streaming) and duckdb
    ``GROUP BY`` on the Parquet copy; plus pyarrow's bare decode of the Parquet column (the
    floor Parquet is held to). Every peer's clipped histogram must equal gpu-profiler's.

Data lives under bench/data/ (git-ignored) and is reused while its recipe is unchanged.
Writes bench/results/io.md and io.json.
"""

from __future__ import annotations

import argparse
import json
import math
import os
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
DATA = BENCH / "data"
CLI = str(Path(sys.executable).parent / "gpu-profiler")
SEED = 20261130
RECIPE = 1
BLOCK = 1 << 24
CAP = 8192
BOUNDS = [0, 770, 1216, 1728, 2432, 3296, 8193]
HF_BATCH = 1000  # rows per record batch, as datasets writes them
HF_SHARD_BYTES = 500 * 10**6
#: gpu-profiler's second scan in one process: imports, kernels and allocator already warm.
WARM = "gpu-profiler, 2nd scan in one process"
MIB = 1 << 20
TARGETS = {"rss_mib": 512, "hf_warm_samples_per_s": 1e9, "parquet_vs_decode": 1.10,
           "cold_read_factor": 1.2, "cold_read_slack": MIB}


# --------------------------------------------------------------------------- corpora

def lengths_block(index: int, n: int) -> np.ndarray:
    """Block ``index`` of the corpus (deterministic, independent of the block count)."""
    rng = np.random.default_rng([SEED, index])
    return np.clip(rng.lognormal(math.log(600), 1.124, n), 1, 131072).astype(np.int32)


def blocks(total: int):
    for i, lo in enumerate(range(0, total, BLOCK)):
        yield lengths_block(i, min(BLOCK, total - lo))


def _fresh(target: Path, recipe: dict) -> bool:
    marker = target.with_name(target.name + ".json")
    return target.exists() and marker.is_file() and json.loads(marker.read_text()) == recipe


def _mark(target: Path, recipe: dict) -> None:
    target.with_name(target.name + ".json").write_text(json.dumps(recipe))


def check_disk(need: int) -> None:
    DATA.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(DATA).free
    if free < need + (2 << 30):
        sys.exit(f"FAIL: {DATA} has {free / 2**30:.1f} GiB free; this run needs about "
                 f"{need / 2**30:.1f} GiB (+2 GiB headroom): lower --samples")


def build_parquet(n: int) -> Path:
    target = DATA / f"io-len-{n}.parquet"
    recipe = {"recipe": RECIPE, "samples": n, "seed": SEED}
    if _fresh(target, recipe):
        return target
    tmp = target.with_name("." + target.name)
    with pq.ParquetWriter(tmp, pa.schema([("length", pa.int32())])) as w:
        for x in blocks(n):
            w.write_table(pa.table({"length": x}), row_group_size=1 << 20)
    os.replace(tmp, target)
    _mark(target, recipe)
    return target


def build_hf(n: int) -> Path:
    """An HF save_to_disk dir of 500 MB shards in datasets' own layout
    (`common.write_hf`)."""
    target = DATA / f"io-hf-len-{n}"
    recipe = {"recipe": RECIPE, "samples": n, "seed": SEED}
    if _fresh(target, recipe):
        return target
    common.write_hf(target, {"length": np.zeros(3, np.int32)},
                    (pa.table({"length": x}) for x in blocks(n)), n,
                    max(1, -(-n // (HF_SHARD_BYTES // 4))), HF_BATCH)
    _mark(target, recipe)
    return target


def build_ids(n: int) -> Path:
    """An HF dir with ``input_ids`` and ``length``, written by ``datasets`` itself (1000-row
    record batches, 500 MB shards)."""
    import datasets

    target = DATA / f"io-hf-ids-{n}"
    recipe = {"recipe": RECIPE, "samples": n, "seed": SEED}
    if _fresh(target, recipe):
        return target
    datasets.disable_progress_bars()
    tmp = Path(tempfile.mkdtemp(prefix=".io-ids-", dir=DATA))
    try:
        lens = lengths_block(10**6, n).astype(np.int64)
        rng = np.random.default_rng(SEED + 1)
        schema = pa.schema([("input_ids", pa.list_(pa.int32())), ("length", pa.int64())])
        stream = tmp / "source.arrow"
        with pa.OSFile(str(stream), "wb") as sink, pa.ipc.new_stream(sink, schema) as w:
            for lo in range(0, n, 8192):
                part = lens[lo:lo + 8192]
                off = np.zeros(part.size + 1, np.int32)
                np.cumsum(part, out=off[1:])
                ids = pa.ListArray.from_arrays(
                    pa.array(off), pa.array(rng.integers(0, 128_000, int(off[-1]), np.int32)))
                w.write_batch(pa.record_batch([ids, pa.array(part)], schema=schema))
        ds = datasets.Dataset.from_file(str(stream))
        ds.save_to_disk(str(tmp / "ds"))
        del ds
        shutil.rmtree(target, ignore_errors=True)
        os.replace(tmp / "ds", target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    _mark(target, recipe)
    return target


def hf_files(path: Path) -> list[Path]:
    return [path / f["filename"] for f in json.loads((path / "state.json").read_text())
            ["_data_files"]]


def column_bytes(path: Path, name: str, offsets: bool) -> int:
    """Bytes of the column's own buffers in an HF dir: validity + values, or validity +
    offsets of a list column (never the list's values)."""
    total = 0
    for f in hf_files(path):
        with pa.memory_map(str(f)) as src:
            for rb in pa.ipc.open_stream(src):
                bufs = rb.column(rb.schema.get_field_index(name)).buffers()[:2]
                total += sum(b.size for b in bufs if b is not None)
    return total


# --------------------------------------------------------------------------- processes

# Every measured process reports, at exit, its own /proc/self/io and peak resident set
# (VmHWM; the rusage maxrss of a forked child would include the parent's pages at fork).
REPORT = """
    import atexit, os, sys
    def _report():
        with open(os.environ["BENCH_IO_REPORT"], "w") as out:
            out.write(open("/proc/self/io").read())
            out.write(open("/proc/self/status").read())
    atexit.register(_report)
"""
# The CLI run in-process under REPORT.
CLI_LAUNCHER = REPORT + """
    from gpu_profiler.cli import main
    main(sys.argv[1:])
"""


def child(cmd: list[str], env: dict[str, str] | None = None) -> dict:
    """Run a Python ``cmd`` whose code starts with REPORT: wall seconds, peak RSS (MiB),
    bytes read from storage, and stdout."""
    fd, report = tempfile.mkstemp(prefix="io-report-")
    os.close(fd)
    env = dict(env or os.environ, BENCH_IO_REPORT=report)
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    wall = time.perf_counter() - t0
    if p.returncode:
        sys.exit(f"FAIL: {' '.join(cmd[:4])} exited {p.returncode}:\n{p.stderr[-3000:]}")
    fields = dict(line.split(":", 1) for line in Path(report).read_text().splitlines()
                  if ":" in line)
    os.unlink(report)
    return {"wall": wall, "rss_mib": int(fields["VmHWM"].split()[0]) / 1024,
            "read_bytes": int(fields["read_bytes"]), "stdout": p.stdout}


def cli(*args: str, env: dict[str, str] | None = None) -> dict:
    """``gpu-profiler ARGS`` as a whole process (measured as in :func:`child`)."""
    return child([sys.executable, "-c", textwrap.dedent(CLI_LAUNCHER), *args], env)


def python_child(code: str, *args: str, env: dict[str, str] | None = None) -> dict:
    r = child([sys.executable, "-c", textwrap.dedent(REPORT + code), *map(str, args)], env)
    r.update(json.loads(r.pop("stdout").strip().splitlines()[-1]))
    return r


def evict(paths: list[Path]) -> int:
    """Drop the files' pages from the page cache; the bytes still cached after (fincore)."""
    os.sync()
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    if not shutil.which("fincore"):
        return -1
    out = subprocess.run(["fincore", "-b", "-n", "-o", "RES", *map(str, paths)],
                         capture_output=True, text=True).stdout.split()
    return sum(int(v) for v in out)


def cold_run(path: Path, offsets_of: str | None) -> dict:
    args = ["profile", str(path), "--quiet", "-f", "json"]
    if offsets_of:
        args += ["--offsets-of", offsets_of]
    cached = evict(hf_files(path))
    r = cli(*args)
    table = json.loads(r.pop("stdout"))
    r.update(cached_before=cached, table={k: table[k] for k in ("buckets", "total_samples")})
    return r


# --------------------------------------------------------------------------- peers

PEER_PYLIST = """
    import json, sys, time
    import datasets
    path, n, cap = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    bounds = json.loads(sys.argv[4])
    t = time.perf_counter()
    lengths = datasets.load_from_disk(path)[:n]["length"]  # a Python list
    samples = []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        bucket = [min(x, cap) for x in lengths if lo <= min(x, cap) < hi]
        samples.append(len(bucket))
        tokens, longest = sum(bucket), max(bucket, default=0)
    print(json.dumps({"seconds": time.perf_counter() - t, "bucket_samples": samples}))
"""

PEER_DATASETS = """
    import json, sys, time
    import numpy as np, datasets
    path, cap = sys.argv[1], int(sys.argv[2])
    t = time.perf_counter()
    counts = np.zeros(cap + 1, np.int64)
    ds = datasets.load_from_disk(path).with_format("numpy")
    for batch in ds.iter(batch_size=1 << 22):
        counts += np.bincount(np.minimum(batch["length"], cap), minlength=cap + 1)
    print(json.dumps({"seconds": time.perf_counter() - t, "counts": counts.tolist()}))
"""

PEER_PYARROW_HF = """
    import json, sys, time
    import numpy as np, pyarrow as pa
    path, cap = sys.argv[1], int(sys.argv[2])
    t = time.perf_counter()
    state = json.load(open(path + "/state.json"))
    counts = np.zeros(cap + 1, np.int64)
    def add(group):
        global counts
        x = np.concatenate(group)
        counts += np.bincount(np.minimum(x, cap), minlength=cap + 1)
    for f in state["_data_files"]:
        table = pa.ipc.open_stream(pa.memory_map(path + "/" + f["filename"])).read_all()
        group, rows = [], 0
        for chunk in table.column("length").chunks:
            group.append(chunk.to_numpy())
            rows += len(chunk)
            if rows >= 1 << 22:
                add(group)
                group, rows = [], 0
        if group:
            add(group)
        del table
    print(json.dumps({"seconds": time.perf_counter() - t, "counts": counts.tolist()}))
"""

PEER_PYARROW_PQ = """
    import json, sys, time
    import numpy as np, pyarrow.dataset as pds
    path, cap = sys.argv[1], int(sys.argv[2])
    t = time.perf_counter()
    counts = np.zeros(cap + 1, np.int64)
    for b in pds.dataset(path).to_batches(columns=["length"], batch_size=1 << 22):
        counts += np.bincount(np.minimum(b.column(0).to_numpy(), cap), minlength=cap + 1)
    print(json.dumps({"seconds": time.perf_counter() - t, "counts": counts.tolist()}))
"""

WARM_PROCESS = """
    import json, sys
    from gpu_profiler import driver
    from gpu_profiler.analysis.buckets import clipped_counts
    from gpu_profiler.request import Execution, Source
    path, cap = sys.argv[1], int(sys.argv[2])
    driver.scan(Source(path), Execution(cap=cap))  # imports, loads the kernels, warms
    s = driver.scan(Source(path), Execution(cap=cap))
    print(json.dumps({"seconds": s.seconds, "counts": clipped_counts(s.total, cap).tolist()}))
"""

DECODE_PQ_THREADED = """
    import json, sys, time
    import pyarrow.dataset as pds
    t = time.perf_counter()
    rows = sum(b.num_rows for b in pds.dataset(sys.argv[1]).to_batches(columns=["length"]))
    print(json.dumps({"seconds": time.perf_counter() - t, "rows": rows}))
"""

DECODE_PQ_SERIAL = """
    import json, sys, time
    import pyarrow.parquet as pq
    t = time.perf_counter()
    pf = pq.ParquetFile(sys.argv[1])
    rows = sum(b.num_rows for b in pf.iter_batches(columns=["length"], batch_size=1 << 22,
                                                   use_threads=False))
    print(json.dumps({"seconds": time.perf_counter() - t, "rows": rows}))
"""

PEER_POLARS = """
    import json, sys, time
    import numpy as np, polars as pl
    path, cap = sys.argv[1], int(sys.argv[2])
    t = time.perf_counter()
    df = (pl.scan_parquet(path).select(pl.col("length").clip(upper_bound=cap).alias("l"))
          .group_by("l").agg(pl.len().alias("n")).collect(engine="streaming"))
    counts = np.zeros(cap + 1, np.int64)
    counts[df["l"].to_numpy()] = df["n"].to_numpy()
    print(json.dumps({"seconds": time.perf_counter() - t, "counts": counts.tolist()}))
"""

PEER_DUCKDB = """
    import json, sys, time
    import numpy as np, duckdb
    path, cap = sys.argv[1], int(sys.argv[2])
    t = time.perf_counter()
    con = duckdb.connect()
    con.execute("SET enable_progress_bar = false")
    rows = con.execute(
        f"SELECT least(length, {cap}) AS l, count(*) FROM read_parquet('{path}') GROUP BY l"
    ).fetchall()
    counts = np.zeros(cap + 1, np.int64)
    for l, n in rows:
        counts[l] = n
    print(json.dumps({"seconds": time.perf_counter() - t, "counts": counts.tolist()}))
"""


def gpu_profiler_run(path: Path) -> dict:
    """The CLI as a whole process; its clipped histogram via --save-hist."""
    from gpu_profiler import LengthHistogram
    from gpu_profiler.analysis.buckets import clipped_counts

    fd, hist = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    r = cli("profile", str(path), "--quiet", "-f", "json", "--save-hist", hist)
    out = json.loads(r.pop("stdout"))
    h = LengthHistogram.load(hist)
    os.unlink(hist)
    r.update(seconds=out["seconds"], counts=clipped_counts(h, CAP).tolist(),
             buckets=[b["samples"] for b in out["buckets"]])
    return r


# --------------------------------------------------------------------------- runs

def section_cold(n_ids: int) -> dict:
    path = build_ids(n_ids)
    sizes = sum(f.stat().st_size for f in hf_files(path))
    out = {"path": str(path.relative_to(ROOT)), "samples": n_ids, "files_bytes": sizes,
           "runs": []}
    for label, offsets_of, col, as_offsets in (("length", None, "length", False),
                                               ("--offsets-of input_ids", "input_ids",
                                                "input_ids", True)):
        col_bytes = column_bytes(path, col, as_offsets)
        limit = TARGETS["cold_read_factor"] * col_bytes + TARGETS["cold_read_slack"]
        cli("profile", str(path), "--quiet")  # warm imports and kernels
        r = cold_run(path, offsets_of)
        r.pop("table")
        r.update(source=label, reader="selective", column_bytes=col_bytes, limit_bytes=limit,
                 ok=r["read_bytes"] <= limit)
        out["runs"].append(r)
        print(f"  cold {label:24s} read {r['read_bytes'] / MIB:9.1f} MiB "
              f"(column {col_bytes / MIB:.1f} MiB, limit {limit / MIB:.1f}) "
              f"{r['wall']:.2f} s", flush=True)
    return out


def section_big(n: int, subset: int, repeat: int) -> dict:
    check_disk(int(n * 4 * 2.2))
    t = time.perf_counter()
    pq_path, hf_path = build_parquet(n), build_hf(n)
    built = time.perf_counter() - t
    sizes = {"parquet": pq_path.stat().st_size,
             "hf": sum(f.stat().st_size for f in hf_files(hf_path))}
    print(f"  corpus ready in {built:.0f} s: parquet {sizes['parquet'] / 2**30:.2f} GiB, "
          f"hf {sizes['hf'] / 2**30:.2f} GiB", flush=True)
    hf, pqs, cap = str(hf_path), str(pq_path), str(CAP)
    methods = {
        ("hf", "gpu-profiler"): lambda: gpu_profiler_run(hf_path),
        ("parquet", "gpu-profiler"): lambda: gpu_profiler_run(pq_path),
        ("hf", WARM): lambda: python_child(WARM_PROCESS, hf, cap),
        ("parquet", WARM): lambda: python_child(WARM_PROCESS, pqs, cap),
        ("hf", "pyarrow + np.bincount"): lambda: python_child(PEER_PYARROW_HF, hf, cap),
        ("parquet", "pyarrow + np.bincount"): lambda: python_child(PEER_PYARROW_PQ, pqs, cap),
        ("parquet", "pyarrow decode only (threaded)"):
            lambda: python_child(DECODE_PQ_THREADED, pqs),
        ("parquet", "pyarrow decode only (1 thread)"):
            lambda: python_child(DECODE_PQ_SERIAL, pqs),
        ("parquet", "polars (streaming)"): lambda: python_child(PEER_POLARS, pqs, cap),
        ("parquet", "duckdb"): lambda: python_child(PEER_DUCKDB, pqs, cap),
    }
    once = {
        ("hf", "datasets with_format('numpy') + np.bincount"):
            lambda: python_child(PEER_DATASETS, hf, cap),
        ("hf", f"Python-list loop ({subset:.0e} subset, scaled)"):
            lambda: python_child(PEER_PYLIST, hf, subset, cap, json.dumps(BOUNDS)),
    }
    for fn in methods.values():  # warm the page cache and every process's disk caches
        fn()
    rounds: dict[tuple[str, str], list[dict]] = {k: [] for k in methods}
    for _ in range(repeat):  # interleaved, so contention hits every method alike
        for key, fn in methods.items():
            rounds[key].append(fn())
    results = {}
    for key, runs in rounds.items():
        keep = dict(runs[-1])
        keep["seconds"] = statistics.median(r["seconds"] for r in runs)
        keep["wall"] = statistics.median(r["wall"] for r in runs)
        keep["rss_mib"] = max(r["rss_mib"] for r in runs)
        keep["runs_s"] = [round(r["seconds"], 3) for r in runs]
        results[key] = keep
    for key, fn in once.items():
        results[key] = fn()
    for fmt in ("hf", "parquet"):
        results[(fmt, WARM)]["wall"] = None  # the process ran two scans
    pylist = next(k for k in results if k[1].startswith("Python-list"))
    r = results[pylist]
    r["measured_seconds"] = r["seconds"]
    r["seconds"] = r["seconds"] * n / subset
    r["wall"] = None  # the process ran on the subset only
    want = np.bincount(np.minimum(lengths_block(0, min(subset, BLOCK)), CAP)) \
        if subset <= BLOCK else None
    if want is not None:
        want = np.pad(want, (0, CAP + 1 - want.size))
        expect = [int(want[lo:hi].sum()) for lo, hi in zip(BOUNDS[:-1], BOUNDS[1:], strict=True)]
        if r["bucket_samples"] != expect:
            sys.exit("FAIL: the Python-list loop disagrees with the generated lengths")
    truth = results[("hf", "gpu-profiler")]["counts"]
    if results[("parquet", "gpu-profiler")]["counts"] != truth:
        sys.exit("FAIL: gpu-profiler gives different histograms on the Parquet and HF copies")
    if sum(truth) != n:
        sys.exit(f"FAIL: gpu-profiler counted {sum(truth)} samples, not {n}")
    for key, res in results.items():
        if "counts" in res and res.pop("counts") != truth:
            sys.exit(f"FAIL: {key} disagrees with gpu-profiler")
        res.pop("stdout", None)
        res["samples_per_s"] = n / res["seconds"]
        res["wall_samples_per_s"] = n / res["wall"] if res["wall"] else None
        print(f"  {key[0]:8s} {key[1]:48s} {res['seconds']:9.2f} s  "
              f"{res['samples_per_s'] / 1e6:8.1f} M/s  RSS {res['rss_mib']:7.0f} MiB",
              flush=True)
    return {"samples": n, "subset": subset, "repeat": repeat, "build_seconds": built,
            "files_bytes": sizes, "results": {f"{k[0]}|{k[1]}": v for k, v in results.items()}}


# --------------------------------------------------------------------------- report

def verdicts(big: dict | None, cold: dict | None) -> list[dict]:
    out = []
    if cold:
        for r in cold["runs"]:
            if r["reader"] == "selective":
                out.append({"target": f"cold read, {r['source']}: read_bytes <= 1.2 x column "
                            "+ 1 MiB", "value": f"{r['read_bytes'] / MIB:.1f} MiB vs "
                            f"{r['limit_bytes'] / MIB:.1f} MiB", "ok": r["ok"]})
    if big:
        res = big["results"]
        gp = {f: res[f"{f}|gpu-profiler"] for f in ("hf", "parquet")}
        for f, r in gp.items():
            out.append({"target": f"{f}: peak RSS <= 512 MiB",
                        "value": f"{r['rss_mib']:.0f} MiB",
                        "ok": r["rss_mib"] <= TARGETS["rss_mib"]})
        for key, r in res.items():
            fmt, name = key.split("|")
            if name.startswith(("gpu-profiler", "pyarrow decode")):
                continue
            mine = gp[fmt]
            whole = f" (whole process: {r['wall'] / mine['wall']:.2f}x)" if r["wall"] else ""
            out.append({"target": f"{fmt}: faster than {name}",
                        "value": f"{r['seconds'] / mine['seconds']:.2f}x{whole}",
                        "ok": r["seconds"] > mine["seconds"]})
        floor = min(res["parquet|pyarrow decode only (threaded)"]["seconds"],
                    res["parquet|pyarrow decode only (1 thread)"]["seconds"])
        for how, name in (("CLI process", "gpu-profiler"), ("2nd scan in one process", WARM)):
            hf = res[f"hf|{name}"]
            rate = hf["samples_per_s"]
            whole = (f" (whole process, interpreter start-up included: "
                     f"{hf['wall_samples_per_s'] / 1e9:.2f}e9)" if hf["wall"] else "")
            out.append({"target": f"hf, warm cache, {how}: >= 1e9 samples/s (int32)",
                        "value": f"{rate / 1e9:.2f}e9 samples/s{whole}", "ok": rate >= 1e9})
            ratio = res[f"parquet|{name}"]["seconds"] / floor
            out.append({"target": f"parquet, {how}: within 10% of pyarrow's decode of the "
                                  "column", "value": f"{ratio:.2f}x the fastest pyarrow decode",
                        "ok": ratio <= TARGETS["parquet_vs_decode"]})
    return out


def markdown(r: dict) -> str:
    m = r["machine"]
    lines = ["# I/O: bytes read, a billion samples, peers", "",
             f"`{r['command']}` on {m['cpu']} ({m['cores']} cores shared with other work, "
             f"load average {m['load_start']:.1f} at start, {m['load_end']:.1f} at end), "
             f"{m['date']}, git {m['git']}.", ""]
    if r.get("verdicts"):
        lines += ["| target | measured | |", "|---|---|---|"]
        lines += [f"| {v['target']} | {v['value']} | {'PASS' if v['ok'] else 'MISS'} |"
                  for v in r["verdicts"]]
        lines.append("")
    cold = r.get("cold")
    if cold:
        lines += [f"## (a) Cold page cache: HF dir with input_ids ({cold['samples']:,} samples,"
                  f" {cold['files_bytes'] / MIB:,.0f} MiB of shards)", "",
                  "Files evicted with `posix_fadvise(DONTNEED)` before each run (`cached "
                  "before` = bytes fincore still saw); `read_bytes` from the CLI process's "
                  "own `/proc/self/io`.", "",
                  "| lengths from | IPC reader | read_bytes | column bytes | limit | cached "
                  "before | wall | |", "|---|---|---:|---:|---:|---:|---:|---|"]
        for x in cold["runs"]:
            lines.append(f"| {x['source']} | {x['reader']} | {x['read_bytes'] / MIB:,.1f} "
                         f"MiB | {x['column_bytes'] / MIB:,.1f} MiB | "
                         f"{x['limit_bytes'] / MIB:,.1f} MiB | {x['cached_before']:,} B | "
                         f"{x['wall']:.2f} s | {'PASS' if x['ok'] else 'MISS'} |")
        lines.append("")
    big = r.get("big")
    if big:
        n = big["samples"]
        fb = big["files_bytes"]
        lines += [f"## (b, c) {n:,} int32 lengths, warm page cache",
                  "", f"Parquet {fb['parquet'] / 2**30:.2f} GiB, HF "
                  f"{fb['hf'] / 2**30:.2f} GiB ({n // HF_BATCH:,} record batches). "
                  f"Median of {big['repeat']} interleaved runs (one run for the two slowest "
                  "peers); `scan s` is measured inside each process (gpu-profiler: the JSON "
                  "`seconds`), `process s` is the whole process with interpreter start-up; "
                  "peak RSS is the process's maximum resident set (memory-mapped file pages "
                  "included). Every histogram equals gpu-profiler's.", "",
                  "| files | tool | scan s | samples/s | process s | peak RSS | vs gpu-profiler |",
                  "|---|---|---:|---:|---:|---:|---:|"]
        res = big["results"]
        for key, x in sorted(res.items(), key=lambda kv: (kv[0].split("|")[0],
                                                          kv[1]["seconds"])):
            fmt, name = key.split("|")
            mine = res[f"{fmt}|gpu-profiler"]["seconds"]
            note = f" (measured {x['measured_seconds']:.2f} s)" if "measured_seconds" in x \
                else ""
            wall = f"{x['wall']:,.2f}" if x["wall"] else "-"
            digits = 0 if x["samples_per_s"] >= 1e7 else 2
            lines.append(f"| {fmt} | {name} | {x['seconds']:,.2f}{note} | "
                         f"{x['samples_per_s'] / 1e6:,.{digits}f} M | {wall} | "
                         f"{x['rss_mib']:,.0f} MiB | {x['seconds'] / mine:.2f}x |")
        lines.append("")
    return "\n".join(lines) + "\n"


def machine(load_start: float) -> dict:
    return {**common.machine(), "load_start": load_start, "load_end": common.load()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=float, default=1e9, help="corpus size for (b) and (c)")
    ap.add_argument("--ids-samples", type=int, default=200_000,
                    help="samples of the input_ids dir for (a) (~2.4 KB each)")
    ap.add_argument("--subset", type=int, default=1_000_000,
                    help="rows the Python-list loop runs on (time scaled to --samples)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--skip", choices=["cold", "big"], action="append", default=[])
    ap.add_argument("--out", default=str(BENCH / "results" / "io"),
                    help="results path without extension")
    args = ap.parse_args()
    load_start = os.getloadavg()[0]
    result: dict = {"command": "python bench/bench_io.py " + " ".join(sys.argv[1:]),
                    "targets": TARGETS}
    if "cold" not in args.skip:
        print("(a) cold-cache bytes read", flush=True)
        result["cold"] = section_cold(args.ids_samples)
    if "big" not in args.skip:
        print(f"(b, c) {int(args.samples):,} samples", flush=True)
        result["big"] = section_big(int(args.samples), args.subset, args.repeat)
    result["verdicts"] = verdicts(result.get("big"), result.get("cold"))
    result["machine"] = machine(load_start)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    out.with_suffix(".md").write_text(markdown(result))
    for v in result["verdicts"]:
        print(f"{'PASS' if v['ok'] else 'MISS'}  {v['target']}: {v['value']}")


if __name__ == "__main__":
    main()
