"""Parquet files decoded in numba, many per call: the footer's Thrift (compact protocol)
FileMetaData, the flat integer length column's chunks, their pages (v1 and v2, dictionary
pages), snappy, PLAIN and dictionary (RLE / bit-packed hybrid) values and definition levels.

This serves many *small* shards (`gpu_profiler.readers.parquet_many`), for which pyarrow's
set-up per file costs more than decoding it. Whatever is not the common case (another
codec or encoding, nesting, unsigned or logical types, a schema unlike the first file's,
anything malformed or inconsistent) makes a file *left*, never an error: the kernel writes
why in ``info`` and goes on with the next file, and pyarrow then reads that one. Every read
is bounds-checked against the file (or page) it belongs to and every loop is bounded by its
input's size, so hostile bytes can neither crash nor hang the kernel. Buffers are the
caller's (the native build allows no allocation). Constants: `gpu_profiler.readers.
parquet_format`. See https://github.com/apache/parquet-format and
https://github.com/google/snappy/blob/main/format_description.txt
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from gpu_profiler.readers.parquet_format import (
    I_ARROW,
    I_ARROW_END,
    I_NEED,
    I_NULLS,
    I_ROWS,
    I_SCHEMA,
    I_SCHEMA_END,
    I_STATUS,
    L_CODEC,
    L_COLUMN,
    L_ENCODING,
    L_FOOTER,
    L_METADATA,
    L_PAGES,
    L_RANGE,
    L_REFERENCE,
    L_ROOM,
    L_SCHEMA,
    NINFO,
    READ,
)

# Thrift compact protocol types.
T_STOP, T_TRUE, T_FALSE, T_I8, T_I16, T_I32, T_I64, T_DOUBLE, T_BINARY, T_LIST, T_SET, \
    T_MAP, T_STRUCT = range(13)
# Parquet enums used here.
INT32, INT64 = 1, 2
REQUIRED, OPTIONAL, REPEATED = 0, 1, 2
CONVERTED_INT = (15, 16, 17, 18)  # INT_8 .. INT_64
LOGICAL_INTEGER = 10
DATA_PAGE, INDEX_PAGE, DICTIONARY_PAGE, DATA_PAGE_V2 = 0, 1, 2, 3
PLAIN, PLAIN_DICTIONARY, RLE, RLE_DICTIONARY = 0, 2, 3, 8
UNCOMPRESSED, SNAPPY = 0, 1
# The work array: [0] why the file is being left, [1] a page size the scratch lacked,
# [2] the reason a malformed read gives here; then the Thrift skip stack (2 words a level),
# the schema's nesting stack and levels, and every leaf's levels (its size bounds the
# leaves of a file read here).
W_WHY, W_NEED, W_BAD = 0, 1, 2
SKIP_AT, SKIP_LEVELS = 8, 48
NEST_AT, NEST_LEVELS = SKIP_AT + 2 * SKIP_LEVELS, 64
LEVELS_AT = NEST_AT + NEST_LEVELS  # each open group's (definition << 8 | repetition) level
LEAF_AT = LEVELS_AT + NEST_LEVELS  # each leaf's (definition << 8 | repetition) level
ARROW_KEY = np.frombuffer(b"ARROW:schema", np.uint8).copy()
#: Bound on a run or group count in the hybrid encoding (no page holds more values).
MAX_RUN = np.int64(1) << 40


class Left(Exception):
    """Leaves the file being decoded (why: ``work[W_WHY]``)."""


@njit(cache=True, nogil=True)
def _leave(st, why):
    st[W_WHY] = why
    raise Left()


@njit(cache=True, nogil=True)
def _has(p, n, hi, st):
    """``n`` bytes from ``p`` lie before ``hi``, or the read is malformed."""
    if n < 0 or p < 0 or p > hi - n:
        _leave(st, st[W_BAD])


@njit(cache=True, nogil=True)
def _varint(b, p, hi, st, most=5):
    """``(unsigned varint at p as int64, next position)``: at most ``most`` bytes (5 for a
    32-bit value, 10 for a 64-bit one; Thrift refuses longer ones)."""
    v = np.int64(0)
    for k in range(most):
        _has(p, 1, hi, st)
        c = np.int64(b[p])
        p += 1
        v |= (c & 0x7F) << (7 * k)
        if c < 0x80:
            return v, p
    _leave(st, st[W_BAD])
    return v, p


@njit(cache=True, nogil=True)
def _zigzag(b, p, hi, st, most):
    v, p = _varint(b, p, hi, st, most)
    return ((v >> 1) & 0x7FFFFFFFFFFFFFFF) ^ -(v & 1), p


@njit(cache=True, nogil=True)
def _int(b, p, hi, t, want, st):
    """An integer field of type ``t``, which must be the struct's type for it (``want``:
    Thrift skips a field of another type, so would miss it), range-checked."""
    if t != want:
        _leave(st, st[W_BAD])
    if t == T_I8:
        _has(p, 1, hi, st)
        v = np.int64(b[p])
        return (v - 256 if v >= 128 else v), p + 1
    if t != T_I16 and t != T_I32 and t != T_I64:
        _leave(st, st[W_BAD])
    v, p = _zigzag(b, p, hi, st, 10 if t == T_I64 else 5)
    if t == T_I32 and not -(1 << 31) <= v < (1 << 31):
        _leave(st, st[W_BAD])
    if t == T_I16 and not -(1 << 15) <= v < (1 << 15):
        _leave(st, st[W_BAD])
    return v, p


@njit(cache=True, nogil=True)
def _field(b, p, hi, last, st):
    """``(field id, type, next position)`` of the field header at ``p`` (type T_STOP: the
    struct ends)."""
    _has(p, 1, hi, st)
    c = np.int64(b[p])
    p += 1
    if c == 0:
        return 0, T_STOP, p
    t = c & 0xF
    d = c >> 4
    if d == 0:
        fid, p = _zigzag(b, p, hi, st, 5)
    else:
        fid = last + d
    if t == T_STOP or t > T_STRUCT:
        _leave(st, st[W_BAD])
    return fid, t, p


@njit(cache=True, nogil=True)
def _seen(seen, fid):
    """``seen`` (a mask of field ids) with ``fid``."""
    return seen | (np.int64(1) << fid) if 0 < fid < 63 else seen


@njit(cache=True, nogil=True)
def _is(t, want, st):
    """A field of the struct's type for it (Thrift would skip another, and miss it)."""
    if t != want:
        _leave(st, st[W_BAD])


