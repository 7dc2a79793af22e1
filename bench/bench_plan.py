"""Epoch-planning benchmark (issue 14): `BucketBatchSampler(...).plan()` on 100M lengths.

Target: plan one epoch of 100,000,000 samples in <= 5 s and <= 2 GiB peak resident memory
on this 2-core machine, per policy (bucket assignment and counting sort in a kernel, not an
argsort of the whole array).

Lengths: ``--samples`` (default 100M) int32 SFT-like lengths, log-normal (median 600,
sigma 1.124, clipped to [1, 131072]; about 1% above 8192), seeded (the same every run) and
generated in chunks inside each measuring process, so generating them adds little beyond
the array itself to that process's peak.

Every measurement is a fresh subprocess, so its ``ru_maxrss`` is that run's peak. Timed:
``BucketBatchSampler(x, policy=P, world_size=W).plan()`` (construction + plan, including
loading the native kernel library, as a training process's first epoch pays it). Reported
per run: that wall time (and the process's CPU time over it), the resident set right
before it (lengths + interpreter, ``VmRSS``) and the peak (``ru_maxrss``), so the plan's own
increment shows. One warm-up process first (each run records what ``native.status()``
said: the kernels must run natively).

Cases: fixed and sorted with world_size 1, fixed with world_size 8, ``--repeat`` runs each
(cases alternated round-robin); side by side, ``--baseline-repeat`` runs of a naive numpy
baseline of step 1 (bucket + shuffle): ``np.searchsorted`` bucket ids, ``np.argsort(ids,
kind="stable")``, ``rng.permutation`` per bucket. Every plan's samples per bucket are
checked against the baseline's and the plans against each other across runs (exits 1 on a
mismatch). Then diagnostic runs (not timed against the target): per-kernel wall and system
CPU time (wrapping ``native._Native.__call__``), epochs 1 and 2 in the same process (a
training process's later epochs: the sampler drops the previous epoch's plan before it plans
the next, so their peak is checked against the target too), and the pile size
(``piles.PILE``) swept.
Writes bench/results/plan.md and plan.json.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from datetime import datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
SEED = 20261214
CHUNK = 1 << 22  # lengths generated 4M at a time (32 MiB of float64 scratch)
TARGET_S = 5.0
TARGET_GIB = 2.0
#: Sources of the grouped case: the samples at or above `LONG` are the last one's (code),
#: the others uniform over the rest; the planner interleaves the sources too.
SOURCES, LONG = 50, 3296
CASES = {"fixed, world_size 1": ("fixed", 1, 0), "sorted, world_size 1": ("sorted", 1, 0),
         "fixed, world_size 8": ("fixed", 8, 0),
         "fixed, world_size 8, 50 sources": ("fixed", 8, SOURCES)}
BASELINE = "numpy baseline (searchsorted + stable argsort + permutation per bucket)"
#: Files the measured code lives in: the md says whether they differ from the commit.
CODE = ("gpu_profiler/sampler.py", "gpu_profiler/piles.py", "kernels/plan.py",
        "gpu_profiler/native.py", "gpu_profiler/analysis/interleave.py")


# --------------------------------------------------------------------------- child side

def sft_lengths(n: int) -> Any:
    """``n`` int32 log-normal lengths (median 600, sigma 1.124), clipped to [1, 131072]."""
    import numpy as np

    rng = np.random.default_rng(SEED)
    out = np.empty(n, np.int32)
    for lo in range(0, n, CHUNK):
        m = min(CHUNK, n - lo)
        out[lo:lo + m] = np.clip(rng.lognormal(math.log(600), 1.124, m), 1, 131072)
    return out


def source_labels(x: Any, sources: int, np: Any) -> Any:
    """int8 labels: `LONG` and longer the last source's, the rest uniform over the others
    (seeded, in chunks)."""
    out = np.empty(x.size, np.int8)
    rng = np.random.default_rng(SEED + 1)
    for lo in range(0, x.size, CHUNK):
        hi = min(x.size, lo + CHUNK)
        out[lo:hi] = np.where(x[lo:hi] >= LONG, sources - 1,
                              rng.integers(0, sources - 1, hi - lo))
    return out


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        kib = next(int(ln.split()[1]) for ln in f if ln.startswith("VmRSS:"))
    return kib / 1024


def maxrss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def usage() -> tuple[float, float, float, int]:
    """Wall, user CPU and system CPU seconds, and minor page faults, so far."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return time.perf_counter(), r.ru_utime, r.ru_stime, r.ru_minflt


