"""Every layout against the best peer a user writes in a few lines (issue 26): whole
processes, side by side, at 1e7 and 1e8 samples (1e9 with ``--big``; JSON Lines at 1e7, and
1e8 with ``--big``) and 1, 4, 64 and 4,000 shards where the layout has shards.

Layouts (data generated under bench/data/layouts/, seeded, deleted after the run unless
``--keep``): an HF save_to_disk dir's int32 ``length`` column (the default route); an HF
dir's ``input_ids`` by ``--offsets-of`` (lists of 1-15 ids, 1,000-row record batches as
``datasets`` writes them); one Parquet file (1Mi-row row groups); Parquet shards; JSON Lines
with a ``num_tokens`` field and ~100 B of text (also ASCII-escaped, as Python's json writes
it by default, emoji as surrogate pairs); a nanoGPT uint16 ``.bin`` with ``--eot``
(sized in tokens, documents of ~1,000 tokens); a Megatron ``.idx`` (documents of 1-3
sequences) by sequence and ``--unit document``.

Each row: ``gpu-profiler profile PATH -q -f json`` as a whole process against each peer as a
``python -c`` process (pyarrow, numpy memmap, duckdb, polars: the histogram clipped at 8192,
saved). Every peer's histogram is checked equal to gpu-profiler's (``--save-hist``) before
anything is timed; then the processes run in turn (A B C A B C), ``--repeat`` times, after
one warm-up round; medians of wall time, the largest peak RSS (``wait4``). The load average
is recorded per row. The machine's memory bandwidth is measured in the same run (a numpy
copy and a read of 1 GiB): each row says what share of the read bandwidth gpu-profiler's
process reaches over the bytes it must read (the length column, the offsets, the text, the
tokens, the sizes). Writes bench/results/layouts.md and layouts.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import struct
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

LAYOUTS = common.DATA / "layouts"
SEED = 20261202
CAP = 8192
EOT = 50256
BASELINE = "gpu-profiler (--baseline)"
#: The hand-written section of layouts.md (profiles of the rows that lose), kept by reruns.
NOTES = "## Where the time goes"

# ----------------------------------------------------------------------------- peers
# Each peer: argv = path, cap, out (.npy of the counts of min(length, cap)).
_HEAD = "import os, sys, numpy as np\npath, cap, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]\n"
_SAVE = "\nnp.save(out, counts)\n"

PEERS = {
    "hf pyarrow": """
import json, pyarrow as pa
counts = np.zeros(cap + 1, np.int64)
for f in json.load(open(path + "/state.json"))["_data_files"]:
    t = pa.ipc.open_stream(pa.memory_map(path + "/" + f["filename"])).read_all()
    x = t.column("length").to_numpy()
    counts += np.bincount(np.minimum(x, cap), minlength=cap + 1)
""",
    "offsets pyarrow": """
import json, pyarrow as pa
counts = np.zeros(cap + 1, np.int64)
for f in json.load(open(path + "/state.json"))["_data_files"]:
    t = pa.ipc.open_stream(pa.memory_map(path + "/" + f["filename"])).read_all()
    x = np.concatenate([np.diff(c.offsets.to_numpy()) for c in t.column("input_ids").chunks])
    counts += np.bincount(np.minimum(x, cap), minlength=cap + 1)
""",
    "pyarrow.dataset": """
import pyarrow.dataset as pds
counts = np.zeros(cap + 1, np.int64)
for b in pds.dataset(path).to_batches(columns=["length"], batch_size=1 << 22):
    counts += np.bincount(np.minimum(b.column(0).to_numpy(), cap), minlength=cap + 1)
""",
    "duckdb": """
import duckdb
src = f"read_parquet('{path}')" if path.endswith(".parquet") else \\
      f"read_parquet('{path}/*.parquet')"
con = duckdb.connect()
rows = con.execute(f"SELECT least(length, {cap}) AS l, count(*) FROM {src} GROUP BY l").fetchall()
counts = np.zeros(cap + 1, np.int64)
for l, n in rows:
    counts[l] = n
""",
    "polars": """
