"""Core benchmark (issue 2): gpu-profiler against what users run today, side by side.

On the same generated corpora (real ``datasets`` save_to_disk dirs under bench/data/):
  1. ``len``: N samples (default 10M), a ``length`` int64 column only;
  2. ``ids``: M samples (default 1M) of realistic length with an ``input_ids`` list<int32>
     column plus ``length`` (~4.5 GB; lengths also read from the list offsets).
Lengths are long-tailed and SFT-like: log-normal, median 600 tokens, sigma 1.124 (about 1%
above 8192), clipped to [1, 131072].

Timed, in one run: the reference loop (``datasets.load_from_disk(dir)["length"]`` iterated in
Python once per bucket; run once), the hand-written fast path (bench/fast_path.py, in-process
and as a script process), gpu-profiler in-process (``gpu_profiler.profile``) and as a whole
CLI process for each CPU backend (the native kernels built by the install: a first run
costs what the others do, see bench/bench_first_scan.py), and the micro-benchmark numba
backend vs ``np.bincount(np.minimum(x, cap))`` on an in-memory int64 array. Every table is
checked against the reference loop's (exits 1 on a mismatch).
Writes bench/results/core.md and core.json.
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
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import common
import numpy as np
import pyarrow as pa
from fast_path import PARAMS, design_table, fast_path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
CLI = str(Path(sys.executable).parent / "gpu-profiler")
SEED = 20261130
CORPUS_VERSION = 1
CAP = PARAMS["max_seq_len"]
BACKENDS = ("auto", "numpy", "numba")  # auto: numba here (no GPU)
TARGETS = {"micro_ratio": 2.0, "cli_vs_reference": 200.0, "cli_vs_fast_script": 1.0}


# --------------------------------------------------------------------------- corpora

def sft_lengths(n: int, seed: int) -> np.ndarray:
    """Log-normal lengths (median 600, sigma 1.124: ~1% above 8192), clipped to [1, 131072]."""
    rng = np.random.default_rng(seed)
    out = np.empty(n, np.int64)
    step = 1 << 24
    for lo in range(0, n, step):
        m = min(step, n - lo)
        out[lo:lo + m] = np.clip(rng.lognormal(math.log(600), 1.124, m), 1, 131072)
    return out


def build_corpus(data: Path, name: str, n: int, with_ids: bool) -> Path:
    """A real ``save_to_disk`` dir, rebuilt only when its recorded recipe changed."""
    import datasets

    target, marker = data / name, data / f"{name}.json"
    recipe = {"version": CORPUS_VERSION, "samples": n, "seed": SEED, "input_ids": with_ids}
    if target.is_dir() and marker.is_file() and json.loads(marker.read_text()) == recipe:
        return target
    data.mkdir(parents=True, exist_ok=True)
    marker.unlink(missing_ok=True)
    shutil.rmtree(target, ignore_errors=True)
    datasets.disable_progress_bars()
    lengths = sft_lengths(n, SEED)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=data))
    try:
        if with_ids:
            # datasets cannot build 1G tokens from Python lists in reasonable time: write an
            # Arrow stream with pyarrow, then let datasets itself memory-map it and write the
            # save_to_disk layout (1000-row record batches, 500 MB shards).
            stream = tmp / "source.arrow"
            _write_ids_stream(stream, lengths)
            ds = datasets.Dataset.from_file(str(stream))
        else:
            ds = datasets.Dataset.from_dict({"length": lengths})
        ds.save_to_disk(str(tmp / name))
        del ds
        os.replace(tmp / name, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    check = datasets.load_from_disk(str(target))
    want = {"length": "int64"} | ({"input_ids": "list<item: int32>"} if with_ids else {})
    got = {f.name: str(f.type) for f in check.data.schema}
    if check.num_rows != n or got != want:
        sys.exit(f"FAIL: {target} reads back as {check.num_rows} rows {got}, want {n} {want}")
    marker.write_text(json.dumps(recipe))
    return target


def _write_ids_stream(path: Path, lengths: np.ndarray) -> None:
    rng = np.random.default_rng(SEED + 1)
    schema = pa.schema([("input_ids", pa.list_(pa.int32())), ("length", pa.int64())])
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, schema) as w:
        for lo in range(0, lengths.size, 8192):
            lens = lengths[lo:lo + 8192]
            offsets = np.zeros(lens.size + 1, np.int32)
            np.cumsum(lens, out=offsets[1:])
            tokens = rng.integers(0, 128_000, int(offsets[-1]), dtype=np.int32)
            ids = pa.ListArray.from_arrays(pa.array(offsets), pa.array(tokens))
            w.write_batch(pa.record_batch([ids, pa.array(lens)], schema=schema))


# --------------------------------------------------------------------------- measuring

def load() -> float:
    """1-minute load average (2 cores shared with other work)."""
    return round(os.getloadavg()[0], 2)


def clock(fn: Callable[[], Any]) -> tuple[float, Any]:
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def process(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, str]:
    """Wall seconds of a whole process, and its stdout; exits loudly when it fails."""
    t = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    wall = time.perf_counter() - t
    if p.returncode:
        sys.exit(f"FAIL: {' '.join(cmd)} exited {p.returncode}:\n{p.stderr}")
    return wall, p.stdout


def med(xs: list[float]) -> float:
    return statistics.median(xs)


class Series:
    """Named lists of seconds, filled round-robin so drifting load hits every method alike."""

    def __init__(self) -> None:
        self.times: dict[str, list[float]] = {}
        self.loads: list[float] = []

    def rounds(self, repeats: int, methods: dict[str, Callable[[], float]]) -> None:
        for _ in range(repeats):
            self.loads.append(load())
            for name, fn in methods.items():
                self.times.setdefault(name, []).append(fn())

    def medians(self) -> dict[str, float]:
        return {k: med(v) for k, v in self.times.items()}


# --------------------------------------------------------------------------- checking

INT_KEYS = ("index", "lo", "hi", "samples", "tokens", "max_len", "est_batch_size")
FLOAT_KEYS = ("sample_pct", "avg_len", "est_batches", "batch_pct")


def check_table(label: str, want: dict, got: dict) -> None:
    """``got`` (a gpu-profiler JSON or a fast-path table) must equal the reference table:
    integers exactly, floats to 1e-9 relative."""
    errs = []

    def close(a: float, b: float) -> bool:
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)

    if want["total_samples"] != got["total_samples"]:
        errs.append(f"total_samples {got['total_samples']} != {want['total_samples']}")
    for key in ("total_est_batches", "steps_per_epoch"):
        if not close(want[key], got[key]):
            errs.append(f"{key} {got[key]} != {want[key]}")
    if len(want["buckets"]) != len(got["buckets"]):
        errs.append(f"{len(got['buckets'])} buckets != {len(want['buckets'])}")
    for w, g in zip(want["buckets"], got["buckets"], strict=True):
        errs += [f"bucket {w['index']} {k}: {g[k]} != {w[k]}" for k in INT_KEYS if g[k] != w[k]]
        errs += [f"bucket {w['index']} {k}: {g[k]} != {w[k]}" for k in FLOAT_KEYS
                 if not close(g[k], w[k])]
    if errs:
        sys.exit(f"FAIL: {label} disagrees with the reference table:\n  " + "\n  ".join(errs))


def strip(d: dict) -> dict:
    """A profile's JSON without what legitimately differs between runs and backends."""
    return {k: v for k, v in json.loads(json.dumps(d)).items() if k not in ("seconds", "backend")}


