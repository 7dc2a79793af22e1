"""The JSON Lines screening kernels (kernels/jsonl.py), natively compiled and through numba's
JIT, equal a plain Python reading of the same bytes: newlines counted, non-blank lines
found (start, index, end), the first that does not open an object, on random text made of
runs of whitespace longer and shorter than its 64-byte groups, objects, stray bytes and
byte order marks."""

from __future__ import annotations

import numpy as np
import pytest

from gpu_profiler import native

WS = b" \t\r"
PIECES = [b"\n", b" ", b"\t", b"\r", b"{", b"}", b"x", b'{"a": 1}', b"\xef\xbb\xbf", b"[",
          b"\n" * 70, b" " * 130, b"\r\n" * 40, b" \t" * 33, b"{" + b"y" * 200, b"\x0c"]


def reference(text: bytes, bom: bool, rows: int) -> tuple[tuple[int, int, int], list]:
    """``(newlines, solid, stray), recorded rows`` as the kernel's docstring says."""
    newlines = solid = 0
    stray = -1
    out: list[tuple[int, int, int]] = []
    at = 0
    for k, line in enumerate(text.split(b"\n")):
        end = at + len(line)
        body = line.removeprefix(b"\xef\xbb\xbf") if bom and k == 0 else line
        stripped = body.lstrip(WS)
        if stripped:
            # where the kernel records the line's end: its newline (or the text's end)
            if len(out) < rows:
                out.append((at, k, end))
            solid += 1
            if stripped[:1] != b"{":
                stray = k
                break
        if end < len(text):
            newlines += 1
        at = end + 1
    return (newlines, solid, stray), out


def _texts(seed: int, n: int) -> list[bytes]:
    rng = np.random.default_rng(seed)
    out = [b"", b"\n", b"{", b" " * 64, b"\n" * 64, b" " * 63 + b"\n", b"\n" * 128 + b"{}",
           b"\xef\xbb\xbf{}\n", b"\xef\xbb\xbf\n[", b" \xef\xbb\xbf{}"]
    for _ in range(n):
        k = int(rng.integers(0, 30))
        out.append(b"".join(PIECES[int(i)] for i in rng.integers(0, len(PIECES), k)))
    return out


def _check(screen, texts: list[bytes]) -> None:
    for text in texts:
        for bom in (False, True):
            want, rows = reference(text, bom, 1000)
            out = np.zeros((1000, 3), np.int64)
            got = screen(np.frombuffer(text, np.uint8).copy(), int(bom), out)
            assert tuple(got) == want, (text, bom)
            assert [tuple(r) for r in out[:len(rows)].tolist()] == rows, (text, bom)
            assert tuple(screen(np.frombuffer(text, np.uint8).copy(), int(bom),
                                np.zeros((0, 3), np.int64))) == want  # room for no row


def test_native_screen_equals_python():
    _check(native.kernel("jsonl_screen"), _texts(1, 3000))


def test_jit_screen_equals_python():
    pytest.importorskip("numba")
    from gpu_profiler.kernels.jsonl import screen

    _check(screen, _texts(2, 300))


def test_a_block_of_blank_lines_is_screened_in_no_memory_of_its_own():
    """16 MiB of newlines: counted, nothing found, no array per line (tracemalloc sees
    none: the kernel allocates nothing)."""
    import tracemalloc

    block = np.full(16 << 20, 10, np.uint8)
    screen = native.kernel("jsonl_screen")
    tracemalloc.start()
    try:
        got = screen(block, 0, np.zeros((0, 3), np.int64))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert got == (16 << 20, 0, -1)
    assert peak < 1 << 20