import polars as pl
src = path if path.endswith(".parquet") else path + "/*.parquet"
df = (pl.scan_parquet(src).select(pl.col("length").clip(upper_bound=cap).alias("l"))
      .group_by("l").agg(pl.len().alias("n")).collect(engine="streaming"))
counts = np.zeros(cap + 1, np.int64)
counts[df["l"].to_numpy()] = df["n"].to_numpy()
""",
    "jsonl duckdb": """
import duckdb
con = duckdb.connect()
src = path + "/*.jsonl" if os.path.isdir(path) else path
rows = con.execute(f"SELECT least(num_tokens, {cap}) AS l, count(*) FROM read_ndjson("
                   f"'{src}', columns={{num_tokens: 'BIGINT'}}) GROUP BY l").fetchall()
counts = np.zeros(cap + 1, np.int64)
for l, n in rows:
    counts[l] = n
""",
    "jsonl polars": """
import polars as pl
src = path + "/*.jsonl" if os.path.isdir(path) else path
df = (pl.scan_ndjson(src, schema={"num_tokens": pl.Int64})
      .select(pl.col("num_tokens").clip(upper_bound=cap).alias("l"))
      .group_by("l").agg(pl.len().alias("n")).collect())
counts = np.zeros(cap + 1, np.int64)
counts[df["l"].to_numpy()] = df["n"].to_numpy()
""",
    "jsonl pyarrow": """
import pyarrow as pa, pyarrow.json as pj
opts = pj.ParseOptions(explicit_schema=pa.schema([("num_tokens", pa.int64())]),
                       unexpected_field_behavior="ignore")
x = pj.read_json(path, parse_options=opts).column(0).to_numpy()
counts = np.bincount(np.minimum(x, cap), minlength=cap + 1)
""",
    "tokens numpy memmap": f"""
x = np.memmap(path, np.uint16, "r")
ends = np.flatnonzero(x == {EOT})
x = np.append(np.diff(ends, prepend=-1), x.size - 1 - ends[-1])  # the tail: a document
x = x[x > 0]
counts = np.bincount(np.minimum(x, cap), minlength=cap + 1)
""",
    "megatron numpy memmap": """
s = int(np.fromfile(path, "<u8", 1, offset=18)[0])
x = np.memmap(path, np.int32, "r", 34, (s,))
counts = np.bincount(np.minimum(x, cap), minlength=cap + 1)
""",
    "megatron documents numpy memmap": """
