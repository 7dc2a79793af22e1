"""Hostile files, fuzzed: small Arrow IPC (stream and file, plain, LZ4, ZSTD) and Parquet
(plain, snappy, ZSTD) files truncated at many offsets, with random bytes changed and with
crafted sizes (2**62, negative, beyond the file, 2**31 metadata lengths, compression
bombs), scanned by every route (an IPC file alone and in a run of small shards read
together, Parquet trusting its statistics or not) and I/O mode, in a child process
under an address-space limit (1 GiB above what it maps when warm) and a time limit per
case (tests/fuzz_child.py).

Every scan must end in numbers or in one line naming the file, never a signal, an
exception that is not `ProfilerError`, the memory limit or the time limit; numbers must
equal pyarrow's wherever pyarrow reads the file, and an IPC file read alone or together
must give the same numbers, or both an error.

The formats added since (`test_every_other_format_ends_in_numbers_or_one_line`) are fuzzed
the same way, a seeded, bounded number of mutants each (~1,100 cases, ~10-20 s): token
streams (.npy, its header rewritten as well as its bytes: shapes, dtypes, lengths,
versions, broken literals; llm.c's header; nanoGPT's raw .bin), Megatron-LM indexes (both
units), JSON Lines plain and zstd (lines broken, blank runs inserted, the compressed
stream itself cut and changed), and Parquet footers with integers made negative. Their
numbers must equal a reading by the format's specification (tests/fuzz_child.py: numpy's
loader, llm.c's and Megatron-LM's checks, Python's json, pyarrow), and for the formats
whose reference is their own loader, numbers where it refuses the file are wrong too. The
bombs among them, run through the CLI itself, are in tests/test_bombs.py.
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
import pytest

pytestmark = pytest.mark.slow  # thousands of mutants in limited children: make test-slow

CHILD = Path(__file__).with_name("fuzz_child.py")
CASE_SECONDS = 20  # per case: far above any real one (the slowest, a bomb, takes ~1 s)
SEED = 20261201


def _table(rng: np.random.Generator, n: int, lists: bool | None) -> pa.Table:
    """Lengths with nulls, and a list column (``lists``), a text column (False) or
    nothing else (None: a dense file, which inline scans read with pyarrow)."""
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
    """Sizes the selective reader refuses in bounded memory (pyarrow's own reader would
    allocate them):
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
        fmt_modes = [("numpy", "alone", "auto"), ("numba", "alone", "buffered"),
                     ("numba", "alone", "mapped"), ("numba", "together", "auto"),
                     ("numpy", "together", "auto")]
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
    cases = _corpus(tmp_path)
    done, refs, problems = _run_cases(tmp_path, cases, "pyarrow's", strict=set())
    # an IPC file read alone and in a run of small shards: the same numbers or error
    by_file: dict[str, dict[str | None, dict]] = {}
    for i, case in enumerate(cases):
        if case["kind"] != "parquet" and case["backend"] == "numba" and \
                case["io"] in ("buffered", "auto") and i in done:
            by_file.setdefault(case["path"], {})[case["reader"]] = done[i]
    for path, outs in by_file.items():
        a, b = outs.get("alone"), outs.get("together")
        if a is None or b is None:
            continue
        if ("ok" in a) != ("ok" in b) or a.get("ok") != b.get("ok"):
            problems.append(f"{path}: alone {_short(a)} vs together {_short(b)}")
    assert not problems, f"{len(problems)} of {len(cases)} cases:\n" + "\n".join(problems[:30])


def _run_cases(tmp_path: Path, cases: list[dict], reference: str, strict: set[str]
               ) -> tuple[dict[int, dict], dict[int, dict], list[str]]:
    """Run every case in the limited children; ``(outcomes, references, problems)``. A
    problem: a child that died or hit a limit, an exception other than one line naming
    the file, numbers unlike the reference's, or (for the ``strict`` kinds) numbers where
    the reference refuses the file."""
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
            problems.append(f"{case}: numbers differ from {reference}")
        elif "ok" not in refs.get(i, {}) and case["kind"] in strict:
            problems.append(f"{case}: numbers where the reference refuses the file "
                            f"({refs.get(i)})")
    return done, refs, problems


