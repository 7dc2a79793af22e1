"""What building the native kernel library costs (`python -m gpu_profiler.native_build
--into DIR`: what ``pip install`` runs), and the JSON Lines walk's compile through the JIT
(`kernels.jsonl.lengths`, first call with an empty ``NUMBA_CACHE_DIR``: what a machine
without the library pays on its first JSON Lines scan). ``--baseline DIR``: the same with
another checkout's install (its own modules: ``python -P``), processes in turn (A B A B).
Wall seconds and peak RSS (the build's largest process), medians over ``--rounds``.
Writes bench/results/build.md and .json.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

JIT = """
import numpy as np
from gpu_profiler.kernels.jsonl import lengths
a = np.frombuffer(b'{"n": 5}\\n', np.uint8).copy()
values, valid = np.zeros(4, np.int64), np.zeros(4, np.bool_)
assert lengths(a, 0, np.frombuffer(b"n", np.uint8), values, valid)[1] == 1
"""


def run(root: Path, what: str) -> dict:
    python = str(root / ".venv" / "bin" / "python")
    with tempfile.TemporaryDirectory(prefix="bench-build-") as tmp:
        env = dict(os.environ, NUMBA_CACHE_DIR=tmp)
        if what == "build":
            return common.process([python, "-P", "-m", "gpu_profiler.native_build", "--into",
                                   tmp], env)
        return common.process([python, "-P", "-c", JIT], env)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--baseline", default="", metavar="DIR")
    args = ap.parse_args()
    roots = {"gpu-profiler": common.ROOT}
    if args.baseline:
        roots["baseline"] = Path(args.baseline).resolve()
    info = common.machine()
    res: dict[str, dict] = {}
    for what in ("build", "jit"):
        runs = common.alternate({k: (lambda r=r, w=what: run(r, w)) for k, r in roots.items()},
                                args.rounds)
        res[what] = {k: {"wall": common.median(v, "wall"), "rss_mib": common.median(v, "rss_mib"),
                         "walls": [round(r["wall"], 1) for r in v]} for k, v in runs.items()}
    names = {"build": "native library build (`native_build --into`)",
             "jit": "JSON Lines walk, first call through the JIT"}
    rows = [[names[w]] + [f"{res[w][k]['wall']:.1f} s ({res[w][k]['rss_mib']:.0f} MiB)"
                          for k in roots] for w in res]
    md = ["# Building the kernels", "",
          f"`python bench/bench_build.py {' '.join(sys.argv[1:])}` on {info['cpu']} "
          f"({info['cores']} cores), {info['date']}, git {info['git']}; load "
          f"{info['load']:.1f} at the start. Wall and peak RSS, medians of {args.rounds} "
          "processes in turn.", ""]
    md += common.table(["what"] + list(roots), rows)
    common.write_results("build", {"machine": info, "command": sys.argv, "results": res}, md)
    print("\n".join(md))


if __name__ == "__main__":
    main()