@njit(cache=True, nogil=True)
def _require(seen, fields, st):
    """Every field of the mask ``fields`` was given (Thrift refuses a struct that lacks a
    required field: so does this reader)."""
    if seen & fields != fields:
        _leave(st, st[W_BAD])


@njit(cache=True, nogil=True)
def _list(b, p, hi, st):
    """``(size, element type, next position)`` of the list header at ``p``; the size is
    at most the bytes left (every element takes one at least)."""
    _has(p, 1, hi, st)
    c = np.int64(b[p])
    p += 1
    n = c >> 4
    if n == 15:
        n, p = _varint(b, p, hi, st)
    t = c & 0xF
    if n < 0 or n > hi - p or t == T_STOP or t > T_STRUCT:
        _leave(st, st[W_BAD])
    return n, t, p


@njit(cache=True, nogil=True)
def _skip(b, p, hi, t, st):
    """Position after a value of type ``t`` (a field's: booleans have no byte) at ``p``,
    whatever it nests, with the work array as its stack; every step takes a byte."""
    depth = 0
    field = True
    while True:
        if t == T_TRUE or t == T_FALSE:
            if not field:
                _has(p, 1, hi, st)
                p += 1
        elif t == T_I8:
            _has(p, 1, hi, st)
            p += 1
        elif t == T_I16 or t == T_I32 or t == T_I64:
            _, p = _varint(b, p, hi, st, 10 if t == T_I64 else 5)
        elif t == T_DOUBLE:
            _has(p, 8, hi, st)
            p += 8
        elif t == T_BINARY:
            n, p = _varint(b, p, hi, st)
            _has(p, n, hi, st)
            p += n
        elif t == T_LIST or t == T_SET or t == T_MAP or t == T_STRUCT:
            if depth == SKIP_LEVELS:
                _leave(st, st[W_BAD])
            if t == T_MAP:
                n, p = _varint(b, p, hi, st)
                kinds = 0
                if n:
                    _has(p, 1, hi, st)
                    kinds = np.int64(b[p])
                    p += 1
                if n < 0 or n > hi - p:
                    _leave(st, st[W_BAD])
                st[SKIP_AT + 2 * depth] = 256 + kinds  # a map: key type << 4 | value type
                st[SKIP_AT + 2 * depth + 1] = 2 * n
            elif t == T_STRUCT:
                st[SKIP_AT + 2 * depth] = -1
                st[SKIP_AT + 2 * depth + 1] = 0
            else:
                n, e, p = _list(b, p, hi, st)
                st[SKIP_AT + 2 * depth] = e
                st[SKIP_AT + 2 * depth + 1] = n
            depth += 1
        else:
            _leave(st, st[W_BAD])
        while True:  # the next value to skip: the innermost open container's
            if depth == 0:
                return p
            kind = st[SKIP_AT + 2 * depth - 2]
            left = st[SKIP_AT + 2 * depth - 1]
            if kind == -1:
                _, t, p = _field(b, p, hi, 0, st)  # ids do not matter here
                if t == T_STOP:
                    depth -= 1
                    continue
                field = True
                break
            if left == 0:
                depth -= 1
                continue
            st[SKIP_AT + 2 * depth - 1] = left - 1
            if kind >= 256:
                t = (kind >> 4) & 0xF if left % 2 == 0 else kind & 0xF
            else:
                t = kind
            if t == T_STOP or t > T_STRUCT:
                _leave(st, st[W_BAD])
            field = False
            break


@njit(cache=True, nogil=True)
def _binary(b, p, hi, t, st):
    """``(start, end)`` of a binary field's bytes, and the next position."""
    if t != T_BINARY:
        _leave(st, st[W_BAD])
    n, p = _varint(b, p, hi, st)
    _has(p, n, hi, st)
    return p, p + n, p + n


@njit(cache=True, nogil=True)
def _equal(b, lo, hi, key):
    if hi - lo != key.size:
        return False
    for k in range(key.size):
        if b[lo + k] != key[k]:
            return False
    return True


@njit(cache=True, nogil=True)
def _same(b, lo, hi, lo2, hi2):
    if hi - lo != hi2 - lo2:
        return False
    for k in range(hi - lo):
        if b[lo + k] != b[lo2 + k]:
            return False
    return True