def check_same(label: str, outputs: dict[str, dict]) -> None:
    """Every gpu-profiler output of one case must be the same JSON (bit-identical backends)."""
    first, ref = next(iter(outputs.items()))
    for name, d in outputs.items():
        if strip(d) != strip(ref):
            sys.exit(f"FAIL: {label}: gpu-profiler output of {name} differs from {first}")


# --------------------------------------------------------------------------- the cases

def bench_case(case: dict, repeats: int) -> dict:
    """Fast path, gpu-profiler in-process and CLI, all on one corpus and length source."""
    import gpu_profiler

    path, offsets_of = str(case["path"]), case["offsets_of"]
    src = ["--offsets-of", offsets_of] if offsets_of else []
    kw = {"offsets_of": offsets_of} if offsets_of else {}
    outputs: dict[str, dict] = {}
    scans: dict[str, list[float]] = {}
    phases: list[dict] = []

    cli = [CLI, "profile", path, "-f", "json", *src]
    for b in BACKENDS:  # warm-up: page cache, in-process kernel load
        gpu_profiler.profile(path, backend=b, **kw)
    fast_path(path, offsets_of)

    def fast_inproc() -> float:
        s, (table, ph) = clock(lambda: fast_path(path, offsets_of))
        outputs["fast path"] = table
        phases.append(ph)
        return s

    def fast_script() -> float:
        s, out = process([sys.executable, str(BENCH / "fast_path.py"), path, *src])
        outputs["fast path script"] = json.loads(out)
        return s

    def inproc(b: str) -> Callable[[], float]:
        def run() -> float:
            s, r = clock(lambda: gpu_profiler.profile(path, backend=b, **kw))
            outputs[f"in-process {b}"] = r.to_dict()
            return s
        return run

    def cli_run(b: str) -> Callable[[], float]:
        def run() -> float:
            s, out = process([*cli, "-b", b])
            outputs[f"cli {b}"] = d = json.loads(out)
            scans.setdefault(b, []).append(d["seconds"])
            return s
        return run

    series = Series()
    series.rounds(repeats, {"fast path (in-process)": fast_inproc,
                            "fast path (script process)": fast_script,
                            **{f"gpu-profiler {b} (in-process)": inproc(b) for b in BACKENDS},
                            **{f"gpu-profiler {b} (CLI process)": cli_run(b) for b in BACKENDS}})
    check_same(case["name"], {k: v for k, v in outputs.items() if not k.startswith("fast")})
    return {"times": series.times, "median": series.medians(), "loads": series.loads,
            "cli_scan_seconds_median": {b: med(v) for b, v in scans.items()},
            "auto_chose": outputs["cli auto"]["backend"],
            "fast_path_phases_median": {k: med([p[k] for p in phases]) for k in phases[0]},
            "reader_only_median": reader_only(path, offsets_of, repeats),
            "process_anatomy": anatomy(path, offsets_of, repeats),
            "outputs": outputs}


