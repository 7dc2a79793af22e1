"""Hostile files, fuzzed: small Arrow IPC (stream and file, plain, LZ4, ZSTD) and Parquet
(plain, snappy, ZSTD) files truncated at many offsets, with random bytes changed and with
crafted sizes (2**62, negative, beyond the file, 2**31 metadata lengths, compression
bombs), scanned by every reader (selective, pyarrow, a light scan's, Parquet trusting its
statistics or not) and I/O mode, in a
child process under an address-space limit (1 GiB above what it maps when warm) and a
time limit per case (tests/fuzz_child.py).

Every scan must end in numbers or in one line naming the file, never a signal, an
exception that is not `ProfilerError`, the memory limit or the time limit; numbers must
equal pyarrow's wherever pyarrow reads the file, and the two IPC readers must agree: the
same numbers, or both an error.
"""

from __future__ import annotations

import json
import os
import select
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

CHILD = Path(__file__).with_name("fuzz_child.py")
CASE_SECONDS = 20  # per case: far above any real one (the slowest, a bomb, takes ~1 s)
SEED = 20261201


def _table(rng: np.random.Generator, n: int, lists: bool | None) -> pa.Table:
    """Lengths with nulls, and a list column (``lists``), a text column (False) or
    nothing else (None: a dense file, which light scans read with pyarrow)."""
    lengths = rng.integers(0, 300, n)
    null = rng.random(n) < 0.1
    cols = {"length": pa.array(lengths.astype(np.int32), mask=null)}
    if lists is None:
        pass
    elif lists:
        cols["input_ids"] = pa.array([None if m else list(range(k % 40))
                                      for k, m in zip(lengths, null, strict=True)],
                                     pa.list_(pa.int32()))
    else:
        cols["text"] = pa.array([f"t{k}" * (k % 5) for k in lengths])
    return pa.table(cols)


def _ipc(path: Path, t: pa.Table, kind: str, codec: str | None) -> bytes:
    opts = pa.ipc.IpcWriteOptions(compression=codec)
    with pa.OSFile(str(path), "wb") as f:
        new = pa.ipc.new_file if kind == "file" else pa.ipc.new_stream
        with new(f, t.schema, options=opts) as w:
            w.write_table(t, max_chunksize=60)
    return path.read_bytes()


def _parquet(path: Path, t: pa.Table, codec: str) -> bytes:
    pq.write_table(t, path, compression=codec, row_group_size=60, write_page_index=True)
    return path.read_bytes()


