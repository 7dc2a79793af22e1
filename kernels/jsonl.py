"""CPU kernels (numba ``njit``) for blocks of JSON Lines text (`gpu_profiler.readers.jsonl`),
natively compiled (`gpu_profiler.native`), allocating nothing: `screen` finds the
non-blank lines and the first that does not open a JSON object, before pyarrow parses a
block; `lengths` parses the common case whole, for one integer field, walking each line
by the bit masks of its structure (`_tokens`: 64 bytes a few vector compares) rather than
byte by byte.

Runs of whitespace, the rest of a line and plain text in strings are crossed a vector at a
time (branch-free tests, or one load and a few compares into a bit mask: `_compare`,
`_specials`), so a block of millions of blank lines is screened as fast as any other
(~0.06 ns a byte: 17 GB/s a core).
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from gpu_profiler.kernels.jit import kernel

_NL, _SP, _TAB, _CR, _OPEN = 10, 32, 9, 13, 123
_GROUP = 64  # bytes tested at once
#: Bytes of a string tested at once: JSON Lines strings are mostly short (keys, ids), and
#: 64 parsed ~100-byte lines 5% slower, 2 KB documents no faster.
_STRING = 32


def _group(context, builder, signature, args, width=_GROUP):
    """The intrinsics' ``width`` bytes ``a[i:i + width]``, one unaligned vector load
    (bounds: the caller's), and a function making a vector of ``width`` copies of a byte."""
    ary = context.make_array(signature.args[0])(context, builder, args[0])
    vec = ir.VectorType(ir.IntType(8), width)
    v = builder.load(builder.bitcast(builder.gep(ary.data, [args[1]]), vec.as_pointer()),
                     align=1)

    def splat(c):
        if isinstance(c, int):
            return ir.Constant(vec, [c] * width)
        one = builder.insert_element(ir.Constant(vec, None), builder.trunc(c, ir.IntType(8)),
                                     ir.Constant(ir.IntType(32), 0))
        return builder.shuffle_vector(one, ir.Constant(vec, None),
                                      ir.Constant(ir.VectorType(ir.IntType(32), width), None))

    return v, splat


def _compare(op):
    """An intrinsic ``(a, i, c)``: the bytes of ``a[i:i + 64]`` that are ``op`` (unsigned)
    the byte ``c``, as the bits of a uint64 (bit k for ``a[i + k]``)."""
    @intrinsic
    def compare(typingctx, a, i, c):
        def codegen(context, builder, signature, args):
            v, splat = _group(context, builder, signature, args)
            return builder.bitcast(builder.icmp_unsigned(op, v, splat(args[2])),
                                   ir.IntType(64))

        return types.uint64(a, types.int64, c), codegen

    return compare


_equal, _above = _compare("=="), _compare(">")


@intrinsic
def _count(typingctx, m):
    """The set bits of the uint64 ``m``: one instruction."""
    def codegen(context, builder, signature, args):
        t = ir.IntType(64)
        ctpop = builder.module.declare_intrinsic("llvm.ctpop", [t], ir.FunctionType(t, [t]))
        return builder.call(ctpop, [args[0]])

    return types.int64(m), codegen


@kernel
def _blank(c):
    return c == _NL or c == _SP or c == _TAB or c == _CR


@kernel
def _blank_run(a, i, n):
    """``(end, newlines)``: how far whole groups of whitespace from ``i`` reach, and the
    newlines among them (a group a few compares: `_equal`)."""
    newlines = 0
    while i + _GROUP <= n:
        lines = _equal(a, i, _NL)
        if ~(lines | _equal(a, i, _SP) | _equal(a, i, _TAB) | _equal(a, i, _CR)):
            break
        newlines += _count(lines)
        i += _GROUP
    return i, newlines


@kernel
def _line_end(a, i, n):
    """Where the line holding ``a[i]`` ends: its newline, or ``n`` (a short line byte by
    byte, a longer one a group at a time)."""
    stop = min(i + _GROUP, n)
    while i < stop:
        if a[i] == _NL:
            return i
        i += 1
    while i + _GROUP <= n and not _equal(a, i, _NL):
        i += _GROUP
    while i < n and a[i] != _NL:
        i += 1
    return i


@kernel(nogil=True)
def screen(a, bom, out):
    """Screen the lines of the text ``a`` (uint8; a line ends at a newline, the last one
    may lack it), skipping a UTF-8 byte order mark at ``a[0]`` when ``bom``.

    Returns ``(newlines, solid, stray)``: the newlines counted, the non-blank lines seen,
    and the index (in the block, from 0) of the first non-blank line whose first byte after
    whitespace is not ``{``, or -1. The scan stops after that line: the counts then run up
    to it (it among the non-blank ones). The first ``out.shape[0]`` non-blank lines are
    recorded in ``out`` (int64, 3 columns): where the line starts, its index in the block,
    and where it ends (its newline, or the end of the block)."""
    n = a.size
    room = out.shape[0]
    newlines = 0
    solid = 0
    stray = -1
    i = 0
    if bom and n >= 3 and a[0] == 0xEF and a[1] == 0xBB and a[2] == 0xBF:
        i = 3
    start = 0
    while i < n:
        c = a[i]
        if i + 1 < n and _blank(c) and _blank(a[i + 1]):  # a run: crossed in groups
            end, lines = _blank_run(a, i, n)
            if lines:
                newlines += lines
                k = end - 1  # the line starts after the run's last newline
                while a[k] != _NL:
                    k -= 1
                start = k + 1
            if end > i:
                i = end
                continue
        if c == _NL:
            newlines += 1
            i += 1
            start = i
            continue
        if c == _SP or c == _TAB or c == _CR:
            i += 1
            continue
        # the line's first byte after whitespace: the rest of the line is pyarrow's
        j = _line_end(a, i + 1, n)
        if solid < room:
            out[solid, 0] = start
            out[solid, 1] = newlines
            out[solid, 2] = j
        solid += 1
        if c != _OPEN:
            stray = newlines
            break
        i = j
    return newlines, solid, stray


# ----------------------------------------------------------------------------- lengths
# The common case parsed here, whole: lines of one object each, the field an integer or
# null. Anything else (an error, and the rare forms pyarrow takes that this does not) stops
# the scan at that line, which the reader hands to pyarrow (`readers.jsonl._Scan.finish`).
# The helpers called once per token are inlined (numba's IR, ``inline="always"``): a call
# passes the text as an array's seven fields, which cost the kernel a third of its time
# (bench/results/jit_runtime.md), and even an untaken call in the walk below slowed it by
# 6-8%. So `lengths` compiles in ~40 s (the native library, built at install, once). Two
# helpers of `_tokens` are calls: `_whole` and `_unicode`, once per 64 bytes holding bytes
# above 127 or escapes; inlined into each of `_tokens`' copies, they made the whole build
# take 290 s against 127 s here, for 2-4% of the walk's time on such text.

_QUOTE, _BACKSLASH, _COLON, _COMMA, _CLOSE = 34, 92, 58, 44, 125
_LBRACKET, _RBRACKET, _MINUS, _ZERO, _NINE = 91, 93, 45, 48, 57
_DEPTH = 64  # nesting the skipper follows (deeper: handed over)
_DIGITS = 18  # an integer of up to 18 digits always fits int64


@kernel
def _at(a, i, n):
    """``a[i]``, or a newline past the end (the block's end ends its last line)."""
    return a[i] if i < n else _NL


@kernel
def _ws(a, i, n):
    """Past the spaces, tabs and carriage returns from ``i`` (a newline ends a line)."""
    while i < n and (a[i] == _SP or a[i] == _TAB or a[i] == _CR):
        i += 1
    return i


@kernel
def _cont(a, i, n, lo, hi):
    """Whether ``a[i]`` is a UTF-8 continuation byte within ``lo..hi``."""
    return i < n and lo <= a[i] <= hi


@kernel
def _utf8(a, i, n):
    """Past the multi-byte UTF-8 character at ``i``, or -1 (ill-formed: overlong, a
    surrogate, above U+10FFFF, cut short)."""
    c = a[i]
    if 0xC2 <= c <= 0xDF:
        return i + 2 if _cont(a, i + 1, n, 0x80, 0xBF) else -1
    if 0xE0 <= c <= 0xEF:
        lo = 0xA0 if c == 0xE0 else 0x80
        hi = 0x9F if c == 0xED else 0xBF
        ok = _cont(a, i + 1, n, lo, hi) and _cont(a, i + 2, n, 0x80, 0xBF)
        return i + 3 if ok else -1
    if 0xF0 <= c <= 0xF4:
        lo = 0x90 if c == 0xF0 else 0x80
        hi = 0x8F if c == 0xF4 else 0xBF
        ok = (_cont(a, i + 1, n, lo, hi) and _cont(a, i + 2, n, 0x80, 0xBF)
              and _cont(a, i + 3, n, 0x80, 0xBF))
        return i + 4 if ok else -1
    return -1


@intrinsic
def _specials(typingctx, a, i):
    """The bytes of ``a[i:i + 32]`` a string cannot cross plainly (a quote, a backslash, a
    control byte or one of a multi-byte character) as the low bits of a uint64, bit k for
    ``a[i + k]``: one unaligned 32-byte load and three compares, which compile to a few
    vector instructions. Bounds: the caller's."""
    def codegen(context, builder, signature, args):
        v, splat = _group(context, builder, signature, args, _STRING)
        hit = builder.or_(builder.icmp_signed("<", v, splat(32)),  # 0x00-0x1f, 0x80-0xff
                          builder.or_(builder.icmp_unsigned("==", v, splat(34)),
                                      builder.icmp_unsigned("==", v, splat(92))))
        return builder.zext(builder.bitcast(hit, ir.IntType(_STRING)), ir.IntType(64))

    return types.uint64(a, types.int64), codegen


@intrinsic
def _first(typingctx, m):
    """The index of the lowest set bit of the uint64 ``m`` (nonzero): one instruction."""
    def codegen(context, builder, signature, args):
        t = ir.IntType(64)
        cttz = builder.module.declare_intrinsic("llvm.cttz", [t],
                                                ir.FunctionType(t, [t, ir.IntType(1)]))
        return builder.call(cttz, [args[0], ir.Constant(ir.IntType(1), 1)])

    return types.int64(m), codegen


@kernel
def _hex4(a, i, n):
    """The value of the 4 hex digits ``a[i:i + 4]``, or -1."""
    if i + 4 > n:
        return -1
    v = 0
    for k in range(i, i + 4):
        c = a[k]
        if _ZERO <= c <= _NINE:
            v = v * 16 + (c - _ZERO)
        elif 97 <= c <= 102:
            v = v * 16 + (c - 87)
        elif 65 <= c <= 70:
            v = v * 16 + (c - 55)
        else:
            return -1
    return v


@kernel(inline="always")
def _char(a, i, n):
    """Past the string's character at ``i`` (not its closing quote), or -1: invalid, as
    pyarrow reads it (a ``\\u`` escape of a UTF-16 surrogate only as a high one followed at
    once by a low one: Python's json writes every character above U+FFFF so)."""
    c = a[i]
    if c == _BACKSLASH:
        e = _at(a, i + 1, n)
        if e == 117:  # \uXXXX
            u = _hex4(a, i + 2, n)
            if u < 0xD800 or u > 0xDFFF:
                return i + 6 if u >= 0 else -1
            if u > 0xDBFF or _at(a, i + 6, n) != _BACKSLASH or _at(a, i + 7, n) != 117:
                return -1
            low = _hex4(a, i + 8, n)
            return i + 12 if 0xDC00 <= low <= 0xDFFF else -1
        if (e == _QUOTE or e == _BACKSLASH or e == 47 or e == 98 or e == 102
                or e == 110 or e == 114 or e == 116):
            return i + 2
        return -1
    if c < 0x20:
        return -1
    if c < 0x80:
        return i + 1
    return _utf8(a, i, n)


@kernel(inline="always")
def _string(a, i, n):
    """Past the string whose opening quote is ``a[i - 1]``, or -1: not valid JSON as
    pyarrow reads it. `_STRING` bytes at a time, only their `_specials` looked at one by
    one: plain text crosses at ~12 GB/s, 2-3x the whole line's parse on text with a few
    escapes or non-ASCII characters a line (bench/results/layouts.md)."""
    while i + _STRING <= n:
        base = i
        m = _specials(a, base)
        while m:
            k = base + _first(m)
            if a[k] == _QUOTE:
                return k + 1
            i = _char(a, k, n)
            if i < 0:
                return -1
            if i >= base + _STRING:  # an escape or character reaching into the next group
                break
            m &= ~((np.uint64(1) << np.uint64(i - base)) - np.uint64(1))  # those before i
        i = max(i, base + _STRING)
    while i < n:
        if a[i] == _QUOTE:
            return i + 1
        i = _char(a, i, n)
        if i < 0:
            return -1
    return -1


@kernel
def _digits(a, i, n):
    while i < n and _ZERO <= a[i] <= _NINE:
        i += 1
    return i


@kernel(inline="always")
def _number(a, i, n):
    """Past the JSON number at ``i``, or -1; also for one pyarrow may find too big for a
    double (a positive exponent of over 2 digits, or one after over 200 integer digits)."""
    if a[i] == _MINUS:
        i += 1
    c = _at(a, i, n)
    whole = i
    if c == _ZERO:
        i += 1
    elif _ZERO < c <= _NINE:
        i = _digits(a, i + 1, n)
    else:
        return -1
    whole = i - whole
    if _at(a, i, n) == 46:  # .
        j = _digits(a, i + 1, n)
        if j == i + 1:
            return -1
        i = j
    c = _at(a, i, n)
    if c == 101 or c == 69:  # e E
        i += 1
        c = _at(a, i, n)
        if c == 43 or c == _MINUS:
            i += 1
        j = _digits(a, i, n)
        if j == i or (c != _MINUS and (j - i > 2 or whole > 200)):
            return -1
        i = j
    return i


@kernel
def _is(a, i, n, b0, b1, b2, b3):
    return (_at(a, i, n) == b0 and _at(a, i + 1, n) == b1 and _at(a, i + 2, n) == b2
            and _at(a, i + 3, n) == b3)


@kernel(inline="always")
def _literal(a, i, n):
    """Past the ``true``, ``false`` or ``null`` at ``i``, or -1."""
    c = a[i]
    if c == 116:
        return i + 4 if _is(a, i, n, 116, 114, 117, 101) else -1
    if c == 102:
        return i + 5 if _is(a, i + 1, n, 97, 108, 115, 101) else -1
    if c == 110:
        return i + 4 if _is(a, i, n, 110, 117, 108, 108) else -1
    return -1


@kernel(inline="always")
def _scalar(a, i, n):
    """Past the string, number or literal at ``i`` (``i < n``), or -1."""
    c = a[i]
    if c == _QUOTE:
        return _string(a, i + 1, n)
    if c == _MINUS or _ZERO <= c <= _NINE:
        return _number(a, i, n)
    return _literal(a, i, n)


@kernel(inline="always")
def _key(a, i, n):
    """Past an object's key and its colon (and the whitespace after), or -1."""
    if _at(a, i, n) != _QUOTE:
        return -1
    i = _string(a, i + 1, n)
    if i < 0:
        return -1
    i = _ws(a, i, n)
    if _at(a, i, n) != _COLON:
        return -1
    return _ws(a, i + 1, n)


@kernel
def _value(a, i, n):
    """Past the JSON value at ``i``, or -1. The objects and arrays it is nested in are bits
    of one word (1: an object), so it follows `_DEPTH` levels, allocating nothing."""
    depth = 0
    objects = np.uint64(0)
    while True:
        c = _at(a, i, n)
        if c == _OPEN or c == _LBRACKET:
            close = _CLOSE if c == _OPEN else _RBRACKET
            i = _ws(a, i + 1, n)
            if _at(a, i, n) == close:
                i += 1
            else:
                if depth == _DEPTH:
                    return -1
                if close == _CLOSE:
                    objects |= np.uint64(1) << np.uint64(depth)
                else:
                    objects &= ~(np.uint64(1) << np.uint64(depth))
                depth += 1
                if close == _CLOSE:
                    i = _key(a, i, n)
                    if i < 0:
                        return -1
                continue
        else:
            i = _scalar(a, i, n) if i < n else -1
            if i < 0:
                return -1
        while depth:  # after a value inside an object or array
            i = _ws(a, i, n)
            c = _at(a, i, n)
            in_object = (objects >> np.uint64(depth - 1)) & np.uint64(1)
            if c == _COMMA:
                i = _ws(a, i + 1, n)
                if in_object:
                    i = _key(a, i, n)
                    if i < 0:
                        return -1
                break
            if c != (_CLOSE if in_object else _RBRACKET):
                return -1
            depth -= 1
            i += 1
        if not depth:
            return i


@kernel(inline="always")
def _integer(a, i, n):
    """``(end, value)`` of the integer of at most `_DIGITS` digits at ``i`` that no
    fraction or exponent follows; end -1 otherwise."""
    neg = _at(a, i, n) == _MINUS
    j = i + 1 if neg else i
    c = _at(a, j, n)
    if c == _ZERO:
        end = j + 1
    elif _ZERO < c <= _NINE:
        end = _digits(a, j, n)
    else:
        return -1, 0
    c = _at(a, end, n)
    if end - j > _DIGITS or c == 46 or c == 101 or c == 69 or _ZERO <= c <= _NINE:
        return -1, 0
    v = np.int64(0)
    for k in range(j, end):
        v = v * 10 + (a[k] - _ZERO)
    return end, -v if neg else v


@kernel
def _line(a, i, n, name):
    """``(end, value, found)`` of the object line whose ``{`` is at ``i``: where its
    trailing whitespace ends, and the integer of its key ``name`` (found 0: absent or
    null); end -1 when this scan does not take the line."""
    value = np.int64(0)
    found = 0
    seen = False
    i = _ws(a, i + 1, n)
    if _at(a, i, n) == _CLOSE:
        return _ws(a, i + 1, n), value, found
    while True:
        if _at(a, i, n) != _QUOTE:
            return -1, value, found
        start = i + 1
        i = _string(a, start, n)
        if i < 0:
            return -1, value, found
        match = i - 1 - start == name.size
        for k in range(start, i - 1):
            if a[k] == _BACKSLASH:  # an escaped key may spell the name: pyarrow's
                return -1, value, found
            if match and a[k] != name[k - start]:
                match = False
        i = _ws(a, i, n)
        if _at(a, i, n) != _COLON:
            return -1, value, found
        i = _ws(a, i + 1, n)
        if match:
            if seen:  # pyarrow's error: the field twice
                return -1, value, found
            seen = True
            if _at(a, i, n) == 110:  # null
                i = _literal(a, i, n)
            else:
                i, value = _integer(a, i, n)
                found = 1
        else:
            i = _value(a, i, n)
        if i < 0:
            return -1, value, found
        i = _ws(a, i, n)
        c = _at(a, i, n)
        if c == _CLOSE:
            return _ws(a, i + 1, n), value, found
        if c != _COMMA:
            return -1, value, found
        i = _ws(a, i + 1, n)


# ----------------------------------------------------------------------------- the walk
# The parse above is bound by latency: each step's load waits for the index the step
# before computed (~15 ns a key and value). So a line is walked as simdjson's second stage
# walks its index: 64 bytes at a time, a few vector compares and bit operations mark every
# byte the grammar looks at (`_tokens`), and the walk goes from one to the next through
# the bits of one word (`_step`), its checks off that chain. A string is crossed in one
# step unless a byte in it is a token (see `_tokens`), and then by `_string`, its checks;
# the text's last 64 bytes (no whole vector left) are parsed as above.

def _masked() -> bool:
    """Whether the kernels are compiled for AVX-512BW (the target numba compiles for: the
    native build's, else this CPU), whose mask registers make each 64-byte compare of
    `_tokens` one instruction. Built for AVX2 alone (a portable x86-64-v3 wheel), the walk
    took 115-119 ns a bench line against the byte-wise parse's 105-108: it is left out."""
    from llvmlite import binding
    from numba.core import config

    name = getattr(config, "CPU_NAME", None)  # set by numba at import, from the environment
    if name:  # a named target: its features, or an x86-64 level's
        return (name == "x86-64-v4"
                or "+avx512bw" in (getattr(config, "CPU_FEATURES", None) or "").split(","))
    return "+avx512bw" in binding.get_host_cpu_features().flatten().split(",")


_WALK = _masked()
_ODD = np.uint64(0xAAAAAAAAAAAAAAAA)
#: A group's last 1, 2 and 3 bytes (where a 2-, 3- or 4-byte character's lead is cut).
_LAST1, _LAST2, _LAST3 = (np.uint64(-(1 << k) & 0xFFFFFFFFFFFFFFFF) for k in (63, 62, 61))
_ONE = np.uint64(1)
_ZERO64 = np.uint64(0)


@kernel(inline="always")
def _tokens(a, i, ins, esc, run):
    """The tokens of ``a[i:i + 64]`` (bit k for ``a[i + k]``) and the carries into the next
    64 bytes. A token: a structural character (``{}[]:,``) or newline outside strings, a
    quote not escaped, the first byte of a run of other bytes outside strings (a number or
    literal, or what its parse finds wrong), and inside a string a control byte, every
    backslash unless each escape in the 64 bytes is a two-byte one (`_escapes`) or a
    ``\\uXXXX`` of no surrogate (`_unicode`), and every byte above 127 unless they are
    whole UTF-8 characters (`_whole`). Carries: ``ins``,
    all ones when ``a[i]`` is inside a string; ``esc``, 1 when it is escaped; ``run``, 1
    when ``a[i - 1]`` is in a run. Escaped: the bytes after odd runs of backslashes
    (simdjson's subtraction)."""
    slash = _equal(a, i, _BACKSLASH)
    escaped = _ZERO64
    if slash | esc:
        first = slash & ~esc
        code = (((first << _ONE) | _ODD) - first) ^ _ODD
        escaped = code ^ (slash | esc)
        esc = (code & slash) >> np.uint64(63)
    quotes = _equal(a, i, _QUOTE) & ~escaped
    inside = quotes  # from an opening quote to before its closing one: a prefix xor
    inside ^= inside << np.uint64(1)
    inside ^= inside << np.uint64(2)
    inside ^= inside << np.uint64(4)
    inside ^= inside << np.uint64(8)
    inside ^= inside << np.uint64(16)
    inside ^= inside << np.uint64(32)
    inside ^= ins
    ins = _ZERO64 - (inside >> np.uint64(63))
    outside = ~(inside | quotes)
    marks = (_equal(a, i, _OPEN) | _equal(a, i, _CLOSE) | _equal(a, i, _LBRACKET)
             | _equal(a, i, _RBRACKET) | _equal(a, i, _COLON) | _equal(a, i, _COMMA)
             | _equal(a, i, _NL))
    other = outside & ~(marks | _equal(a, i, _SP) | _equal(a, i, _TAB) | _equal(a, i, _CR))
    starts = other & ~((other << _ONE) | run)
    run = other >> np.uint64(63)
    special = ~_above(a, i, 31)  # control bytes; escapes and UTF-8 where not all whole
    if slash:
        odd = escaped & ~_escapes(a, i)
        if esc or (odd and not _unicode(a, i, odd)):
            special |= slash
    high = _above(a, i, 127)
    if high and not _whole(a, i, high):
        special |= high
    return (outside & marks) | quotes | starts | (inside & ~quotes & special), ins, esc, run


@kernel(inline="always")
def _escapes(a, i):
    """The bytes of ``a[i:i + 64]`` that make a two-byte escape after a backslash, ``\\/``
    left out: these escapes can never spell the field's name in a key (which holds no
    quote, backslash or control byte); a key with a ``\\u`` escape can, and `_object`
    hands every key with a backslash and at least the name's length to pyarrow."""
    return (_equal(a, i, _QUOTE) | _equal(a, i, _BACKSLASH) | _equal(a, i, 98)
            | _equal(a, i, 102) | _equal(a, i, 110) | _equal(a, i, 114) | _equal(a, i, 116))


@kernel
def _unicode(a, i, odd):
    """Whether the escaped bytes ``odd`` of ``a[i:i + 64]`` (bit k for ``a[i + k]``) are
    each the ``u`` of a ``\\uXXXX`` whose 4 hex digits lie within these 64 bytes, a UTF-16
    surrogate only as a high one followed at once by a low one (`_char`'s rules; Python's
    json writes every character outside ASCII so): such text is plain to pyarrow."""
    u = odd & _equal(a, i, 117)
    if u != odd or u >> np.uint64(60):
        return False
    digit = _above(a, i, 47) & ~_above(a, i, 57)
    upper, lower = _above(a, i, 64) & ~_above(a, i, 70), _above(a, i, 96) & ~_above(a, i, 102)
    need = (u << _ONE) | (u << np.uint64(2)) | (u << np.uint64(3)) | (u << np.uint64(4))
    if need & ~(digit | upper | lower):
        return False
    two = np.uint64(2)
    d = u & ((_equal(a, i, 100) | _equal(a, i, 68)) >> _ONE)  # \uD...
    if not d:
        return True
    surrogate = d & (((digit | upper | lower) & ~(digit & ~_above(a, i, 55))) >> two)
    high = surrogate & ((_above(a, i, 55) & ~_above(a, i, 57) | upper & ~_above(a, i, 66)
                         | lower & ~_above(a, i, 98)) >> two)  # D800-DBFF
    return (high << np.uint64(6)) == surrogate & ~high and not high >> np.uint64(54)


@kernel(inline="always")
def _classes(a, i, high):
    """The UTF-8 bytes of ``a[i:i + 64]`` by class, as bit masks (``high``: those above 127):
    ``(cont, lead, need, cut, bad)``: continuation bytes, lead bytes, where their
    continuation bytes must be, the leads whose characters run past these 64 bytes, and
    second bytes out of their lead's range (overlong, a surrogate, above U+10FFFF:
    `_utf8`'s rules)."""
    cont = high & ~_above(a, i, 0xBF)
    two = _above(a, i, 0xC1) & ~_above(a, i, 0xDF)
    three = _above(a, i, 0xDF) & ~_above(a, i, 0xEF)
    four = _above(a, i, 0xEF) & ~_above(a, i, 0xF4)
    lead = two | three | four
    need = (lead << _ONE) | ((three | four) << np.uint64(2)) | (four << np.uint64(3))
    cut = (two & _LAST1) | (three & _LAST2) | (four & _LAST3)
    low_a0 = ~_above(a, i, 0x9F)
    low_90 = ~_above(a, i, 0x8F)
    bad = (((_equal(a, i, 0xE0) << _ONE) & low_a0) | ((_equal(a, i, 0xED) << _ONE) & ~low_a0)
           | ((_equal(a, i, 0xF0) << _ONE) & low_90) | ((_equal(a, i, 0xF4) << _ONE) & ~low_90))
    return cont, lead, need, cut, bad


@kernel(inline="always")
def _all_whole(high, cont, lead, need, cut, bad):
    """Whether the bytes ``high`` (`_classes`' masks of them) are well-formed UTF-8
    characters, each whole within their 64 bytes."""
    return high == cont | lead and need == cont and not cut and not bad


@kernel
def _whole(a, i, high):
    """Whether the bytes above 127 of ``a[i:i + 64]`` (``high``) are well-formed UTF-8
    characters, each whole within these 64 bytes (`_classes`)."""
    cont, lead, need, cut, bad = _classes(a, i, high)
    return _all_whole(high, cont, lead, need, cut, bad)


@kernel(inline="always")
def _whole_span(a, i, high):
    """How many bytes from ``a[i]`` are whole, well-formed UTF-8 characters (or ASCII),
    as `_whole` tells them: all 64, or those before the first character cut by the end of
    the 64 (checked from its own lead next), else 0 (`utf8_error` then walks the bytes)."""
    cont, lead, need, cut, bad = _classes(a, i, high)
    if _all_whole(high, cont, lead, need, cut, bad):
        return _GROUP
    if not cut:
        return 0
    at = _first(cut)
    keep = (_ONE << np.uint64(at)) - _ONE  # the bytes before it: whole, none needing it
    if ((high & keep) == ((cont | lead) & keep) and (need & keep) == (cont & keep)
            and not (need >> np.uint64(at)) & _ONE and not bad & keep):
        return at
    return 0


@kernel(nogil=True)
def utf8_error(a):
    """``(where,)``: where the text ``a`` (uint8) first fails to be UTF-8, the index of the
    first byte of its first ill-formed character (`_utf8`'s rules), or -1. 64 bytes of
    ASCII or whole characters are crossed at once, or up to a character cut by their end
    (`_whole_span`: text of 3-byte characters has one in most groups); the rest byte by
    byte."""
    n = a.size
    i = 0
    while i < n:
        if i + _GROUP <= n:
            high = _above(a, i, 127)
            span = _whole_span(a, i, high) if high else _GROUP
            if span:
                i += span
                continue
        stop = min(i + _GROUP, n)
        while i < stop:
            if a[i] < 128:
                i += 1
                continue
            e = _utf8(a, i, n)
            if e < 0:
                return (i,)
            i = e
    return (-1,)


@kernel
def _start(a, i):
    """The walk's state at ``i``, outside any string: ``(i, its tokens, the carries)``.
    (Called, not inlined: it runs once a walk, and after a string `_crossing` crossed
    that ends past the group it began in.)"""
    m, ins, esc, run = _tokens(a, i, _ZERO64, _ZERO64, _ZERO64)
    return i, m, ins, esc, run


@kernel(inline="always")
def _step(a, n, st):
    """``(p, state)``: the next token and the state past it; p -1 when it lies beyond the
    text's last whole 64 bytes (the scalar parse takes the line)."""
    base, m, ins, esc, run = st
    if m:
        return base + _first(m), (base, m & (m - _ONE), ins, esc, run)
    return _refill(a, n, st)


@kernel
def _refill(a, n, st):
    """`_step` past its group's last token: the next groups' tokens found. Called at most
    once a group of 64 bytes, not inlined: the walk inlines `_step` at 19 places and
    `_start` at 6, and `_tokens` inlined in each of those 25 made the library build in 2x
    the time and 4x the memory, for 1.5-4% of the walk's speed (bench/results/build.md,
    jsonl_walk.md)."""
    base, m, ins, esc, run = st
    while not m:
        base += _GROUP
        if base + _GROUP > n:
            return -1, (base, m, ins, esc, run)
        m, ins, esc, run = _tokens(a, base, ins, esc, run)
    return base + _first(m), (base, m & (m - _ONE), ins, esc, run)


#: `_string`, called, not inlined, where the walk cannot cross a string in one step: the
#: rarer case, and inlined at each of its places it made the kernel compile 3x slower.
_crossing = kernel(_string.py_func)


@kernel(inline="always")
def _text(a, n, st):
    """``(end, crossed, state)`` of the string whose opening quote was the last token: past
    its closing quote, or -1 (invalid) or -2 (the scalar parse takes the line); ``crossed``:
    a byte in it was a token, and `_string` crossed it."""
    p, st = _step(a, n, st)
    if p < 0:
        return -2, False, st
    if a[p] == _QUOTE:
        return p + 1, False, st
    e = _crossing(a, p, n)
    if e < 0:
        return -1, True, st
    base, m, ins, esc, run = st
    k = e - base
    if k <= _GROUP:  # its closing quote in these 64 bytes: the tokens up to it dropped
        return e, True, (base, m & ~(((_ONE << np.uint64(k - 1)) << _ONE) - _ONE), ins, esc,
                         run)
    if e + _GROUP > n:
        return -2, True, st
    return e, True, _start(a, e)


@kernel(inline="always")
def _edge(c):
    """Whether ``c`` may follow a number or literal (ends its run)."""
    return (c == _SP or c == _TAB or c == _CR or c == _NL or c == _COMMA or c == _CLOSE
            or c == _RBRACKET)


@kernel(inline="always")
def _scalar_run(a, n, v):
    """Whether the number or literal whose run starts at ``a[v]`` is valid and the whole run."""
    c = a[v]
    e = _number(a, v, n) if c == _MINUS or _ZERO <= c <= _NINE else _literal(a, v, n)
    return e >= 0 and _edge(_at(a, e, n))


@kernel(inline="always")
def _member(a, n, k, st):
    """``(v, end, crossed, state)`` of the object member whose key's first token is
    ``a[k]``: its value's first token, or -1 (invalid) or -2 (the scalar parse takes the
    line), and its key's `_text` (``end``: past its closing quote)."""
    if a[k] != _QUOTE:
        return -1, 0, False, st
    e, crossed, st = _text(a, n, st)
    if e < 0:
        return e, e, crossed, st
    p, st = _step(a, n, st)
    if p < 0:
        return -2, e, crossed, st
    if a[p] != _COLON:
        return -1, e, crossed, st
    v, st = _step(a, n, st)
    return (v if v >= 0 else -2), e, crossed, st


@kernel(inline="always")
def _skip(a, n, v, st):
    """``(status, state)``: past the object or array whose ``{`` or ``[`` is the token
    ``a[v]`` (status 0), or -1 (invalid) or -2 (the scalar parse takes the line); nesting
    followed as `_value` follows it."""
    depth = 0
    objects = _ZERO64
    while True:
        c = a[v]
        if c == _OPEN or c == _LBRACKET:
            close = _CLOSE if c == _OPEN else _RBRACKET
            p, st = _step(a, n, st)
            if p < 0:
                return -2, st
            if a[p] != close:
                if depth == _DEPTH:
                    return -1, st
                if close == _CLOSE:
                    objects |= _ONE << np.uint64(depth)
                else:
                    objects &= ~(_ONE << np.uint64(depth))
                depth += 1
                if close == _CLOSE:
                    v, e, crossed, st = _member(a, n, p, st)
                else:
                    v = p
                if v < 0:
                    return v, st
                continue
        elif c == _QUOTE:
            e, crossed, st = _text(a, n, st)
            if e < 0:
                return e, st
        elif not _scalar_run(a, n, v):
            return -1, st
        while depth:  # after a value inside an object or array
            p, st = _step(a, n, st)
            if p < 0:
                return -2, st
            c = a[p]
            in_object = (objects >> np.uint64(depth - 1)) & _ONE
            if c == _COMMA:
                v, st = _step(a, n, st)
                if v < 0:
                    return -2, st
                if in_object:
                    v, e, crossed, st = _member(a, n, v, st)
                    if v < 0:
                        return v, st
                break
            if c != (_CLOSE if in_object else _RBRACKET):
                return -1, st
            depth -= 1
        if not depth:
            return 0, st


@kernel(inline="always")
def _object(a, n, name, st):
    """``(end, value, found, state)`` of the line whose ``{`` was the last token: its
    newline, and the integer of its key ``name`` as `_line` reads it; end -1 when the line
    is not taken, -2 when the scalar parse takes it."""
    value = np.int64(0)
    found = 0
    seen = False
    p, st = _step(a, n, st)
    if p < 0:
        return -2, value, found, st
    if a[p] != _CLOSE:
        while True:
            v, e, crossed, st = _member(a, n, p, st)
            if v < 0:
                return v, value, found, st
            match = e - 2 - p == name.size
            k = p + 1
            if match:  # bytes equal to the name's hold no backslash: compared alone
                while k < e - 1 and a[k] == name[k - p - 1]:
                    k += 1
                match = k == e - 1
            if crossed or e - 2 - p >= name.size:  # escapes only lengthen a key
                for j in range(k, e - 1):
                    if a[j] == _BACKSLASH:  # an escaped key may spell the name: pyarrow's
                        return -1, value, found, st
            c = a[v]
            if match:
                if seen:  # pyarrow's error: the field twice
                    return -1, value, found, st
                seen = True
                if c == 110:  # null
                    e = _literal(a, v, n)
                else:
                    e, value = _integer(a, v, n)
                    found = 1
                if e < 0 or not _edge(_at(a, e, n)):
                    return -1, value, found, st
            elif c == _QUOTE:  # strings and scalars here, nesting in `_skip`
                e, crossed, st = _text(a, n, st)
                if e < 0:
                    return e, value, found, st
            elif c == _OPEN or c == _LBRACKET:
                e, st = _skip(a, n, v, st)
                if e < 0:
                    return e, value, found, st
            elif not _scalar_run(a, n, v):
                return -1, value, found, st
            p, st = _step(a, n, st)
            if p < 0:
                return -2, value, found, st
            if a[p] == _CLOSE:
                break
            if a[p] != _COMMA:
                return -1, value, found, st
            p, st = _step(a, n, st)
            if p < 0:
                return -2, value, found, st
    p, st = _step(a, n, st)
    if p < 0:
        return -2, value, found, st
    return (p if a[p] == _NL else -1), value, found, st


@kernel(nogil=True)
def lengths(a, bom, name, values, valid):
    """Parse the JSON Lines text ``a`` (uint8, whole lines; the last may lack its newline)
    for the integer field ``name`` (its UTF-8 bytes, no quote, backslash or control byte)
    of every line's one object, skipping blank lines and a byte order mark at ``a[0]``
    when ``bom``. Lines are walked by their tokens (`_object`; compiled for AVX-512BW);
    those reaching into the text's last 64 bytes (and all, elsewhere) are parsed byte by
    byte (`_line`), with the same checks.

    Row k's value goes to ``values[k]`` and ``valid[k]`` (False: the field is absent or
    null). Returns ``(pos, rows, newlines)``: the end of the text, or the start of the
    first line this scan does not take (invalid JSON or UTF-8, not one object, the field
    not a plain integer or null, a form pyarrow decides: an escaped key, a number it may
    find too big, nesting deeper than 64; or no room left in ``values``);
    the rows before it, and the newlines before it."""
    n = a.size
    rows = 0
    newlines = 0
    i = 3 if bom and n >= 3 and a[0] == 0xEF and a[1] == 0xBB and a[2] == 0xBF else 0
    start = 0
    if _WALK and i + _GROUP <= n:  # walked (see above)
        st = _start(a, i)
        while True:
            p, st = _step(a, n, st)
            if p < 0:
                break
            c = a[p]
            if c == _NL:
                newlines += 1
                start = p + 1
                continue
            if c != _OPEN or rows == values.size:
                return start, rows, newlines
            end, value, found, st = _object(a, n, name, st)
            if end == -2:
                break
            if end < 0:
                return start, rows, newlines
            values[rows] = value
            valid[rows] = found
            rows += 1
            newlines += 1
            start = end + 1
        i = start
    while i < n:  # the scalar parse: the last 64 bytes, and the line reaching them
        i = _ws(a, i, n)
        if i == n:
            break
        c = a[i]
        if c == _NL:
            newlines += 1
            i += 1
            start = i
            continue
        end, value, found = _line(a, i, n, name) if c == _OPEN else (-1, 0, 0)
        if end < 0 or (end < n and a[end] != _NL) or rows == values.size:
            return start, rows, newlines
        values[rows] = value
        valid[rows] = found
        rows += 1
        i = end
    return n, rows, newlines