def since(u: tuple[float, float, float, int]) -> dict:
    v = usage()
    return {"wall_s": v[0] - u[0], "user_s": v[1] - u[1], "sys_s": v[2] - u[2],
            "minor_faults": v[3] - u[3]}


def child(spec: dict) -> dict:
    """One measurement in this (fresh) process."""
    import numpy as np

    import gpu_profiler
    from gpu_profiler import native, piles
    from gpu_profiler.params import DEFAULT_BOUNDS, BucketParams

    out: dict[str, Any] = {"kind": spec["kind"]}
    t = time.perf_counter()
    x = sft_lengths(spec["samples"])
    out["generate_s"] = time.perf_counter() - t
    out["maxrss_after_generate_mib"] = maxrss_mib()
    if spec["kind"] == "baseline":
        return out | baseline(x, np) | {"above_8192_pct": above(x, np)}
    if spec.get("pile"):
        piles.PILE = spec["pile"]
    if spec.get("no_hugepages"):  # numpy advises huge pages for large arrays by default
        np._core.multiarray._set_madvise_hugepage(False)  # type: ignore[attr-defined]
    calls: list[tuple[str, dict]] = []
    if spec["kind"] == "breakdown":  # every native kernel call timed
        t = time.perf_counter()
        native.library()
        out["library_load_s"] = time.perf_counter() - t
        call = native._Native.__call__

        def timed(self: Any, *args: Any) -> Any:
            u = usage()
            try:
                return call(self, *args)
            finally:
                calls.append((self.name, since(u)))

        native._Native.__call__ = timed  # type: ignore[method-assign]
    groups = None
    if spec.get("sources"):
        groups = source_labels(x, spec["sources"], np)
    out["rss_before_mib"] = rss_mib()
    out["maxrss_before_mib"] = maxrss_mib()
    u = usage()
    s = gpu_profiler.BucketBatchSampler(x, policy=spec["policy"],
                                        world_size=spec["world_size"], groups=groups)
    plan = s.plan()
    out |= since(u)
    out["cpu_s"] = out["user_s"] + out["sys_s"]
    out["peak_mib"] = maxrss_mib()
    out["native"] = native.status()
    out["above_8192_pct"] = above(x, np)
    if spec["kind"] == "breakdown":
        # Then epochs 1 and 2 in this process, as a training process runs them: the sampler
        # drops the last epoch's plan before it makes the next (and nothing else here holds
        # one), so the peak from epoch 1 on should be the first epoch's.
        del plan
        epochs = [out | {"kernels": kernels(calls)}]
        for epoch in (1, 2):
            calls.clear()
            u = usage()
            s.set_epoch(epoch)
            s.plan()
            epochs.append(since(u) | {"peak_mib": maxrss_mib(), "kernels": kernels(calls)})
        out["epochs"] = epochs
        return out
    # Checks (after the measurement): the plan covers every sample exactly once, per bucket.
    k = len(DEFAULT_BOUNDS) - 1
    per_bucket = np.bincount(plan.bucket, weights=plan.end - plan.start, minlength=k)
    layout_ok = plan.layout.size + plan.dropped_samples == x.size
    if x.size <= 1 << 22:  # small runs: every sample exactly once
        layout_ok = layout_ok and bool((np.bincount(plan.layout, minlength=x.size) == 1).all())
    digest = hashlib.blake2b(digest_size=8)
    for a in (plan.start, plan.end, plan.bucket, plan.layout[:1 << 20], plan.layout[-1 << 20:]):
        digest.update(np.ascontiguousarray(a).data)
    p = BucketParams(world_size=spec["world_size"])
    return out | {"batches": plan.batches, "steps": plan.steps, "min_run": plan.min_run,
                  "dropped": plan.dropped_samples, "split_batches": plan.split_batches,
                  "bucket_samples": [int(v) for v in per_bucket], "layout_ok": layout_ok,
                  "digest": digest.hexdigest(), "bounds": list(p.bounds),
                  "max_seq_len": p.max_seq_len}


