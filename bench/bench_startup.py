"""Start-up benchmark: what a whole ``gpu-profiler`` process pays before and around its scan,
layer by layer, beside what a five-line numpy script pays.

Builds a 10,000-sample Hugging Face save_to_disk dir (``input_ids`` list<int32> + ``length``)
under bench/data/ and times, as whole processes in turn (A B C A B C, after a warm-up
round; medians of wall and CPU seconds): the interpreter (``python -c pass``), with numpy
imported (all a numpy script pays before its work), with typer too (the CLI's framework),
with the package's scan and CLI modules, ``gpu-profiler --help``, and ``gpu-profiler
profile`` of the small dir (its scan is ~1 ms: the rest is start-up, tables and output),
with the numpy backend and with ``--offsets-of input_ids``. ``--baseline DIR`` runs the
package's rows from a checkout DIR as well, in the same alternation (its ``.venv``, which
should start as this one does: the same site hooks, numba-cuda's included). Every
process runs with one OpenBLAS thread, as the CLI sets it (numpy's idle threads otherwise
spin for ~0.1 s of CPU each, and on a 2-core machine the layers' times then vary by more
than their steps). Target: ``profile`` under 1 s. Writes bench/results/startup.md and
startup.json.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

BENCH, CLI = common.BENCH, common.CLI
TARGET_S = 1.0
#: The import layers, each one's ``python -c`` code (each includes the ones before).
LAYERS = {"python -c pass": "pass", "+ numpy": "import numpy",
          "+ typer": "import numpy, typer",
          "+ the package's modules": "import numpy, typer, gpu_profiler.api, gpu_profiler.cli.app"}
OURS = ("+ the package's modules",)


def corpus(samples: int) -> Path:
    """The small HF dir (built once)."""
    path = BENCH / "data" / f"startup-hf-{samples}"
    if not (path / "state.json").exists():
        import datasets

        rng = np.random.default_rng(4)
        lens = np.clip(rng.lognormal(np.log(600), 1.124, samples), 1, 16384).astype(np.int64)
        ids = [rng.integers(0, 50_000, n, dtype=np.int32) for n in lens]
        datasets.Dataset.from_dict({"input_ids": ids, "length": lens}).save_to_disk(str(path))
    return path


def commands(path: str, python: str, cli: str) -> dict[str, list[str]]:
    """Each row's command, run with ``python`` and the ``cli`` script of one checkout."""
    out = {name: [python, "-P", "-c", code] for name, code in LAYERS.items()}  # (-P: the
    # package from the venv's install, not the working directory's)
    out |= {"gpu-profiler --help": [cli, "--help"],
            "profile (auto backend)": [cli, "profile", path, "--quiet"],
            "profile -b numpy": [cli, "profile", path, "--quiet", "-b", "numpy"],
            "profile --offsets-of input_ids": [cli, "profile", path, "--quiet",
                                               "--offsets-of", "input_ids"]}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=21)
    ap.add_argument("--baseline", help="a checkout (with its .venv) to run the same rows of")
    args = ap.parse_args()
    path = str(corpus(args.samples))
    common.compile_package()
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    now = commands(path, sys.executable, CLI)
    methods = {name: (lambda c=cmd: common.process(c, env)) for name, cmd in now.items()}
    if args.baseline:
        venv = Path(args.baseline, ".venv", "bin")
        before = commands(path, str(venv / "python"), str(venv / "gpu-profiler"))
        methods |= {f"{name} (baseline)": (lambda c=cmd: common.process(c, env))
                    for name, cmd in before.items()
                    if name in OURS or name not in LAYERS}
    machine = common.machine()
    common.alternate(methods, 1)  # warm-up: page cache, kernel cache
    runs = common.alternate(methods, args.repeat)
    rows = {name: {"wall_s": common.median(r, "wall"), "cpu_s": common.median(r, "cpu"),
                   "runs": [round(x["wall"], 4) for x in r]} for name, r in runs.items()}
    for name, r in rows.items():
        print(f"{name:44s} wall {r['wall_s'] * 1e3:6.1f} ms  cpu {r['cpu_s'] * 1e3:6.1f} ms",
              flush=True)
    auto = rows["profile (auto backend)"]["wall_s"]
    machine["load_end"] = common.load()
    cmd = "python bench/bench_startup.py " + " ".join(sys.argv[1:])
    data = {"command": cmd, "samples": args.samples, "repeat": args.repeat,
            "target_s": TARGET_S, "meets_target": auto < TARGET_S, "machine": machine,
            "results": rows}
    md = ["# Start-up: whole processes, layer by layer", "",
          f"`{cmd}` on {machine['cpu']} ({machine['cores']} cores shared with other work), "
          f"{machine['date']}, git {machine['git']}, load {machine['load']:.1f}-"
          f"{machine['load_end']:.1f}. Each command a whole process, all of them in turn "
          f"after a warm-up round, one OpenBLAS thread each (as the CLI sets it); medians of "
          f"{args.repeat}. A layer's `python -c` imports "
          "those above it too, so its step is what it adds. A profile of the "
          f"{args.samples:,}-sample dir scans for ~1 ms: the rest is start-up, the tables and "
          f"the output. Target: `profile` under {TARGET_S:.0f} s: "
          f"**{'met' if auto < TARGET_S else 'missed'}** ({auto * 1e3:.0f} ms).", ""]
    table, prev = [], 0.0
    for name, r in rows.items():
        step = ""
        if name in LAYERS:
            step, prev = f"+{(r['wall_s'] - prev) * 1e3:.0f}" if prev else "", r["wall_s"]
        table.append([f"`{name}`", f"{r['wall_s'] * 1e3:.0f}", step,
                      f"{r['cpu_s'] * 1e3:.0f}"])
    md += common.table(["command", "wall (ms)", "step (ms)", "CPU (ms)"], table)
    common.write_results("startup", data, md)


if __name__ == "__main__":
    main()
