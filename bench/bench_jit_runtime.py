"""What numba's reference counting costs the CPU kernels through the JIT (`kernels/jit.py`).

The JSON Lines parser (`kernels/jsonl.py: lengths`) is compiled from its source with
numba's runtime on (plain ``njit``) and off (``_nrt=False``, as shipped), and with its
per-token helpers not inlined, and run beside the native library on lines of three
shapes; ns per line, the minimum of ``--repeat`` runs (the kernel alone, one thread).
Writes bench/results/jit_runtime.md and .json.
"""

from __future__ import annotations

import argparse
import sys
import time
from functools import partial
from pathlib import Path

import numpy as np
from numba import njit

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

LINES = {
    "the bench corpus's line": b'{"id":"doc-1","text":"is are that x\\ny in x\\ny it",'
                               b'"num_tokens":5461,"meta":{"src":"web","score":0.5}}\n',
    "the field alone": b'{"num_tokens":5461}\n',
    "four numbers beside it": b'{"num_tokens":5461,"s":0.5,"u":0.5,"v":0.5,"w":0.5}\n',
}


def compiled(nrt: bool, inline: bool = True):
    """``lengths`` compiled from kernels/jsonl.py with numba's runtime on or off, its
    per-token helpers inlined as shipped or not."""
    src = (common.ROOT / "kernels" / "jsonl.py").read_text().replace(
        "from gpu_profiler.kernels.jit import kernel\n", "")
    if not inline:
        src = src.replace('@kernel(inline="always")\n', "@kernel\n")
    scope: dict = {"__name__": f"jsonl_{nrt}_{inline}", "kernel": partial(njit, _nrt=nrt)}
    exec(compile(src, f"<jsonl nrt={nrt} inline={inline}>", "exec"), scope)  # noqa: S102
    return scope["lengths"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    from gpu_profiler import native

    kernels = {"JIT, runtime on": compiled(True), "JIT, runtime off (shipped)": compiled(False),
               "JIT, runtime off, helpers not inlined": compiled(False, inline=False)}
    if native.library() is not None:
        kernels["native library"] = native.kernel("jsonl_lengths")
    name = np.frombuffer(b"num_tokens", np.uint8)
    values = np.empty(args.lines, np.int64)
    valid = np.empty(args.lines, np.bool_)
    rows = []
    for shape, line in LINES.items():
        text = np.frombuffer(line * args.lines, np.uint8)
        row = {"line": shape, "bytes": len(line)}
        for label, f in kernels.items():
            f(text[:len(line) * 10], 0, name, values, valid)  # compile
            best = float("inf")
            for _ in range(args.repeat):
                t = time.perf_counter()
                got = f(text, 0, name, values, valid)
                best = min(best, time.perf_counter() - t)
            assert got[1] == args.lines and values[0] == 5461, got
            row[label] = best / args.lines * 1e9
        rows.append(row)
    labels = list(kernels)
    m = common.machine()
    md = ["# The JSON Lines kernel through the JIT, with and without numba's runtime", "",
          f"{m['cpu']}, {m['cores']} cores (shared), load {m['load']:.1f}, git {m['git']}, "
          f"{m['date']}. Command: `python bench/bench_jit_runtime.py`. {args.lines:,} lines "
          f"of each shape; ns per line, the best of {args.repeat} runs, one thread, the "
          "kernel alone.", ""]
    md += common.table(["line", "bytes", *labels, "runtime on / off"],
                       [[r["line"], r["bytes"], *(f"{r[k]:.0f}" for k in labels),
                         f"{r[labels[0]] / r[labels[1]]:.2f}x"] for r in rows])
    common.write_results("jit_runtime", {"machine": m, "rows": rows}, md)
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