def _address(context, builder, signature, args, bits):
    ary = context.make_array(signature.args[0])(context, builder, args[0])
    return builder.bitcast(builder.gep(ary.data, [args[1]]), ir.IntType(bits).as_pointer())


def _loader(bits: int):
    """An intrinsic that loads the signed ``bits``-bit little-endian integer at byte ``p``
    of a uint8 array, whatever its alignment: one instruction, where assembling it byte by
    byte costs several per byte. Callers check the bounds."""

    def typer(typingctx, b, p):
        def codegen(context, builder, signature, args):
            v = builder.load(_address(context, builder, signature, args, bits), align=1)
            return v if bits == 64 else builder.sext(v, ir.IntType(64))

        return types.int64(b, types.int64), codegen

    return intrinsic(typer)


@intrinsic
def _store64(typingctx, b, p, v):
    """Store the int64 ``v`` at byte ``p`` of a uint8 array (unaligned; bounds: the
    caller's)."""
    def codegen(context, builder, signature, args):
        builder.store(args[2], _address(context, builder, signature, args, 64), align=1)
        return context.get_dummy_value()

    return types.none(b, types.int64, types.int64), codegen


_load32, _load64 = _loader(32), _loader(64)


@njit(cache=True, nogil=True)
def _u32(b, p):
    return (np.int64(b[p]) | (np.int64(b[p + 1]) << 8) | (np.int64(b[p + 2]) << 16)
            | (np.int64(b[p + 3]) << 24))


# --- the footer -------------------------------------------------------------------------

@njit(cache=True, nogil=True)
def _int_type(b, p, hi, st):
    """``(bit width, signed)`` of a LogicalType union at ``p`` if it is INTEGER, else
    ``(-1, False)``; and the next position."""
    width, signed, other = -1, False, False
    fid = 0
    while True:
        fid, t, p = _field(b, p, hi, fid, st)
        if t == T_STOP:
            break
        if fid == LOGICAL_INTEGER and t == T_STRUCT:
            g = 0
            while True:
                g, u, p = _field(b, p, hi, g, st)
                if u == T_STOP:
                    break
                if g == 1:
                    width, p = _int(b, p, hi, u, T_I8, st)
                elif g == 2 and (u == T_TRUE or u == T_FALSE):
                    signed = u == T_TRUE
                else:
                    p = _skip(b, p, hi, u, st)
            if width < 0:
                other = True
        else:
            other = True
            p = _skip(b, p, hi, t, st)
    if other:
        width = -2
    return width, signed, p


@njit(cache=True, nogil=True)
def _element(b, p, hi, st):
    """A SchemaElement: ``(type, repetition, name start, name end, children (-1: none),
    converted type, logical int width (-1: none, -2: another logical type), signed,
    next position)``."""
    typ, rep, n0, n1, children, conv, width, signed = -1, -1, -1, -1, -1, -1, -1, False
    fid = 0
    while True:
        fid, t, p = _field(b, p, hi, fid, st)
        if t == T_STOP:
            break
        if fid == 1:
            typ, p = _int(b, p, hi, t, T_I32, st)
        elif fid == 3:
            rep, p = _int(b, p, hi, t, T_I32, st)
        elif fid == 4:
            n0, n1, p = _binary(b, p, hi, t, st)
        elif fid == 5:
            children, p = _int(b, p, hi, t, T_I32, st)
        elif fid == 6:
            conv, p = _int(b, p, hi, t, T_I32, st)
        elif fid == 10 and t == T_STRUCT:
            width, signed, p = _int_type(b, p, hi, st)
        else:
            p = _skip(b, p, hi, t, st)
    if n0 < 0:
        _leave(st, L_METADATA)
    return typ, rep, n0, n1, children, conv, width, signed, p


@njit(cache=True, nogil=True)
def _width(typ, conv, logical, signed):
    """Bits of a signed integer column of these types, or -1 (not read here)."""
    if typ == INT32:
        natural = 32
    elif typ == INT64:
        natural = 64
    else:
        return -1
    w = natural
    if conv != -1:
        if conv < CONVERTED_INT[0] or conv > CONVERTED_INT[3]:
            return -1
        w = 8 << (conv - CONVERTED_INT[0])
    if logical == -2 or (logical != -1 and not signed):
        return -1
    if logical != -1:
        if conv != -1 and logical != w:
            return -1
        w = logical
    if w != 8 and w != 16 and w != 32 and w != 64:
        return -1
    if (typ == INT32 and w > 32) or (typ == INT64 and w != 64):
        return -1
    return w


