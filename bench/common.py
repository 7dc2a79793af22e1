"""What the benches share: where things live, whole processes timed with their own peak
RSS, the machine and its load, Markdown tables, and the seeded corpora they generate.

Peak RSS is measured by a small launcher (``python -I -S``, ~8 MiB) that spawns the measured
command and reads ``wait4``'s rusage: Linux keeps a process's ``ru_maxrss`` across exec, and a
child spawned straight from a bench (which holds numpy, pyarrow and its corpora) would start
from the bench's own resident set.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
DATA = BENCH / "data"
RESULTS = BENCH / "results"
CLI = str(Path(sys.executable).parent / "gpu-profiler")
MIB = 1 << 20

_LAUNCH = r"""
import json, os, sys, time
out, err = sys.argv[1], sys.argv[2]
acts = [(os.POSIX_SPAWN_OPEN, 1, out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644),
        (os.POSIX_SPAWN_OPEN, 2, err, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)]
t = time.perf_counter()
pid = os.posix_spawnp(sys.argv[3], sys.argv[3:], os.environ, file_actions=acts)
_, status, ru = os.wait4(pid, 0)
print(json.dumps({"wall": time.perf_counter() - t, "rc": os.waitstatus_to_exitcode(status),
                  "rss_mib": ru.ru_maxrss / 1024, "cpu": ru.ru_utime + ru.ru_stime}))
"""


def process(cmd: list[str], env: dict[str, str] | None = None, check: bool = True) -> dict:
    """Run ``cmd`` as a whole process: ``wall`` seconds, ``cpu`` seconds, ``rss_mib`` (its
    peak resident set), ``rc``, ``stdout`` and ``stderr``."""
    with tempfile.TemporaryDirectory(prefix="bench-proc-") as tmp:
        out, err = Path(tmp, "out"), Path(tmp, "err")
        p = subprocess.run([sys.executable, "-I", "-S", "-c", _LAUNCH, str(out), str(err),
                            *map(str, cmd)], capture_output=True, text=True,
                           env=env, cwd=ROOT, check=True)
        r = json.loads(p.stdout)
        r["stdout"], r["stderr"] = out.read_text(), err.read_text()
    if check and r["rc"]:
        sys.exit(f"FAIL: {' '.join(map(str, cmd))[:200]} exited {r['rc']}:\n"
                 f"{r['stderr'][-3000:]}")
    return r


def python(code: str, *args: object, env: dict[str, str] | None = None) -> dict:
    """``python -c code args`` as a whole process (see :func:`process`)."""
    return process([sys.executable, "-c", code, *map(str, args)], env)


#: A process that maps the files named in its arguments (folders walked) and locks them in
#: memory, so that they stay in the page cache while a bench runs: on these machines the
#: kernel's DAMON reclaim evicts cold page-cache pages within minutes, with GBs free, and a
#: "warm" run then reads from disk (seen: 47% iowait, walls 2x apart).
_PIN = r"""
import ctypes, os, signal, stat, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                      ctypes.c_int, ctypes.c_long]
for top in sys.argv[1:]:
    walk = os.walk(top) if os.path.isdir(top) else [("", [], [top])]
    for folder, _, names in walk:
        for name in names:
            try:
                fd = os.open(os.path.join(folder, name), os.O_RDONLY)
            except OSError:
                continue
            st = os.fstat(fd)
            if st.st_size and stat.S_ISREG(st.st_mode):
                libc.mmap(None, st.st_size, 1, 1, fd, 0)  # PROT_READ, MAP_SHARED
            os.close(fd)
