"""Memory and time bombs, and headers that claim more than their file holds, run through the
CLI as a user would: each in a child process under an address-space limit (1 GiB above
what the warmed-up CLI maps) and a time limit. Each must end in exit 0 with the right
numbers, or exit 2 with one line naming the file, in seconds and bounded memory: never
exit 1 ("internal error"), a signal, ``MemoryError`` or a hang.

- JSON Lines: 20 MiB of blank lines, plain; 1 GiB of newlines (or of spaces, one line
  without end) in a ~100 KB zstd file, with and without an object first;
- .npy: a v2 header length of 2**32 - 1 in a 200-byte file; a negative shape whose
  product matches the file; a header numpy's tokenizer chokes on;
- Parquet: a footer whose ``RowGroup.num_rows`` or ``ColumnMetaData.num_values`` is
  negative (pyarrow reads no row, or indexes past its lists);
- Megatron-LM: an index claiming 2**61 sequences.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

pytestmark = pytest.mark.slow  # each bomb a CLI child under limits: make test-slow

#: Seconds a bomb may take (each takes ~0.5-1 s here after the CLI's start).
SECONDS = 60
#: Resident memory a bomb may add to the warmed-up CLI's.
MOST_RSS = 400 << 20

# The child: the CLI warmed up on a small file of each kind, the address-space limit set,
# then the command; its exit code, and how much its peak resident set grew, written out.
CHILD = r"""
import contextlib, io, json, os, resource, sys
from gpu_profiler import native
from gpu_profiler.cli import main

native.library()
for warm in json.loads(os.environ["BOMB_WARM"]):
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            main(warm)
        except SystemExit:
            pass
with open("/proc/self/status") as f:
    vm = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize"))
resource.setrlimit(resource.RLIMIT_AS, (vm + (1 << 30), resource.RLIM_INFINITY))
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
code = 0
try:
    main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code if isinstance(exc.code, int) else 1
sys.stdout.flush()
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
with open(os.environ["BOMB_OUT"], "w") as f:
    json.dump({"code": code, "grew": after - before}, f)