def _short(outcome: dict) -> str:
    return "numbers" if "ok" in outcome else str(outcome)[:160]


# ------------------------------------------------------------------------ the other formats
EOT = 7
#: Mutants per base file of each of the other formats (seeded: the same files every run).
OTHER_MUTANTS = 24


def _ids(rng: np.random.Generator, n: int, top: int) -> np.ndarray:
    x = rng.integers(0, top, n)
    x[rng.random(n) < 0.08] = EOT
    return x


def _npy_file(header: bytes, version: tuple[int, int], body: bytes) -> bytes:
    size = struct.pack("<H" if version == (1, 0) else "<I", len(header))
    return b"\x93NUMPY" + bytes(version) + size + header + body


#: Rewrites of a .npy header's text (N: its token count), each where its first part occurs.
NPY_EDITS = [
    ("(N,)", "(-N,)"), ("(N,)", "(N, -1)"), ("(N,)", "(-1, -N)"), ("(N,)", "(2**32,)"),
    ("(N,)", "(1e99,)"), ("(N,)", "()"), ("(N,)", "(True,)"), ("(N,)", "(N"), ("(N,)", "[N]"),
    ("(N,)", "(99999999999999999999999,)"), ("(N,)", "(NL,)"), ("(N,)", "(N, 1)"),
    ("(N,)", "(1, N)"), ("(N,)", "(" + "1, " * 70 + "N)"), ("(N,)", "(0,)"),
    ("(N,)", "(" * 300 + "N" + ")" * 300), ("(N,)", "(N//2,)"),
    ("(N,)", "(" + "9" * 5000 + ",)"), ("(N,)", "(" + "9" * 4000 + ", " + "9" * 4000 + ")"),
    ("'D'", "'<u8'"), ("'D'", "'>u2'"), ("'D'", "'<f4'"), ("'D'", "'|O'"),
    ("'D'", "[('a', '<u2')]"), ("'D'", "'xx'"), ("'D'", "b'<u2'"), ("'D'", "'u2'"),
    ("'D'", "'=u2'"), ("'D'", "'<i4'"), ("'D'", "'<u4'"), ("'D'", "'(9999999999,)u1'"),
    ("'D'", "None"), ("False", "True"), ("False", "1"), ("False", "None"),
    ("'shape'", "'sh\"pe'"), ("{'descr'", "{'''descr"), ("{", "{'x': 1, "), ("{", ""),
    ("}", ""), ("'descr': 'D', ", ""), ("'descr'", "'descr': 'D', 'descr'"), (", }", "#}"),
    ("{", " {"), ("{", "\x00{"), ("}", "} + 1"), ("'", '"'), ("(N,)", "(N,\n)"),
    ("'", "\\"), ("}", "}}"), ("{", "{{"), ("'shape'", "'shape\u00e9'"),
]


