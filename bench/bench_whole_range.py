"""Whole-range scans (issue 16): what binning every length (``cap=None``, as ``profile``
now scans) costs next to binning up to max_seq_len (``cap=8192``, as it scanned before),
and what the numbers built on it cost: the percentiles and compare's distances.

Corpus: 10M log-normal SFT-like lengths (median 600, sigma 1.124, up to 131072, as in
bench_analysis.py), in memory as an int64 pyarrow ChunkedArray of 1M-sample chunks (as a
reader yields them), histogrammed by the numba backend (the CPU path of a large scan),
plus the same corpus with one sample of 10M tokens (a rare huge length: the bins then
reach 10M, and memory with them). The percentiles are checked against the sorted lengths
at the exact nearest rank. Each timing is the median of ``--repeats`` runs,
the two caps side by side in one process; peak memory of one scan with tracemalloc.
Writes bench/results/whole_range.md and whole_range.json.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from gpu_profiler import histogram
from gpu_profiler.analysis.compare import distances

RESULTS = Path(__file__).resolve().parent / "results"
SEED = 20261201


def timed(fn: Callable[[], Any], repeats: int) -> float:
    """Median wall seconds of ``repeats`` calls (after one warm-up call)."""
    fn()
    wall = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        wall.append(time.perf_counter() - t)
    return statistics.median(wall)


def peak_mib(fn: Callable[[], Any]) -> float:
    """Peak traced memory of one call, MiB (numpy's allocations, which tracemalloc sees)."""
    tracemalloc.start()
    fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak / 2**20


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=10_000_000)
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    rng = np.random.default_rng(SEED)
    x = np.clip(rng.lognormal(math.log(600), 1.124, args.samples), 1, 131072).astype(np.int64)
    huge = x.copy()
    huge[len(huge) // 2] = 10_000_000
    rows = []
    for name, lengths in (("SFT-like, longest 131,072", x), ("plus one 10M-token sample", huge)):
        data = pa.chunked_array(np.array_split(lengths, max(1, len(lengths) // 1_000_000)))

        def capped(data: Any = data) -> Any:
            return histogram(data, backend="numba", cap=8192)

        def whole(data: Any = data) -> Any:
            return histogram(data, backend="numba", cap=None)

        h = whole()
        rows.append({"corpus": name, "cap_8192_s": timed(capped, args.repeats),
                     "cap_none_s": timed(whole, args.repeats), "bins": h.cap + 1,
                     "cap_8192_peak_mib": peak_mib(capped), "cap_none_peak_mib": peak_mib(whole),
                     "percentiles_s": timed(h.percentiles, args.repeats),
                     "distances_s": timed(lambda h=h: distances(h, h), args.repeats)})
    ranks = [max(1, -(-Fraction(q) * len(x) // 100)) for q in ("50", "90", "95", "99", "99.9")]
    want = [int(v) for v in np.sort(x)[[int(r) - 1 for r in ranks]]]
    got = list(histogram(x, backend="numba", cap=None).percentiles().values())
    machine = {"python": platform.python_version(), "numpy": np.__version__,
               "cpus": __import__("os").cpu_count()}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "whole_range.json").write_text(json.dumps(
        {"machine": machine, "args": vars(args), "rows": rows,
         "percentiles_match_numpy": got == want}, indent=2) + "\n")
    lines = [
        "# Whole-range scans (issue 16)", "",
        f"{args.samples:,} in-memory int64 lengths, numba backend; medians of "
        f"{args.repeats} runs, side by side in one process; machine: {machine['cpus']} CPUs, "
        f"Python {machine['python']}, numpy {machine['numpy']} (shared with other jobs).", "",
        "| corpus | bins (cap=None) | scan cap=8192 s | scan cap=None s | ratio | peak MiB "
        "cap=8192 | peak MiB cap=None | percentiles s |", "|---|--:|--:|--:|--:|--:|--:|--:|"]
    for r in rows:
        lines.append(f"| {r['corpus']} | {r['bins']:,} | {r['cap_8192_s']:.3f} | "
                     f"{r['cap_none_s']:.3f} | {r['cap_none_s'] / r['cap_8192_s']:.2f} | "
                     f"{r['cap_8192_peak_mib']:.0f} | {r['cap_none_peak_mib']:.0f} | "
                     f"{r['percentiles_s']:.4f} |")
    lines += ["", f"Percentiles equal the sorted lengths at the exact nearest rank: "
              f"{got == want}. "
              f"ks/tv/w1 of two whole-range histograms: {rows[0]['distances_s']:.3f} s "
              f"({rows[0]['bins']:,} bins), {rows[1]['distances_s']:.3f} s "
              f"({rows[1]['bins']:,} bins)."]
    (RESULTS / "whole_range.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if got == want else 1


if __name__ == "__main__":
    sys.exit(main())
