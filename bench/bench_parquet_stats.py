"""What the Parquet footer-statistics shortcut (``--trust-statistics``, issue 13) saves.

Two files of 50M int32 lengths in row groups of 1M rows, snappy, as pyarrow writes them:
``constant`` (every row group one length: a packed corpus, the case the shortcut exists
for) and ``mixed`` (lengths 1..8192, where statistics never prove a row group constant, so
the shortcut cannot apply). Each is histogrammed by ``gpu_profiler.histogram`` (numba
backend) with and without ``trust_statistics``, the kinds interleaved, in one process
after a warm-up, page cache warm; medians of ``--repeats``. Every result is checked equal
to the default's (exit 1 otherwise). Writes bench/results/parquet_stats.md and .json.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

RESULTS = Path(__file__).resolve().parent / "results"
ROWS, GROUP = 50_000_000, 1_000_000


def write(path: Path, constant: bool) -> None:
    rng = np.random.default_rng(13)
    with pq.ParquetWriter(path, pa.schema([("length", pa.int32())])) as w:
        for g in range(ROWS // GROUP):
            x = np.full(GROUP, 512 * (1 + g % 4), np.int32) if constant else \
                rng.integers(1, 8193, GROUP).astype(np.int32)
            w.write_table(pa.table({"length": x}), row_group_size=GROUP)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    import gpu_profiler as gp

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for kind in ("constant", "mixed"):
            path = Path(tmp) / f"{kind}.parquet"
            write(path, kind == "constant")
            ref = gp.histogram(path, cap=8192, backend="numba")  # warm-up and reference
            times: dict[bool, list[float]] = {False: [], True: []}
            for _ in range(args.repeats):
                for trust in (False, True):
                    t0 = time.perf_counter()
                    h = gp.histogram(path, cap=8192, backend="numba", trust_statistics=trust)
                    times[trust].append(time.perf_counter() - t0)
                    if h != ref:
                        print(f"{kind}: trust_statistics={trust} differs", file=sys.stderr)
                        return 1
            read, trusted = (statistics.median(times[t]) for t in (False, True))
            rows.append({"file": kind, "mb": round(path.stat().st_size / 1e6, 1),
                         "read_s": round(read, 4), "trusted_s": round(trusted, 4),
                         "speedup": round(read / trusted, 1)})
    RESULTS.mkdir(exist_ok=True)
    meta = {"machine": platform.machine(), "python": platform.python_version(),
            "pyarrow": pa.__version__, "rows": ROWS, "row_group": GROUP,
            "repeats": args.repeats}
    (RESULTS / "parquet_stats.json").write_text(json.dumps({**meta, "rows_": rows}, indent=1))
    lines = ["# Parquet footer statistics: reading vs `--trust-statistics`", "",
             f"{ROWS:,} int32 lengths, row groups of {GROUP:,}, numba backend, warm cache, "
             f"medians of {args.repeats} (bench/bench_parquet_stats.py; pyarrow "
             f"{pa.__version__}).", "",
             "| file | MB | read every row group (default) | --trust-statistics | ratio |",
             "|---|---|---|---|---|"]
    lines += [f"| {r['file']} | {r['mb']} | {r['read_s']:.3f} s | {r['trusted_s']:.3f} s | "
              f"{r['speedup']}x |" for r in rows]
    (RESULTS / "parquet_stats.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