#: Run in a fresh process: seconds spent in each phase of a CLI-like run (and whether numba
#: was imported: with the native kernels built, it is not).
ANATOMY = """
import json, sys, time
t = [time.perf_counter()]
import gpu_profiler.cli.app
t.append(time.perf_counter())
from gpu_profiler import native
native.library()
t.append(time.perf_counter())
import gpu_profiler
path, *offsets_of = sys.argv[1:]
kw = {"offsets_of": offsets_of[0]} if offsets_of else {}
r = gpu_profiler.profile(path, backend="numba", **kw)
t.append(time.perf_counter())
r = gpu_profiler.profile(path, backend="numba", **kw)
t.append(time.perf_counter())
from gpu_profiler.render.formats import to_json
to_json(r)
t.append(time.perf_counter())
print(json.dumps([b - a for a, b in zip(t, t[1:])] + ["numba" in sys.modules]))
"""
PHASES = ("import gpu_profiler.cli.app (typer, numpy, ...)",
          "load the native kernel library (check its sidecar, dlopen)",
          "first profile(): gpu_profiler's lazy imports, scan",
          "second profile(): the scan alone", "render JSON")


def anatomy(path: str, offsets_of: str | None, repeats: int) -> dict[str, float]:
    """Median seconds per phase of a fresh process profiling with the numba backend; the
    rest of its wall time is the interpreter's start and exit."""
    runs = []
    for _ in range(repeats):
        wall, stdout = process([sys.executable, "-c", ANATOMY, path,
                                *([offsets_of] if offsets_of else [])])
        *phases, numba = json.loads(stdout)
        if numba:
            sys.exit("FAIL: a CLI-like process imported numba (gpu-profiler backends says "
                     "why the native kernels do not serve)")
        runs.append({"interpreter start + exit": wall - sum(phases),
                     **dict(zip(PHASES, phases, strict=True))})
    return {k: med([r[k] for r in runs]) for k in runs[0]}