os._exit(code)
"""


def _zstd_of(path: Path, head: bytes, fill: bytes, total: int) -> Path:
    """``head`` then ``total`` bytes of ``fill`` repeated, zstd-compressed (streamed)."""
    piece = fill * ((16 << 20) // len(fill))
    with pa.CompressedOutputStream(str(path), "zstd") as f:
        f.write(head)
        for _ in range(total // len(piece)):
            f.write(piece)
    return path


@pytest.fixture(scope="module")
def warm(tmp_path_factory) -> list[list[str]]:
    """Small files of each kind, for the child to warm up on."""
    d = tmp_path_factory.mktemp("warm")
    (d / "w.jsonl").write_bytes(b'{"length": 3}\n\n{"length": 4}\n')
    _zstd_of(d / "w.jsonl.zst", b'{"length": 3}\n', b"\n", 16 << 20)
    np.save(d / "w.npy", np.array([1, 2, 7, 3], np.uint16))
    pq.write_table(pa.table({"length": pa.array([1, 2, 3], pa.int32())}), d / "w.parquet")
    return [["profile", str(d / "w.jsonl")], ["profile", str(d / "w.jsonl.zst")],
            ["profile", str(d / "w.npy"), "--eot", "7"], ["profile", str(d / "w.parquet")]]


def _cli(warm: list[list[str]], tmp: Path, *args: str) -> tuple[int, str, str, float, int]:
    """``gpu-profiler ARGS`` in the child: (exit code, stdout, stderr, seconds, bytes its
    peak resident set grew by)."""
    out = tmp / "bomb.json"
    env = {**os.environ, "BOMB_WARM": json.dumps(warm), "BOMB_OUT": str(out),
           "MALLOC_ARENA_MAX": "2"}
    began = time.monotonic()
    p = subprocess.run([sys.executable, "-c", CHILD, *args], capture_output=True, text=True,
                       env=env, timeout=SECONDS + 120)  # (the warm-up is not timed)
    seconds = time.monotonic() - began
    if not out.exists():
        pytest.fail(f"{args}: the child died: exit {p.returncode}: {p.stderr[-2000:]}")
    said = json.loads(out.read_text())
    assert said["code"] == p.returncode
    return p.returncode, p.stdout, p.stderr, seconds, said["grew"]


def _one_line(path: Path, code: int, err: str) -> str:
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpu-profiler: error: "), err
    assert str(path) in lines[0] and "internal error" not in lines[0], err
    return lines[0]


def _samples(code: int, out: str, err: str) -> int:
    assert code == 0, err
    return json.loads(out)["total_samples"]


def _bounded(seconds: float, grew: int) -> None:
    assert seconds < SECONDS + 60, seconds  # the child's start and warm-up included
    assert grew < MOST_RSS, f"peak resident set grew by {grew >> 20} MiB"


# --------------------------------------------------------------------------------- JSON Lines
def test_blank_lines_cost_no_more_than_their_bytes(tmp_path, warm):
    blank = tmp_path / "blank.jsonl"
    blank.write_bytes(b"\n" * (20 << 20))
    code, _, err, seconds, grew = _cli(warm, tmp_path, "profile", str(blank))
    assert "no 'length' column" in _one_line(blank, code, err)
    _bounded(seconds, grew)
    first = tmp_path / "first.jsonl"
    first.write_bytes(b'{"length": 5}\n' + b" \r\n\t\n" * (5 << 20) + b'{"length": 6}')
    code, out, err, seconds, grew = _cli(warm, tmp_path, "profile", str(first), "-f", "json")
    assert _samples(code, out, err) == 2
    _bounded(seconds, grew)


@pytest.mark.parametrize("head,fill,samples", [
    (b"", b"\n", None), (b'{"length": 5}\n', b"\n", 1), (b'{"length": 5}\n', b" ", 1),
    (b"", b"\r\n", None), (b'{"length": 5}\n', b"\r", 1)])
def test_a_zstd_bomb_of_whitespace_streams_in_bounded_memory(tmp_path, warm, head, fill,
                                                             samples):
    """1 GiB of whitespace in ~35 KB: decompressed in bounded windows, screened natively,
    never parsed (it took 119 s to an error, or a MemoryError, before)."""
    bomb = _zstd_of(tmp_path / "bomb.jsonl.zst", head, fill, 1 << 30)
    assert bomb.stat().st_size < 256 << 10
    code, out, err, seconds, grew = _cli(warm, tmp_path, "profile", str(bomb), "-f", "json")
    if samples is None:
        assert "no 'length' column" in _one_line(bomb, code, err)
    else:
        assert _samples(code, out, err) == samples
    _bounded(seconds, grew)


def test_a_bad_line_after_a_million_blank_ones_is_named(tmp_path, warm):
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b'{"length": 5}\n' + b"\n" * (1 << 20) + b'{"length": 1.5}\n')
    code, _, err, _, _ = _cli(warm, tmp_path, "profile", str(bad))
    assert f"line {(1 << 20) + 2}: 'length' is 1.5" in _one_line(bad, code, err)


# -------------------------------------------------------------------------------------- .npy
def _npy(header: str, version: int = 1, length: int | None = None) -> bytes:
    raw = header.encode("latin-1")
    size = len(raw) if length is None else length
    field = struct.pack("<H", size) if version == 1 else struct.pack("<I", size)
    return b"\x93NUMPY" + bytes([version, 0]) + field + raw


@pytest.mark.parametrize("name,data,said", [
    ("huge.npy", _npy("{'descr': '<u2', 'fortran_order': False, 'shape': (3,), }\n", 2,
                      (1 << 32) - 1).ljust(200, b"\0"), "runs past the end"),
    ("negative.npy", _npy("{'descr': '<u2', 'fortran_order': False, 'shape': (-1, -3), }\n")
     + b"\1\0\7\0\2\0", "integers from 0"),
    ("token.npy", _npy("{'''descr': '<u2', 'fortran_order': False, 'shape': (3,), }\n")
     + b"\1\0\7\0\2\0", "not a Python literal"),
    ("keys.npy", _npy("{'descr': '<u2', 'fortran_order': False, 'shape': (3,), 'x': 1}\n")
     + b"\1\0\7\0\2\0", "exactly 'descr'"),
    ("dtype.npy", _npy("{'descr': '<u8', 'fortran_order': False, 'shape': (3,), }\n")
     + b"\0" * 24, "holds <u8"),
    ("version.npy", _npy("{'descr': '<u2', 'fortran_order': False, 'shape': (3,), }\n", 7),
     "format version 7.0"),
])
def test_npy_headers_are_parsed_with_bounds(tmp_path, warm, name, data, said):
    path = tmp_path / name
    path.write_bytes(data)
    code, _, err, seconds, grew = _cli(warm, tmp_path, "profile", str(path), "--eot", "7")
    assert said in _one_line(path, code, err)
    _bounded(seconds, grew)


# ----------------------------------------------------------------------------------- Parquet
def _negative_counts(tmp: Path) -> list[Path]:
    """A two-row-group file with each 60 in its footer (zigzag varint 0x78 after an i64
    field header 0x16: the RowGroup's num_rows and the column chunk's num_values) made -60
    in turn."""
    t = pa.table({"length": pa.array(np.arange(120, dtype=np.int32))})
    pq.write_table(t, tmp / "good.parquet", row_group_size=60)
    data = (tmp / "good.parquet").read_bytes()
    (length,) = struct.unpack_from("<i", data, len(data) - 8)
    start = len(data) - 8 - length
    out = []
    for k, i in enumerate(i for i in range(start, len(data) - 9)
                          if data[i:i + 2] == b"\x16\x78"):
        b = bytearray(data)
        b[i + 1] = 0x77
        out.append(tmp / f"negative{k}.parquet")
        out[-1].write_bytes(bytes(b))
    assert len(out) >= 4
    return out


def test_negative_counts_in_a_parquet_footer_are_refused(tmp_path, warm):
    for path in _negative_counts(tmp_path):
        for args in ([], ["--backend", "numpy"], ["--trust-statistics"]):
            code, _, err, _, _ = _cli(warm, tmp_path, "profile", str(path), *args)
            line = _one_line(path, code, err)
            assert "rows" in line, line


def test_negative_counts_in_a_parquet_footer_are_refused_in_process(tmp_path):
    """The same through the API, every reader (a quick check of the messages)."""
    import gpu_profiler as gp
    from gpu_profiler import ProfilerError

    for path in _negative_counts(tmp_path):
        for trust in (False, True):
            with pytest.raises(ProfilerError, match=r"claims -60 rows|rows decoded, the foot"):
                gp.histogram(str(path), trust_statistics=trust)


# ---------------------------------------------------------------------------------- Megatron
def test_a_megatron_index_claiming_2_61_sequences(tmp_path, warm):
    idx = tmp_path / "m.idx"
    idx.write_bytes(b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, 8, 1 << 61, 2) + b"\0" * 64)
    code, _, err, seconds, grew = _cli(warm, tmp_path, "profile", str(idx))
    assert "corrupt Megatron-LM index" in _one_line(idx, code, err)
    _bounded(seconds, grew)
