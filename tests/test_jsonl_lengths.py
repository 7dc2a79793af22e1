"""The JSON Lines parsing kernel (kernels/jsonl.py `lengths`), natively compiled and through
numba's JIT, against pyarrow's parse of the same lines: every line it takes, pyarrow reads
to the same integer or null; every valid line of the common forms, it takes; every line it
does not take stops it there. Lines are random JSON (nested values, escapes, unicode, spaces)
and random damage to them."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.json as pj
import pytest
from conftest import jit_param

from gpu_profiler import native

NAME = "n"
PARSE = pj.ParseOptions(explicit_schema=pa.schema([(NAME, pa.int64())]),
                        unexpected_field_behavior="ignore")
STRINGS = ["", "x", "日本", "ünï", 'q"uote', "back\\slash", "nl\nx", "tab\t", "\u00e9\u2028",
           "\U0001f600", "/", "\x01"]
KEYS = ["a", "text", "nn", "N", "n ", " n", "meta", "日"]


def _value(rng: np.random.Generator, depth: int) -> object:
    kind = int(rng.integers(0, 9 if depth < 3 else 6))
    if kind == 0:
        return int(rng.integers(-10**6, 10**6))
    if kind == 1:
        return float(rng.normal()) * 10.0 ** int(rng.integers(-30, 30))
    if kind == 2:
        return STRINGS[int(rng.integers(0, len(STRINGS)))]
    if kind == 3:
        return [True, False, None][int(rng.integers(0, 3))]
    if kind in (4, 5):
        return int(rng.integers(0, 10**18)) * int(rng.choice([-1, 1]))
    if kind in (6, 7):
        return {KEYS[int(rng.integers(0, len(KEYS)))]: _value(rng, depth + 1)
                for _ in range(int(rng.integers(0, 4)))}
    return [_value(rng, depth + 1) for _ in range(int(rng.integers(0, 4)))]


def _spaced(text: str, rng: np.random.Generator) -> str:
    """``text`` with JSON whitespace added after some of its structural characters."""
    out = []
    in_string = escaped = False
    for c in text:
        out.append(c)
        if in_string:
            in_string = escaped or c != '"'
            escaped = not escaped and c == "\\"
        elif c == '"':
            in_string = True
        elif c in ",:{}[" and rng.random() < 0.3:
            out.append(str(rng.choice([" ", "\t", "\r", "  "])))
    return "".join(out)


def valid_line(rng: np.random.Generator) -> str:
    obj: dict[str, object] = {}
    for _ in range(int(rng.integers(0, 5))):
        obj[KEYS[int(rng.integers(0, len(KEYS)))]] = _value(rng, 1)
    if rng.random() < 0.8:
        pick = int(rng.integers(0, 4))
        obj[NAME] = (None if pick == 0 else int(rng.integers(-10**18 + 1, 10**18))
                     if pick == 1 else int(rng.integers(0, 100_000)))
    keys = list(obj)
    rng.shuffle(keys)
    text = json.dumps({k: obj[k] for k in keys}, ensure_ascii=bool(rng.random() < 0.3))
    return str(rng.choice(["", " ", "\t"])) + _spaced(text, rng) + str(rng.choice(["", " ", "\r"]))


def damaged(line: bytes, rng: np.random.Generator) -> bytes:
    at = int(rng.integers(0, len(line) + 1))
    kind = int(rng.integers(0, 4))
    if kind == 0:
        return line[:at]
    if kind == 1:
        return line[:at] + line[at + 1:]
    junk = [b"{", b"}", b'"', b"\\", b",", b":", b"[", b"]", b"0", b"-", b".", b"e", b"n",
            b"\xff", b"\xc3", b"\xed\xa0\x80", b"\\ud800", b"1e400", b"{}", b" ", b"\x00"]
    piece = junk[int(rng.integers(0, len(junk)))]
    return line[:at] + piece + line[at + (kind == 2):]


def pyarrow_reads(line: bytes) -> tuple[int | None] | None:
    """pyarrow's field of the one object on ``line``; None when it fails or reads not one."""
    try:
        t = pj.read_json(pa.py_buffer(line + b"\n"), parse_options=PARSE,
                         read_options=pj.ReadOptions(use_threads=False))
    except pa.ArrowInvalid:
        return None
    return (t.column(0)[0].as_py(),) if t.num_rows == 1 else None


