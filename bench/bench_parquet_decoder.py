"""The project's own Parquet decoder against the pyarrow ways (issue 25, item 4).

``kernels/parquet.py`` (Thrift + snappy in numba, called through
``gpu_profiler/readers/parquet/many.py``) reads runs of small Parquet shards (at most
``readers.base.SMALL_BYTES`` each) together; whatever it does not read (zstd, other
encodings, ...) goes to the project's pyarrow path (``readers/parquet/__init__.py``). It stays only
where it is >= 2x faster than the best pyarrow way. This script measures the full job,
"exact histogram of the ``length`` column over every shard", on the same corpora, side by
side in one process (methods in turn, each round starting with the next method), with:

* ``kernel``: the project's default route, ``gp.histogram(dir, column="length",
  backend="numba")`` (what ``gpu-profiler profile DIR`` does on a CPU machine: the
  ``auto`` backend is numba here), which reads small shards with the kernel decoder;
* ``project-pyarrow``: the same call with ``ParquetPart.together = None`` (in process,
  restored after): every shard read by the project's pyarrow reader
  (``readers/parquet/__init__.py``,
  shards run at once on one worker thread per core); what the project does without the
  kernel;
* ``pq.read_table``: ``pq.read_table(dir, columns=["length"])`` + ``np.bincount`` (of its
  chunks, gathered a million values at a time: `Counts`);
* ``dataset fr=F br=B``: ``pyarrow.dataset.dataset(dir).to_batches(columns=["length"],
  use_threads=True, fragment_readahead=F, batch_readahead=B)``, each batch counted as it
  comes (`Counts`: never the whole column in memory) (a few readahead settings; pyarrow's
  defaults are fr=4 br=16);
* ``polars``: ``pl.scan_parquet(dir/*.parquet).select("length").collect()`` + ``np.bincount``;
* ``duckdb``: ``SELECT length, count(*) FROM read_parquet(...) GROUP BY length``.

Every run's histogram is checked against numpy's of the generated lengths (assert).

Corpora (same rows, deterministic): ``small-pyarrow`` (``--small-shards`` shards written
by ``pq.write_table``: snappy, dictionary, one row group), ``small-polars`` (the same
tables written by polars: zstd, its default), ``small-spark`` (the pyarrow corpus read by
Spark and written back as as many ``part-*.snappy.parquet`` files, with
``repartition``: nullable columns, parquet-mr's layout; needs ``--spark-python``, a Python
with pyspark and a Java runtime), ``mid-pyarrow`` and ``mid-polars`` (``--mid-shards``
shards of 1-4 MiB). Each row: an int64 ``length`` (SFT-like: a log-normal mix, 8..32768)
and a ``text`` string of ``length // TEXT_DIV`` bytes of random words, so that reading the
length column only (projection) skips most of each file.

Warm page cache: every file is read once before timing (and the first, untimed, round
warms every method). ``--cold-rounds`` also times runs after each corpus file is dropped
from this machine's page cache with ``posix_fadvise(DONTNEED)`` (only these files; no
global cache drop); a virtual disk may still be cached by its host, so these are "evicted
from this guest's cache", not a true cold disk.

Writes bench/results/parquet_decoder.json and .md.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

BENCH = Path(__file__).resolve().parent
RESULTS = BENCH / "results"
MIB = 1 << 20
KEEP = 2.0  # the kernel stays where it is at least this much faster than the best pyarrow way
TEXT_DIV = 4  # text bytes per row = length // TEXT_DIV (real text is ~4 bytes a token: 16x this)
READAHEADS = ((1, 2), (4, 16), (16, 32))  # (fragment_readahead, batch_readahead)

SPARK = """
import sys
from pyspark.sql import SparkSession
src, out, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
s = (SparkSession.builder.master("local[2]").appName("bench-parquet-decoder")
     .config("spark.driver.memory", "3g").config("spark.ui.enabled", "false")
     .config("spark.sql.shuffle.partitions", str(n)).getOrCreate())