print("pinned" if libc.mlockall(1) == 0 else "not pinned", flush=True)
signal.pause()
"""


def libraries() -> list[Path]:
    """What a process of this interpreter loads: its venv, its Python, this checkout."""
    return [Path(sys.prefix), Path(sys.base_prefix), ROOT / "gpu_profiler", ROOT / "kernels"]


@contextlib.contextmanager
def pinned(*paths: Path) -> Iterator[bool]:
    """Keep the files of ``paths`` in the page cache meanwhile (see `_PIN`); yields whether
    they are: not when they would take over half the memory available (or locking is not
    allowed: it needs root or a large RLIMIT_MEMLOCK)."""
    files = [q for p in paths for q in (p.rglob("*") if p.is_dir() else [p]) if q.is_file()]
    need = sum(q.stat().st_size for q in files)
    free = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    if need > free // 2:
        yield False
        return
    p = subprocess.Popen([sys.executable, "-c", _PIN, *map(str, paths)],
                         stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None
        yield p.stdout.readline().strip() == "pinned"
    finally:
        p.kill()
        p.wait()


def compile_package() -> None:
    """Byte-compile the package, as installing a wheel does: an editable install under
    ``PYTHONDONTWRITEBYTECODE`` would otherwise compile every module in every process."""
    import compileall

    for folder in ("gpu_profiler", "kernels"):
        compileall.compile_dir(ROOT / folder, quiet=1)


def alternate(methods: dict[str, Callable[[], dict]], repeat: int) -> dict[str, list[dict]]:
    """Each method run ``repeat`` times, in turn (A B C A B C ...), so that a change of load
    hits them alike."""
    runs: dict[str, list[dict]] = {k: [] for k in methods}
    for _ in range(repeat):
        for name, fn in methods.items():
            runs[name].append(fn())
    return runs


def median(runs: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def load() -> float:
    """The 1-minute load average."""
    return os.getloadavg()[0]


def machine() -> dict:
    """The CPU, core count, versions, git revision, date and load average."""
    import pyarrow as pa

    cpu = next((line.split(":", 1)[1].strip() for line in
                Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    git = subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True,
                         text=True, cwd=ROOT).stdout.strip()
    return {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(),
            "numpy": np.__version__, "pyarrow": pa.__version__, "git": git,
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "load": load()}


def table(header: list[str], rows: list[list[object]], right: set[int] | None = None) -> list[str]:
    """A Markdown table; columns in ``right`` (default: all but the first) right-aligned."""
    right = set(range(1, len(header))) if right is None else right
    out = ["| " + " | ".join(header) + " |",
           "|" + "|".join("---:" if i in right else "---" for i in range(len(header))) + "|"]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return out


def write_results(name: str, data: dict, md: list[str]) -> None:
    """bench/results/NAME.json and NAME.md."""
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps(data, indent=1) + "\n")
    (RESULTS / f"{name}.md").write_text("\n".join(md) + "\n")


def check_disk(need: int, where: Path = DATA) -> None:
    """Exit unless ``where`` has ``need`` bytes free, and 2 GiB more."""
    where.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(where).free
    if free < need + (2 << 30):
        sys.exit(f"FAIL: {where} has {free / 2**30:.1f} GiB free; this run needs about "
                 f"{need / 2**30:.1f} GiB (+2 GiB headroom)")


# --------------------------------------------------------------------------- corpora

def lengths_block(seed: int, index: int, n: int) -> np.ndarray:
    """Block ``index`` of a corpus of SFT-like int32 lengths (log-normal, median 600, ~1%
    above 8192, clipped to [1, 131072]); independent of how many blocks there are."""
    rng = np.random.default_rng([seed, index])
    return np.clip(rng.lognormal(math.log(600), 1.124, n), 1, 131072).astype(np.int32)


def length_blocks(seed: int, total: int, block: int = 1 << 24) -> Iterator[np.ndarray]:
    for i, lo in enumerate(range(0, total, block)):
        yield lengths_block(seed, i, min(block, total - lo))


def token_stream(path: Path, tokens: int, eot: int, seed: int = 20261201,
                 block: int = 100_000_000) -> Path:
    """A nanoGPT ``.bin`` (uint16) of ``tokens`` ids, made once: uniform below ``eot``, one
    in 1000 an ``eot`` (documents of ~1000 tokens)."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        rng = np.random.default_rng(seed)
        tmp = path.with_suffix(".tmp")
        with open(tmp, "wb") as f:
            for lo in range(0, tokens, block):
                m = min(block, tokens - lo)
                x = rng.integers(0, eot, m).astype(np.uint16)
                x[rng.random(m) < 1e-3] = eot
                x.tofile(f)
        os.replace(tmp, path)
    return path


JSONL_WORDS = ["the", "of", "and", "a", "to", "in", "is", "you", "that", "it", "he", "was",
               "for", "on", "are", "as", "with", "his", "they", "I", "ünï", "日本", '"q"',
               "x\ny"]


