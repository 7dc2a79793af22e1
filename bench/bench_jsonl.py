"""JSON Lines reading (issue 12, item 6): samples/s and peak RSS of a ~1 GB, 10M-line JSONL
corpus, plain and zstd-compressed, on this machine.

The corpus (generated once under bench/data/, seeded): objects like
``{"id": "doc-17", "text": "...", "num_tokens": 812, "meta": {"src": "web", "score": 0.5}}``
with 3-11 words of text (unicode, escaped quotes and newlines among them), ~108 bytes a line.
Measured, each in a fresh process (so peak RSS, ``VmHWM``, is that run's own), the
page cache warm, medians of ``--repeats`` runs with the kinds interleaved:

  * ``histogram``: ``gpu_profiler.histogram(path, column="num_tokens")`` end to end;
  * ``lengths``: ``gpu_profiler.lengths(path, column="num_tokens")`` (the sampler's path);
  * ``open_json``: pyarrow's streaming JSON reader with the same one-field schema, batches
    iterated and dropped: the parse alone, no checks (the floor this reader pays on);
  * ``json.loads``: Python's json, line by line (the naive reader), on the first 1M lines.

Also the RSS of a process that only imports gpu_profiler and scans a 1-line file. Every
histogram is checked equal to the one of ``lengths`` (exit 1 otherwise).
Writes bench/results/jsonl.md and jsonl.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

BENCH, DATA, RESULTS = common.BENCH, common.DATA, common.RESULTS
SEED = 20261201

CHILD = textwrap.dedent("""
    import json, sys, time
    kind, path, limit = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if kind in ("histogram", "lengths", "tiny"):
        import gpu_profiler as gp
    elif kind == "open_json":
        import pyarrow as pa, pyarrow.json as pj
    t0 = time.perf_counter()  # imports are not timed
    c0 = time.process_time()
    out = {}
    if kind in ("histogram", "lengths", "tiny"):
        if kind == "lengths":
            v = gp.lengths(path, column="num_tokens")
            out["samples"] = int(v.size)
            out["digest"] = [int(v.sum()), int((v < 0).sum())]
        else:
            h = gp.histogram(path, column="num_tokens")
            out["samples"] = h.total
            out["digest"] = [h.tokens, h.null_count + h.invalid_count]
    elif kind == "open_json":
        parse = pj.ParseOptions(explicit_schema=pa.schema([("num_tokens", pa.int64())]),
                                unexpected_field_behavior="ignore")
        stream = pa.input_stream(path, compression="zstd" if path.endswith(".zst") else None)
        out["samples"] = sum(b.num_rows for b in pj.open_json(stream, parse_options=parse))
    elif kind == "json.loads":
        n = 0
        with open(path, "rb") as f:
            for line in f:
                if n == limit:
                    break
                json.loads(line)["num_tokens"]
                n += 1
        out["samples"] = n
    out["seconds"] = time.perf_counter() - t0
    out["cpu_seconds"] = time.process_time() - c0
    # VmHWM, not ru_maxrss: that one keeps the forking parent's RSS across fork and exec
    hwm = next(x for x in open("/proc/self/status") if x.startswith("VmHWM:"))
    out["peak_rss_mib"] = int(hwm.split()[1]) / 1024
    print(json.dumps(out))
