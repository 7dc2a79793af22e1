"""The hand-written fast path a performance-minded user would write without gpu-profiler:
read one column of a Hugging Face ``save_to_disk`` dir with pyarrow, ``numpy.bincount`` the
clipped lengths, build the docs/design.md bucket table. Standalone on purpose (imports neither
gpu_profiler nor datasets), so it can also run as its own process:

    python bench/fast_path.py DIR [--offsets-of input_ids]

prints the table as JSON. ``design_table`` is the docs/design.md formula, written out once here and
shared with the reference loop in ``bench_core.py`` (gpu-profiler's own code is not used).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

PARAMS = {"bounds": [0, 770, 1216, 1728, 2432, 3296, 8193], "max_seq_len": 8192,
          "token_budget": 49152, "max_batch_size": 64, "grad_accum": 4, "world_size": 1}


def design_table(stats: list[tuple[int, int, int]], total: int, p: dict = PARAMS) -> dict:
    """The docs/design.md bucket table from per-bucket ``(samples, tokens, max_len)``."""
    bounds = p["bounds"]
    rows = []
    for b, (samples, tokens, max_len) in enumerate(stats):
        size = min(p["token_budget"] // max_len, p["max_batch_size"]) if max_len \
            else p["max_batch_size"]
        rows.append({"index": b, "lo": bounds[b], "hi": bounds[b + 1], "samples": samples,
                     "sample_pct": samples / total * 100 if total else 0.0, "tokens": tokens,
                     "avg_len": tokens / samples if samples else 0.0, "max_len": max_len,
                     "est_batch_size": size, "est_batches": samples / max(size, 1)})
    total_batches = float(sum(r["est_batches"] for r in rows))
    for r in rows:
        r["batch_pct"] = r["est_batches"] / total_batches * 100 if total_batches else 0.0
    return {"total_samples": total, "buckets": rows, "total_est_batches": total_batches,
            "steps_per_epoch": total_batches / (p["grad_accum"] * p["world_size"])}


def read_lengths(path: str | Path, offsets_of: str | None = None) -> np.ndarray:
    """Every length of an HF dir: the ``length`` column, or the list lengths of ``offsets_of``."""
    path = Path(path)
    state = json.loads((path / "state.json").read_text())
    parts = []
    for f in state["_data_files"]:
        table = pa.ipc.open_stream(pa.memory_map(str(path / f["filename"]))).read_all()
        col = pc.list_value_length(table.column(offsets_of)) if offsets_of \
            else table.column("length")
        parts.append(col.to_numpy())
    return np.concatenate(parts)


def table_from_lengths(x: np.ndarray, p: dict = PARAMS) -> dict:
    """``bincount(minimum(x, max_seq_len))``, then per-bucket sums over the counts."""
    cap = p["max_seq_len"]
    counts = np.bincount(np.minimum(x, cap), minlength=cap + 1)
    stats = []
    for lo, hi in zip(p["bounds"][:-1], p["bounds"][1:], strict=True):
        seg = counts[lo:hi]
        nz = np.flatnonzero(seg)
        stats.append((int(seg.sum()), int(seg @ np.arange(lo, lo + seg.size)),
                      lo + int(nz[-1]) if nz.size else 0))
    return design_table(stats, int(counts.sum()), p)


def fast_path(path: str | Path, offsets_of: str | None = None) -> tuple[dict, dict]:
    """The table and the seconds spent reading and histogramming (+ table)."""
    t0 = time.perf_counter()
    x = read_lengths(path, offsets_of)
    t1 = time.perf_counter()
    table = table_from_lengths(x)
    return table, {"read": t1 - t0, "hist_table": time.perf_counter() - t1}


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("path")
    ap.add_argument("--offsets-of")
    args = ap.parse_args()
    print(json.dumps(fast_path(args.path, args.offsets_of)[0]))