@njit(cache=True, nogil=True)
def _schema(b, p, hi, name, width, st):
    """Find the top-level leaf ``name`` in the schema list at ``p``: ``(its leaf index,
    physical type, maximum definition level, leaves, next position)``."""
    n, t, p = _list(b, p, hi, st)
    if t != T_STRUCT or n < 1:
        _leave(st, L_METADATA)
    _, _, _, _, top, _, _, _, p = _element(b, p, hi, st)
    if top < 0 or top > n - 1:
        _leave(st, L_METADATA)
    level = 0
    st[NEST_AT] = top
    st[LEVELS_AT] = 0
    leaves = 0
    found, phys, max_def, matches = -1, -1, -1, 0
    for _ in range(n - 1):
        if st[NEST_AT + level] == 0:
            _leave(st, L_METADATA)  # more elements than the tree has
        st[NEST_AT + level] -= 1
        typ, rep, n0, n1, children, conv, logical, signed, p = _element(b, p, hi, st)
        if level == 0 and _equal(b, n0, n1, name):
            matches += 1
            if children != -1 or (rep != REQUIRED and rep != OPTIONAL) or \
                    _width(typ, conv, logical, signed) != width:
                _leave(st, L_COLUMN)
            found, phys, max_def = leaves, typ, rep
        if rep < REQUIRED or rep > REPEATED:
            _leave(st, L_METADATA)
        levels = st[LEVELS_AT + level] + (256 if rep != REQUIRED else 0) + \
            (1 if rep == REPEATED else 0)
        if children > 0:
            if level + 1 == NEST_LEVELS or children > n:
                _leave(st, L_METADATA)
            level += 1
            st[NEST_AT + level] = children
            st[LEVELS_AT + level] = levels
        elif children == 0:
            _leave(st, L_METADATA)  # a group of nothing
        else:
            if typ < 0 or LEAF_AT + leaves >= st.size:
                _leave(st, L_METADATA)
            st[LEAF_AT + leaves] = levels
            leaves += 1
        while level > 0 and st[NEST_AT + level] == 0:
            level -= 1
    if level != 0 or st[NEST_AT] != 0:
        _leave(st, L_METADATA)
    if matches != 1:
        _leave(st, L_COLUMN)
    return found, phys, max_def, leaves, p


@njit(cache=True, nogil=True)
def _arrow_schema(b, p, hi, st):
    """``(start, end)`` of the ``ARROW:schema`` value in the key-value list at ``p``
    (``(0, 0)``: none)."""
    n, t, p = _list(b, p, hi, st)
    if t != T_STRUCT:
        _leave(st, L_METADATA)
    a0, a1, seen = 0, 0, 0
    for _ in range(n):
        k0, k1, v0, v1 = -1, -1, -1, -1
        fid = 0
        while True:
            fid, u, p = _field(b, p, hi, fid, st)
            if u == T_STOP:
                break
            if fid == 1:
                k0, k1, p = _binary(b, p, hi, u, st)
            elif fid == 2:
                v0, v1, p = _binary(b, p, hi, u, st)
            else:
                p = _skip(b, p, hi, u, st)
        if k0 < 0:
            _leave(st, L_METADATA)
        if _equal(b, k0, k1, ARROW_KEY):
            seen += 1
            a0, a1 = v0, v1
    if seen > 1 or (seen == 1 and a0 < 0):
        _leave(st, L_METADATA)
    return a0, a1


@njit(cache=True, nogil=True)
def _histogram(b, p, hi, t, length, st):
    """A level histogram of SizeStatistics: a list of ``length`` i64, or of none (pyarrow
    checks it)."""
    if t != T_LIST:
        _leave(st, L_METADATA)
    n, e, q = _list(b, p, hi, st)
    if (n != length and n != 0) or e != T_I64:
        _leave(st, L_METADATA)
    return _skip(b, p, hi, t, st)


@njit(cache=True, nogil=True)
def _column_meta(b, p, hi, levels, st):
    """ColumnMetaData of a leaf with these levels (definition << 8 | repetition): ``(type,
    codec, values, compressed size, data page offset, dictionary page offset (-1: none),
    next position)``."""
    typ, codec, nvals, size, data, dic = -1, -1, -1, -1, -1, -1
    fid, seen = 0, 0
    while True:
        fid, t, p = _field(b, p, hi, fid, st)
        if t == T_STOP:
            break
        seen = _seen(seen, fid)
        if fid == 1:
            typ, p = _int(b, p, hi, t, T_I32, st)
        elif fid == 4:
            codec, p = _int(b, p, hi, t, T_I32, st)
        elif fid == 5:
            nvals, p = _int(b, p, hi, t, T_I64, st)
        elif fid == 6:
            _, p = _int(b, p, hi, t, T_I64, st)
        elif fid == 2 or fid == 3:
            _is(t, T_LIST, st)
            p = _skip(b, p, hi, t, st)
        elif fid == 7:
            size, p = _int(b, p, hi, t, T_I64, st)
        elif fid == 9:
            data, p = _int(b, p, hi, t, T_I64, st)
        elif fid == 11:
            dic, p = _int(b, p, hi, t, T_I64, st)
        elif fid == 13:  # PageEncodingStats: three required i32
            _is(t, T_LIST, st)
            n, e, p = _list(b, p, hi, st)
            if e != T_STRUCT:
                _leave(st, L_METADATA)
            for _ in range(n):
                g, got = 0, 0
                while True:
                    g, u, p = _field(b, p, hi, g, st)
                    if u == T_STOP:
                        break
                    got = _seen(got, g)
                    p = _int(b, p, hi, u, T_I32, st)[1] if 1 <= g <= 3 else _skip(b, p, hi, u, st)
                _require(got, 0b1110, st)
        elif fid == 16:  # SizeStatistics
            _is(t, T_STRUCT, st)
            g = 0
            while True:
                g, u, p = _field(b, p, hi, g, st)
                if u == T_STOP:
                    break
                if g == 2:
                    p = _histogram(b, p, hi, u, (levels & 255) + 1, st)
                elif g == 3:
                    p = _histogram(b, p, hi, u, (levels >> 8) + 1, st)
                else:
                    p = _skip(b, p, hi, u, st)
        else:
            p = _skip(b, p, hi, t, st)
    _require(seen, 0b1011111110, st)  # fields 1-7 and 9
    if typ < 0 or codec < 0 or nvals < 0 or size < 0 or data < 0:
        _leave(st, L_METADATA)
    return typ, codec, nvals, size, data, dic, p