def _npy_mutants(rng: np.random.Generator, array: np.ndarray, n: int) -> list[bytes]:
    """Header-aimed: the header's text rewritten (its length field then made right, or
    left as it was), the length field set to crafted values, the version changed, the
    header's bytes flipped or cut; and the generic mutants of the whole file."""
    version = {"<u2": (1, 0), "<u4": (2, 0), "<i4": (3, 0)}[array.dtype.str]
    wide = version != (1, 0)
    text = "{'descr': 'D', 'fortran_order': False, 'shape': (N,), }"
    body = array.tobytes()

    def encode(t: str) -> bytes:
        t = t.replace("'D'", f"'{array.dtype.str}'").replace("N", str(array.size))
        return t.encode("utf-8" if version == (3, 0) else "latin-1", errors="replace")

    good = encode(text)
    header = good + b" " * ((64 - (12 + len(good) + 1) % 64) % 64) + b"\n"
    data = _npy_file(header, version, body)
    out = []
    for _ in range(n):
        what, into = NPY_EDITS[int(rng.integers(0, len(NPY_EDITS)))]
        raw = encode(text.replace(what, into, 1)) + b"\n"
        if rng.random() < 0.3:  # the length field as it was: the text runs on, or short
            raw = (raw + b" " * len(header))[:len(header)]
            out.append(data[:12 if wide else 10] + raw + body)
        else:
            out.append(_npy_file(raw, version, body))
    for word in (0, 1, len(header) - 1, len(header) + 1, 0xFFFF, 0xFFFFFFFF, 1 << 31,
                 len(data)):
        if not wide and word > 0xFFFF:
            continue
        b = bytearray(data)
        b[8:12 if wide else 10] = struct.pack("<I" if wide else "<H", word)
        out.append(bytes(b))
    for v in ((1, 0), (2, 0), (3, 0), (0, 0), (9, 9), (1, 1)):
        out.append(data[:6] + bytes(v) + data[8:])
    for _ in range(n // 2):
        b = bytearray(data)
        i = int(rng.integers(0, 12 + len(header)))
        b[i] ^= int(rng.integers(1, 256))
        out.append(bytes(b))
    out += [data[:int(k)] for k in rng.integers(0, 12 + len(header), 4)]
    return out + _mutants(rng, data, n // 2)


def _llmc_mutants(rng: np.random.Generator, ids: np.ndarray, version: int,
                  n: int) -> list[bytes]:
    header = np.zeros(256, np.int32)
    header[:3] = 20240520, version, ids.size
    body = ids.astype(np.uint16 if version == 1 else np.uint32).tobytes()
    data = header.tobytes() + body
    out = []
    for at in (4, 8):
        for word in (-1, 0, 1, 2, 3, ids.size - 1, ids.size + 1, -ids.size, (1 << 31) - 1,
                     1 << 30):
            b = bytearray(data)
            b[at:at + 4] = struct.pack("<i", word)
            out.append(bytes(b))
    out += [data[:k] for k in (4, 8, 12, 1023, 1024, 1025, len(data) - 1)]
    out.append(data + b"\0\0")
    return out + _mutants(rng, data, n // 2)


def _megatron(sizes: list[int], docs: list[int], modes: bool) -> bytes:
    head = b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, 8, len(sizes), len(docs))
    pointers = np.concatenate([[0], np.cumsum(sizes)[:-1]]) * 2
    tail = np.array([s % 3 for s in sizes], np.int8).tobytes() if modes else b""
    return (head + np.array(sizes, "<i4").tobytes() + pointers.astype("<i8").tobytes()
            + np.array(docs, "<i8").tobytes() + tail)


def _megatron_mutants(rng: np.random.Generator, data: bytes, sequences: int,
                      n: int) -> list[bytes]:
    """Header fields crafted (version, dtype code, counts), document index entries and
    sizes crafted, bytes appended; and the generic mutants."""
    out = []
    for at, fmt, words in ((9, "<Q", (0, 2, 1 << 63)), (17, "<B", (0, 9, 255)),
                           (18, "<Q", (0, sequences - 1, sequences + 1, (1 << 64) - 1,
                                       1 << 61)),
                           (26, "<Q", (0, 1, 2, (1 << 64) - 1, 1 << 60))):
        for word in words:
            b = bytearray(data)
            b[at:at + struct.calcsize(fmt)] = struct.pack(fmt, word)
            out.append(bytes(b))
    docs_at = 34 + 12 * sequences
    for _ in range(n // 2):
        b = bytearray(data)
        if rng.random() < 0.5:
            i = docs_at + 8 * int(rng.integers(0, (len(b) - docs_at) // 8))
            word = [-1, 0, sequences, sequences + 1, 1 << 62, 3][int(rng.integers(0, 6))]
            b[i:i + 8] = struct.pack("<q", word)
        else:
            i = 34 + 4 * int(rng.integers(0, sequences))
            word = [-1, 0, (1 << 31) - 1, -(1 << 31), 1 << 30][int(rng.integers(0, 5))]
            b[i:i + 4] = struct.pack("<i", word)
        out.append(bytes(b))
    out += [data + b"\0" * k for k in (1, sequences, 8)]
    return out + _mutants(rng, data, n)


def _jsonl_text(rng: np.random.Generator, lines: int) -> bytes:
    """Objects with the length an int, null or absent, blank and whitespace lines, LF and
    CRLF, sometimes a byte order mark first."""
    out = [b"\xef\xbb\xbf" if rng.random() < 0.3 else b""]
    for _ in range(lines):
        r = rng.random()
        if r < 0.1:
            out.append([b"", b"  ", b"\t", b"\r", b" \r"][int(rng.integers(0, 5))] + b"\n")
            continue
        value = "null" if r < 0.15 else str(int(rng.integers(0, 3000)))
        field = f'"length": {value}, ' if r > 0.2 else ""
        end = b"\r\n" if rng.random() < 0.2 else b"\n"
        text = "x" * int(rng.integers(0, 99))
        out.append(("{" + field + f'"text": "{text}"' + "}").encode() + end)
    return b"".join(out)


JSONL_PIECES = [b"{", b"}", b'"', b"\n", b" ", b"\r", b"\t", b"\\", b"\x00", b"\xff", b",",
                b":", b"[", b"0", b"-", b"null", b"1.5", b"99999999999999999999", b"true",
                b'"length": 1, "length": 2', b"\xef\xbb\xbf", b"\n" * 5000, b" " * 5000,
                b"\r\n" * 3000, b"{}", b'{"length": -5}', b'{"length": 5}{"length": 6}',
                b"\n" * (3 << 20)]


def _jsonl_mutants(rng: np.random.Generator, data: bytes, n: int) -> list[bytes]:
    """Pieces inserted or written over, bytes deleted; and the generic mutants."""
    out = []
    for _ in range(n):
        b = bytearray(data)
        i = int(rng.integers(0, len(b) + 1))
        piece = JSONL_PIECES[int(rng.integers(0, len(JSONL_PIECES)))]
        r = rng.random()
        if r < 0.5:
            b[i:i] = piece
        elif r < 0.8:
            b[i:i + len(piece)] = piece
        else:
            del b[i:i + int(rng.integers(1, 40))]
        out.append(bytes(b))
    return out + _mutants(rng, data, n // 2)


def _zstd(data: bytes) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.CompressedOutputStream(sink, "zstd") as f:
        f.write(data)
    return sink.getvalue().to_pybytes()


def _footer_mutants(rng: np.random.Generator, data: bytes, n: int) -> list[bytes]:
    """A Parquet file's footer with integers made negative (the zigzag sign, bit 0 of a
    varint's first byte, flipped: after every byte that may be an i32/i64 field header,
    and ``n`` more at random)."""
    (length,) = struct.unpack_from("<i", data, len(data) - 8)
    start = len(data) - 8 - length
    picks = {i + 1 for i in range(start, len(data) - 9) if data[i] & 0x0F in (5, 6)}
    picks |= set(rng.integers(start, len(data) - 8, n).tolist())
    out = []
    for i in sorted(picks):
        b = bytearray(data)
        b[i] ^= 1
        out.append(bytes(b))
    return out


def _other_corpus(tmp: Path) -> list[dict]:
    """Every mutant of the other formats, as cases (the backends taking turns)."""
    rng = np.random.default_rng(SEED + 1)
    files: list[tuple[bytes, str, str, dict]] = []  # (data, kind, suffix, options)
    for dtype, top in ((np.uint16, 300), (np.uint32, 70_000), (np.int32, 300)):
        files += [(m, "npy", ".npy", {"eot": EOT}) for m in
                  _npy_mutants(rng, _ids(rng, 150, top).astype(dtype), OTHER_MUTANTS)]
    for version in (1, 2):
        files += [(m, "llmc", ".bin", {"eot": EOT, "eot_position": "start"}) for m in
                  _llmc_mutants(rng, _ids(rng, 150, 300), version, OTHER_MUTANTS)]
    raw = _ids(rng, 150, 300).astype(np.uint16).tobytes()
    files += [(m, "nanogpt", ".bin", {"eot": EOT}) for m in _mutants(rng, raw, 12)
              if m[:4] != struct.pack("<i", 20240520) and not m.startswith(b"\x93NUMPY")]
    for modes in (False, True):
        sizes = rng.integers(1, 500, 40).tolist()
        docs = [0, *sorted(rng.choice(np.arange(1, 40), 9, replace=False).tolist()), 40]
        for m in _megatron_mutants(rng, _megatron(sizes, docs, modes), 40, OTHER_MUTANTS):
            files += [(m, "megatron", ".idx", {}),
                      (m, "megatron", ".idx", {"unit": "document"})]
    for _ in range(2):
        text = _jsonl_text(rng, 80)
        plain = _jsonl_mutants(rng, text, 2 * OTHER_MUTANTS)
        files += [(m, "jsonl", ".jsonl", {}) for m in plain]
        zipped = [_zstd(m) for m in plain[:OTHER_MUTANTS]]
        zipped += _mutants(rng, _zstd(text), OTHER_MUTANTS)  # the stream itself broken
        zipped += [_zstd(text) + _zstd(text), _zstd(b"\n" * (64 << 20) + text)]
        files += [(m, "jsonl", ".jsonl.zst", {}) for m in zipped]
    t = _table(rng, 240, None)
    for m in _footer_mutants(rng, _parquet(tmp / "footer", t, "snappy"), OTHER_MUTANTS):
        files += [(m, "parquet", ".parquet", {}), (m, "parquet", ".parquet", {"trust": True})]
    cases = []
    for k, (data, kind, suffix, options) in enumerate(files):
        path = tmp / f"o{k}{suffix}"
        path.write_bytes(data)
        trust = options.pop("trust", False)
        cases.append({"path": str(path), "kind": kind,
                      "column": "length" if kind in ("jsonl", "parquet") else None,
                      "offsets_of": None, "backend": ("numpy", "numba")[k % 2],
                      "reader": None, "io": "auto", "options": options, "trust": trust})
        if kind == "jsonl" and suffix == ".jsonl":  # also twice, as small shards are read
            cases.append({**cases[-1], "backend": ("numpy", "numba")[k % 2 - 1],
                          "reader": "together"})
    return cases


#: Formats whose reference is their specification's own loader: numbers read where it
#: refuses the file are wrong (a negative .npy shape was counted). JSON Lines is not among
#: them: Python's json refuses what pyarrow's parser takes (control characters in strings).
STRICT = {"npy", "llmc", "nanogpt", "megatron"}


def test_every_other_format_ends_in_numbers_or_one_line(tmp_path):
    """.npy, llm.c and nanoGPT token streams, Megatron-LM indexes (both units), JSON Lines
    plain and zstd: every mutant gives the reference's numbers (where the reference reads
    it) or one line naming the file; never another exception, a signal, the memory or the
    time limit. A plain JSON Lines mutant read twice as small shards are (together) ends as
    it does alone, numbers or line."""
    cases = _other_corpus(tmp_path)
    done, refs, problems = _run_cases(tmp_path, cases, "the reference's", strict=STRICT)
    # a JSON Lines file read twice as small shards are (together) ends as it does alone
    for i, case in enumerate(cases):
        if case["reader"] == "together" and i - 1 in done and i in done:
            alone, twice = done[i - 1], done[i]
            if alone != twice:
                problems.append(f"{case['path']}: alone {_short(alone)} vs together "
                                f"{_short(twice)}")
    assert not problems, f"{len(problems)} of {len(cases)} cases:\n" + "\n".join(problems[:30])
    # the mutants reach both outcomes in every format, and read numbers are checked
    for kind in ("npy", "llmc", "nanogpt", "megatron", "jsonl", "parquet"):
        mine = [i for i, c in enumerate(cases) if c["kind"] == kind]
        assert {"ok" if "ok" in done[i] else "error" for i in mine} == {"ok", "error"}, kind
        assert any("ok" in done[i] and "ok" in refs.get(i, {}) for i in mine), kind


# --------------------------------------------------------------------- Apache's own files
APACHE = Path(__file__).with_name("data") / "apache"
#: Why a well-formed file of Apache's (pyarrow reads it) may still be refused, in one line:
#: lengths no token count has, a byte order or a column type lengths are not read from,
#: two fields of one name, an encrypted column.
REFUSALS = ("do not look like token counts", "big-endian", "fields are named",
            "needs a list column", "lengths must be integers", "encrypted")


def _apache_kind(rel: str) -> str:
    if "parquet" in rel.split("/")[0] or "/parquet/" in rel:
        return "parquet"
    return "file" if rel.endswith(".arrow_file") or "arrow-ipc-file" in rel else "stream"


def _apache_columns(path: Path, kind: str) -> list[tuple[str | None, str | None]]:
    """``(column, offsets_of)`` of every integer, dictionary-of-integer and list column
    pyarrow sees in the file's schema, or the scan's own choice where it sees none."""
    try:
        if kind == "parquet":
            schema = pq.read_schema(path)
        else:
            opened = pa.ipc.open_file if kind == "file" else pa.ipc.open_stream
            schema = opened(str(path)).schema
    except Exception:  # noqa: BLE001 - a hostile file: the scan picks (or refuses)
        return [(None, None)]
    out: list[tuple[str | None, str | None]] = []
    for field in schema:
        t = field.type
        if pa.types.is_dictionary(t):
            t = t.value_type
        try:
            name = field.name
        except UnicodeDecodeError:  # a name that is not UTF-8: the scan refuses it
            name = None
        if pa.types.is_integer(t):
            out.append((name, None))
        elif pa.types.is_list(t) or pa.types.is_large_list(t):
            out.append((None, name) if name else (None, None))
    return out or [(None, None)]


def test_apache_test_files_end_in_numbers_or_one_line(tmp_path):
    """Apache's own test files (tests/data/apache: parquet-testing and arrow-testing,
    their valid files of every encoding, codec, page version and IPC writer, and their
    fuzzers' crash cases and bad data), every integer and list column, each read alone
    and, as a scan of many small shards reads them, twice together, with both CPU
    backends: pyarrow's numbers where pyarrow reads the file, else one line naming it; and
    a valid file's column refused only for a reason of `REFUSALS`."""
    cases = []
    for path in sorted(p for p in APACHE.rglob("*") if p.is_file() and p.name != "LICENSE.txt"):
        rel = path.relative_to(APACHE).as_posix()
        kind = _apache_kind(rel)
        for column, offsets in _apache_columns(path, kind):
            for backend, reader in (("numpy", "alone"), ("numba", "alone"),
                                    ("numba", "together")):
                if reader == "together" and column is None and offsets is None:
                    continue
                cases.append({"path": str(path), "kind": kind, "column": column,
                              "offsets_of": offsets, "backend": backend, "reader": reader,
                              "io": "auto", "trust": False, "valid": "/data/" in rel
                              and "fuzz" not in rel and "crash" not in rel})
    assert len(cases) > 1000
    done, refs, problems = _run_cases(tmp_path, cases, "pyarrow's", strict=set())
    for i, case in enumerate(cases):
        got = done.get(i, {})
        if case["valid"] and "ok" in refs.get(i, {}) and "error" in got and \
                not any(why in got["error"] for why in REFUSALS):
            problems.append(f"{case}: a valid file refused: {got['error']}")
    assert not problems, f"{len(problems)} of {len(cases)} cases:\n" + "\n".join(problems[:30])
    # both outcomes are reached, and most valid columns are read and checked
    checked = [i for i in range(len(cases)) if "ok" in done.get(i, {}) and "ok" in refs.get(i, {})]
    assert len(checked) > 1000
    assert sum("error" in done.get(i, {}) for i in range(len(cases))) > 300