def run(kernel, text: bytes, bom: bool = False) -> tuple[int, int, int, list]:
    a = np.frombuffer(text, np.uint8).copy()
    values = np.zeros(a.size // 3 + 1, np.int64)
    valid = np.zeros(values.size, np.bool_)
    pos, rows, newlines = kernel(a, int(bom), np.frombuffer(NAME.encode(), np.uint8), values,
                                 valid)
    return pos, rows, newlines, [int(v) if ok else None
                                 for v, ok in zip(values[:rows], valid[:rows], strict=True)]


def walked(raw):
    """``raw`` on the text shifted by 0-63 spaces and followed by a newline and 64 spaces,
    its results given as for the text itself: every line then lies before the text's last
    64 bytes, where the kernel walks lines by their tokens (the scalar parse takes only the
    lines that reach into those bytes, which the texts alone mostly do)."""
    def kernel(a, bom, name, values, valid):
        k = 0 if bom else (a.size * 7 + int(a.sum())) % 64
        b = np.concatenate([np.full(k, 32, np.uint8), a,
                            np.frombuffer(b"\n" + b" " * 64, np.uint8)])
        pos, rows, newlines = raw(b, bom, name, values, valid)
        if pos == b.size:
            return a.size, rows, newlines - 1
        assert pos == 0 or pos > k
        return (pos - k if pos else 0), rows, newlines

    return kernel


@pytest.fixture(params=["native", "native, walked", jit_param("jit"), jit_param("jit, walked")])
def kernel(request):
    if request.param.startswith("native"):
        if native.library() is None:
            pytest.skip(native.status())
        raw = native.kernel("jsonl_lengths")
    else:
        from gpu_profiler.kernels.jsonl import lengths as raw
    return walked(raw) if request.param.endswith("walked") else raw


def test_each_line_it_takes_is_pyarrows_and_the_common_ones_it_takes(kernel):
    rng = np.random.default_rng(26)
    taken = 0
    for k in range(3000):
        text = valid_line(rng).encode()
        if k % 2:
            text = damaged(text, rng)
            if rng.random() < 0.3:
                text = damaged(text, rng)
        pos, rows, _, got = run(kernel, text)
        want = pyarrow_reads(text)
        if not text.strip(b" \t\r"):
            assert (pos, rows) == (len(text), 0)
        elif pos == len(text):
            assert rows == 1 and want == (got[0],), text
            taken += 1
        else:
            assert (pos, rows) == (0, 0), text
            plain = b"\\u" not in text and b"\\" not in text.split(b'"n"')[0]
            assert k % 2 or not plain or want is None, text  # valid and common: taken
    assert taken > 1500


def test_lines_blank_lines_and_where_it_stops(kernel):
    text = b'\xef\xbb\xbf{"n": 5}\n\n \t\r\n{"a": [1, {"n": 2}], "n": -12}\r\n{}\n{"n": null}\n'
    assert run(kernel, text, bom=True) == (len(text), 4, 6, [5, -12, None, None])
    assert run(kernel, text)[:2] == (0, 0)  # a byte order mark opens only the file
    text = b'{"n": 1}\n{"n": 2}\n{"n": 2.5}\n{"n": 3}\n'
    assert run(kernel, text) == (18, 2, 2, [1, 2])
    for stop in (b'{"n": 1}{"n": 2}', b'{"n": 1, "n": 2}', b'{"n\\u0020": 1}', b"null",
                 b'{"n": 12345678901234567890}', b'{"n": "1"}', b'{"n": true}',
                 b'{"n": 01}', b'{"a": ' + b"[" * 66 + b"]" * 66 + b"}",
                 b'{"a": "\\ud83d"}', b'{"a": "\\ude00"}', b'{"a": "\\ud83d\\u0041"}',
                 b'{"a": "\\ud83d\\ud83d"}', b'{"a": "\\ud83d\\n"}', b'{"a": "\\ud83d\\ude0"}',
                 b'{"a": "\xed\xa0\x80"}', b'{"a": "\xc0\xaf"}', b'{"a": NaN}'):
        assert run(kernel, b'{"n": 7}\n' + stop + b'\n{"n": 8}\n') == (9, 1, 1, [7]), stop
    deep = b'{"a": ' + b"[" * 65 + b"]" * 65 + b', "n": 3}'
    assert run(kernel, deep)[3] == [3]
    pair = b'{"a": "\\ud83d\\ude00 \\uDBFF\\uDFFF", "n": 4}'  # as Python's json writes
    assert run(kernel, pair)[3] == [4] and pyarrow_reads(pair) == (4,)


def test_a_key_whose_escapes_spell_the_name_is_never_missed(kernel):
    """A field named ``a/b`` spelled ``a\\/b`` (as PHP's json_encode writes every ``/``) or
    with ``\\u`` escapes: the line is taken with its value or left to pyarrow, never read as
    a line without the field (keys with other escapes cannot spell a name)."""
    name = np.frombuffer(b"a/b", np.uint8)
    schema = pj.ParseOptions(explicit_schema=pa.schema([("a/b", pa.int64())]),
                             unexpected_field_behavior="ignore")
    for key in (b"a\\/b", b"a\\u002fb", b"\\u0061/b", b"a/b", b"a\\nb", b"a\\\\/b", b"a\\tb"):
        line = b'{"x": "' + b"y" * 70 + b'", "' + key + b'": 5, "z": 1}'
        a = np.frombuffer(line, np.uint8).copy()
        values, valid = np.zeros(40, np.int64), np.zeros(40, np.bool_)
        pos, rows, _ = kernel(a, 0, name, values, valid)
        want = pj.read_json(pa.py_buffer(line + b"\n"), parse_options=schema).column(0)[0].as_py()
        if pos == len(line):
            assert (int(values[0]) if valid[0] else None) == want, key
        else:
            assert (pos, rows) == (0, 0) and b"\\" in key, key  # pyarrow's to read


UTF16 = [b"\\ud83d", b"\\ude00", b"\\uDBFF", b"\\uDFFF", b"\\ud800", b"\\udc00", b"\\ud7ff",
         b"\\ue000", b"\\u0041", b"\\uD83", b"\\n", b"x", b'"']


def test_surrogate_escapes_taken_exactly_when_pyarrow_reads_them(kernel):
    """Strings of 1-4 pieces of UTF-16 escapes (surrogates high and low, in pairs, alone,
    in the wrong order, cut short), around every edge of `_string`'s 32-byte groups: the
    kernel takes a line exactly when pyarrow reads it (no other form is in these lines)."""
    rng = np.random.default_rng(16)
    taken = 0
    for _ in range(2000):
        body = b"".join(UTF16[i] for i in rng.integers(0, len(UTF16), rng.integers(1, 5)))
        text = b'{"' + b"k" * int(rng.integers(0, 40)) + b'": "' + body + b'", "n": 6}'
        pos, _, _, got = run(kernel, text)
        want = pyarrow_reads(text)
        assert (pos == len(text)) == (want is not None), text
        if want is not None:
            assert got == [6] and want == (6,)
            taken += 1
    assert 200 < taken < 1800


PLAIN = [b"a", b"plain text ", b"\\n", b'\\"', b"\\\\", b"\\/", b"\\u00e9", b"\xc3\xa9",
         b"\xe6\x97\xa5", b"\xf0\x9f\x98\x80", b"\x7f", b"\\ud83d\\ude00", b"\\uDBFF\\uDFFF"]
BAD = [b"\x01", b"\x1f", b"\xff", b"\x80", b"\xe6\x97", b"\xf0\x9f\x98", b"\\x", b"\\u12",
       b"\xed\xa0\x80", b"\xc0\xaf", b"\\ud800", b"\\udc00", b"\\ud83d\\u0041", b'"', b"\\"]


def test_long_strings_crossed_a_group_at_a_time_as_pyarrow_reads_them(kernel):
    """Strings of up to ~1 KB (`_string` looks at 32 bytes at once, only the escapes and
    non-ASCII bytes among them one by one), shifted over every offset of 64 bytes, each
    with one bad piece anywhere (half of them) or none: a valid one is taken, and what is
    taken is what pyarrow reads."""
    rng = np.random.default_rng(64)
    taken = 0
    for k in range(3000):
        body = b"".join(PLAIN[i] for i in rng.integers(0, len(PLAIN), rng.integers(0, 200)))
        if k % 2:
            at = int(rng.integers(0, len(body) + 1))
            body = body[:at] + BAD[int(rng.integers(0, len(BAD)))] + body[at:]
        text = (b'{"' + b"k" * int(rng.integers(0, 64)) + b'": "' + body + b'", "n": 5}'
                + b" " * int(rng.integers(0, 70)))
        pos, rows, _, got = run(kernel, text)
        if pos == len(text):
            assert got == [5] and pyarrow_reads(text) == (5,), text
            assert json.loads(text.decode())["n"] == 5  # UTF-8, which pyarrow may not check
            taken += 1
        else:
            assert (pos, rows) == (0, 0) and k % 2, text
    assert taken > 1500


@pytest.mark.parametrize(("cpu", "features", "walked"), [
    ("x86-64-v3", "", False), ("x86-64-v4", "", True), ("haswell", "+avx2,+bmi2", False),
    ("sapphirerapids", "+avx2,+avx512bw,+avx512f", True), ("skylake", "+avx2,-avx512bw", False)])
def test_the_walk_is_compiled_for_avx512bw_targets_only(cpu, features, walked):
    """The walk's 64-byte compares are one instruction each with AVX-512BW's mask registers;
    compiled for AVX2 alone it was slower than the byte-wise parse, which then parses all."""
    env = dict(os.environ, NUMBA_CPU_NAME=cpu, NUMBA_CPU_FEATURES=features)
    code = "from gpu_profiler.kernels import jsonl; print(jsonl._WALK)"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       timeout=120)
    assert p.stdout.strip() == str(walked), p.stderr