@njit(cache=True, nogil=True)
def _column_chunk(b, p, hi, levels, st):
    """ColumnChunk: its metadata (as `_column_meta`, without the position), and the next
    position; a chunk in another file or encrypted is left."""
    meta = (-1, -1, -1, -1, -1, -1)
    fid, seen = 0, 0
    while True:
        fid, t, p = _field(b, p, hi, fid, st)
        if t == T_STOP:
            break
        seen = _seen(seen, fid)
        if fid == 3:
            _is(t, T_STRUCT, st)
            typ, codec, nvals, size, data, dic, p = _column_meta(b, p, hi, levels, st)
            meta = (typ, codec, nvals, size, data, dic)
        elif fid == 2:
            _, p = _int(b, p, hi, t, T_I64, st)
        elif fid == 1 or fid == 8 or fid == 9:
            _leave(st, L_METADATA)
        else:
            p = _skip(b, p, hi, t, st)
    _require(seen, 0b100, st)
    if meta[0] < 0:
        _leave(st, L_METADATA)
    return meta, p


# --- pages ------------------------------------------------------------------------------

@njit(cache=True, nogil=True)
def _page_header(b, p, hi, st):
    """PageHeader: ``(type, uncompressed size, compressed size, values, encoding,
    definition level encoding, nulls, rows, definition levels' bytes, repetition levels'
    bytes, compressed, next position)`` (-1: not given)."""
    ptype, usize, csize = -1, -1, -1
    nv, enc, denc, nulls, rows, dlen, rlen, comp = -1, -1, -1, -1, -1, -1, -1, 1
    fid, seen = 0, 0
    while True:
        fid, t, p = _field(b, p, hi, fid, st)
        if t == T_STOP:
            break
        seen = _seen(seen, fid)
        if fid == 1:
            ptype, p = _int(b, p, hi, t, T_I32, st)
        elif fid == 2:
            usize, p = _int(b, p, hi, t, T_I32, st)
        elif fid == 3:
            csize, p = _int(b, p, hi, t, T_I32, st)
        elif fid == 5 or fid == 7 or fid == 8:
            _is(t, T_STRUCT, st)
            g, got = 0, 0
            while True:
                g, u, p = _field(b, p, hi, g, st)
                if u == T_STOP:
                    break
                got = _seen(got, g)
                if g == 1:
                    nv, p = _int(b, p, hi, u, T_I32, st)
                elif fid == 8 and g == 7 and (u == T_TRUE or u == T_FALSE):
                    comp = 1 if u == T_TRUE else 0
                elif (fid == 8 and 2 <= g <= 6) or (fid == 5 and 2 <= g <= 4) or \
                        (fid == 7 and g == 2):
                    v, p = _int(b, p, hi, u, T_I32, st)
                    if fid != 8:
                        if g == 2:
                            enc = v
                        elif g == 3:
                            denc = v
                    elif g == 2:
                        nulls = v
                    elif g == 3:
                        rows = v
                    elif g == 4:
                        enc = v
                    elif g == 5:
                        dlen = v
                    else:
                        rlen = v
                else:
                    p = _skip(b, p, hi, u, st)
            _require(got, 0b11110 if fid == 5 else 0b110 if fid == 7 else 0b1111110, st)
        else:
            p = _skip(b, p, hi, t, st)
    _require(seen, 0b1110, st)
    if ptype < 0 or usize < 0 or csize < 0:
        _leave(st, L_PAGES)
    return ptype, usize, csize, nv, enc, denc, nulls, rows, dlen, rlen, comp, p


@njit(cache=True, nogil=True)
def _copy(src, p, dst, o, n):
    """``dst[o:o + n] = src[p:p + n]``, 8 bytes at a time where both arrays have them
    (a source at least 8 bytes before the destination in the same array: each word read
    is final already)."""
    k = 0
    if p + n + 8 <= src.size and o + n + 8 <= dst.size:
        while k < n:
            _store64(dst, o + k, _load64(src, p + k))
            k += 8
        return
    for k in range(n):
        dst[o + k] = src[p + k]


@njit(cache=True, nogil=True)
def _snappy(b, p, hi, out, m, st):
    """Decompress the raw snappy block ``b[p:hi]`` into ``out[:m]`` (exactly ``m`` bytes).
    (The loop breaks on a malformed element instead of raising in it: it runs once per
    element, a few bytes, and stays a tight loop that way.)"""
    n, p = _varint(b, p, hi, st)
    if n != m:
        _leave(st, L_PAGES)
    o = 0
    b_words, out_words = b.size - 16, out.size - 16  # two words may be moved from/to here
    bad = False
    while p < hi:
        tag = np.int64(b[p])
        p += 1
        kind = tag & 3
        if kind == 0:
            ln = tag >> 2
            if ln >= 60:
                nb = ln - 59
                if nb > hi - p:
                    bad = True
                    break
                ln = 0
                for k in range(nb):
                    ln |= np.int64(b[p + k]) << (8 * k)
                p += nb
            ln += 1
            if ln > hi - p or ln > m - o:
                bad = True
                break
            if ln <= 16 and p <= b_words and o <= out_words:
                _store64(out, o, _load64(b, p))
                _store64(out, o + 8, _load64(b, p + 8))
            else:
                _copy(b, p, out, o, ln)
            o += ln
            p += ln
            continue
        if kind == 1:
            if p >= hi:
                bad = True
                break
            ln = 4 + ((tag >> 2) & 7)
            off = ((tag >> 5) << 8) | np.int64(b[p])
            p += 1
        elif kind == 2:
            if p + 2 > hi:
                bad = True
                break
            ln = 1 + (tag >> 2)
            off = np.int64(b[p]) | (np.int64(b[p + 1]) << 8)
            p += 2
        else:
            if p + 4 > hi:
                bad = True
                break
            ln = 1 + (tag >> 2)
            off = _u32(b, p)
            p += 4
        if off == 0 or off > o or ln > m - o:
            bad = True
            break
        if off >= 8 and ln <= 16 and o <= out_words:  # two words, each read final
            _store64(out, o, _load64(out, o - off))
            _store64(out, o + 8, _load64(out, o - off + 8))
        elif off >= 8:
            _copy(out, o - off, out, o, ln)
        else:  # overlapping: repeats the bytes just written
            s = o - off
            for k in range(ln):
                out[o + k] = out[s + k]
        o += ln
    if bad:
        _leave(st, L_PAGES)
    if o != m:
        _leave(st, L_PAGES)