def kernels(calls: list[tuple[str, dict]]) -> dict[str, list[dict]]:
    """The timed kernel calls by kernel, in call order."""
    out: dict[str, list[dict]] = {}
    for name, took in calls:
        out.setdefault(name, []).append(took)
    return out


def above(x: Any, np: Any) -> float:
    """Percent of ``x`` above 8192 (in chunks: no 100M-entry mask)."""
    hits = sum(int(np.count_nonzero(x[lo:lo + CHUNK] > 8192)) for lo in range(0, x.size, CHUNK))
    return hits / max(1, x.size) * 100


def baseline(x: Any, np: Any) -> dict:
    """Step 1 of the plan the naive way: bucket ids, a stable argsort, a shuffle per bucket."""
    from gpu_profiler.params import DEFAULT_BOUNDS, BucketParams

    cap = BucketParams.max_seq_len
    edges = np.minimum(np.asarray(DEFAULT_BOUNDS), cap + 1)
    rss, before = rss_mib(), maxrss_mib()
    u = usage()
    t0 = u[0]
    rng = np.random.default_rng(SEED)
    ids = np.searchsorted(edges, np.minimum(x, cap), side="right") - 1
    t_ids = time.perf_counter()
    order = np.argsort(ids, kind="stable")
    t_sort = time.perf_counter()
    sizes = np.bincount(ids, minlength=len(edges) - 1)
    bounds = np.concatenate(([0], np.cumsum(sizes)))
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        order[lo:hi] = rng.permutation(order[lo:hi])
    end = time.perf_counter()
    took = since(u)
    return took | {
        "rss_before_mib": rss, "maxrss_before_mib": before,
        "cpu_s": took["user_s"] + took["sys_s"], "peak_mib": maxrss_mib(),
        "phases_s": {"searchsorted": t_ids - t0, "argsort": t_sort - t_ids,
                     "permutation": end - t_sort},
        "bucket_samples": [int(v) for v in sizes[:len(edges) - 1]]}


# --------------------------------------------------------------------------- parent side

def load() -> float:
    """1-minute load average (2 cores shared with other work)."""
    return round(os.getloadavg()[0], 2)


def run_child(spec: dict) -> dict:
    """One measuring process."""
    load_at = load()
    p = subprocess.run([sys.executable, __file__, "--child", json.dumps(spec)],
                       capture_output=True, text=True, cwd=ROOT)
    if p.returncode:
        sys.exit(f"FAIL: {spec} exited {p.returncode}:\n{p.stderr}")
    r = json.loads(p.stdout.strip().splitlines()[-1])
    r["load_1m"] = load_at
    return r