def reference_tokens(text: bytes) -> list[int]:
    """The bytes `kernels.jsonl._tokens` marks, by its definition, one byte at a time (and a
    decision per 64 bytes: their backslashes are tokens unless each makes, within them, a
    two-byte escape other than ``\\/`` or a ``\\uXXXX``, a UTF-16 surrogate only as a high
    one followed at once by a low one, their bytes above 127 unless they decode as UTF-8 by
    themselves)."""
    out, slashes, inside, other = [], 0, False, False
    for k, c in enumerate(text):
        if k % 64 == 0:
            group = text[k:k + 64]
            try:
                group.decode("utf-8")
                high = False
            except UnicodeDecodeError:
                high = True
            runs, odd, units = slashes, False, {}
            for j, b in enumerate(group):
                if runs % 2 and b not in b'"\\bfnrt':
                    digits = group[j + 1:j + 5].decode("latin-1")
                    if b == 117 and len(digits) == 4 and all(
                            h in "0123456789abcdefABCDEF" for h in digits):
                        units[j] = int(digits, 16)
                    else:
                        odd = True
                runs = runs + 1 if b == 92 else 0
            for j, unit in units.items():  # a surrogate: high, then at once low
                if 0xD800 <= unit <= 0xDBFF:
                    odd |= not 0xDC00 <= units.get(j + 6, 0) <= 0xDFFF
                elif 0xDC00 <= unit <= 0xDFFF:
                    odd |= not 0xD800 <= units.get(j - 6, 0) <= 0xDBFF
            slash = 92 in group and (runs % 2 == 1 or odd)
        quote = c == 34 and slashes % 2 == 0  # not escaped: after an even run of backslashes
        slashes = slashes + 1 if c == 92 else 0
        inside ^= quote
        outside = not inside and not quote
        mark = chr(c) in "{}[]:,\n"
        was, other = other, outside and not mark and chr(c) not in " \t\r"
        special = c < 32 or (c == 92 and slash) or (c >= 128 and high)
        if (outside and mark) or quote or (other and not was) or (inside and not quote and special):
            out.append(k)
    return out