def jsonl_corpus(path: Path, lines: int, seed: int = 20261201, words: tuple[int, int] = (3, 12),
                 rare: float = 4 / 24, escaped: bool = False) -> Path:
    """JSON Lines, made once: objects like ``{"id": "doc-17", "text": "...", "num_tokens":
    812, "meta": {"src": "web", "score": 0.5}}`` with ``words`` (low, high) words of text,
    a ``rare`` share of them unicode, escaped quotes or newlines. The default: 3-11 words,
    ~108 bytes a line; ``(200, 500), 0.02``: documents of ~2 KB of mostly plain text, as in
    pretraining corpora. ``escaped``: as Python's json writes by default (``ensure_ascii``),
    every non-ASCII character a ``\\uXXXX`` escape, and the unicode word an emoji too (a
    surrogate pair: in ~1 line of 4)."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        rng = np.random.default_rng(seed)
        vocabulary = [w + "\U0001F600" if escaped and w == "日本" else w for w in JSONL_WORDS]
        plain, special = len(JSONL_WORDS) - 4, 4
        p = np.r_[np.full(plain, (1 - rare) / plain), np.full(special, rare / special)]
        tmp = path.with_suffix(".tmp")
        with open(tmp, "w") as f:
            for start in range(0, lines, 100_000):
                m = min(100_000, lines - start)
                tokens = rng.integers(1, 8192, m)
                nwords = rng.integers(*words, m)
                picks = rng.choice(len(JSONL_WORDS), int(nwords.sum()), p=p)
                out, at = [], 0
                for i in range(m):
                    text = json.dumps(" ".join(vocabulary[j] for j in picks[at:at + nwords[i]]),
                                      ensure_ascii=escaped)
                    at += nwords[i]
                    out.append(f'{{"id":"doc-{start + i}","text":{text},"num_tokens":'
                               f'{tokens[i]},"meta":{{"src":"web","score":0.5}}}}\n')
                f.write("".join(out))
        os.replace(tmp, path)
    return path


def write_hf(target: Path, template: dict, tables: Iterator, rows: int, shards: int,
             batch: int = 1000) -> Path:
    """An HF save_to_disk dir of ``rows`` rows in ``shards`` shards of ``batch``-row record
    batches, as ``datasets`` writes them: its metadata files and schema taken from a small
    dir that ``datasets`` saved from ``template`` (columns of the same types), the rows
    from ``tables`` (pyarrow tables, in order). Checked with ``datasets.load_from_disk``."""
    import datasets
    import pyarrow as pa

    datasets.disable_progress_bars()
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".hf-", dir=target.parent))
    try:
        datasets.Dataset.from_dict(template).save_to_disk(str(tmp / "template"))
        with pa.memory_map(str(tmp / "template" / "data-00000-of-00001.arrow")) as src:
            schema = pa.ipc.open_stream(src).schema
        per = -(-rows // shards)
        names = [f"data-{k:05d}-of-{shards:05d}.arrow" for k in range(shards)]
        out = tmp / "ds"
        out.mkdir()
        shard, written, writer, sink = -1, per, None, None
        for t in tables:
            lo = 0
            while lo < t.num_rows:
                if written == per:
                    if writer:
                        writer.close()
                        sink.close()
                    shard, written = shard + 1, 0
                    sink = pa.OSFile(str(out / names[shard]), "wb")
                    writer = pa.ipc.new_stream(sink, schema)
                take = min(t.num_rows - lo, per - written)
                writer.write_table(t.slice(lo, take).cast(schema), max_chunksize=batch)
                lo += take
                written += take
        writer.close()
        sink.close()
        state = json.loads((tmp / "template" / "state.json").read_text())
        state["_data_files"] = [{"filename": f} for f in names[:shard + 1]]
        state["_fingerprint"] = f"{rows:x}{shards:x}"[:16]
        (out / "state.json").write_text(json.dumps(state, indent=2))
        shutil.copy(tmp / "template" / "dataset_info.json", out / "dataset_info.json")
        check = datasets.load_from_disk(str(out))
        if check.num_rows != rows:
            sys.exit(f"FAIL: {out} reads back as {check.num_rows} rows, not {rows}")
        del check
        shutil.rmtree(target, ignore_errors=True)
        os.replace(out, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target