s, d = (int(v) for v in np.fromfile(path, "<u8", 2, offset=18))
sizes = np.memmap(path, np.int32, "r", 34, (s,))
docs = np.memmap(path, np.int64, "r", 34 + 12 * s, (d,))
x = np.add.reduceat(sizes, docs[:-1])
counts = np.bincount(np.minimum(x, cap), minlength=cap + 1)
""",
}


def peer_code(name: str) -> str:
    return _HEAD + PEERS[name] + _SAVE


# ----------------------------------------------------------------------------- corpora

def _lengths(n: int) -> list[pa.Table]:
    return [pa.table({"length": x}) for x in common.length_blocks(SEED, n)]


def hf_dir(n: int, shards: int) -> Path:
    target = LAYOUTS / f"hf-{n:.0e}-{shards}"
    if not (target / "state.json").exists():
        common.write_hf(target, {"length": np.zeros(3, np.int32)},
                        (pa.table({"length": x}) for x in common.length_blocks(SEED, n)),
                        n, shards)
    return target


def offsets_dir(n: int) -> Path:
    target = LAYOUTS / f"offsets-{n:.0e}"
    if not (target / "state.json").exists():
        def tables():
            rng = np.random.default_rng(SEED)
            for lo in range(0, n, 1 << 22):
                m = min(1 << 22, n - lo)
                off = np.zeros(m + 1, np.int32)
                np.cumsum(rng.integers(1, 16, m, dtype=np.int32), out=off[1:])
                ids = pa.ListArray.from_arrays(pa.array(off), pa.array(
                    np.zeros(int(off[-1]), np.int32)))
                yield pa.table({"input_ids": ids})
        common.write_hf(target, {"input_ids": [[1], [2, 3]]}, tables(), n, 1)
    return target


def parquet_file(n: int, compression: str = "snappy", encoding: str = "") -> Path:
    """One file of ``n`` int32 lengths in row groups of 1 Mi (snappy: pyarrow's default;
    zstd: polars' and duckdb's), dictionary-encoded as writers do by default, or in
    ``encoding`` (``PLAIN``: what a writer falls back to when a column's dictionary grows
    past its limit; ``DELTA_BINARY_PACKED``, in version 2 pages: parquet-mr's v2 writer)."""
    name = (f"one-{n:.0e}" + ("" if compression == "snappy" else f"-{compression}")
            + (f"-{encoding.lower()}" if encoding else ""))
    target = LAYOUTS / f"{name}.parquet"
    if not target.exists():
        tmp = target.with_suffix(".tmp")
        options = dict(use_dictionary=False, column_encoding={"length": encoding},
                       data_page_version="2.0" if encoding != "PLAIN" else "1.0") \
            if encoding else {}
        with pq.ParquetWriter(tmp, pa.schema([("length", pa.int32())]),
                              compression=compression, **options) as w:
            for x in common.length_blocks(SEED, n):
                w.write_table(pa.table({"length": x}), row_group_size=1 << 20)
        os.replace(tmp, target)
    return target


def parquet_shards(n: int, shards: int) -> Path:
    target = LAYOUTS / f"shards-{n:.0e}-{shards}"
    if not target.exists():
        tmp = target.with_name(target.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        x = np.concatenate(list(common.length_blocks(SEED, n)))
        for k, part in enumerate(np.array_split(x, shards)):
            pq.write_table(pa.table({"length": part}), tmp / f"part-{k:05d}.parquet")
        os.replace(tmp, target)
    return target


def jsonl(n: int) -> Path:
    return common.jsonl_corpus(LAYOUTS / f"lines-{n:.0e}.jsonl", n)


def jsonl_escaped(n: int) -> Path:
    """The JSONL corpus as Python's json writes it by default: ASCII, escapes for the rest."""
    return common.jsonl_corpus(LAYOUTS / f"escaped-{n:.0e}.jsonl", n, escaped=True)


def jsonl_documents(n: int) -> Path:
    """``n`` lines of ~2 KB of mostly plain text each."""
    return common.jsonl_corpus(LAYOUTS / f"documents-{n:.0e}.jsonl", n, words=(200, 500),
                               rare=0.02)


def jsonl_shards(n: int, shards: int) -> Path:
    """The JSONL corpus of ``n`` lines cut into ``shards`` files of whole lines."""
    target = LAYOUTS / f"lines-{n:.0e}-{shards}"
    if not target.exists():
        tmp = target.with_suffix(".tmp")
        tmp.mkdir(parents=True)
        lines = jsonl(n).read_bytes().splitlines(keepends=True)
        for k, part in enumerate(np.array_split(np.arange(len(lines)), shards)):
            (tmp / f"part-{k:05d}.jsonl").write_bytes(b"".join(lines[i] for i in part))
        os.replace(tmp, target)
    return target


def tokens(n: int) -> Path:
    return common.token_stream(LAYOUTS / f"tokens-{n:.0e}.bin", n, EOT)


def megatron(n: int) -> Path:
    """A Megatron-LM index of ``n`` sequences in documents of 1-3 (and a sparse .bin)."""
    target = LAYOUTS / f"megatron-{n:.0e}.idx"
    if not target.exists():
        rng = np.random.default_rng(SEED)
        sizes = np.concatenate(list(common.length_blocks(SEED, n)))
        starts = np.cumsum(rng.integers(1, 4, n // 2 + 1))
        docs = np.concatenate([[0], starts[starts < n], [n]]).astype(np.int64)
        tmp = target.with_suffix(".tmp")
        with open(tmp, "wb") as f:
            f.write(b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, 8, n, docs.size))
            sizes.tofile(f)
            pointers = np.zeros(n, np.int64)
            np.cumsum(sizes[:-1].astype(np.int64) * 2, out=pointers[1:])
            pointers.tofile(f)
            del pointers
            docs.tofile(f)
        with open(target.with_suffix(".bin"), "wb") as f:
            f.truncate(int(sizes.sum(dtype=np.int64)) * 2)
        os.replace(tmp, target)
    return target


# ----------------------------------------------------------------------------- rows

@dataclass
class Row:
    layout: str
    samples: str  # as written in the table (e.g. "1e8", "1e9 tokens")
    shards: int
    make: Callable[[], Path]
    peers: list[str]
    args: list[str] = field(default_factory=list)
    need: Callable[[Path], int] = lambda p: 0  # bytes the scan must read at least


def _column_bytes(n: int) -> Callable[[Path], int]:
    return lambda p: 4 * n


def _size(p: Path) -> int:
    return p.stat().st_size


def rows(sizes: list[int], sweep: int, big: bool) -> list[Row]:
    out: list[Row] = []
    for n in sizes:
        e = f"{n:.0e}".replace("+0", "").replace("+", "")
        out.append(Row("HF dir, `length` (default)", e, 1, lambda n=n: hf_dir(n, 1),
                       ["hf pyarrow"], need=_column_bytes(n)))
        out.append(Row("HF dir, `--offsets-of input_ids`", e, 1, lambda n=n: offsets_dir(n),
                       ["offsets pyarrow"], ["--offsets-of", "input_ids"],
                       need=lambda p, n=n: 4 * (n + n // 1000)))
        out.append(Row("one Parquet file", e, 1, lambda n=n: parquet_file(n),
                       ["duckdb", "polars", "pyarrow.dataset"], need=_column_bytes(n)))
        out.append(Row("one Parquet file, zstd", e, 1, lambda n=n: parquet_file(n, "zstd"),
                       ["duckdb", "polars", "pyarrow.dataset"], need=_column_bytes(n)))
        for encoding in ("PLAIN", "DELTA_BINARY_PACKED"):
            out.append(Row(f"one Parquet file, {encoding}", e, 1,
                           lambda n=n, encoding=encoding: parquet_file(n, encoding=encoding),
                           ["duckdb", "polars", "pyarrow.dataset"], need=_column_bytes(n)))
        if n <= 10**7 or big:  # 1e8 lines: 10.8 GB, so only with --big; polars and
            # pyarrow would hold the whole text or column there (~11 GiB and ~7 GiB)
            out.append(Row("JSONL, `num_tokens` + ~100 B text", e, 1, lambda n=n: jsonl(n),
                           ["jsonl duckdb"] + (["jsonl polars", "jsonl pyarrow"]
                                               if n <= 10**7 else []),
                           ["--column", "num_tokens"], need=_size))
        if n <= 10**7:
            out.append(Row("JSONL, ~100 B, ASCII-escaped (Python's json)", e, 1,
                           lambda n=n: jsonl_escaped(n),
                           ["jsonl duckdb", "jsonl polars", "jsonl pyarrow"],
                           ["--column", "num_tokens"], need=_size))
        out.append(Row("Megatron `.idx`", e, 1, lambda n=n: megatron(n),
                       ["megatron numpy memmap"], need=_column_bytes(n)))
        out.append(Row("Megatron `.idx`, `--unit document`", e, 1, lambda n=n: megatron(n),
                       ["megatron documents numpy memmap"], ["--unit", "document"],
                       need=lambda p, n=n: 4 * n + 8 * (n // 2)))
        t = 10 * n
        out.append(Row("nanoGPT `.bin` uint16, `--eot`", f"{t:.0e} tokens".replace("+0", ""),
                       1, lambda t=t: tokens(t), ["tokens numpy memmap"],
                       ["--eot", str(EOT)], need=_size))
    e = f"{sweep:.0e}".replace("+0", "").replace("+", "")
    for k in (4, 64, 4000):
        out.append(Row("HF dir, `length` (default)", e, k, lambda k=k: hf_dir(sweep, k),
                       ["hf pyarrow"], need=_column_bytes(sweep)))
        out.append(Row("Parquet shards", e, k, lambda k=k: parquet_shards(sweep, k),
                       ["duckdb", "polars", "pyarrow.dataset"], need=_column_bytes(sweep)))
    n = sweep // 100
    e = f"{n:.0e}".replace("+0", "").replace("+", "")
    out.append(Row("JSONL shards, `num_tokens` + ~100 B text", e, 2000,
                   lambda n=n: jsonl_shards(n, 2000), ["jsonl duckdb", "jsonl polars"],
                   ["--column", "num_tokens"], need=lambda p: sum(
                       f.stat().st_size for f in p.iterdir())))
    n = sweep // 200
    e = f"{n:.0e}".replace("+0", "").replace("+", "")
    out.append(Row("JSONL, `num_tokens` + ~2 KB text", e, 1, lambda n=n: jsonl_documents(n),
                   ["jsonl duckdb", "jsonl polars", "jsonl pyarrow"], ["--column", "num_tokens"],
                   need=_size))
    if big:
        n = 10**9
        out.append(Row("HF dir, `length` (default)", "1e9", 8, lambda: hf_dir(n, 8),
                       ["hf pyarrow"], need=_column_bytes(n)))
        out.append(Row("one Parquet file", "1e9", 1, lambda: parquet_file(n),
                       ["duckdb", "polars", "pyarrow.dataset"], need=_column_bytes(n)))
        out.append(Row("nanoGPT `.bin` uint16, `--eot`", "2e9 tokens", 1,
                       lambda: tokens(2 * n), ["tokens numpy memmap"], ["--eot", str(EOT)],
                       need=_size))
    return out


# ----------------------------------------------------------------------------- runs

BANDWIDTH = """
import json, time, numpy as np
src = np.ones(1 << 27, np.int64)  # 1 GiB
dst = np.empty_like(src)
np.copyto(dst, src)
copy, read = [], []
for _ in range(5):
    t = time.perf_counter(); np.copyto(dst, src); copy.append(time.perf_counter() - t)
    t = time.perf_counter(); int(np.bitwise_or.reduce(src)); read.append(time.perf_counter() - t)
print(json.dumps({"copy_gbs": src.nbytes / min(copy) / 1e9,
                  "read_gbs": src.nbytes / min(read) / 1e9}))
"""


def bandwidth() -> dict:
    return json.loads(common.python(BANDWIDTH)["stdout"])


def gp_counts(path: Path, args: list[str]) -> np.ndarray:
    from gpu_profiler import LengthHistogram
    from gpu_profiler.analysis.buckets import clipped_counts

    with tempfile.TemporaryDirectory() as tmp:
        hist = Path(tmp, "h.json")
        common.process([common.CLI, "profile", str(path), "-q", "-f", "json", *args,
                        "--save-hist", str(hist)])
        return clipped_counts(LengthHistogram.load(hist), CAP)


def measure(row: Row, repeat: int, tmp: Path, baseline: str) -> dict:
    load0 = common.load()
    path = row.make()
    with common.pinned(path) as pinned:  # its pages stay cached through every run
        return {**_measure(row, path, repeat, tmp, baseline, load0), "pinned": pinned}


def _measure(row: Row, path: Path, repeat: int, tmp: Path, baseline: str, load0: float
             ) -> dict:
    out = tmp / "counts.npy"
    want = gp_counts(path, row.args)
    for name in row.peers:  # checked before anything is timed
        common.python(peer_code(name), path, CAP, out)
        got = np.load(out)
        if not np.array_equal(got, want):
            sys.exit(f"FAIL: {row.layout} {row.samples}: {name} disagrees with gpu-profiler "
                     f"({int(got.sum())} vs {int(want.sum())} samples)")
    methods = {"gpu-profiler": lambda: common.process(
        [common.CLI, "profile", str(path), "-q", "-f", "json", *row.args])}
    if baseline:  # the same CLI on other sources of the package, e.g. a main checkout:
        # its own install (and native kernels) where it has a venv, else by PYTHONPATH
        own = Path(baseline, ".venv", "bin", "gpu-profiler")
        env = None if own.exists() else dict(os.environ, PYTHONPATH=baseline)
        cli = str(own) if own.exists() else common.CLI
        methods[BASELINE] = lambda: common.process(
            [cli, "profile", str(path), "-q", "-f", "json", *row.args], env)
    for name in row.peers:
        methods[name] = lambda name=name: common.python(peer_code(name), path, CAP, out)
    runs = common.alternate(methods, repeat)
    scan = [json.loads(r["stdout"])["seconds"] for r in runs["gpu-profiler"]]
    res = {name: {"wall": common.median(rs, "wall"), "cpu": common.median(rs, "cpu"),
                  "rss_mib": max(r["rss_mib"] for r in rs),
                  "runs": [round(r["wall"], 3) for r in rs]} for name, rs in runs.items()}
    res["gpu-profiler"]["scan"] = float(np.median(scan))
    if baseline:
        res[BASELINE]["scan"] = float(np.median(
            [json.loads(r["stdout"])["seconds"] for r in runs[BASELINE]]))
    best = min(row.peers, key=lambda k: res[k]["wall"])
    return {"layout": row.layout, "samples": row.samples, "shards": row.shards,
            "args": row.args, "path_bytes": _bytes(path), "need_bytes": row.need(path),
            "samples_counted": int(want.sum()), "results": res, "best_peer": best,
            "ratio": res[best]["wall"] / res["gpu-profiler"]["wall"],
            "load": [load0, common.load()]}


def _bytes(path: Path) -> int:
    if path.is_dir():
        return sum(f.stat().st_size for f in path.iterdir())
    return path.stat().st_size


def _key(row: dict) -> tuple:
    return row["layout"], row["samples"], row["shards"]


def markdown(result: dict) -> list[str]:
    m, bw = result["machine"], result["bandwidth"]
    earlier = result.get("earlier", [])
    md = ["# Layouts: gpu-profiler against the best peer, whole processes", "",
          *([f"Rows of earlier runs kept: {'; '.join(earlier)}.", ""] if earlier else []),
          f"`{result['command']}` on {m['cpu']} ({m['cores']} cores shared with other work), "
          f"{m['date']}, git {m['git']}; Python {m['python']}, numpy {m['numpy']}, pyarrow "
          f"{m['pyarrow']}. Page cache warm (each row's files locked in it while the row "
          "runs, where memory allows: `common.pinned`); every peer's histogram equal to "
          "gpu-profiler's; "
          f"medians of {result['repeat']} runs of each process in turn after a warm-up; "
          "peak RSS from `wait4`. Memory bandwidth measured in the same run: "
          f"a numpy copy of 1 GiB at {bw['copy_gbs']:.1f} GB/s, a read at "
          f"{bw['read_gbs']:.1f} GB/s. `GB/s` is the bytes the scan must read (the length "
          "column, offsets, text, tokens or sizes) over gpu-profiler's whole process; `share` "
          "is that over the read bandwidth. ratio = best peer's time / gpu-profiler's (`CPU "
          "ratio`: the same for CPU seconds, user + system, steadier on a shared machine); "
          "`baseline`: the same CLI on the sources given by `--baseline` (the code before "
          "this round), in the same alternation.", ""]
    body = []
    for r in result["rows"]:
        gp, best = r["results"]["gpu-profiler"], r["results"][r["best_peer"]]
        gbs = r["need_bytes"] / gp["wall"] / 1e9
        base = r["results"].get(BASELINE)
        body.append([r["layout"], r["samples"], r["shards"], f"{gp['wall']:.2f} s",
                     f"{gp['scan']:.2f} s", f"{base['wall']:.2f} s" if base else "-",
                     f"{r['best_peer']} {best['wall']:.2f} s",
                     f"**{r['ratio']:.2f}x**", f"{best['cpu'] / gp['cpu']:.2f}x",
                     f"{gp['rss_mib']:.0f} MiB",
                     f"{best['rss_mib']:.0f} MiB", f"{gbs:.2f}",
                     f"{100 * gbs / bw['read_gbs']:.0f}%",
                     f"{r['load'][0]:.1f}-{r['load'][1]:.1f}"])
    md += common.table(["layout", "samples", "shards", "gpu-profiler", "(its scan)",
                        "baseline", "best peer", "ratio", "CPU ratio", "RSS", "peer RSS",
                        "GB/s", "share", "load"], body, right=set(range(2, 14)) - {6})
    md += ["", "Every peer, whole process (median wall, peak RSS):", ""]
    body = []
    for r in result["rows"]:
        for name, x in r["results"].items():
            body.append([r["layout"], r["samples"], r["shards"], name, f"{x['wall']:.3f} s",
                         f"{x['cpu']:.2f} s", f"{x['rss_mib']:.0f} MiB"])
    md += common.table(["layout", "samples", "shards", "process", "wall", "CPU", "peak RSS"],
                       body, right={2, 4, 5, 6})
    return md


def write(name: str, result: dict) -> None:
    """bench/results/NAME.md and .json, keeping the hand-written `NOTES` of the old .md."""
    md = markdown(result)
    old = common.RESULTS / f"{name}.md"
    if old.exists() and NOTES in old.read_text():
        md += ["", NOTES + old.read_text().split(NOTES, 1)[1].rstrip("\n")]
    common.write_results(name, result, md)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="1e7 samples only (shards of 1e7)")
    ap.add_argument("--big", action="store_true",
                    help="also 1e9 (HF, Parquet, tokens) and 1e8 JSON Lines")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--only", default="", help="rows whose layout contains this text")
    ap.add_argument("--samples", default="", help="rows whose size contains this text")
    ap.add_argument("--keep", action="store_true", help="keep the generated data")
    ap.add_argument("--out", default="layouts", help="results name under bench/results/")
    ap.add_argument("--baseline", default="", metavar="DIR",
                    help="also time the CLI of the checkout DIR (its .venv if it has one, "
                         "else its sources by PYTHONPATH)")
    args = ap.parse_args()
    sizes = [10**7] if args.quick else [10**7, 10**8]
    common.check_disk((25 << 30) if args.big else (12 << 30), LAYOUTS)
    common.compile_package()
    result = {"command": "python bench/bench_layouts.py " + " ".join(sys.argv[1:]),
              "repeat": args.repeat, "machine": common.machine(), "bandwidth": bandwidth(),
              "rows": []}
    print(f"bandwidth {result['bandwidth']}", flush=True)
    try:
        with tempfile.TemporaryDirectory() as tmp, common.pinned(*common.libraries()):
            for row in rows(sizes, sizes[-1], args.big):
                if args.only not in row.layout or args.samples not in row.samples:
                    continue
                t = time.perf_counter()
                r = measure(row, args.repeat, Path(tmp), args.baseline)
                result["rows"].append(r)
                gp = r["results"]["gpu-profiler"]
                print(f"{row.layout:40s} {row.samples:>12s} {row.shards:5d}  gp "
                      f"{gp['wall']:.3f} s ({gp['rss_mib']:.0f} MiB)  {r['best_peer']} "
                      f"{r['results'][r['best_peer']]['wall']:.3f} s  {r['ratio']:.2f}x  "
                      f"load {r['load'][1]:.1f}  [{time.perf_counter() - t:.0f} s]",
                      flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(LAYOUTS, ignore_errors=True)
    result["bandwidth_after"] = bandwidth()
    result["machine"]["load_end"] = common.load()
    old_json = common.RESULTS / f"{args.out}.json"
    if (args.only or args.samples) and old_json.exists():  # the rows not rerun stay
        new = {_key(r): r for r in result["rows"]}
        before = json.loads(old_json.read_text())
        result["rows"] = [new.pop(_key(r), r) for r in before["rows"]] + list(new.values())
        earlier = [*before.get("earlier", []), f"`{before['command']}` "
                   f"({before['machine']['date']})"]
        result["earlier"] = list(dict.fromkeys(earlier))  # each earlier run once, in order
    write(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