@pytest.mark.slow
def test_tokens_are_the_bytes_their_definition_marks():
    """`_tokens` 64 bytes at a time, its carries (inside a string, escaped, in a run) taken
    across, against the definition byte by byte: texts of quotes, runs of backslashes,
    escapes, structural characters, spaces, digits, control bytes and UTF-8 whole, cut,
    overlong or of a surrogate."""
    from numba import njit

    from gpu_profiler.kernels.jsonl import _tokens

    @njit
    def marked(a, out):
        ins, esc, run = np.uint64(0), np.uint64(0), np.uint64(0)
        for i in range(0, a.size - 63, 64):
            m, ins, esc, run = _tokens(a, i, ins, esc, run)
            for k in range(64):
                out[i + k] = (m >> np.uint64(k)) & np.uint64(1)

    rng = np.random.default_rng(7)
    pieces = [b'"', b'"', b"\\", b"\\", b"{", b"}", b"[", b"]", b":", b",", b"\n", b" ", b"\t",
              b"\r", b"1", b"a", b"n", b"u", b"t", b"/", b"-", b".", b"u00e9", b"ud83d", b"uDE00",
              b"uDBFF", b"udc00", b"uD7ff", b"u12", b"U0041", b"f", b"\x00", b"\x1f", b"\x7f",
              b"\xc3\xa9", b"\xe6\x97\xa5", b"\xf0\x9f\x98\x80", b"\x80", b"\xff", b"\xc0\xaf",
              b"\xed\xa0\x80", b"\xe0\x80\x80", b"\xf4\x90\x80\x80", b"plain text"]
    # strings as Python's json writes them: \\u escapes, surrogate pairs (whole, cut by a
    # group's end, or alone), two-byte escapes
    escaped = [b"ab ", b"x", b"\\u00e9", b"\\u65e5", b"\\ud83d\\ude00", b"\\uDBFF\\uDFFF",
               b"\\ud83d", b"\\ude00", b"\\ud83d\\u0041", b"\\n", b'"', b"\\u12g4"]
    for k in range(900):
        mix = [pieces, pieces[:-11] + [b"plain text"] * 20, escaped][k % 3]  # some all whole
        text = b"".join(mix[i] for i in rng.integers(0, len(mix), 64 * 6))
        a = np.frombuffer(text[:64 * int(rng.integers(1, 6))], np.uint8).copy()
        out = np.zeros(a.size, np.uint8)
        marked(a, out)
        assert np.flatnonzero(out).tolist() == reference_tokens(a.tobytes()), a.tobytes()