s.sparkContext.setLogLevel("ERROR")
df = s.read.parquet(src)
df.repartition(n).write.mode("overwrite").parquet(out)
print("spark", s.version, df.count())
s.stop()
"""


# ----------------------------------------------------------------------------- corpora
def sft_lengths(rng: np.random.Generator, n: int) -> np.ndarray:
    """SFT-like token counts: mostly short chats, a body of longer ones, a long tail."""
    kind = rng.random(n)
    short = rng.lognormal(np.log(350), 0.8, n)
    mid = rng.lognormal(np.log(1400), 0.6, n)
    long = rng.uniform(4096, 32768, n)
    out = np.where(kind < 0.7, short, np.where(kind < 0.95, mid, long))
    return np.clip(out, 8, 32768).astype(np.int64)


def word_stream(rng: np.random.Generator, nbytes: int) -> bytes:
    """``nbytes`` of ASCII words (a Zipf-ish draw from 5,000 made-up words)."""
    letters = np.frombuffer(b"etaoinshrdlcumwfgypbvkjxqz", np.uint8)
    vocab = [bytes(letters[rng.integers(0, 26, k)]) for k in rng.integers(2, 11, 5000)]
    ids = np.minimum(rng.zipf(1.3, nbytes // 4), 5000) - 1
    stream = b" ".join(vocab[i] for i in ids)
    return stream[:nbytes]


def tables(shards: int, rows: int, seed: int, text: bool = True
           ) -> tuple[list[pa.Table], np.ndarray]:
    """The shards' tables (``length``, and ``text`` unless not ``text``) and every length,
    in order."""
    rng = np.random.default_rng(seed)
    base = pa.py_buffer(word_stream(rng, 32 * MIB))
    out, every = [], []
    for _ in range(shards):
        length = sft_lengths(rng, rows)
        every.append(length)
        if not text:
            out.append(pa.table({"length": length}))
            continue
        text_len = np.maximum(length // TEXT_DIV, 1)
        offsets = np.zeros(rows + 1, np.int32)
        np.cumsum(text_len, out=offsets[1:])
        total = int(offsets[-1])
        at = int(rng.integers(0, len(base) - total))
        text = pa.StringArray.from_buffers(rows, pa.py_buffer(offsets),
                                           base.slice(at, total))  # zero-copy
        out.append(pa.table({"length": length, "text": text}))
    return out, np.concatenate(every)


def write_pyarrow(ts: list[pa.Table], root: Path) -> Path:
    root.mkdir(parents=True)
    for i, t in enumerate(ts):
        pq.write_table(t, root / f"shard-{i:05d}.parquet")
    return root


def write_polars(ts: list[pa.Table], root: Path) -> Path:
    import polars as pl

    root.mkdir(parents=True)
    for i, t in enumerate(ts):
        pl.from_arrow(t).write_parquet(root / f"shard-{i:05d}.parquet")  # zstd: default
    return root


def write_spark(python: str, src: Path, root: Path, shards: int) -> tuple[Path, str]:
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(SPARK)
    try:
        proc = subprocess.run([python, f.name, str(src), str(root), str(shards)],
                              capture_output=True, text=True, timeout=1800)
    finally:
        os.unlink(f.name)
    if proc.returncode:
        raise RuntimeError(f"spark failed: {proc.stderr[-2000:]}")
    return root, proc.stdout.strip().splitlines()[-1]


def files_of(root: Path) -> list[Path]:
    return sorted(p for p in root.glob("*.parquet") if not p.name.startswith((".", "_")))


def describe(root: Path) -> dict:
    """Files, bytes, the length column's share of them, codecs, what the kernel does."""
    files = files_of(root)
    sizes = [f.stat().st_size for f in files]
    col_bytes = 0
    codecs = set()
    writers = set()
    for f in files[:: max(1, len(files) // 50)]:  # a sample of footers
        md = pq.ParquetFile(f).metadata
        writers.add(md.created_by.split(" (")[0])
        for g in range(md.num_row_groups):
            rg = md.row_group(g)
            for c in range(rg.num_columns):
                cc = rg.column(c)
                codecs.add(f"{cc.path_in_schema}:{cc.compression}")
                if cc.path_in_schema == "length":
                    col_bytes += cc.total_compressed_size
    sample = sizes[:: max(1, len(files) // 50)]
    col = col_bytes / max(sum(sample), 1)
    return {"files": len(files), "bytes": sum(sizes), "min_bytes": min(sizes),
            "max_bytes": max(sizes), "length_column_share": round(col, 4),
            "codecs": sorted(codecs), "created_by": sorted(writers),
            "kernel": kernel_status(files)}


def kernel_status(files: list[Path]) -> dict:
    """How many files the kernel decoder reads and why it leaves the others (one run of
    `many.together`, counted or its chunks binned as the default route does; files over
    SMALL_BYTES never reach it)."""
    from gpu_profiler.backends.numba_backend import NumbaBackend
    from gpu_profiler.kernels import parquet_format as fmt
    from gpu_profiler.readers.base import SMALL_BYTES, LengthSpec, Reading
    from gpu_profiler.readers.parquet import ParquetPart
    from gpu_profiler.readers.parquet import many as parquet_many

    small = [ParquetPart(str(f)) for f in files if f.stat().st_size <= SMALL_BYTES]
    whole = [p for p in small if p.nbytes <= parquet_many.MOST_BYTES]
    out = {"over_small_bytes": len(files) - len(small),
           "over_most_bytes": len(small) - len(whole)}
    if whole:
        run = parquet_many.together(whole, Reading(LengthSpec("length")), None)
        if not isinstance(run, parquet_many.Files):
            out["left: the first file's column is not one the kernel reads"] = len(whole)
            return out
        work = run.counting()
        if work is not None:
            NumbaBackend().count(work, None)
        else:
            NumbaBackend().histogram(run.chunks(), None)
        status = run.status
        out["read"] = int((status == fmt.READ).sum())
        for code, why in fmt.LEFT.items():
            n = int((status == code).sum())
            if n:
                out[f"left: {why}"] = n
    return out


# ----------------------------------------------------------------------------- methods
class Counts:
    """An exact histogram built as arrays come (what a user streaming batches writes): the
    arrays are gathered up to `FLUSH` values, then counted by one ``np.bincount``; nothing
    the size of the whole column is ever held (materialising a column of 1e8 values costs
    more here than reading it: fresh pages are faulted in on every run)."""

    FLUSH = 1 << 20

    def __init__(self) -> None:
        self.counts = np.zeros(1, np.int64)
        self.pending: list[np.ndarray] = []
        self.n = 0

    def add(self, values: np.ndarray) -> None:
        self.pending.append(values)
        self.n += values.size
        if self.n >= self.FLUSH:
            self.flush()

    def flush(self) -> None:
        if not self.pending:
            return
        c = np.bincount(np.concatenate(self.pending) if len(self.pending) > 1
                        else self.pending[0])
        if c.size > self.counts.size:
            c[:self.counts.size] += self.counts
            self.counts = c
        else:
            self.counts[:c.size] += c
        self.pending, self.n = [], 0

    def result(self) -> np.ndarray:
        self.flush()
        return self.counts


def counts_of(arrays: Iterable[Any]) -> np.ndarray:
    """The histogram of pyarrow or numpy arrays, streamed (`Counts`)."""
    h = Counts()
    for a in arrays:
        h.add(a if isinstance(a, np.ndarray) else a.to_numpy())
    return h.result()


def m_kernel(root: Path) -> np.ndarray:
    import gpu_profiler as gp

    h = gp.histogram(str(root), column="length", backend="numba")
    assert h.above_count == 0 and h.null_count == 0 and h.invalid_count == 0
    return np.asarray(h.counts)


def m_project_pyarrow(root: Path) -> np.ndarray:
    from gpu_profiler.readers.parquet import ParquetPart

    saved = ParquetPart.__dict__["together"]
    ParquetPart.together = None  # type: ignore[assignment]
    try:
        return m_kernel(root)
    finally:
        ParquetPart.together = saved


def m_read_table(root: Path) -> np.ndarray:
    t = pq.read_table(root, columns=["length"])
    return counts_of(t.column(0).chunks)


def m_dataset(fr: int, br: int) -> Callable[[Path], np.ndarray]:
    def run(root: Path) -> np.ndarray:
        d = ds.dataset(root, format="parquet")
        return counts_of(b.column(0) for b in d.to_batches(
            columns=["length"], use_threads=True, fragment_readahead=fr,
            batch_readahead=br))
    return run


def m_polars(root: Path) -> np.ndarray:
    import polars as pl

    s = pl.scan_parquet(str(root / "*.parquet")).select("length").collect().to_series()
    return counts_of([s.to_numpy()])


def m_duckdb(root: Path) -> np.ndarray:
    import duckdb

    con = duckdb.connect()
    try:
        got = con.execute(f"SELECT length, count(*) AS n FROM read_parquet("
                          f"'{root}/*.parquet') GROUP BY length").fetchnumpy()
    finally:
        con.close()
    out = np.zeros(int(got["length"].max()) + 1, np.int64)
    out[got["length"].astype(np.int64)] = got["n"]
    return out


def methods() -> dict[str, Callable[[Path], np.ndarray]]:
    out: dict[str, Callable[[Path], np.ndarray]] = {
        "kernel": m_kernel, "project-pyarrow": m_project_pyarrow,
        "pq.read_table": m_read_table}
    for fr, br in READAHEADS:
        out[f"dataset fr={fr} br={br}"] = m_dataset(fr, br)
    for name, fn, mod in (("polars", m_polars, "polars"), ("duckdb", m_duckdb, "duckdb")):
        try:
            __import__(mod)
            out[name] = fn
        except ImportError:
            pass
    return out


PYARROW = ("project-pyarrow", "pq.read_table", "dataset")  # the pyarrow ways (prefixes)


def same(a: np.ndarray, b: np.ndarray) -> bool:
    n = max(a.size, b.size)
    return np.array_equal(np.pad(a, (0, n - a.size)), np.pad(b, (0, n - b.size)))


def evict(root: Path) -> None:
    """Drop the corpus's files from this machine's page cache (theirs only)."""
    for f in root.iterdir():
        if f.is_file():
            fd = os.open(f, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def resident(root: Path) -> float | None:
    """Share of the corpus's pages in the page cache (``fincore``), or None."""
    if shutil.which("fincore") is None:
        return None
    files = [str(f) for f in files_of(root)]
    page = os.sysconf("SC_PAGE_SIZE")
    res = tot = 0
    for lo in range(0, len(files), 500):
        out = subprocess.run(["fincore", "-b", "-n", "-r", "-o", "PAGES,SIZE",
                              *files[lo:lo + 500]], capture_output=True, text=True).stdout
        vals = list(map(int, out.split()))
        res += sum(vals[0::2])
        tot += sum(-(-n // page) for n in vals[1::2])
    return res / max(tot, 1)


def warm(root: Path) -> None:
    for f in root.iterdir():
        if f.is_file():
            with open(f, "rb") as fh:
                while fh.read(8 * MIB):
                    pass


def timed(fn: Callable[[Path], np.ndarray], root: Path, ref: np.ndarray, label: str
          ) -> float:
    gc.collect()
    t = time.perf_counter()
    got = fn(root)
    s = time.perf_counter() - t
    assert same(got, ref), f"{label}: histogram differs from numpy's"
    return s


def bench(root: Path, ref: np.ndarray, ms: dict, rounds: int, cold: bool) -> dict:
    names = list(ms)
    runs: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for n in order:
            if cold:
                evict(root)
            runs[n].append(timed(ms[n], root, ref, n))
        print(f"    round {r + 1}/{rounds}: " + ", ".join(
            f"{n} {runs[n][-1]:.3f}" for n in names), flush=True)
    return runs


def summary(runs: dict[str, list[float]]) -> dict:
    med = {n: statistics.median(v) for n, v in runs.items()}
    ways = {n: m for n, m in med.items() if n.startswith(PYARROW)}
    best = min(ways, key=ways.get)
    return {"median_s": med, "runs_s": runs, "rounds": len(runs["kernel"]),
            "best_pyarrow": best,
            "speedup_vs_best_pyarrow": ways[best] / med["kernel"],
            "speedup_vs_project_pyarrow": med["project-pyarrow"] / med["kernel"],
            "kernel_over_best_pyarrow": med["kernel"] / ways[best]}


# ----------------------------------------------------------------------------- report
def machine() -> dict:
    cpu = "?"
    try:
        cpu = next(ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo")
                   if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / (1 << 30)
    versions = {"python": platform.python_version(), "numpy": np.__version__,
                "pyarrow": pa.__version__}
    for mod in ("polars", "duckdb", "numba"):
        try:
            versions[mod] = __import__(mod).__version__
        except ImportError:
            pass
    return {"cpu": cpu, "cores": os.cpu_count(), "mem_gib": round(mem, 1),
            "machine": platform.machine(), "kernel": platform.release(),
            "versions": versions, "load_start": os.getloadavg()}


def decide(s: dict) -> str:
    return "keep" if s["speedup_vs_best_pyarrow"] >= KEEP else "delete"


def report(res: dict) -> str:
    m, p = res["machine"], res["params"]
    v = ", ".join(f"{k} {x}" for k, x in m["versions"].items())
    lines = [
        "# The Parquet decoder against the pyarrow ways (issue 25, item 4)", "",
        f"`{res['command']}` on {m['machine']} ({m['cpu']}, {m['cores']} cores shared with "
        f"other work: load average {m['load_start'][0]:.1f} at start, "
        f"{res['load_end'][0]:.1f} at end; {m['mem_gib']} GiB), {res['when']}, git "
        f"{res['git']}; {v}."]
    for r in res.get("reruns", []):
        lines.append(f"Rerun of {', '.join(r['corpora'])} (its rows below replace the "
                     f"first run's): `{r['command']}`, {r['when']}, git {r['git']}, load "
                     f"{r['load'][0]:.1f} at start, {r['load'][1]:.1f} at end.")
    lines += ["",
        "The job: the exact histogram of the int64 `length` column over every shard of a "
        "directory. All methods in one process, side by side: each round runs every "
        "method once, starting with the next one; the first round (untimed) warms every "
        "method. **Page cache warm**: every file was read once before timing (fincore: "
        + ", ".join(f"{c} {x:.0%}" for c, x in res["resident"].items() if x is not None)
        + " resident). Every run's histogram is asserted equal to numpy's "
        "`bincount` of the generated lengths. `kernel` is the project's default route "
        "(`gp.histogram(dir, column='length', backend='numba')`, what `gpu-profiler "
        "profile DIR` runs on a CPU machine); `project-pyarrow` the same call with "
        "`ParquetPart.together = None` (every shard by `readers/parquet/__init__.py`); "
        "`dataset fr=F br=B`: `pyarrow.dataset.dataset(dir).to_batches(columns=['length'], "
        "use_threads=True, fragment_readahead=F, batch_readahead=B)`, the batches counted "
        "as they come (`np.bincount` of a million values at a time; collecting the whole "
        "column first made the 1e8-row corpus 3-5x slower here: fresh pages are faulted in "
        "on every run); `pq.read_table(dir, columns=['length'])` the same over its chunks. "
        "*Best pyarrow* is the fastest of project-pyarrow, pq.read_table and the dataset "
        "settings. Speedup = best pyarrow median / kernel median (>= 2.0: keep).", "",
        "## Corpora", "",
        f"Each row: an int64 `length`, SFT-like (70% log-normal around 350, 25% around "
        f"1,400, 5% uniform 4,096-32,768; 8..32,768), and a `text` string of `length // "
        f"{res.get('text_div', TEXT_DIV)}` bytes of random words (real text is ~4 bytes a "
        "token, so a real shard's length column is an even smaller share of it). "
        f"small-*: {p['small_shards']:,} shards of {p['small_rows']:,} rows; mid-*: "
        f"{p['mid_shards']:,} shards of {p['mid_rows']:,} rows; small-lengths-only: "
        f"{p['small_shards']:,} shards of {p['lengths_rows']:,} lengths and no text "
        "(bench_shards.py's shape). *-pyarrow: `pq.write_table` (snappy); *-polars: the same "
        "tables by polars' `write_parquet` (zstd, its default); small-spark: small-pyarrow "
        f"read by Spark (pyspark {m['versions'].get('pyspark', '?')}, `local[2]`) and "
        f"written back as {p['small_shards']:,} files with `repartition` (snappy, its "
        "default). polars and duckdb (a `GROUP BY length` query) are for reference: they "
        "are not pyarrow ways, so not in the criterion.", "",
        "| corpus | files | MiB | file size | length column share | codecs | writer | "
        "kernel decoder reads |",
        "|---|---:|---:|---|---:|---|---|---|"]
    for c, d in res["corpora"].items():
        k = d["kernel"]
        left = "; ".join([f"{n} {why[6:]}" for why, n in k.items() if why.startswith("left")]
                         + ([f"{k['over_most_bytes']} over 256 KiB, read by pyarrow"]
                            if k.get("over_most_bytes") else []))
        reads = f"{k.get('read', 0)}/{d['files']}" + (f" (left: {left})" if left else "")
        lines.append(
            f"| {c} | {d['files']:,} | {d['bytes'] / MIB:,.0f} | "
            f"{d['min_bytes'] / 1024:,.0f}-{d['max_bytes'] / 1024:,.0f} KiB | "
            f"{d['length_column_share']:.1%} | {', '.join(d['codecs'])} | "
            f"{', '.join(d['created_by'])} | {reads} |")
    for title, key in (("Warm page cache", "warm"), ("Evicted from the page cache", "cold")):
        if not res.get(key):
            continue
        any_c = next(iter(res[key].values()))
        names = list(any_c["median_s"])
        lines += ["", f"## {title}: medians (s)", ""]
        if key == "cold":
            lines += [
                "Before every run the corpus's files are "
                "dropped from this machine's page cache (`posix_fadvise(DONTNEED)`, "
                "these files only); the virtual disk may still be cached by its host, so "
                "this is not a true cold disk.", ""]
        verdict = "decision" if key == "warm" else ">= 2x (not the criterion)"
        verdicts = {"warm": {"keep": "keep", "delete": "delete"},
                    "cold": {"keep": "yes", "delete": "no"}}
        lines += ["| corpus | " + " | ".join(names)
                  + " | best pyarrow | speedup vs best pyarrow | vs project-pyarrow | "
                  f"{verdict} | rounds | load |",
                  "|---|" + "---:|" * len(names) + "---|---:|---:|---|---:|---|"]
        for c, s in res[key].items():
            med = s["median_s"]
            cells = [f"**{med[n]:.3f}**" if n == "kernel" else f"{med[n]:.3f}"
                     for n in names]
            lines.append(f"| {c} | " + " | ".join(cells) + f" | {s['best_pyarrow']} | "
                         f"{s['speedup_vs_best_pyarrow']:.2f}x | "
                         f"{s['speedup_vs_project_pyarrow']:.2f}x | "
                         f"{verdicts[key][decide(s)]} | "
                         f"{s.get('rounds', len(s['runs_s']['kernel']))} | "
                         f"{s['load'][0]:.1f}-{s['load'][1]:.1f} |")
    lines += ["", "## Decision", "", res["decision"], "",
              "Raw runs: bench/results/parquet_decoder.json."]
    return "\n".join(lines) + "\n"


def decision_text(res: dict) -> str:
    """The decision paragraph, from the numbers (warm page cache decides; see `KEEP`)."""
    warm_s, corpora = res["warm"], res["corpora"]
    keep = [c for c, s in warm_s.items() if decide(s) == "keep"]
    gone = [c for c, s in warm_s.items() if decide(s) == "delete"]
    txt = ("**Warm page cache**, kernel route speedup over the best pyarrow way: " + "; ".join(
        f"{c} **{s['speedup_vs_best_pyarrow']:.2f}x** (vs {s['best_pyarrow']})"
        for c, s in warm_s.items()) + ". ")
    none = [c for c in gone if not corpora[c]["kernel"].get("read")
            and corpora[c]["kernel"].get("over_most_bytes", 0) < corpora[c]["files"]]
    whole = [c for c in gone if c not in none]
    if none:
        txt += (f"The kernel reads none of the files of {', '.join(none)} (their codec "
                "is not one it reads): there the default route is the project's "
                "pyarrow path, after the first file's footer says so ("
                + ", ".join(f"{1 / warm_s[c]['speedup_vs_project_pyarrow']:.2f}x"
                            for c in none)
                + " its time). ")
    if whole:
        txt += ("On " + ", ".join(
            f"{c} ({corpora[c]['min_bytes'] / MIB:.1f}-{corpora[c]['max_bytes'] / MIB:.1f} "
            f"MiB files, the length column {corpora[c]['length_column_share']:.1%} of them)"
            for c in whole)
            + " the default route is the project's pyarrow path too: a shard over "
            "`many.MOST_BYTES` (256 KiB) is not read whole, and one of fewer than "
            "`pages.MIN_ROWS` rows is not counted by the kernel either (the kernel's count "
            "of a large file's pages: bench/results/layouts.md). What is left there is the "
            "project's pyarrow path against pyarrow.dataset's fragment read-ahead. ")
    cold = res.get("cold") or {}
    if keep and cold:
        txt += ("With the files evicted from the page cache its lead on "
                + ", ".join(f"{c} is {cold[c]['speedup_vs_best_pyarrow']:.2f}x"
                            for c in keep if c in cold) + ". ")
    if keep and not gone:
        txt += ("**Decision: keep** (it is >= 2x faster than the best pyarrow way on "
                "every corpus).")
    elif keep:
        sizes = ", ".join(f"{corpora[c]['min_bytes'] >> 10}-{corpora[c]['max_bytes'] >> 10} "
                          f"KiB" for c in keep)
        txt += (f"**Decision: keep it where it earns its place** (>= 2x: {', '.join(keep)}: "
                f"runs of small snappy or zstd shards, {sizes} here) **and not "
                f"elsewhere** ({', '.join(gone)}): the project hands it no shard it loses on "
                "(codecs it leaves, such as gzip, learnt from the run's first footer; shards "
                "over 256 KiB, which it would read whole) and reads those with pyarrow. Where "
                "between ~120 KiB and ~2.2 MiB per shard its lead falls under 2x is not "
                "measured here.")
    else:
        txt += ("**Decision: delete** (it is under 2x the best pyarrow way on every "
                "corpus): recommend removing kernels/parquet.py, readers/parquet/many.py, "
                "readers/parquet/metadata.py and their tests, and reading small shards the "
                "best pyarrow way.")
    return txt


def merged(old: dict, new: dict) -> dict:
    """``old`` results with the corpora of ``new`` replaced (a rerun of some of them)."""
    for key in ("corpora", "warm", "cold", "resident"):
        if key in new:
            old.setdefault(key, {}).update(new[key])
    old.setdefault("reruns", []).append(
        {"command": new["command"], "when": new["when"], "git": new["git"],
         "load": [new["machine"]["load_start"][0], new["load_end"][0]],
         "corpora": list(new["corpora"])})
    old["decision"] = decision_text(old)
    return old


def git_head() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=BENCH,
                              capture_output=True, text=True).stdout.strip()
    except OSError:
        return "?"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--small-shards", type=int, default=4000)
    ap.add_argument("--small-rows", type=int, default=500)
    ap.add_argument("--mid-shards", type=int, default=400)
    ap.add_argument("--mid-rows", type=int, default=15000)
    ap.add_argument("--lengths-rows", type=int, default=25000,
                    help="rows of each of --small-shards shards of a length column alone "
                         "(bench_shards.py's corpus); 0: none")
    ap.add_argument("--repeat", type=int, default=7, help="timed rounds (warm cache)")
    ap.add_argument("--cold-rounds", type=int, default=3, help="0: none")
    ap.add_argument("--spark-python", default=None,
                    help="a Python with pyspark (and a JVM) to write the Spark corpus")
    ap.add_argument("--workdir", default=None, help="where corpora go (default: a temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep the corpora")
    ap.add_argument("--only", default=None, help="comma-separated corpora to run")
    ap.add_argument("--no-write", action="store_true", help="print, do not write results")
    ap.add_argument("--report-only", action="store_true",
                    help="rewrite the .md (and the decision) from the .json already written")
    ap.add_argument("--merge", action="store_true",
                    help="replace only the corpora run (--only) in the results already written")
    args = ap.parse_args()
    if args.report_only:
        res = json.loads((RESULTS / "parquet_decoder.json").read_text())
        spark = res["params"].get("spark_python")
        if spark and "pyspark" not in res["machine"]["versions"] and os.path.exists(spark):
            res["machine"]["versions"]["pyspark"] = subprocess.run(
                [spark, "-c", "import pyspark; print(pyspark.__version__)"],
                capture_output=True, text=True).stdout.strip() or "?"
        res["decision"] = decision_text(res)
        (RESULTS / "parquet_decoder.json").write_text(json.dumps(res, indent=1) + "\n")
        (RESULTS / "parquet_decoder.md").write_text(report(res))
        print(report(res))
        return

    work = Path(args.workdir or tempfile.mkdtemp(prefix="bench-parquet-decoder-"))
    work.mkdir(parents=True, exist_ok=True)
    res: dict = {"command": "python bench/bench_parquet_decoder.py " + " ".join(sys.argv[1:]),
                 "when": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
                 "git": git_head(), "machine": machine(),
                 "params": {k: v for k, v in vars(args).items()}, "text_div": TEXT_DIV}
    try:
        t0 = time.perf_counter()
        small, small_ref = tables(args.small_shards, args.small_rows, 1)
        mid, mid_ref = tables(args.mid_shards, args.mid_rows, 2)
        corpora: dict[str, tuple[Path, np.ndarray]] = {}

        def make(name: str, fn: Callable[[], Path], ref: np.ndarray) -> None:
            root, done = work / name, work / f"{name}.done"  # a finished corpus is reused
            key = json.dumps([args.small_shards, args.small_rows, args.mid_shards,
                              args.mid_rows, args.lengths_rows, TEXT_DIV])
            if not done.exists() or done.read_text() != key:
                shutil.rmtree(root, ignore_errors=True)
                fn()
                done.write_text(key)
            corpora[name] = (root, ref)

        if args.spark_python:
            res["machine"]["versions"]["pyspark"] = subprocess.run(
                [args.spark_python, "-c", "import pyspark; print(pyspark.__version__)"],
                capture_output=True, text=True).stdout.strip() or "?"
        make("small-pyarrow", lambda: write_pyarrow(small, work / "small-pyarrow"), small_ref)
        make("small-polars", lambda: write_polars(small, work / "small-polars"), small_ref)
        if args.spark_python:
            try:
                def spark() -> Path:
                    root, line = write_spark(args.spark_python, work / "small-pyarrow",
                                             work / "small-spark", args.small_shards)
                    res["spark"] = line
                    return root
                make("small-spark", spark, small_ref)
            except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
                res["spark_error"] = str(exc)[-500:]
                print("spark:", exc, file=sys.stderr)
        make("mid-pyarrow", lambda: write_pyarrow(mid, work / "mid-pyarrow"), mid_ref)
        make("mid-polars", lambda: write_polars(mid, work / "mid-polars"), mid_ref)
        small = mid = []  # (free them: corpora written)
        if args.lengths_rows:
            bare, bare_ref = tables(args.small_shards, args.lengths_rows, 3, text=False)
            make("small-lengths-only", lambda: write_pyarrow(bare, work / "small-lengths-only"),
                 bare_ref)
            bare = []
        if args.only:
            corpora = {c: v for c, v in corpora.items() if c in args.only.split(",")}
        res["build_s"] = time.perf_counter() - t0
        print(f"corpora ready in {res['build_s']:.0f} s", flush=True)

        res["corpora"] = {c: describe(root) for c, (root, _) in corpora.items()}
        for c, d in res["corpora"].items():
            print(c, json.dumps(d), flush=True)
        refs = {c: np.bincount(ref) for c, (_, ref) in corpora.items()}
        ms = methods()
        res["methods"] = list(ms)

        res["warm"], res["resident"] = {}, {}
        for c, (root, _) in corpora.items():
            print(f"{c}: warm", flush=True)
            warm(root)
            bench(root, refs[c], ms, 1, False)  # untimed: warms every method
            res["resident"][c] = resident(root)
            load = os.getloadavg()[0]
            runs = bench(root, refs[c], ms, args.repeat, False)
            res["warm"][c] = summary(runs)
            res["warm"][c]["load"] = [load, os.getloadavg()[0]]
            print(f"  speedup vs best pyarrow {res['warm'][c]['speedup_vs_best_pyarrow']:.2f}x",
                  flush=True)
        if args.cold_rounds:
            res["cold"], res["cold_rounds"] = {}, args.cold_rounds
            root0 = next(iter(corpora.values()))[0]
            evict(root0)
            res["resident_after_evict"] = resident(root0)
            for c, (root, _) in corpora.items():
                print(f"{c}: evicted", flush=True)
                load = os.getloadavg()[0]
                res["cold"][c] = summary(bench(root, refs[c], ms, args.cold_rounds, True))
                res["cold"][c]["load"] = [load, os.getloadavg()[0]]
                warm(root)
        res["load_end"] = os.getloadavg()
        res["decision"] = decision_text(res)
    finally:
        if not args.keep and args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)
    out = RESULTS / "parquet_decoder.json"
    if args.merge and out.exists():
        res = merged(json.loads(out.read_text()), res)
    md = report(res)
    if args.no_write:
        print(md)
        return
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "parquet_decoder.json").write_text(json.dumps(res, indent=1) + "\n")
    (RESULTS / "parquet_decoder.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