def _mutants(rng: np.random.Generator, data: bytes, n: int) -> list[bytes]:
    """Truncations, flipped bytes, and 8-byte words replaced by crafted sizes."""
    out = [data[:k] for k in sorted({*rng.integers(0, len(data), n // 3).tolist(),
                                     len(data) - 1, 8, 0})]
    for _ in range(n // 3):
        b = bytearray(data)
        i = int(rng.integers(0, len(b)))
        b[i] ^= int(rng.integers(1, 256))
        out.append(bytes(b))
    crafted = [1 << 62, -1, -(1 << 40), 1 << 31, (1 << 31) - 1, len(data) + 8, 1 << 42]
    for _ in range(n // 3):
        b = bytearray(data)
        i = int(rng.integers(0, max(len(b) - 8, 1)))
        i -= i % 4
        word = crafted[int(rng.integers(0, len(crafted)))]
        b[i:i + 8] = struct.pack("<q", word)[:len(b) - i]  # the file may be under 8 bytes
        out.append(bytes(b))
    return out


def _crafted_ipc(tmp: Path) -> list[tuple[Path, str]]:
    """Sizes the selective reader refuses in bounded memory, aimed at pyarrow's path:
    a 4 TB body, a 2 GiB metadata length in a record batch's framing, a buffer declaring
    2**40 decompressed bytes, and a real ZSTD bomb (1.2 GB of zeros in a 40 KB file)."""
    out = []
    t = pa.table({"length": pa.array(np.arange(123, dtype=np.int32))})
    for kind in ("stream", "file"):
        data = _ipc(tmp / f"c.{kind}", t, kind, None)
        p = tmp / f"body.{kind}"
        p.write_bytes(data.replace(struct.pack("<q", 496), struct.pack("<q", 1 << 42)))
        out.append((p, kind))
        start = 8 if kind == "file" else 0
        (m,) = struct.unpack_from("<i", data, start + 4)
        second = start + 8 + m  # the record batch's framing
        p = tmp / f"meta.{kind}"
        p.write_bytes(data[:second + 4] + struct.pack("<i", 0x7FFFFFF0) + data[second + 8:])
        out.append((p, kind))
        zdata = _ipc(tmp / f"z.{kind}", t, kind, "zstd")
        p = tmp / f"declared.{kind}"
        p.write_bytes(zdata.replace(struct.pack("<q", 492), struct.pack("<q", 1 << 40)))
        out.append((p, kind))
    zeros = pa.table({"length": pa.array(np.zeros(300_000_000, np.int32))})  # calloc'd
    for kind in ("stream", "file"):
        p = tmp / f"bomb.{kind}"
        with pa.OSFile(str(p), "wb") as f:
            new = pa.ipc.new_file if kind == "file" else pa.ipc.new_stream
            with new(f, zeros.schema, options=pa.ipc.IpcWriteOptions(compression="zstd")) as w:
                w.write_table(zeros, max_chunksize=len(zeros))
        out.append((p, kind))
    return out


def _corpus(tmp: Path) -> list[dict]:
    rng = np.random.default_rng(SEED)
    files: list[tuple[Path, str, str | None]] = []  # (path, kind, offsets_of)
    k = 0
    for lists in (False, True, None):
        t = _table(rng, 200, lists)
        sources = [(kind, codec) for kind in ("stream", "file") for codec in (None, "lz4",
                                                                              "zstd")]
        sources += [("parquet", codec) for codec in ("none", "snappy", "zstd")]
        for kind, codec in sources:
            base = tmp / f"base{k}"
            data = _ipc(base, t, kind, codec) if kind != "parquet" else \
                _parquet(base, t, str(codec))
            for m in _mutants(rng, data, 24):
                p = tmp / f"m{k}.{'parquet' if kind == 'parquet' else 'arrow'}"
                p.write_bytes(m)
                files.append((p, kind, "input_ids" if lists is True else None))
                k += 1
    files += [(p, kind, None) for p, kind in _crafted_ipc(tmp)]
    cases = []
    for path, kind, offsets in files:
        fmt_modes = [("numpy", None, "auto"), ("numba", "selective", "buffered"),
                     ("numba", "selective", "mapped"), ("numba", "pyarrow", "auto")]
        if kind == "parquet":  # and trusting statistics (which a mutation may make lie)
            fmt_modes = [("numpy", None, "auto"), ("numba", None, "auto"),
                         ("numba", None, "trust")]
        for backend, reader, io in fmt_modes:
            cases.append({"path": str(path), "kind": kind, "column": None if offsets else
                          "length", "offsets_of": offsets, "backend": backend,
                          "reader": reader, "io": "auto" if io == "trust" else io,
                          "trust": io == "trust"})
    return cases


def _run(manifest: Path, n: int) -> tuple[dict[int, dict], dict[int, dict], dict[int, str]]:
    """Every case's outcome and pyarrow's reference; a case the child died or stalled on
    is recorded in the third dict, and the child restarted after it."""
    done: dict[int, dict] = {}
    refs: dict[int, dict] = {}
    died: dict[int, str] = {}
    first = 0
    # few malloc arenas: each thread's 64 MiB arena would count against the limit
    env = {**os.environ, "PYTHONPATH": str(CHILD.parent.parent), "MALLOC_ARENA_MAX": "2"}
    errors = manifest.with_suffix(".err")
    while first < n:
        with open(errors, "w") as err:
            child = subprocess.Popen([sys.executable, str(CHILD), str(manifest), str(first)],
                                     stdout=subprocess.PIPE, stderr=err, env=env, text=True)
        assert child.stdout is not None
        current, phase = first, "start"
        deadline = time.monotonic() + 300  # the child's own start-up and warm-up
        while True:
            ready, _, _ = select.select([child.stdout], [], [],
                                        max(0.0, deadline - time.monotonic()))
            line = child.stdout.readline() if ready else None
            if not line:
                if line is None:
                    child.kill()
                child.wait()
                if phase == "ref":  # pyarrow's own reading took the child down
                    refs[current] = {"fail": f"exit {child.returncode}"}
                    first = current + 1
                elif current >= n:
                    first = n
                else:
                    reason = "time limit" if line is None else f"exit {child.returncode}"
                    died[current] = f"{reason}: {errors.read_text()[-400:]}"
                    first = current + 1
                break
            word, index, *rest = line.split(" ", 2)
            current, phase = int(index), word
            deadline = time.monotonic() + CASE_SECONDS
            if word == "done":
                done[current] = json.loads(rest[0])
            elif word == "ref":
                refs[current] = json.loads(rest[0])
                if current == n - 1:
                    current = n
    return done, refs, died


def test_hostile_files_end_in_numbers_or_one_line(tmp_path):
    from gpu_profiler import native

    native.library()  # built here, if need be, not inside a child's time limit
    cases = _corpus(tmp_path)
    manifest = tmp_path / "cases.json"
    manifest.write_text(json.dumps(cases))
    done, refs, died = _run(manifest, len(cases))
    problems = [f"{cases[i]}: {why}" for i, why in died.items()]
    for i, case in enumerate(cases):
        got = done.get(i)
        if got is None:
            continue
        if "bug" in got:
            problems.append(f"{case}: {got['bug']}")
        elif "error" in got:
            line = got["error"]
            if "\n" in line or case["path"] not in line:
                problems.append(f"{case}: error line {line!r}")
        elif "ok" in refs.get(i, {}) and refs[i]["ok"] != got["ok"] and not case["trust"]:
            problems.append(f"{case}: numbers differ from pyarrow's")
    # the two IPC readers agree: selective (buffered) vs pyarrow, per file
    by_file: dict[str, dict[str | None, dict]] = {}
    for i, case in enumerate(cases):
        if case["kind"] != "parquet" and case["io"] in ("buffered", "auto") and i in done:
            by_file.setdefault(case["path"], {})[case["reader"]] = done[i]
    for path, outs in by_file.items():
        a, b = outs.get("selective"), outs.get("pyarrow")
        if a is None or b is None:
            continue
        if ("ok" in a) != ("ok" in b) or a.get("ok") != b.get("ok"):
            problems.append(f"{path}: selective {_short(a)} vs pyarrow {_short(b)}")
    assert not problems, f"{len(problems)} of {len(cases)} cases:\n" + "\n".join(problems[:30])


def _short(outcome: dict) -> str:
    return "numbers" if "ok" in outcome else str(outcome)[:160]