def reader_only(path: str, offsets_of: str | None, repeats: int) -> float:
    """gpu-profiler's reader + coalescing alone (no histogram): where in-process time goes."""
    from gpu_profiler.readers import open_source, resolve_spec
    from gpu_profiler.readers.arrow import coalesce

    def run() -> int:
        parts = [p for ps in open_source(path).values() for p in ps]
        spec = resolve_spec(parts[0].schema(), None, offsets_of, parts[0].label)
        return sum(c.samples for p in parts for c in coalesce(p.chunks(spec)))

    return med([clock(run)[0] for _ in range(repeats)])


def startup(repeats: int) -> dict[str, float]:
    """Whole-process floors: interpreter, the fast path's imports, the CLI, numba's import."""
    py = sys.executable
    cmds = {"python -c pass": [py, "-c", "pass"],
            "import numpy, pyarrow": [py, "-c", "import numpy, pyarrow"],
            "import numba": [py, "-c", "import numba"],
            "gpu-profiler --version": [CLI, "--version"]}
    series = Series()
    series.rounds(repeats, {k: (lambda c=c: process(c)[0]) for k, c in cmds.items()})
    return series.medians()


def micro(n: int, repeats: int) -> dict:
    """numba backend vs ``np.bincount(np.minimum(x, cap))`` on an in-memory int64 array."""
    from gpu_profiler.backends import get_backend
    from gpu_profiler.backends.numba_backend import cores
    from gpu_profiler.chunk import Chunk

    x = sft_lengths(n, SEED + 7)
    backend = get_backend("numba")
    threads = cores()
    backend.histogram_chunk(Chunk(x[:65536]), CAP)  # load the kernel

    def numpy_bincount() -> float:
        return clock(lambda: np.bincount(np.minimum(x, CAP), minlength=CAP + 1))[0]

    def numba_threads(k: int) -> Callable[[], float]:
        b = get_backend("numba", threads=k)
        return lambda: clock(lambda: b.histogram_chunk(Chunk(x), CAP))[0]

    want = np.bincount(np.minimum(x, CAP), minlength=CAP + 1)
    h = backend.histogram_chunk(Chunk(x), CAP)
    got = h.counts.copy()
    got[CAP] += h.above_count
    if not np.array_equal(got, want):
        sys.exit("FAIL: numba histogram != np.bincount(np.minimum(x, cap))")
    methods = {"np.bincount(np.minimum(x, cap))": numpy_bincount,
               f"numba backend ({threads} threads)": numba_threads(threads)}
    if threads > 1:
        methods["numba backend (1 thread)"] = numba_threads(1)
    series = Series()
    series.rounds(repeats, methods)
    m = series.medians()
    base = m["np.bincount(np.minimum(x, cap))"]
    return {"samples": n, "above_cap_pct": float((x > CAP).mean() * 100), "threads": threads,
            "times": series.times, "median": m, "loads": series.loads,
            "ratio": {k: base / v for k, v in m.items()}}


