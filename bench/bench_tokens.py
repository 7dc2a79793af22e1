"""Flat token streams (issue 12, item 6): documents found per second in a 1e8-token nanoGPT
``.bin`` (uint16, GPT-2's EOT 50256, documents of ~1000 tokens), numba vs numpy, and the
peak RSS of the scan, on this machine.

Measured, each in a fresh process (its own peak RSS, ``VmHWM``) after a scan of a 2-token
file (imports and kernels loaded: the first big scan still pays its fresh memory's page
faults), page cache warm, medians of ``--repeats`` runs with the backends interleaved:

  * ``histogram``: ``gpu_profiler.histogram(path, eot=50256, backend=B, cap=8192)`` end to
    end (positioned reads of 8 MiB chunks in a read-ahead thread, the backend's kernel);
  * ``read``: the reader alone (chunks read, carried, dropped): the floor of the scan;
  * ``kernel``: the backend on the whole stream already in memory (one chunk).

Every histogram is checked equal across backends (exit 1 otherwise). Writes
bench/results/tokens.md and tokens.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

DATA, RESULTS = common.DATA, common.RESULTS
TOKENS = 100_000_000
EOT = 50256

_RUN = r"""
import json, re, sys, time
from pathlib import Path
import numpy as np
import gpu_profiler as gp
from gpu_profiler.backends import get_backend
from gpu_profiler.chunk import Chunk, Documents
from gpu_profiler.readers import LengthSpec, Reading, SourceOptions, tokens
path, kind, backend = sys.argv[1:4]
tiny = Path(sys.argv[4])
np.array([1, 50256], np.uint16).tofile(tiny)
gp.histogram(str(tiny), eot=50256, backend=backend, cap=8)  # imports and kernels loaded
Path("/proc/self/clear_refs").write_text("5")
t = time.perf_counter()
if kind == "histogram":
    h = gp.histogram(path, eot=50256, backend=backend, cap=8192)
    out = {"docs": h.valid, "tokens": h.tokens, "counts": int(h.counts @ np.arange(h.cap + 1))}
elif kind == "read":
    r = Reading(LengthSpec("length"), source=SourceOptions(eot=50256))
    out = {"ids": sum(c.data.size for c in tokens.TokenPart(Path(path)).chunks(r))}
else:
    x = np.fromfile(path, np.uint16)
    t = time.perf_counter()
    h = get_backend(backend).histogram([Chunk(x, docs=Documents(50256))], 8192)
    out = {"docs": h.valid}
out["seconds"] = time.perf_counter() - t
status = Path("/proc/self/status").read_text()
out["peak_mib"] = int(re.search(r"VmHWM:\s+(\d+)", status).group(1)) >> 10
print(json.dumps(out))
"""


def corpus() -> Path:
    """The stream, generated once (seeded): ids uniform below the EOT, one in 1000 an EOT."""
    return common.token_stream(DATA / "tokens_1e8.bin", TOKENS, EOT)


def run(path: Path, kind: str, backend: str) -> dict:
    p = subprocess.run([sys.executable, "-c", _RUN, str(path), kind, backend,
                        str(DATA / "tokens_tiny.bin")],
                       capture_output=True, text=True, check=True)
    return json.loads(p.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    path = corpus()
    kinds = [("histogram", "numba"), ("histogram", "numpy"), ("read", "numpy"),
             ("kernel", "numba"), ("kernel", "numpy")]
    runs: dict[str, list[dict]] = {f"{k} {b}": [] for k, b in kinds}
    for _ in range(args.repeats):
        for k, b in kinds:
            runs[f"{k} {b}"].append(run(path, k, b))
    first = runs["histogram numba"][0]
    same = all(r["docs"] == first["docs"] and r.get("tokens", TOKENS) == TOKENS
               for rs in runs.values() for r in rs if "docs" in r)
    same &= runs["histogram numpy"][0]["counts"] == first["counts"]
    rows = {name: {"seconds": statistics.median(r["seconds"] for r in rs),
                   "peak_mib": statistics.median(r["peak_mib"] for r in rs)}
            for name, rs in runs.items()}
    machine = f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs"
    lines = ["# Flat token streams: documents per second", "",
             f"1e8 uint16 token ids (200 MB nanoGPT .bin), {first['docs']:,} documents; "
             f"{machine}; medians of {args.repeats} fresh processes, page cache warm "
             "(`bench/bench_tokens.py`).", "",
             "| run | seconds | M tokens/s | peak RSS MiB |", "|---|---:|---:|---:|"]
    for name, r in rows.items():
        rate = TOKENS / r["seconds"] / 1e6
        lines.append(f"| {name} | {r['seconds']:.3f} | {rate:,.0f} | {r['peak_mib']:.0f} |")
    lines += ["", "histogram: end to end; read: the reader alone; kernel: the backend on the "
              "stream already in memory (peak RSS then includes its 200 MB)."]
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "tokens.md").write_text("\n".join(lines) + "\n")
    (RESULTS / "tokens.json").write_text(json.dumps({"rows": rows, "same": same}, indent=1))
    print("\n".join(lines))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