def machine(samples: int) -> dict:
    import numpy as np
    import pyarrow as pa

    import gpu_profiler
    from gpu_profiler import native

    cpu = next((ln.split(":", 1)[1].strip() for ln in
                Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")), platform.processor())
    with open("/proc/meminfo") as f:
        mem = next(int(ln.split()[1]) for ln in f if ln.startswith("MemTotal:")) / 2**20

    def git(*a: str) -> str:
        return subprocess.run(["git", *a], capture_output=True, text=True,
                              cwd=ROOT).stdout.strip()

    return {"cpu": cpu, "cores": os.cpu_count(), "mem_gib": round(mem, 1),
            "python": platform.python_version(), "numpy": np.__version__,
            "pyarrow": pa.__version__, "numba": version("numba"),
            "gpu_profiler": gpu_profiler.__version__,
            "git": git("describe", "--always", "--dirty"),
            "code_changed": git("status", "--porcelain", "--", *CODE).splitlines(),
            "native": native.status(), "samples": samples, "thp": thp(),
            "PYTHONDONTWRITEBYTECODE": os.environ.get("PYTHONDONTWRITEBYTECODE", ""),
            "platform": platform.platform()}


def thp() -> str:
    """The transparent huge page settings (numpy asks for huge pages for large arrays)."""
    base = Path("/sys/kernel/mm/transparent_hugepage")
    try:
        return ", ".join(f"{f} {(base / f).read_text().split('[')[1].split(']')[0]}"
                         for f in ("enabled", "defrag"))
    except (OSError, IndexError):
        return "unknown"


def summary(runs: list[dict], key: str) -> dict:
    v = [r[key] for r in runs]
    return {"median": statistics.median(v), "min": min(v), "max": max(v)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=100_000_000)
    ap.add_argument("--repeat", type=int, default=5, help="runs per case")
    ap.add_argument("--baseline-repeat", type=int, default=3, help="runs of the baseline")
    ap.add_argument("--piles", default="4096,16384,131072,1048576",
                    help="pile sizes swept (fixed, world_size 1; one run each; '' skips)")
    ap.add_argument("--out", type=Path, default=BENCH / "results",
                    help="where plan.md and plan.json go")
    ap.add_argument("--report", type=Path, metavar="PLAN_JSON",
                    help="only rewrite plan.md (in --out) from a plan.json of an earlier run")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return
    if args.report:
        (args.out / "plan.md").write_text(markdown(json.loads(args.report.read_text())))
        return

    def say(msg: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')} load {load():.2f}] {msg}", flush=True)

    n = args.samples
    m = machine(n)
    say(f"warm-up process; {m['native']}")
    warm = run_child({"kind": "plan", "policy": "fixed", "world_size": 1, "samples": n})
    runs: dict[str, list[dict]] = {name: [] for name in (*CASES, BASELINE)}
    for i in range(max(args.repeat, args.baseline_repeat)):
        for name, (policy, world, sources) in CASES.items():
            if i < args.repeat:
                r = run_child({"kind": "plan", "policy": policy, "world_size": world,
                               "samples": n, "sources": sources})
                runs[name].append(r)
                say(f"round {i + 1} {name}: {r['wall_s']:.2f} s, peak {r['peak_mib']:.0f} MiB"
                    f" (before {r['rss_before_mib']:.0f} MiB)")
        if i < args.baseline_repeat:
            r = run_child({"kind": "baseline", "samples": n})
            runs[BASELINE].append(r)
            say(f"round {i + 1} baseline: {r['wall_s']:.2f} s, peak {r['peak_mib']:.0f} MiB")
    breakdown = {}
    for name, (policy, world, sources) in CASES.items():
        breakdown[name] = run_child({"kind": "breakdown", "policy": policy,
                                     "world_size": world, "samples": n, "sources": sources})
        say(f"breakdown {name}: epochs 0, 1, 2 "
            + ", ".join(f"{e['wall_s']:.2f} s (peak {e['peak_mib']:.0f} MiB)"
                        for e in breakdown[name]["epochs"]))
    no_huge = "fixed, world_size 1, numpy's huge-page advice off"
    breakdown[no_huge] = run_child({"kind": "breakdown", "policy": "fixed", "world_size": 1,
                                    "samples": n, "no_hugepages": True})
    say(f"breakdown {no_huge}: epochs 0, 1, 2 "
        + ", ".join(f"{e['wall_s']:.2f} s" for e in breakdown[no_huge]["epochs"]))
    piles = {}
    for pile in (int(v) for v in args.piles.split(",") if v.strip()):
        piles[pile] = run_child({"kind": "breakdown", "policy": "fixed", "world_size": 1,
                                 "samples": n, "pile": pile})
        say(f"pile {pile}: {piles[pile]['wall_s']:.2f} s")

    end = machine(n)
    m["at_end"] = {"git": end["git"], "code_changed": end["code_changed"]}
    problems = check(warm, runs)
    result = {"date": datetime.now().strftime("%Y-%m-%d %H:%M"), "machine": m,
              "command": " ".join(["python", "bench/bench_plan.py", *sys.argv[1:]]),
              "target": {"wall_s": TARGET_S, "peak_gib": TARGET_GIB}, "warmup": warm,
              "cases": {name: {"wall_s": summary(r, "wall_s"), "cpu_s": summary(r, "cpu_s"),
                               "sys_s": summary(r, "sys_s"),
                               "peak_mib": summary(r, "peak_mib"),
                               "rss_before_mib": summary(r, "rss_before_mib"), "runs": r}
                        for name, r in runs.items() if r},
              "breakdown": breakdown, "piles": piles, "problems": problems}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "plan.json").write_text(json.dumps(result, indent=2) + "\n")
    (args.out / "plan.md").write_text(markdown(result))
    say(f"wrote {args.out / 'plan.md'}")
    if problems:
        sys.exit("FAIL: " + "; ".join(problems))


def check(warm: dict, runs: dict[str, list[dict]]) -> list[str]:
    """What is wrong with the runs: kernels not native, uncovered samples, plans that differ
    between runs, or samples per bucket that differ from the baseline's."""
    problems = []
    want = runs[BASELINE][0]["bucket_samples"] if runs[BASELINE] else None
    for name in CASES:
        for r in runs[name]:
            if not r["native"].startswith("native"):
                problems.append(f"{name}: kernels not native ({r['native']})")
            if not r["layout_ok"]:
                problems.append(f"{name}: the layout does not cover every sample once")
            if want is not None and r["bucket_samples"] != want:
                problems.append(f"{name}: samples per bucket {r['bucket_samples']} differ "
                                f"from the baseline's {want}")
        if len({r["digest"] for r in runs[name]}) > 1:
            problems.append(f"{name}: the plan differs between runs of one seed")
    fixed = runs["fixed, world_size 1"]
    if fixed and warm["digest"] != fixed[0]["digest"]:
        problems.append("the warm-up plan differs from the measured ones")
    return problems


# --------------------------------------------------------------------------- report

def loads(runs: list[dict]) -> str:
    return ", ".join(f"{x['load_1m']:.2f}" for x in runs)


def gib(mib: float) -> str:
    return f"{mib / 1024:.2f} GiB"


def markdown(r: dict) -> str:
    m, cases = r["machine"], r["cases"]
    n, end = m["samples"], m["at_end"]
    first = cases["fixed, world_size 1"]["runs"][0]
    reps = len(cases["fixed, world_size 1"]["runs"])
    lines = [
        "# Epoch planning benchmark (issue 14)", "",
        f"Generated by `{r['command']}` (`bench/bench_plan.py`) on {r['date']}, "
        f"git `{m['git']}`"
        + (f" (measured code differs from it: {', '.join(m['code_changed'])})"
           if m["code_changed"] else "") + "."
        + (f" At the end: git `{end['git']}`." if end["git"] != m["git"] else ""),
        f"Machine: {m['cpu']}, {m['cores']} cores, {m['mem_gib']} GiB (shared with other "
        f"work; kernels {m['native'].split(' (')[0]}), Python {m['python']}, numpy "
        f"{m['numpy']}, pyarrow {m['pyarrow']}, numba {m['numba']}; transparent huge pages: "
        f"{m['thp']}. Medians of {reps} runs "
        "per case (min-max beside), cases alternated round-robin, each run a fresh process; "
        "1-minute load average (os.getloadavg) at the start of each run noted per case.", "",
        *([f"PYTHONDONTWRITEBYTECODE={m['PYTHONDONTWRITEBYTECODE']} here.", ""]
          if m["PYTHONDONTWRITEBYTECODE"] else []),
        f"Lengths: {n:,} int32, log-normal (median 600, sigma 1.124, clipped to [1, 131072]; "
        f"{first['above_8192_pct']:.2f}% above 8192), seed {SEED}, generated in "
        f"{CHUNK >> 20}M-sample chunks inside each process ({first['generate_s']:.1f} s; "
        f"peak {first['maxrss_after_generate_mib']:.0f} MiB after generating, "
        f"{n * 4 / 2**20:.0f} MiB of it the array). Default bucket table (bounds "
        f"{','.join(map(str, first['bounds']))}, max_seq_len {first['max_seq_len']}, token "
        "budget 49152, at most 64 rows).", "",
        "Timed: `BucketBatchSampler(x, policy=P, world_size=W).plan()`, construction + plan, "
        "in a fresh process (loading the native library included). *Before* is the "
        "resident set right before it (VmRSS: the lengths + the interpreter); *peak* is the "
        "process's ru_maxrss after it; *plan's own* is peak - before.", "",
        "## Targets", "",
        "| target | measured | verdict |", "|---|---|---|"]
    for name in CASES:
        c = cases[name]
        t, pk = c["wall_s"]["median"], c["peak_mib"]["max"]
        ok_t, ok_m = t <= TARGET_S, pk <= TARGET_GIB * 1024
        if name.startswith("fixed, world_size 8"):
            lines.append(f"| (context) {name}: the same targets | {t:.2f} s, peak "
                         f"{gib(pk)} | {'PASS' if ok_t and ok_m else 'MISS'} |")
            continue
        policy = name.split(",")[0]
        lines.append(f"| {policy}: median plan time <= {TARGET_S:g} s at {n:,} | {t:.2f} s "
                     f"(min-max {c['wall_s']['min']:.2f}-{c['wall_s']['max']:.2f}) | "
                     f"{'PASS' if ok_t else 'MISS'} |")
        lines.append(f"| {policy}: peak RSS <= {TARGET_GIB:g} GiB at {n:,} | {gib(pk)} (the "
                     f"largest of {len(c['runs'])} runs) | {'PASS' if ok_m else 'MISS'} |")
    for name, d in r["breakdown"].items():
        if name not in CASES:
            continue
        later = max(e["peak_mib"] for e in d["epochs"][1:])
        lines.append(f"| (context) {name}: peak RSS <= {TARGET_GIB:g} GiB from epoch 1 on "
                     "(later epochs in one process; the sampler drops the last plan before "
                     f"it makes the next; diagnostic run) | {gib(later)} | "
                     f"{'PASS' if later <= TARGET_GIB * 1024 else 'MISS'} |")
    if r["problems"]:
        lines += ["", "**Checks failed:** " + "; ".join(r["problems"])]
    lines += ["", "## Results", "",
              "| case | median wall (s) | min-max (s) | median CPU (s) | of it sys (s) | "
              "before (MiB) | peak (MiB), median (min-max) | plan's own (MiB) | batches | "
              "loads |", "|---|--:|--:|--:|--:|--:|--:|--:|--:|---|"]
    for name, c in cases.items():
        runs = c["runs"]
        own = statistics.median(x["peak_mib"] - x["rss_before_mib"] for x in runs)
        w, pk = c["wall_s"], c["peak_mib"]
        batches = f"{runs[0]['batches']:,}" if "batches" in runs[0] else "-"
        lines.append(f"| {name} | {w['median']:.2f} | {w['min']:.2f}-{w['max']:.2f} | "
                     f"{c['cpu_s']['median']:.2f} | {c['sys_s']['median']:.2f} | "
                     f"{c['rss_before_mib']['median']:.0f} | "
                     f"{pk['median']:.0f} ({pk['min']:.0f}-{pk['max']:.0f}) | {own:.0f} | "
                     f"{batches} | {loads(runs)} |")
    spread = {name: (min(x["user_s"] for x in c["runs"]), max(x["user_s"] for x in c["runs"]),
                     min(x["sys_s"] for x in c["runs"]), max(x["sys_s"] for x in c["runs"]))
              for name, c in cases.items()}
    lines += ["", "CPU time split, min-max over the runs: user (the planning's own work) "
              + ", ".join(f"{name} {v[0]:.2f}-{v[1]:.2f} s" for name, v in spread.items())
              + "; system (the kernel faulting in freshly allocated arrays on first touch) "
              + ", ".join(f"{name} {v[2]:.2f}-{v[3]:.2f} s" for name, v in spread.items())
              + ". The run-to-run spread of the wall times is mostly the system time."]
    base = cases.get(BASELINE)
    if base:
        b, fixed = base["wall_s"]["median"], cases["fixed, world_size 1"]
        ph = {k: statistics.median(x["phases_s"][k] for x in base["runs"])
              for k in base["runs"][0]["phases_s"]}
        same = not any("baseline" in p for p in r["problems"])
        ratio = base["peak_mib"]["median"] / fixed["peak_mib"]["median"]
        lines += ["", "Baseline time / plan time (medians): "
                  + ", ".join(f"{name} {b / cases[name]['wall_s']['median']:.1f}x"
                              for name in CASES)
                  + f"; baseline peak RSS {ratio:.1f}x the fixed plan's. The baseline does "
                  "only step 1 (the buckets' shuffled layout, what `fixed` computes with "
                  "`pile_sort` + `shuffle_segments`), none of the batching or ordering; its "
                  "phases (medians): " + ", ".join(f"{k} {v:.2f} s" for k, v in ph.items())
                  + f". Its samples per bucket equal every plan's: {'yes' if same else '**no**'}."]
    lines += ["", "## Where the time goes (diagnostic runs, one process each)", "",
              "Each native kernel call timed (wrapping `native._Native.__call__`): wall "
              "seconds, with the system (kernel) CPU seconds in brackets where there were "
              "any to speak of. Two calls are shown as first + second: `pile_sort` is the "
              "count pass + the scatter pass (which writes the 8-byte-per-sample layout, "
              "freshly allocated), `shuffle_segments` the piles + each bucket's batches. "
              "*Outside kernels* is the rest of construction + plan (numpy on the batch "
              "arrays, Python). Loading the library (dlopen) is timed before, apart: "
              + ", ".join(f"{d['library_load_s'] * 1000:.0f} ms"
                          for d in r["breakdown"].values())
              + ". Then, in the same process, `set_epoch(e); plan()` for epochs 1 and 2, as a "
              "training process runs them: the sampler drops the last epoch's plan before it "
              "makes the next, so a training process's peak from epoch 1 on is the largest "
              "of these epochs' peaks. The last run is the first again with "
              "numpy's huge-page advice off (`np._core.multiarray._set_madvise_hugepage"
              "(False)`, 4 KiB pages): the scatter pass's system time is the kernel faulting "
              "in the freshly allocated layout on first touch, huge pages or not.", "",
              HEAD.format("case"), RULE]
    for name, d in r["breakdown"].items():
        lines += [breakdown_row(name if e == 0 else "", e, ep)
                  for e, ep in enumerate(d["epochs"])]
    if r["piles"]:
        lines += ["", "## Pile size (`piles.PILE`; fixed, world_size 1, one process each)",
                  "", "The counting sort scatters into piles of at most PILE samples, each "
                  "then shuffled: small piles shuffle in cache, but the scatter writes to "
                  "more places.", "", HEAD.format("PILE"), RULE]
        for p, d in r["piles"].items():
            label = f"{int(p):,}" + (" (default)" if int(p) == 1 << 17 else "")
            lines += [breakdown_row(label if e == 0 else "", e, ep)
                      for e, ep in enumerate(d["epochs"])]
    return "\n".join(lines) + "\n"


KERNELS = ("clip_counts_int32", "source_counts_int32", "pile_sort_int32", "shuffle_segments",
           "sorted_cuts", "interleave", "expand")
HEAD = ("| {} | epoch | total (s) | sys (s) | " + " | ".join(f"`{k}`" for k in KERNELS)
        + " | outside kernels | peak (MiB) |")
RULE = "|---|--:|--:|--:|" + "--:|" * len(KERNELS) + "--:|--:|"


def breakdown_row(name: str, epoch: int, d: dict) -> str:
    k = d["kernels"]
    inside = sum(c["wall_s"] for v in k.values() for c in v)

    def cell(n: str) -> str:
        if n not in k:
            return "-"
        each = k[n]
        wall = (" + ".join(f"{c['wall_s']:.2f}" for c in each) if len(each) <= 2
                else f"{sum(c['wall_s'] for c in each):.2f} ({len(each)} calls)")
        sys_s = [c["sys_s"] for c in each]
        if sum(sys_s) < 0.05:
            return wall
        return wall + " (sys " + (" + ".join(f"{v:.2f}" for v in sys_s) if len(each) <= 2
                                  else f"{sum(sys_s):.2f}") + ")"

    return (f"| {name} | {epoch} | {d['wall_s']:.2f} | {d['sys_s']:.2f} | "
            + " | ".join(cell(n) for n in KERNELS)
            + f" | {d['wall_s'] - inside:.2f} | {d['peak_mib']:.0f} |")


if __name__ == "__main__":
    main()