def reference(path: Path, materialize: bool) -> tuple[float, dict]:
    """What users run today: pull the length column from ``datasets`` and loop over it in
    Python once per bucket. ``materialize`` first turns it into a list (``[:]``, what
    ``ds["length"]`` returned before datasets 4); else the ``Column`` is iterated directly."""
    import datasets

    def run() -> dict:
        ds = datasets.load_from_disk(str(path))
        lengths = ds["length"][:] if materialize else ds["length"]
        cap, bounds = PARAMS["max_seq_len"], PARAMS["bounds"]
        stats = []
        for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
            bucket = [min(n, cap) for n in lengths if lo <= min(n, cap) < hi]
            stats.append((len(bucket), sum(bucket), max(bucket, default=0)))
        return design_table(stats, len(lengths))

    return clock(run)


# --------------------------------------------------------------------------- reporting

def machine() -> dict:
    import datasets
    import numba

    import gpu_profiler
    from gpu_profiler import engine, native
    from gpu_profiler.backends import available_backends, get_backend
    from gpu_profiler.backends.numba_backend import cores

    return {**common.machine(), "cpu_threads": cores(),
            "cpu_kernels": native.status().split(" (")[0], "numba": numba.__version__,
            "datasets": datasets.__version__, "gpu_profiler": gpu_profiler.__version__,
            "auto_backend": get_backend("auto").name,
            "small_mib": engine.SMALL_SCAN_BYTES >> 20,
            "PYTHONDONTWRITEBYTECODE": os.environ.get("PYTHONDONTWRITEBYTECODE", ""),
            "backends": {k: v or "available" for k, v in available_backends().items()},
            "platform": platform.platform()}


def fmt_s(s: float) -> str:
    return f"{s * 1000:.0f} ms" if s < 10 else f"{s:.1f} s"


def verdict(value: float, target: float) -> str:
    return f"{value:.2f}x (target >= {target:g}x: {'PASS' if value >= target else 'MISS'})"


