"""``profile --group-by`` against the per-group histogram a user writes with duckdb, polars
or pyarrow (issue 29, measured as issue 26 measures every layout): whole processes, side
by side, alternated, medians.

Corpus (bench/data/groups/, seeded, kept unless ``--clean``): one Parquet file of N rows,
an int32 ``length`` (lognormal, differing by source) and a string ``source`` of 8 values
(pyarrow's default dictionary pages), in 1 Mi-row row groups; and an HF ``save_to_disk``
dir of the same rows (4 shards of 1,000-row record batches; peers: pyarrow and polars over
its IPC streams, duckdb reading no IPC). Each peer computes every group's exact
histogram (``GROUP BY source, length``); every peer's per-group samples, tokens and longest
length are checked equal to gpu-profiler's ``-f json`` before anything is timed.
Writes bench/results/groups.md and groups.json.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

DATA = common.DATA / "groups"
SOURCES = ("web", "code", "books", "arxiv", "wiki", "math", "chat", "news")
SEED = 20261202

# Each peer: argv = path, out (.json of {group: [samples, tokens, longest]}).
_HEAD = "import sys, json\npath, out = sys.argv[1], sys.argv[2]\n"
_SAVE = ("\njson.dump({str(g): [int(n), int(t), int(m)] for g, n, t, m in rows}, "
         "open(out, 'w'))\n")
#: Peers of an HF save_to_disk dir (Arrow IPC streams of 1,000-row record batches).
HF_PEERS = {
    "hf pyarrow": """
import json, numpy as np, pyarrow as pa
parts = []
for f in json.load(open(path + "/state.json"))["_data_files"]:
    t = pa.ipc.open_stream(pa.memory_map(path + "/" + f["filename"])).read_all()
    parts.append(t.select(["source", "length"]).group_by(["source", "length"])
                 .aggregate([("length", "count")]))
h = pa.concat_tables(parts)
g = h["source"].to_numpy(zero_copy_only=False); l = h["length"].to_numpy().astype(np.int64)
n = h["length_count"].to_numpy()
rows = [(k, n[g == k].sum(), (n * l)[g == k].sum(), l[g == k].max()) for k in set(g.tolist())]
""",
    "hf polars": """
import json, polars as pl
files = [path + "/" + f["filename"] for f in json.load(open(path + "/state.json"))["_data_files"]]
df = pl.concat([pl.read_ipc_stream(f, columns=["source", "length"]) for f in files])
h = df.group_by("source", "length").len()
s = h.group_by("source").agg(pl.col("len").sum().alias("n"),
                             (pl.col("len").cast(pl.Int64) * pl.col("length")).sum().alias("t"),
                             pl.col("length").max().alias("m"))
rows = s.iter_rows()
""",
}

PEERS = {
    "duckdb": """
import duckdb
hist = duckdb.sql(f"SELECT source, length, count(*) AS n FROM read_parquet('{path}') "
                  "GROUP BY source, length").fetchnumpy()
import numpy as np
g, l, n = hist["source"], hist["length"].astype(np.int64), hist["n"].astype(np.int64)
rows = [(k, n[g == k].sum(), (n * l)[g == k].sum(), l[g == k].max()) for k in set(g.tolist())]
""",
    "polars": """
import polars as pl
h = pl.scan_parquet(path).group_by("source", "length").len().collect()
s = h.group_by("source").agg(pl.col("len").sum().alias("n"),
                             (pl.col("len").cast(pl.Int64) * pl.col("length")).sum().alias("t"),
                             pl.col("length").max().alias("m"))
rows = s.iter_rows()
""",
    "pyarrow": """