""")


def corpus(lines: int) -> tuple[Path, Path]:
    """The corpus, plain and zstd (written by pyarrow), made once."""
    plain = common.jsonl_corpus(DATA / f"jsonl-{lines}.jsonl", lines, SEED)
    packed = DATA / f"jsonl-{lines}.jsonl.zst"
    if not packed.exists():
        tmp = packed.with_suffix(".tmp")
        with open(plain, "rb") as src, pa.CompressedOutputStream(str(tmp), "zstd") as dst:
            while block := src.read(16 << 20):
                dst.write(block)
        os.replace(tmp, packed)
    return plain, packed


def child(kind: str, path: Path, limit: int = 0) -> dict:
    env = dict(os.environ, PYTHONPATH=str(BENCH.parent))
    done = subprocess.run([sys.executable, "-c", CHILD, kind, str(path), str(limit)],
                          capture_output=True, text=True, env=env, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=10_000_000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    plain, packed = corpus(args.lines)
    tiny = DATA / "jsonl-tiny.jsonl"
    tiny.write_text('{"num_tokens": 1}\n')
    load0 = os.getloadavg()[0]
    runs: dict[tuple[str, str], list[dict]] = {}
    kinds = [("histogram", plain), ("lengths", plain), ("open_json", plain),
             ("histogram", packed), ("lengths", packed), ("open_json", packed)]
    for _ in range(args.repeats):
        for kind, path in kinds:
            runs.setdefault((kind, path.name), []).append(child(kind, path))
    loads = child("json.loads", plain, min(args.lines, 1_000_000))
    base = child("tiny", tiny)
    load1 = os.getloadavg()[0]
    bad = 0
    for name in (plain.name, packed.name):
        h, v = runs[("histogram", name)][0], runs[("lengths", name)][0]
        if (h["samples"], h["digest"]) != (v["samples"], v["digest"]) or \
                h["samples"] != args.lines:
            print(f"MISMATCH on {name}: {h} vs {v}", file=sys.stderr)
            bad = 1
    rows = []
    for (kind, name), rs in runs.items():
        secs = statistics.median(r["seconds"] for r in rs)
        rows.append({"what": kind, "file": name, "seconds": secs,
                     "cpu_seconds": statistics.median(r["cpu_seconds"] for r in rs),
                     "samples_per_s": args.lines / secs,
                     "best_samples_per_s": args.lines / min(r["seconds"] for r in rs),
                     "mib_per_s": (plain.stat().st_size / (1 << 20)) / secs,
                     "peak_rss_mib": max(r["peak_rss_mib"] for r in rs)})
    rows.append({"what": "json.loads", "file": f"{plain.name} (first {loads['samples']:,} "
                 "lines)", "seconds": loads["seconds"], "cpu_seconds": loads["cpu_seconds"],
                 "samples_per_s": loads["samples"] / loads["seconds"],
                 "best_samples_per_s": loads["samples"] / loads["seconds"],
                 "mib_per_s": float("nan"), "peak_rss_mib": loads["peak_rss_mib"]})
    meta = {"machine": f"{platform.machine()}, {os.cpu_count()} cores, Python "
            f"{platform.python_version()}, pyarrow {pa.__version__}",
            "lines": args.lines, "plain_bytes": plain.stat().st_size,
            "zstd_bytes": packed.stat().st_size, "load_before": load0, "load_after": load1,
            "import_and_tiny_scan_rss_mib": base["peak_rss_mib"], "repeats": args.repeats,
            "date": time.strftime("%Y-%m-%d")}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "jsonl.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    md = [
        "# JSON Lines reading", "",
        f"Machine: {meta['machine']}; load average {load0:.2f} before, {load1:.2f} after "
        f"(2 cores shared with other work). {args.lines:,} lines, "
        f"{meta['plain_bytes'] / 1e9:.2f} GB plain, {meta['zstd_bytes'] / 1e6:.0f} MB zstd "
        f"(pyarrow's default level). Page cache warm; each run a fresh process; medians of "
        f"{args.repeats} runs, kinds interleaved. Command: `python bench/bench_jsonl.py`.", "",
        "| what | file | seconds | CPU seconds | samples/s | best samples/s | MiB/s of text "
        "| peak RSS |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        mibs = "" if r["mib_per_s"] != r["mib_per_s"] else f"{r['mib_per_s']:.0f}"
        md.append(f"| {r['what']} | {r['file']} | {r['seconds']:.2f} | {r['cpu_seconds']:.2f}"
                  f" | {r['samples_per_s'] / 1e6:.2f} M | {r['best_samples_per_s'] / 1e6:.2f} M"
                  f" | {mibs} | {r['peak_rss_mib']:.0f} MiB |")
    md += ["", f"A process that imports gpu_profiler and scans a 1-line file peaks at "
           f"{base['peak_rss_mib']:.0f} MiB. `open_json` is pyarrow's parse with no checks "
           "(no UTF-8 check of skipped strings, no line numbers, no one-object-per-line "
           "check, lines limited to its block size); `json.loads` is per line, one thread."]
    (RESULTS / "jsonl.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return bad


if __name__ == "__main__":
    sys.exit(main())