def markdown(r: dict) -> str:
    m = r["machine"]
    lines = [
        "# Core benchmark (issue 2)", "",
        f"Generated by `make bench` (`bench/bench_core.py`) on {r['date']}, git `{m['git']}`.",
        f"Machine: {m['cpu']}, {m['cores']} cores (shared with other work; CPU kernel "
        f"threads {m['cpu_threads']}, kernels {m['cpu_kernels']}), Python {m['python']}, "
        f"numpy {m['numpy']}, pyarrow {m['pyarrow']}, numba {m['numba']}, datasets "
        f"{m['datasets']}. `auto` backend here: {m['auto_backend']} for scans above "
        f"{m['small_mib']} MiB of input; numba below. Medians of "
        f"{r['repeats']} runs, methods alternated round-robin; 1-minute load average "
        "(os.getloadavg) noted per section.", "",
        *([f"PYTHONDONTWRITEBYTECODE={m['PYTHONDONTWRITEBYTECODE']} here: the editable "
           "package's modules are compiled from source in every process.", ""]
          if m.get("PYTHONDONTWRITEBYTECODE") else []),
        "Lengths: long-tailed SFT-like log-normal (median 600, sigma 1.124, clipped to "
        "[1, 131072]; about 1% above 8192).", "",
        "## Targets", "",
        "| target | measured |", "|---|---|",
    ]
    t = r["targets"]
    lines += [f"| {k} | {v} |" for k, v in t.items()]
    for case in r["cases"]:
        c = case["result"]
        lines += ["", f"## {case['title']}", "",
                  f"{case['description']}. Load during timed rounds: "
                  f"{', '.join(str(x) for x in c['loads'])}.", "",
                  "| method | median | x faster than reference loop | x faster than fast path "
                  "script |", "|---|---|---|---|"]
        ref = case.get("reference")
        rows = list(c["median"].items())
        if ref:
            rows[:0] = [("reference loop: `datasets` Column iterated once per bucket (1 run)",
                         ref["column"]),
                        ("reference, list variant: `ds['length'][:]`, then the same loops "
                         "(1 run)", ref["list"])]
        script = c["median"]["fast path (script process)"]
        for k, sec in rows:
            vs_ref = f"{ref['column'] / sec:,.1f}" if ref else "-"
            lines.append(f"| {k} | {fmt_s(sec)} | {vs_ref} | {script / sec:.2f} |")
        ph = c["fast_path_phases_median"]
        scan = c["cli_scan_seconds_median"]
        lines += ["", "Where the time goes: fast path in-process = read "
                  f"{fmt_s(ph['read'])} + bincount/table {fmt_s(ph['hist_table'])}; "
                  f"gpu-profiler reader + coalescing alone {fmt_s(c['reader_only_median'])}; "
                  "scan time inside the CLI process (JSON `seconds`): "
                  + ", ".join(f"{b} {fmt_s(s)}" for b, s in scan.items())
                  + f"; `auto` ran the {c['auto_chose']} backend."
                  + (f" Load at the start of the reference loops: {ref['load']}." if ref
                     else ""), "",
                  "Anatomy of a fresh process profiling with the numba backend (medians; "
                  "numba is not imported):", "",
                  "| phase | seconds |", "|---|---|"]
        lines += [f"| {k} | {v:.3f} |" for k, v in c["process_anatomy"].items()]
    s = r["startup"]
    lines += ["", "## Process start-up floors", "", "| process | median |", "|---|---|"]
    lines += [f"| `{k}` | {fmt_s(v)} |" for k, v in s.items()]
    mi = r["micro"]
    lines += ["", f"## Micro-benchmark: {mi['samples']:,} int64 lengths in memory, cap {CAP}",
              "", f"Single process; {mi['above_cap_pct']:.2f}% of values above the cap. Load "
              f"during rounds: {', '.join(str(x) for x in mi['loads'])}.", "",
              "| method | median | speed-up vs bincount |", "|---|---|---|"]
    lines += [f"| {k} | {fmt_s(v)} | {mi['ratio'][k]:.2f}x |" for k, v in mi["median"].items()]
    lines += ["", "Every gpu-profiler output (every backend, in-process and CLI) "
              "was checked equal to the reference loop's table (integers exactly, floats to "
              "1e-9) and to each other; the fast path too.", ""]
    return "\n".join(lines)


# --------------------------------------------------------------------------- main

