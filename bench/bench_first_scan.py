"""First scan after install vs the second (issue 25, item 1): the kernels are compiled when
the package is installed, so a user's first scan should cost what every later one does.

A fresh venv gets the project from a wheel built once here (``pip wheel``: the native
kernels compiled then, timed); each round reinstalls that wheel (``--force-reinstall``)
and runs ``gpu-profiler profile -f json`` twice, each a fresh process with an empty
``NUMBA_CACHE_DIR`` (which must stay empty: nothing compiled), on each corpus in turn: an
HF ``save_to_disk`` dir by ``--offsets-of input_ids`` and a Parquet dir by its ``length``
column. Wall time of the whole process, medians over the rounds; target: first within
1.5x of second. With ``--before REV``, the same for the project at REV installed from its
source (a first scan there built the kernels into the empty cache), one round. Every
output is checked equal across runs (exits 1 otherwise).
Writes bench/results/first_scan.md and first_scan.json.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
DATA = BENCH / "data" / "first-scan"
SEED = 20261202
TARGET = 1.5


def corpora(samples: int) -> dict[str, list[str]]:
    """The corpora (written once per size), each as the CLI arguments that scan it."""
    import datasets

    hf, parquet = DATA / f"hf-{samples}", DATA / f"parquet-{samples}"
    rng = np.random.default_rng(SEED)
    lengths = np.clip(rng.lognormal(math.log(600), 1.124, samples), 1, 32768).astype(np.int64)
    if not hf.is_dir():
        offsets = np.zeros(samples + 1, np.int32)
        np.cumsum(lengths, out=offsets[1:])
        ids = pa.ListArray.from_arrays(pa.array(offsets),
                                       pa.array(rng.integers(0, 128_000, int(offsets[-1]),
                                                             dtype=np.int32)))
        datasets.disable_progress_bars()
        datasets.Dataset(pa.table({"input_ids": ids, "length": lengths})).save_to_disk(
            str(hf), num_shards=4)
    if not parquet.is_dir():
        parquet.mkdir(parents=True)
        for k, part in enumerate(np.array_split(lengths, 4)):
            pq.write_table(pa.table({"length": part}), parquet / f"part-{k}.parquet")
    return {"hf": [str(hf), "--offsets-of", "input_ids"],
            "parquet": [str(parquet), "--column", "length"]}


def cpu() -> str:
    with open("/proc/cpuinfo") as f:
        return next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")),
                    platform.machine())


def run(cmd: list[str], **kw: object) -> subprocess.CompletedProcess:
    p = subprocess.run(cmd, capture_output=True, text=True, **kw)  # type: ignore[call-overload]
    if p.returncode:
        sys.exit(f"FAIL: {' '.join(map(str, cmd))} exited {p.returncode}:\n{p.stderr[-3000:]}")
    return p


def scan(venv: Path, args: list[str], cache: Path) -> tuple[float, dict]:
    """Wall seconds of one CLI scan in a fresh process, and its table (no timings)."""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache))
    t = time.perf_counter()
    p = run([str(venv / "bin" / "gpu-profiler"), "profile", *args, "-f", "json"], env=env)
    wall = time.perf_counter() - t
    out = json.loads(p.stdout)
    return wall, {k: v for k, v in out.items() if k not in ("seconds", "backend")}


def rounds(venv: Path, install: list[str], cases: dict[str, list[str]], n: int,
           scratch: Path) -> dict:
    """``n`` rounds of: ``install``, then each corpus scanned twice."""
    times: dict[str, dict[str, list[float]]] = {c: {"first": [], "second": []} for c in cases}
    tables: dict[str, list[dict]] = {c: [] for c in cases}
    installs, status, caches = [], "", []
    for k in range(n):
        t = time.perf_counter()
        run([str(venv / "bin" / "pip"), "install", "-q", "--force-reinstall", "--no-deps",
             *install])
        installs.append(time.perf_counter() - t)
        status = run([str(venv / "bin" / "gpu-profiler"), "backends"]).stdout
        for case, args in cases.items():
            cache = scratch / f"numba-cache-{case}-{k}"
            cache.mkdir(parents=True)
            for which in ("first", "second"):
                wall, table = scan(venv, args, cache)
                times[case][which].append(wall)
                tables[case].append(table)
            caches.append(sorted(p.name for p in cache.rglob("*")))
            print(f"round {k}: {case}: first {times[case]['first'][-1]:.2f} s, second "
                  f"{times[case]['second'][-1]:.2f} s", flush=True)
    for case, ts in tables.items():
        if any(t != ts[0] for t in ts):
            sys.exit(f"FAIL: {case}: the scans' tables differ")
    return {"times": times, "install_s": installs, "backends": status,
            "numba_cache_files": sorted({f for c in caches for f in c}),
            "median": {c: {w: statistics.median(v) for w, v in t.items()}
                       for c, t in times.items()},
            "tables": {c: ts[0] for c, ts in tables.items()}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--samples", type=int, default=100_000)
    ap.add_argument("--before", metavar="REV", help="also measure the project at REV")
    ap.add_argument("--out", type=Path, default=BENCH / "results")
    args = ap.parse_args()
    cases = corpora(args.samples)
    git = run(["git", "describe", "--always", "--dirty"], cwd=ROOT).stdout.strip()
    result: dict = {"date": datetime.now().strftime("%Y-%m-%d %H:%M"), "git": git,
                    "command": " ".join(["python", "bench/bench_first_scan.py", *sys.argv[1:]]),
                    "machine": {"cpu": cpu(),
                                "cores": os.cpu_count(), "python": platform.python_version(),
                                "load_1m_start": os.getloadavg()[0]},
                    "samples": args.samples, "cases": {c: " ".join(a) for c, a in cases.items()},
                    "target": TARGET}
    with tempfile.TemporaryDirectory(prefix="gp-first-scan-") as tmp:
        scratch = Path(tmp)
        venv = scratch / "venv"
        run([sys.executable, "-m", "venv", str(venv)])
        t = time.perf_counter()
        run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w",
             str(scratch / "dist"), str(ROOT)])
        result["wheel_build_s"] = time.perf_counter() - t
        wheel, = (scratch / "dist").glob("*.whl")
        result["wheel"] = wheel.name
        print(f"wheel {wheel.name} built in {result['wheel_build_s']:.0f} s", flush=True)
        run([str(venv / "bin" / "pip"), "install", "-q", str(wheel)])  # and its dependencies
        result["after"] = rounds(venv, [str(wheel)], cases, args.rounds, scratch / "after")
        if args.before:
            src = scratch / "before"
            src.mkdir()
            archive = subprocess.run(["git", "archive", args.before], cwd=ROOT,
                                     capture_output=True, check=True).stdout
            subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
            result["before"] = rounds(venv, [str(src)], cases, 1, scratch / "before-runs")
            result["before"]["rev"] = args.before
            if result["before"]["tables"] != result["after"]["tables"]:
                sys.exit(f"FAIL: the tables at {args.before} differ from this tree's")
    result["machine"]["load_1m_end"] = os.getloadavg()[0]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "first_scan.json").write_text(json.dumps(result, indent=2) + "\n")
    (args.out / "first_scan.md").write_text(markdown(result))
    print(markdown(result))
    ok = all(m["first"] <= TARGET * m["second"] and not result["after"]["numba_cache_files"]
             for m in result["after"]["median"].values())
    return 0 if ok else 1


def markdown(r: dict) -> str:
    m, after = r["machine"], r["after"]
    lines = [
        "# First scan after install (issue 25, item 1)", "",
        f"Generated by `{r['command']}` on {r['date']}, git `{r['git']}`. Machine: "
        f"{m['cpu']}, {m['cores']} cores (shared with other work; 1-minute load "
        f"{m['load_1m_start']:.2f} at the start, {m['load_1m_end']:.2f} at the end), Python "
        f"{m['python']}.", "",
        f"A fresh venv holds the project's wheel `{r['wheel']}` (built here in "
        f"{r['wheel_build_s']:.0f} s, the native kernels compiled then). Each of "
        f"{len(after['install_s'])} rounds reinstalls it (`pip install --force-reinstall "
        f"--no-deps`, median {statistics.median(after['install_s']):.1f} s) and runs "
        "`gpu-profiler profile ... -f json` twice per corpus, each a fresh process with an "
        "empty `NUMBA_CACHE_DIR`; wall time of the whole process. "
        + ("Nothing was compiled: every cache folder stayed empty." if
           not after["numba_cache_files"] else
           f"Files numba cached: {', '.join(after['numba_cache_files'][:10])}."), "",
        "Kernels (`gpu-profiler backends`): " + next(
            ln.split("kernels:", 1)[1].strip() for ln in after["backends"].splitlines()
            if "kernels:" in ln) + ".", "",
        f"Corpora ({r['samples']:,} samples, log-normal lengths, median 600): " + "; ".join(
            f"{c}: `{a}`" for c, a in r["cases"].items()) + ".", "",
        "| corpus | first scan | second scan | first / second | target |",
        "|---|---|---|---|---|"]
    for c, med in after["median"].items():
        ratio = med["first"] / med["second"]
        lines.append(f"| {c} | {med['first']:.2f} s | {med['second']:.2f} s | {ratio:.2f}x | "
                     f"<= {r['target']}x: {'PASS' if ratio <= r['target'] else 'MISS'} |")
    if "before" in r:
        b = r["before"]
        lines += ["", f"Before (the project at `{b['rev']}`, installed from source: a user's "
                  "first scan that needed the native kernels built them, while a small scan "
                  "that could took numpy and pyarrow's readers instead), one round, the same "
                  "corpora:", "",
                  "| corpus | first scan | second scan |", "|---|---|---|"]
        lines += [f"| {c} | {med['first']:.1f} s | {med['second']:.2f} s |"
                  for c, med in b["median"].items()]
    lines += ["", "Every run's table was checked equal to every other's"
              + (", before and after" if "before" in r else "") + "."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