@pytest.fixture(params=["native", jit_param("jit")])
def utf8_error(request):
    if request.param == "native":
        if native.library() is None:
            pytest.skip(native.status())
        return native.kernel("jsonl_utf8_error")
    from gpu_profiler.kernels.jsonl import utf8_error as jit

    return jit


def test_utf8_error_is_where_python_finds_the_first_ill_formed_character(utf8_error):
    """The reader's UTF-8 check (`_check_utf8`), against Python's decoder: texts of ASCII
    runs and characters whole, cut, overlong, of a surrogate, above U+10FFFF or a stray
    continuation byte, across the kernel's 64-byte groups."""
    rng = np.random.default_rng(8)
    good = [b"a", b"x" * 70, b" \n", "é".encode(), "日本".encode(), "😀".encode(),
            "\U0010ffff".encode(), "\u07ff".encode(), "\ud7ff".encode()]
    bad = [b"\xe6\x97", b"\xf0\x9f\x98", b"\x80", b"\xbf", b"\xc0\x80", b"\xc1\xbf",
           b"\xe0\x80\x80", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xf5\x80\x80\x80", b"\xff"]
    found = 0
    for k in range(3000):
        parts = [good[i] for i in rng.integers(0, len(good), rng.integers(0, 60))]
        if k % 2:
            parts.insert(int(rng.integers(0, len(parts) + 1)), bad[k // 2 % len(bad)])
        text = b"".join(parts)
        try:
            text.decode()
            want = -1
        except UnicodeDecodeError as exc:
            want = exc.start
        assert utf8_error(np.frombuffer(text, np.uint8)) == (want,), text
        found += want >= 0
    assert found > 1400