def main() -> None:
    ap = argparse.ArgumentParser(description="Core benchmark (issue 2); see the module doc.")
    ap.add_argument("--samples", type=int, default=10_000_000, help="rows of the length corpus")
    ap.add_argument("--ids-samples", type=int, default=1_000_000,
                    help="rows of the input_ids corpus")
    ap.add_argument("--scale-samples", type=int, default=100_000_000,
                    help="rows of an extra length corpus without reference loop (0: skip)")
    ap.add_argument("--micro-samples", type=int, default=100_000_000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--data", type=Path, default=BENCH / "data")
    ap.add_argument("--out", type=Path, default=BENCH / "results")
    args = ap.parse_args()

    def say(msg: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')} load {load()}] {msg}", flush=True)

    say("building corpora")
    len_dir = build_corpus(args.data, f"len-{args.samples}", args.samples, False)
    ids_dir = build_corpus(args.data, f"ids-{args.ids_samples}", args.ids_samples, True)
    gb = sum(f.stat().st_size for f in ids_dir.glob("*.arrow")) / 1e9
    cases = [
        {"name": "len", "path": len_dir, "offsets_of": None,
         "title": f"Corpus 1: {args.samples:,} samples, `length` column only",
         "description": f"HF save_to_disk dir `{len_dir.name}` written by `datasets` "
                        "(int64 `length`, 1000-row record batches)"},
        {"name": "ids-length", "path": ids_dir, "offsets_of": None,
         "title": f"Corpus 2: {args.ids_samples:,} samples with `input_ids`, `--column length`",
         "description": f"HF dir `{ids_dir.name}` ({gb:.1f} GB, `input_ids` list<int32> of "
                        "realistic length + `length`)"},
        {"name": "ids-offsets", "path": ids_dir, "offsets_of": "input_ids",
         "title": f"Corpus 2: {args.ids_samples:,} samples, `--offsets-of input_ids`",
         "description": f"Same dir ({gb:.1f} GB); lengths from the list offsets, token values "
                        "never read (fast path: `pyarrow.compute.list_value_length`)"},
    ]
    if args.scale_samples:
        big = build_corpus(args.data, f"len-{args.scale_samples}", args.scale_samples, False)
        cases.append({
            "name": "len-scale", "path": big, "offsets_of": None, "no_reference": True,
            "title": f"Scale: {args.scale_samples:,} samples, `length` column only",
            "description": f"HF dir `{big.name}` written by `datasets`, to show where fixed "
                           "process costs stop mattering; no reference loop (hours), outputs "
                           "checked against the fast path's table"})
    results: dict[str, Any] = {"date": time.strftime("%Y-%m-%d %H:%M"), "repeats": args.repeats,
                               "machine": machine(), "cases": []}
    for case in cases:
        say(f"case {case['name']}")
        res = bench_case(case, args.repeats)
        results["cases"].append({k: str(v) if isinstance(v, Path) else v
                                 for k, v in case.items()} | {"result": res})
    say("start-up floors")
    results["startup"] = startup(args.repeats)
    say("micro-benchmark")
    results["micro"] = micro(args.micro_samples, args.repeats)
    say(f"micro: {results['micro']['ratio']}")

    refs: dict[str, dict] = {}
    for path in (len_dir, ids_dir):
        for variant, materialize in (("list", True), ("column", False)):
            say(f"reference loop ({variant}) on {path.name}: once")
            lo = load()
            seconds, table = reference(path, materialize)
            refs.setdefault(str(path), {"load": []})["load"].append(lo)
            refs[str(path)][variant] = seconds
            refs[str(path)][f"{variant}_table"] = table
            say(f"  {seconds:.1f} s")
            if variant == "column" and table != refs[str(path)]["list_table"]:
                sys.exit("FAIL: the two reference variants disagree")
    for case in results["cases"]:
        outputs = case["result"]["outputs"]
        if case.get("no_reference"):
            want = outputs["fast path"]
        else:
            ref = refs[case["path"]]
            case["reference"] = {"column": ref["column"], "list": ref["list"],
                                 "load": ref["load"]}
            want = case["reference_table"] = ref["column_table"]
        for label, out in outputs.items():
            check_table(f"{case['name']}: {label}", want, out)
    say("all outputs agree with the reference loop")

    c1 = results["cases"][0]
    med1 = c1["result"]["median"]
    cli = med1["gpu-profiler auto (CLI process)"]
    results["targets"] = {
        "numba backend vs np.bincount(np.minimum(x, cap)), 100M int64, single process":
            verdict(results["micro"]["ratio"][f"numba backend ({results['micro']['threads']} "
                                              "threads)"], TARGETS["micro_ratio"]),
        "CLI (default auto backend, warm) vs datasets reference loop, 10M HF dir":
            verdict(c1["reference"]["column"] / cli, TARGETS["cli_vs_reference"]),
        "CLI (default auto backend, warm) vs hand-written pyarrow + bincount script, 10M "
        "HF dir":
            verdict(med1["fast path (script process)"] / cli, TARGETS["cli_vs_fast_script"]),
        "(context) CLI vs reference list variant, 10M HF dir":
            f"{c1['reference']['list'] / cli:.1f}x",
    }
    for case in results["cases"]:
        del case["result"]["outputs"]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "core.json").write_text(json.dumps(results, indent=2) + "\n")
    (args.out / "core.md").write_text(markdown(results))
    say(f"wrote {args.out / 'core.md'}")
    print(markdown(results))


if __name__ == "__main__":
    main()
