"""The JSON Lines walk alone: `gpu_profiler.kernels.jsonl.lengths` (native) on the first
100 MiB of each layouts corpus (~100-byte lines, the same ASCII-escaped, ~2 KB documents),
one thread, in memory: no read, no start-up, so a change of the kernel is seen apart from
the noise of whole processes. ``--baseline DIR``: the same measured with another
checkout's install (its own venv and native library), processes in turn (A B, B A, ...).
Minimum of ``--repeat`` calls a process, median over ``--rounds`` processes. Writes
bench/results/jsonl_walk.md and .json."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_layouts  # noqa: E402
import common  # noqa: E402

WALK = """
import sys, time, json, numpy as np
from gpu_profiler import native
k = native.kernel("jsonl_lengths")
name = np.frombuffer(b"num_tokens", np.uint8)
out = {}
for path in sys.argv[2:]:
    text = np.fromfile(path, np.uint8, 100 << 20)
    values = np.empty(text.size // 3 + 1, np.int64)
    valid = np.empty(values.size, np.bool_)
    k(text, 0, name, values, valid)
    best = float("inf")
    for _ in range(int(sys.argv[1])):
        t = time.perf_counter()
        pos, rows, newlines = k(text, 0, name, values, valid)
        best = min(best, time.perf_counter() - t)
    out[path] = [best, int(pos), int(rows), int(values[:rows][valid[:rows]].sum()), text.size]
print(json.dumps(out))
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=9)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--baseline", default="", metavar="DIR")
    args = ap.parse_args()
    corpora = {"~100 B lines": bench_layouts.jsonl(10**7),
               "~100 B, ASCII-escaped": bench_layouts.jsonl_escaped(10**7),
               "~2 KB documents": bench_layouts.jsonl_documents(5 * 10**5)}
    paths = [str(p) for p in corpora.values()]
    pythons = {"gpu-profiler": sys.executable}
    if args.baseline:
        pythons["baseline"] = str(Path(args.baseline, ".venv", "bin", "python"))
    runs: dict[str, list[dict]] = {k: [] for k in pythons}
    for k in range(args.rounds):  # A B, B A, ...: a drift of the load hits both alike
        for who, exe in list(pythons.items())[::1 if k % 2 == 0 else -1]:
            # -P: the package from that install, not from this checkout (the working dir)
            r = common.process([exe, "-P", "-c", WALK, str(args.repeat), *paths])
            runs[who].append(json.loads(r["stdout"]))
    rows = []
    for label, path in zip(corpora, paths, strict=True):
        row = {"corpus": label, "bytes": runs["gpu-profiler"][0][path][4]}
        for who, rs in runs.items():
            got = {tuple(r[path][1:4]) for r in rs}  # where it stopped, rows, their sum
            if got != {tuple(runs["gpu-profiler"][0][path][1:4])}:
                sys.exit(f"FAIL: {label}: {who} parsed other lines or values: {got}")
            if next(iter(got))[0] < row["bytes"] - (64 << 10):  # (its last line is cut)
                sys.exit(f"FAIL: {label}: {who} stopped at byte {next(iter(got))[0]}")
            row[who] = statistics.median(r[path][0] for r in rs)
        rows.append(row)
    result = {"command": "python bench/bench_jsonl_walk.py " + " ".join(sys.argv[1:]),
              "machine": common.machine(), "rows": rows}
    m = result["machine"]
    header = ["corpus", "gpu-profiler", "GB/s"] + (["baseline", "change"] if args.baseline
                                                   else [])
    body = [[row["corpus"], f"{row['gpu-profiler'] * 1e3:.1f} ms",
             f"{row['bytes'] / row['gpu-profiler'] / 1e9:.2f}"]
            + ([f"{row['baseline'] * 1e3:.1f} ms",
                f"{row['gpu-profiler'] / row['baseline'] - 1:+.1%}"] if args.baseline else [])
            for row in rows]
    lines = ["# The JSON Lines walk alone (one thread, in memory)", "",
             f"`{result['command']}` on {m['cpu']}, {m['date']}, git {m['git']}; load "
             f"{m['load']:.1f}. The first 100 MiB of each corpus; minimum of {args.repeat} "
             f"calls a process, median of {args.rounds} processes"
             + (", in turn with the baseline's (A B, B A)." if args.baseline else "."), "",
             *common.table(header, body)]
    common.write_results("jsonl_walk", result, lines)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