import pyarrow.parquet as pq, pyarrow.compute as pc, numpy as np
t = pq.read_table(path, columns=["source", "length"])
h = t.group_by(["source", "length"]).aggregate([("length", "count")])
g = h["source"].to_numpy(zero_copy_only=False); l = h["length"].to_numpy().astype(np.int64)
n = h["length_count"].to_numpy()
rows = [(k, n[g == k].sum(), (n * l)[g == k].sum(), l[g == k].max()) for k in set(g.tolist())]
""",
}


def hf_corpus(n: int) -> Path:
    """The HF dir of the Parquet file's rows, in 4 shards (made once, as ``datasets``
    writes them: `common.write_hf`)."""
    target = DATA / f"hf-{n:.0e}"
    if not (target / "state.json").exists():
        t = pq.read_table(corpus(n))
        common.write_hf(target, {"length": [1, 2], "source": ["a", "b"]}, iter([t]), n, 4)
    return target


def corpus(n: int) -> Path:
    """The Parquet file of ``n`` rows (made once)."""
    path = DATA / f"mix-{n:.0e}.parquet"
    if path.exists():
        return path
    DATA.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(SEED)
    tmp = path.with_suffix(".tmp")
    with pq.ParquetWriter(tmp, pa.schema([("length", pa.int32()), ("source", pa.string())])) as w:
        for start in range(0, n, 1 << 20):
            m = min(1 << 20, n - start)
            pick = rng.integers(0, len(SOURCES), m)
            lengths = rng.lognormal(5.5 + pick / 4, 0.8).astype(np.int32) + 1
            w.write_table(pa.table({"length": lengths,
                                    "source": np.array(SOURCES)[pick]}))
    tmp.rename(path)
    return path


def ours(path: Path) -> dict:
    return common.process([common.CLI, "profile", str(path), "--group-by", "source", "-q",
                           "-f", "json"])


def check(path: Path, peers: dict[str, str]) -> None:
    """Every peer's per-group samples, tokens and longest equal ours."""
    doc = json.loads(ours(path)["stdout"])
    want = {g: [v["total_samples"], v["total_tokens"], v["max_len"]]
            for g, v in doc["groups"].items()}
    for name, code in peers.items():
        out = DATA / f"{name}.json"
        common.python(_HEAD + code + _SAVE, path, out)
        got = json.loads(out.read_text())
        if got != want:
            sys.exit(f"FAIL: {name} disagrees with gpu-profiler on {path.name}:\n{got}\n{want}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--samples", default="1e7,1e8", help="row counts, comma-separated")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--clean", action="store_true", help="delete the corpora afterwards")
    args = ap.parse_args()
    common.compile_package()
    rows, data = [], {"machine": common.machine(), "rows": []}
    cases = [(layout, n) for n in (int(float(s)) for s in args.samples.split(","))
             for layout in ("Parquet", "HF dir")]
    for layout, n in cases:
        path, peers = (corpus(n), PEERS) if layout == "Parquet" else (hf_corpus(n), HF_PEERS)
        check(path, peers)
        methods = {"gpu-profiler": lambda p=path: ours(p)}
        methods |= {name: (lambda c=code, p=path: common.python(_HEAD + c + _SAVE, p,
                                                                 DATA / "peer.json"))
                    for name, code in peers.items()}
        methods["gpu-profiler"]()  # warm-up round (page cache, byte code)
        for fn in list(methods.values())[1:]:
            fn()
        load0 = common.load()
        runs = common.alternate(methods, args.repeat)
        ours_wall = common.median(runs["gpu-profiler"], "wall")
        best = min((k for k in runs if k != "gpu-profiler"),
                   key=lambda k: common.median(runs[k], "wall"))
        entry = {"layout": layout, "samples": n, "load": [load0, common.load()],
                 "runs": {k: [{x: r[x] for x in ("wall", "cpu", "rss_mib")} for r in v]
                          for k, v in runs.items()}}
        data["rows"].append(entry)
        for name, v in runs.items():
            rows.append([layout, f"{n:.0e}", name, f"{common.median(v, 'wall'):.2f} s",
                         f"{common.median(v, 'cpu'):.2f} s",
                         f"{max(r['rss_mib'] for r in v):.0f} MiB",
                         f"**{common.median(runs[best], 'wall') / ours_wall:.2f}x**"
                         if name == "gpu-profiler" else "",
                         f"{load0:.1f}-{common.load():.1f}"])
    m = data["machine"]
    md = ["# `profile --group-by` against per-group histograms in duckdb, polars, pyarrow", "",
          f"`python bench/bench_groups.py --samples {args.samples} --repeat {args.repeat}` on "
          f"{m['cpu']} ({m['cores']} cores, shared), {m['date']}, git {m['git']}. One Parquet "
          "file, an int32 `length` and a string `source` of 8 values (dictionary pages), 1 Mi-"
          "row row groups; the same rows as an HF save_to_disk dir (4 shards of 1,000-row "
          "record batches, plain strings); page cache warm. Each process whole, alternated, "
          "medians; every peer's per-group samples, tokens and longest length checked equal "
          "first. ratio: the best peer's wall over gpu-profiler's.", "",
          *common.table(["layout", "rows", "process", "wall", "CPU", "peak RSS", "ratio",
                         "load"], rows, {3, 4, 5, 6})]
    common.write_results("groups", data, md)
    print("\n".join(md))
    if args.clean:
        shutil.rmtree(DATA)


if __name__ == "__main__":
    main()