@njit(cache=True, nogil=True)
def _run(b, p, hi, bw, st):
    """The run of the RLE / bit-packed hybrid (``bw`` bits a value) at ``p``: ``(values in
    it, bit-packed?, its value (RLE) or where its bits start (bit-packed), next run)``."""
    h, p = _varint(b, p, hi, st)
    count = h >> 1
    if count > MAX_RUN:
        _leave(st, L_PAGES)
    if h & 1:  # count groups of 8 values: count * bw bytes
        _has(p, count * bw, hi, st)
        return count * 8, True, p, p + count * bw
    vb = (bw + 7) >> 3
    _has(p, vb, hi, st)
    v = np.int64(0)
    for j in range(vb):
        v |= np.int64(b[p + j]) << (8 * j)
    return count, False, v, p + vb


@njit(cache=True, nogil=True)
def _indices(b, p, hi, bw, n, dictionary, ndict, dst, at, st):
    """``n`` dictionary indices (the hybrid, ``bw`` bits each) at ``b[p:hi]``, as the values
    of ``dictionary[:ndict]`` they index, into ``dst[at:at + n]``."""
    mask = (np.int64(1) << bw) - 1
    i = 0
    while i < n:
        count, packed, v, p = _run(b, p, hi, bw, st)
        take = min(count, n - i)
        if packed:
            fast = min(take, ((b.size - 8 - v) * 8) // bw) if bw else 0
            for k in range(fast):  # 8 bytes loaded lie in b (those past the run: masked)
                bit = k * bw
                j = (_load64(b, v + (bit >> 3)) >> (bit & 7)) & mask
                if j >= ndict:
                    _leave(st, L_PAGES)
                dst[at + i + k] = dictionary[j]
            for k in range(max(fast, 0), take):  # near b's end: byte by byte
                bit = k * bw
                q = v + (bit >> 3)
                x = np.int64(0)
                for g in range((bit & 7) + bw + 7 >> 3):
                    x |= np.int64(b[q + g]) << (8 * g)
                j = (x >> (bit & 7)) & mask
                if j >= ndict:
                    _leave(st, L_PAGES)
                dst[at + i + k] = dictionary[j]
        else:
            if v >= ndict:
                _leave(st, L_PAGES)
            x = dictionary[v]
            for k in range(take):
                dst[at + i + k] = x
        i += take


@njit(cache=True, nogil=True)
def _plain(b, p, hi, phys, n, dst, at, st):
    """``n`` PLAIN int32 or int64 values at ``b[p:hi]`` into ``dst[at:]``."""
    size = 4 if phys == INT32 else 8
    if n > (hi - p) // size or at < 0 or n > dst.size - at:
        _leave(st, L_PAGES)
    if size == 4:
        for k in range(n):
            dst[at + k] = _load32(b, p + 4 * k)
    else:
        for k in range(n):
            dst[at + k] = _load64(b, p + 8 * k)


@njit(cache=True, nogil=True)
def _page_values(b, p, hi, enc, phys, nn, dictionary, ndict, values, at, st):
    """The ``nn`` non-null values of a data page (its values section at ``b[p:hi]``)."""
    if enc == PLAIN:
        _plain(b, p, hi, phys, nn, values, at, st)
        return
    if enc != PLAIN_DICTIONARY and enc != RLE_DICTIONARY:
        _leave(st, L_ENCODING)
    if ndict < 0:
        _leave(st, L_PAGES)
    if nn == 0:
        return
    _has(p, 1, hi, st)
    bw = np.int64(b[p])
    if bw > 32:
        _leave(st, L_PAGES)
    _indices(b, p + 1, hi, bw, nn, dictionary, ndict, values, at, st)


@njit(cache=True, nogil=True)
def _levels(b, p, hi, n, valid, at, st):
    """Decode ``n`` definition levels (max 1: the hybrid, 1 bit each) at ``b[p:hi]`` into
    ``valid[at:]``: the non-null count."""
    i, nn = 0, 0
    while i < n:
        count, packed, v, p = _run(b, p, hi, 1, st)
        take = min(count, n - i)
        if packed:
            for k in range(take):
                d = (b[v + (k >> 3)] >> (k & 7)) & 1
                valid[at + i + k] = d == 1
                nn += d
        else:
            if v > 1:
                _leave(st, L_PAGES)
            for k in range(take):
                valid[at + i + k] = v == 1
            nn += take * v
        i += take
    return nn


@njit(cache=True, nogil=True)
def _spread(values, valid, at, n, nn):
    """Move the ``nn`` values at ``values[at:]`` to the valid ones of its ``n`` rows (nulls
    get 0), last first so that nothing is overwritten before it is moved."""
    k = nn - 1
    for i in range(n - 1, -1, -1):
        if valid[at + i]:
            values[at + i] = values[at + k]
            k -= 1
        else:
            values[at + i] = 0


@njit(cache=True, nogil=True)
def _chunk(b, p, hi, codec, phys, max_def, nvals, scratch, dictionary, values, valid, at, st):
    """Decode the pages of one column chunk (``b[p:hi]``, ``nvals`` rows) into
    ``values[at:]`` and ``valid[at:]``: the nulls among them."""
    if codec != UNCOMPRESSED and codec != SNAPPY:
        _leave(st, L_CODEC)
    seen, nulls, ndict = 0, 0, -1
    size = 4 if phys == INT32 else 8
    while seen < nvals:
        ptype, usize, csize, nv, enc, denc, pnulls, prows, dlen, rlen, comp, p = \
            _page_header(b, p, hi, st)
        _has(p, csize, hi, st)
        body, end = p, p + csize
        p = end
        if ptype == INDEX_PAGE:
            continue
        if ptype != DATA_PAGE and ptype != DICTIONARY_PAGE and ptype != DATA_PAGE_V2:
            _leave(st, L_PAGES)
        if nv < 0 or enc < 0:
            _leave(st, L_PAGES)
        lead = 0  # v2: levels, uncompressed, before the (compressed) values
        if ptype == DATA_PAGE_V2:
            if dlen < 0 or rlen != 0 or pnulls < 0 or prows != nv or dlen > csize \
                    or dlen > usize or (max_def == 0 and dlen != 0):
                _leave(st, L_PAGES)
            lead = dlen
        packed = codec == SNAPPY and (ptype != DATA_PAGE_V2 or comp == 1)
        if packed:
            if usize - lead > scratch.size:
                st[W_NEED] = usize - lead
                _leave(st, L_ROOM)
            _snappy(b, body + lead, end, scratch, usize - lead, st)
            src, lo, top = scratch, 0, usize - lead
        else:
            if usize != csize:
                _leave(st, L_PAGES)
            src, lo, top = b, body + lead, end
        if ptype == DICTIONARY_PAGE:
            if enc != PLAIN and enc != PLAIN_DICTIONARY:
                _leave(st, L_ENCODING)
            if ndict >= 0 or seen > 0:
                _leave(st, L_PAGES)
            if nv > dictionary.size:
                st[W_NEED] = usize
                _leave(st, L_ROOM)
            if nv * size != top - lo:
                _leave(st, L_PAGES)
            _plain(src, lo, top, phys, nv, dictionary, 0, st)
            ndict = nv
            continue
        if nv > nvals - seen:
            _leave(st, L_PAGES)
        here = at + seen
        if max_def == 0:
            nn = nv
            if ptype == DATA_PAGE_V2 and pnulls != 0:
                _leave(st, L_PAGES)
            for k in range(nv):
                valid[here + k] = True
        elif ptype == DATA_PAGE_V2:
            nn = _levels(b, body, body + dlen, nv, valid, here, st)
            if nv - nn != pnulls:
                _leave(st, L_PAGES)
        else:
            if denc != RLE:
                _leave(st, L_ENCODING)
            _has(lo, 4, top, st)
            n = _u32(src, lo)
            _has(lo + 4, n, top, st)
            nn = _levels(src, lo + 4, lo + 4 + n, nv, valid, here, st)
            lo += 4 + n
        _page_values(src, lo, top, enc, phys, nn, dictionary, ndict, values, here, st)
        if nn < nv:
            _spread(values, valid, here, nv, nn)
        nulls += nv - nn
        seen += nv
    return nulls


# --- files ------------------------------------------------------------------------------

@njit(cache=True, nogil=True)
def _in_range(values, valid, at, n, width):
    if width >= 32:  # int32 and int64 columns hold only their own values
        return True
    lo, hi = -(np.int64(1) << (width - 1)), np.int64(1) << (width - 1)
    for k in range(n):
        v = values[at + k]
        if valid[at + k] and (v < lo or v >= hi):
            return False
    return True


@njit(cache=True, nogil=True)
def _file(b, s, size, f, name, width, scratch, dictionary, values, valid, at, info, st):
    """Decode one whole file ``b[s:s + size]`` to ``values[at:]``: ``(rows, nulls)``."""
    st[W_BAD] = L_FOOTER
    e = s + size
    if size < 12 or b[s] != 80 or b[s + 1] != 65 or b[s + 2] != 82 or b[s + 3] != 49 \
            or b[e - 4] != 80 or b[e - 3] != 65 or b[e - 2] != 82 or b[e - 1] != 49:
        _leave(st, L_FOOTER)
    flen = _u32(b, e - 8)
    if flen > size - 12:
        _leave(st, L_FOOTER)
    st[W_BAD] = L_METADATA
    p, hi = e - 8 - flen, e - 8
    schema, rgs, kv, num_rows = -1, -1, -1, -1
    s0, s1 = -1, -1
    fid, seen = 0, 0
    while True:
        fid, t, p = _field(b, p, hi, fid, st)
        if t == T_STOP:
            break
        seen = _seen(seen, fid)
        if fid == 1:
            _, p = _int(b, p, hi, t, T_I32, st)
        elif fid == 2:
            _is(t, T_LIST, st)
            schema = p
            p = _skip(b, p, hi, t, st)
            s0, s1 = schema, p
        elif fid == 3:
            num_rows, p = _int(b, p, hi, t, T_I64, st)
        elif fid == 4:
            _is(t, T_LIST, st)
            rgs = p
            p = _skip(b, p, hi, t, st)
        elif fid == 5:
            _is(t, T_LIST, st)
            kv = p
            p = _skip(b, p, hi, t, st)
        elif fid == 8 or fid == 9:
            _leave(st, L_METADATA)  # encrypted
        else:
            p = _skip(b, p, hi, t, st)
    _require(seen, 0b11110, st)
    if schema < 0 or rgs < 0 or num_rows < 0:
        _leave(st, L_METADATA)
    leaf, phys, max_def, leaves, _ = _schema(b, schema, hi, name, width, st)
    a0, a1 = (0, 0) if kv < 0 else _arrow_schema(b, kv, hi, st)
    info[f, I_SCHEMA], info[f, I_SCHEMA_END] = s0, s1
    info[f, I_ARROW], info[f, I_ARROW_END] = a0, a1
    if f > 0:
        if info[0, I_SCHEMA_END] <= 0:
            _leave(st, L_REFERENCE)
        if not _same(b, s0, s1, info[0, I_SCHEMA], info[0, I_SCHEMA_END]) or \
                not _same(b, a0, a1, info[0, I_ARROW], info[0, I_ARROW_END]):
            _leave(st, L_SCHEMA)
    info[f, I_ROWS] = num_rows
    if num_rows > values.size - at:
        _leave(st, L_ROOM)
    n, t, p = _list(b, rgs, hi, st)
    if t != T_STRUCT:
        _leave(st, L_METADATA)
    rows, nulls = 0, 0
    for _ in range(n):
        cols, rg_rows = -1, -1
        fid, seen = 0, 0
        while True:
            fid, t, p = _field(b, p, hi, fid, st)
            if t == T_STOP:
                break
            seen = _seen(seen, fid)
            if fid == 1:
                _is(t, T_LIST, st)
                cols = p
                p = _skip(b, p, hi, t, st)
            elif fid == 2 or fid == 3:
                v, p = _int(b, p, hi, t, T_I64, st)
                rg_rows = v if fid == 3 else rg_rows
            else:
                p = _skip(b, p, hi, t, st)
        _require(seen, 0b1110, st)
        if cols < 0 or rg_rows < 0 or rg_rows > num_rows - rows:
            _leave(st, L_METADATA)
        nc, t, q = _list(b, cols, hi, st)
        if nc != leaves or t != T_STRUCT:
            _leave(st, L_METADATA)
        meta = (-1, -1, -1, -1, -1, -1)
        for k in range(nc):  # every one, as pyarrow parses (and checks) them all
            chunk, q = _column_chunk(b, q, hi, st[LEAF_AT + k], st)
            if k == leaf:
                meta = chunk
        typ, codec, nvals, csize, data, dic = meta
        if typ != phys or nvals != rg_rows:
            _leave(st, L_METADATA)
        if rg_rows == 0:
            continue
        start = dic if 0 < dic < data else data
        if start < 4 or csize > size - 8 - flen - start:
            _leave(st, L_METADATA)
        st[W_BAD] = L_PAGES
        nulls += _chunk(b, s + start, s + start + csize, codec, phys, max_def, nvals, scratch,
                        dictionary, values, valid, at + rows, st)
        st[W_BAD] = L_METADATA
        rows += rg_rows
    if rows != num_rows:
        _leave(st, L_METADATA)
    if not _in_range(values, valid, at, rows, width):
        _leave(st, L_RANGE)
    return rows, nulls


@njit(cache=True, nogil=True)
def lengths(buf, starts, sizes, name, width, scratch, dictionary, values, valid, info, work):
    """Decode the length column ``name`` (UTF-8 bytes; a signed integer of ``width`` bits)
    of every whole Parquet file ``buf[starts[f]:+sizes[f]]`` into ``values`` and ``valid``,
    the files read back to back, in order. ``info[f]``: its status (READ, or why it was
    left), rows, nulls, the scratch bytes it lacked (if so), and where its schema and
    ``ARROW:schema`` lie (every file's must equal file 0's byte for byte). Returns
    ``(values written, nulls among them)``."""
    at, nulls = 0, 0
    for f in range(starts.size):
        for k in range(NINFO):
            info[f, k] = 0
        work[W_WHY] = READ
        work[W_NEED] = 0
        s, size = starts[f], sizes[f]
        if s < 0 or size < 0 or s > buf.size - size:
            info[f, I_STATUS] = L_FOOTER
            continue
        try:
            rows, n = _file(buf, s, size, f, name, width, scratch, dictionary, values,
                            valid, at, info, work)
            info[f, I_ROWS] = rows
            info[f, I_NULLS] = n
            at += rows
            nulls += n
        except Exception:
            info[f, I_STATUS] = work[W_WHY] if work[W_WHY] != READ else L_METADATA
            info[f, I_NEED] = work[W_NEED]
    return at, nulls
