"""Parquet files decoded in numba, many per call: the footer's Thrift (compact protocol)
FileMetaData, the flat integer length column's chunks, their pages (v1 and v2, dictionary
pages), snappy (and zstd, decompressed by the caller: `zstd_pages`), PLAIN,
DELTA_BINARY_PACKED and dictionary (RLE / bit-packed hybrid) values and definition levels.

This serves many *small* shards (`gpu_profiler.readers.parquet.many`), for which pyarrow's
set-up per file costs more than decoding it, and counts a large file's column chunks without
a value array (`chunks`, for `gpu_profiler.readers.parquet.pages`). Whatever is not the
common case (another codec or encoding, nesting, unsigned or logical types, a schema unlike
the first file's, anything malformed or inconsistent) makes a file *left*, never an error:
the kernel writes why in ``info`` and goes on with the next file, and pyarrow then reads
that one. Every read is bounds-checked against the file (or page) it belongs to and every
loop is bounded by its input's size, so hostile bytes can neither crash nor hang the kernel.
Buffers are the caller's (the native build allows no allocation). Constants:
`gpu_profiler.kernels.parquet_format`. See https://github.com/apache/parquet-format and
https://github.com/google/snappy/blob/main/format_description.txt
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from gpu_profiler.kernels.cpu import tally, tally_span
from gpu_profiler.kernels.jit import kernel
from gpu_profiler.kernels.parquet_format import (
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
    SNAPPY,
    UNCOMPRESSED,
    W_BAD,
    W_NEED,
    W_PAGE,
    W_PAGES,
    W_WHY,
    ZSTD,
)
from gpu_profiler.kernels.posix import read_file
from gpu_profiler.kernels.stats import COUNT_DONE, COUNT_FOLD, COUNT_WIDEN, NULLS

# Thrift compact protocol types.
# (np.int64, not int: numba compiles a function again for each int literal it is passed.)
T_STOP, T_TRUE, T_FALSE, T_I8, T_I16, T_I32, T_I64, T_DOUBLE, T_BINARY, T_LIST, T_SET, \
    T_MAP, T_STRUCT = map(np.int64, range(13))
# Parquet enums used here.
INT32, INT64 = 1, 2
REQUIRED, OPTIONAL, REPEATED = 0, 1, 2
CONVERTED_INT = (15, 16, 17, 18)  # INT_8 .. INT_64
LOGICAL_INTEGER = 10
DATA_PAGE, INDEX_PAGE, DICTIONARY_PAGE, DATA_PAGE_V2 = 0, 1, 2, 3
PLAIN, PLAIN_DICTIONARY, RLE, BIT_PACKED, DELTA_BINARY_PACKED, RLE_DICTIONARY = 0, 2, 3, 4, 5, 8
ZSTD_MAGIC = 0xFD2FB528
# The work array: W_WHY, W_NEED and W_BAD (`parquet_format`); then the Thrift skip stack
# (2 words a level), the schema's nesting stack and levels, and every leaf's levels (its
# size bounds the leaves of a file read here).
SKIP_AT, SKIP_LEVELS = 8, 48
NEST_AT, NEST_LEVELS = SKIP_AT + 2 * SKIP_LEVELS, 64
LEVELS_AT = NEST_AT + NEST_LEVELS  # each open group's (definition << 8 | repetition) level
FIELDS = 17  # field ids a struct reader keeps (1-16)
# Where `_struct` keeps each struct's fields (FIELDS words each): one area per struct
# kind, so that a struct's fields outlive the parsing of those it holds.
(A_FILE, A_ELEMENT, A_LOGICAL, A_INT, A_KV, A_ROW_GROUP, A_CHUNK, A_META, A_STATS, A_SIZE,
 A_PAGE, A_SUB) = range(LEVELS_AT + NEST_LEVELS, LEVELS_AT + NEST_LEVELS + 12 * FIELDS,
                        FIELDS)
LEAF_AT = A_SUB + FIELDS  # each leaf's (definition << 8 | repetition) level, to the end


def _fields(area: int, required: tuple[int, ...], *typed: tuple[int, np.int64]) -> np.ndarray:
    """The Thrift type of each field id a struct reader keeps (0: skipped; T_TRUE stands
    for a bool); at index 0 the work array's ``area`` where they are kept, at the end the
    mask of the ``required`` ones (in the table, not arguments: numba would compile a
    `_struct` for each value of those)."""
    types = np.zeros(FIELDS + 1, np.int64)
    types[0] = area
    for fid, t in typed:
        types[fid] = t
    types[FIELDS] = sum(1 << fid for fid in required)
    return types


# The fields read of each Parquet struct (parquet.thrift).
FILE_FIELDS = _fields(A_FILE, (1, 2, 3, 4), (1, T_I32), (2, T_LIST), (3, T_I64),
                      (4, T_LIST), (5, T_LIST), (8, T_STRUCT), (9, T_BINARY))
ELEMENT_FIELDS = _fields(A_ELEMENT, (4,), (1, T_I32), (3, T_I32), (4, T_BINARY), (5, T_I32),
                         (6, T_I32), (10, T_STRUCT))
LOGICAL_FIELDS = _fields(A_LOGICAL, (), (LOGICAL_INTEGER, T_STRUCT))
INT_FIELDS = _fields(A_INT, (1, 2), (1, T_I8), (2, T_TRUE))
KV_FIELDS = _fields(A_KV, (1,), (1, T_BINARY), (2, T_BINARY))
ROW_GROUP_FIELDS = _fields(A_ROW_GROUP, (1, 2, 3), (1, T_LIST), (2, T_I64), (3, T_I64))
CHUNK_FIELDS = _fields(A_CHUNK, (2, 3), (1, T_BINARY), (2, T_I64), (3, T_STRUCT),
                       (8, T_STRUCT), (9, T_BINARY))  # 3 (the metadata): this reader's need
META_FIELDS = _fields(A_META, (1, 2, 3, 4, 5, 6, 7, 9), (1, T_I32), (2, T_LIST), (3, T_LIST),
                      (4, T_I32), (5, T_I64), (6, T_I64), (7, T_I64), (9, T_I64),
                      (11, T_I64), (13, T_LIST), (16, T_STRUCT))
STATS_FIELDS = _fields(A_STATS, (1, 2, 3), (1, T_I32), (2, T_I32), (3, T_I32))
SIZE_FIELDS = _fields(A_SIZE, (), (2, T_LIST), (3, T_LIST))
PAGE_FIELDS = _fields(A_PAGE, (1, 2, 3), (1, T_I32), (2, T_I32), (3, T_I32), (5, T_STRUCT),
                      (7, T_STRUCT), (8, T_STRUCT))
DATA_FIELDS = _fields(A_SUB, (1, 2, 3, 4), *((g, T_I32) for g in range(1, 5)))
DICT_FIELDS = _fields(A_SUB, (1, 2), (1, T_I32), (2, T_I32), (3, T_TRUE))
V2_FIELDS = _fields(A_SUB, tuple(range(1, 7)), *((g, T_I32) for g in range(1, 7)),
                    (7, T_TRUE))
#: Varint lengths Thrift allows: a 32-bit value's, a 64-bit one's.
VARINT32, VARINT64 = np.int64(5), np.int64(10)
ZERO, MISSING = np.int64(0), np.int64(-1)
LEVEL_BITS = np.int64(1)  # a definition level (max 1) in the hybrid encoding
ARROW_KEY = np.frombuffer(b"ARROW:schema", np.uint8).copy()
#: Bound on a run or group count in the hybrid encoding (no page holds more values).
MAX_RUN = np.int64(1) << 40


class Left(Exception):
    """Leaves the file being decoded (why: ``work[W_WHY]``)."""


@kernel(nogil=True)
def _leave(st, why):
    st[W_WHY] = why
    raise Left()


@kernel(nogil=True)
def _has(p, n, hi, st):
    """``n`` bytes from ``p`` lie before ``hi``, or the read is malformed."""
    if n < 0 or p < 0 or p > hi - n:
        _leave(st, st[W_BAD])


@kernel(nogil=True)
def _varint(b, p, hi, st, most):
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


@kernel(inline="always")
def _unzig(u):
    """The signed integer the zigzag code ``u`` stands for."""
    return ((u >> 1) & 0x7FFFFFFFFFFFFFFF) ^ -(u & 1)


@kernel(nogil=True)
def _zigzag(b, p, hi, st, most):
    v, p = _varint(b, p, hi, st, most)
    return _unzig(v), p


@kernel(nogil=True)
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
    v, p = _zigzag(b, p, hi, st, VARINT64 if t == T_I64 else VARINT32)
    if t == T_I32 and not -(1 << 31) <= v < (1 << 31):
        _leave(st, st[W_BAD])
    if t == T_I16 and not -(1 << 15) <= v < (1 << 15):
        _leave(st, st[W_BAD])
    return v, p


@kernel(nogil=True)
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
        fid, p = _zigzag(b, p, hi, st, VARINT32)
    else:
        fid = last + d
    if t == T_STOP or t > T_STRUCT:
        _leave(st, st[W_BAD])
    return fid, t, p


@kernel(nogil=True)
def _is(t, want, st):
    """A field of the struct's type for it (Thrift would skip another, and miss it)."""
    if t != want:
        _leave(st, st[W_BAD])


@kernel(nogil=True)
def _struct(b, p, hi, types, st):
    """Read the struct at ``p``: each field whose id has a type in ``types`` (which it
    must have: Thrift skips a field of another type, and misses it) into ``st[at + id]``
    (``at``: ``types[0]``; an integer or bool: its value; a list, struct or binary: its
    position), every other
    field skipped; a required one missing (``types[FIELDS]``) leaves the file. ``(mask
    of the ids read, bit 0: others too; next position)``."""
    at = types[0]
    for k in range(FIELDS):
        st[at + k] = -1
    fid, seen = ZERO, ZERO
    while True:
        fid, t, p = _field(b, p, hi, fid, st)
        if t == T_STOP:
            if seen & types[FIELDS] != types[FIELDS]:  # Thrift refuses it: so does this
                _leave(st, st[W_BAD])
            return seen, p
        want = types[fid] if 0 < fid < FIELDS else 0
        if want == 0:
            seen |= 1
            p = _skip(b, p, hi, t, st)
            continue
        if want == T_TRUE:
            if t != T_TRUE and t != T_FALSE:
                _leave(st, st[W_BAD])
            v = 1 if t == T_TRUE else 0
        elif want <= T_I64:
            v, p = _int(b, p, hi, t, want, st)
        else:
            _is(t, want, st)
            v = p
            p = _skip(b, p, hi, t, st)
        st[at + fid] = v
        seen |= np.int64(1) << fid


@kernel(nogil=True)
def _list(b, p, hi, st):
    """``(size, element type, next position)`` of the list header at ``p``; the size is
    at most the bytes left (every element takes one at least)."""
    _has(p, 1, hi, st)
    c = np.int64(b[p])
    p += 1
    n = c >> 4
    if n == 15:
        n, p = _varint(b, p, hi, st, VARINT32)
    t = c & 0xF
    if n < 0 or n > hi - p or t == T_STOP or t > T_STRUCT:
        _leave(st, st[W_BAD])
    return n, t, p


@kernel(nogil=True)
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
            _, p = _varint(b, p, hi, st, VARINT64 if t == T_I64 else VARINT32)
        elif t == T_DOUBLE:
            _has(p, 8, hi, st)
            p += 8
        elif t == T_BINARY:
            n, p = _varint(b, p, hi, st, VARINT32)
            _has(p, n, hi, st)
            p += n
        elif t == T_LIST or t == T_SET or t == T_MAP or t == T_STRUCT:
            if depth == SKIP_LEVELS:
                _leave(st, st[W_BAD])
            if t == T_MAP:
                n, p = _varint(b, p, hi, st, VARINT32)
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
                _, t, p = _field(b, p, hi, ZERO, st)  # ids do not matter here
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


@kernel(nogil=True)
def _binary(b, p, hi, t, st):
    """``(start, end)`` of a binary field's bytes, and the next position."""
    if t != T_BINARY:
        _leave(st, st[W_BAD])
    n, p = _varint(b, p, hi, st, VARINT32)
    _has(p, n, hi, st)
    return p, p + n, p + n


@kernel(nogil=True)
def _equal(b, lo, hi, key):
    if hi - lo != key.size:
        return False
    for k in range(key.size):
        if b[lo + k] != key[k]:
            return False
    return True


@kernel(nogil=True)
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


@kernel(nogil=True)
def _u32(b, p):
    return (np.int64(b[p]) | (np.int64(b[p + 1]) << 8) | (np.int64(b[p + 2]) << 16)
            | (np.int64(b[p + 3]) << 24))


# --- the footer -------------------------------------------------------------------------

@kernel(nogil=True)
def _int_type(b, p, hi, st):
    """``(bit width, signed)`` of the LogicalType union at ``p`` if it is INTEGER, else
    ``(-2, False)``."""
    seen, _ = _struct(b, p, hi, LOGICAL_FIELDS, st)
    if seen != np.int64(1) << LOGICAL_INTEGER:
        return -2, False
    seen, _ = _struct(b, st[A_LOGICAL + LOGICAL_INTEGER], hi, INT_FIELDS, st)
    return st[A_INT + 1], st[A_INT + 2] == 1


@kernel(nogil=True)
def _element(b, p, hi, st):
    """A SchemaElement: ``(type, repetition, name start, name end, children (-1: none),
    converted type, logical int width (-1: none, -2: another logical type), signed,
    next position)``."""
    seen, p = _struct(b, p, hi, ELEMENT_FIELDS, st)
    typ, rep, children, conv = st[A_ELEMENT + 1], st[A_ELEMENT + 3], st[A_ELEMENT + 5], \
        st[A_ELEMENT + 6]
    n0, n1, _ = _binary(b, st[A_ELEMENT + 4], hi, T_BINARY, st)
    width, signed = -1, False
    if seen & (1 << 10):
        width, signed = _int_type(b, st[A_ELEMENT + 10], hi, st)
    return typ, rep, n0, n1, children, conv, width, signed, p


@kernel(nogil=True)
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


@kernel(nogil=True)
def _schema(b, p, hi, name, width, st):
    """Find the top-level leaf ``name`` in the schema list at ``p`` (none with ``width``
    0: the schema is only checked): ``(its leaf index, physical type, maximum definition
    level, leaves, next position)``."""
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
        if width and level == 0 and _equal(b, n0, n1, name):
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
    if width and matches != 1:
        _leave(st, L_COLUMN)
    return found, phys, max_def, leaves, p


@kernel(nogil=True)
def _arrow_schema(b, p, hi, st):
    """``(start, end)`` of the ``ARROW:schema`` value in the key-value list at ``p``
    (``(0, 0)``: none)."""
    n, t, p = _list(b, p, hi, st)
    if t != T_STRUCT:
        _leave(st, L_METADATA)
    a0, a1, found = 0, 0, 0
    for _ in range(n):
        seen, p = _struct(b, p, hi, KV_FIELDS, st)
        k0, k1, _ = _binary(b, st[A_KV + 1], hi, T_BINARY, st)
        if _equal(b, k0, k1, ARROW_KEY):
            if not seen & 0b100:
                _leave(st, L_METADATA)
            found += 1
            a0, a1, _ = _binary(b, st[A_KV + 2], hi, T_BINARY, st)
    if found > 1:
        _leave(st, L_METADATA)
    return a0, a1


@kernel(nogil=True)
def _histogram(b, p, hi, length, st):
    """A level histogram of SizeStatistics at ``p``: a list of ``length`` i64, or of none
    (pyarrow checks it)."""
    n, e, _ = _list(b, p, hi, st)
    if (n != length and n != 0) or e != T_I64:
        _leave(st, L_METADATA)


@kernel(nogil=True)
def _column_meta(b, p, hi, levels, st):
    """ColumnMetaData of a leaf with these levels (definition << 8 | repetition): ``(type,
    codec, values, compressed size, data page offset, dictionary page offset (-1: none),
    where its list of encodings lies)``, its PageEncodingStats and SizeStatistics checked
    as pyarrow checks them."""
    seen, _ = _struct(b, p, hi, META_FIELDS, st)
    if seen & (1 << 13):
        n, e, q = _list(b, st[A_META + 13], hi, st)
        if e != T_STRUCT:
            _leave(st, L_METADATA)
        for _ in range(n):
            _, q = _struct(b, q, hi, STATS_FIELDS, st)
    if seen & (1 << 16):
        got, _ = _struct(b, st[A_META + 16], hi, SIZE_FIELDS, st)
        if got & 0b100:
            _histogram(b, st[A_SIZE + 2], hi, (levels & 255) + 1, st)
        if got & 0b1000:
            _histogram(b, st[A_SIZE + 3], hi, (levels >> 8) + 1, st)
    m = A_META
    typ, codec, nvals, size, data, dic = st[m + 1], st[m + 4], st[m + 5], st[m + 7], \
        st[m + 9], st[m + 11]
    if typ < 0 or codec < 0 or nvals < 0 or size < 0 or data < 0:
        _leave(st, L_METADATA)
    return typ, codec, nvals, size, data, dic, st[m + 2]


@kernel(nogil=True)
def _decodable(b, p, hi, st):
    """1 if the encodings a ColumnMetaData lists (the list at ``p``) are all ones the kernel
    decodes (values PLAIN, DELTA_BINARY_PACKED or by dictionary; levels RLE, or BIT_PACKED,
    which writers list for columns with no levels), else 0: a chunk's pages say their own
    encodings, so this only spares reading a chunk the kernel would leave
    (BYTE_STREAM_SPLIT)."""
    n, t, p = _list(b, p, hi, st)
    if t != T_I32:
        return ZERO
    for _ in range(n):
        e, p = _zigzag(b, p, hi, st, VARINT32)
        if e != PLAIN and e != PLAIN_DICTIONARY and e != RLE and e != BIT_PACKED \
                and e != DELTA_BINARY_PACKED and e != RLE_DICTIONARY:
            return ZERO
    return np.int64(1)


@kernel(nogil=True)
def _column_chunk(b, p, hi, levels, st):
    """ColumnChunk: its metadata (as `_column_meta`) and the next position; a chunk in
    another file or encrypted is left."""
    seen, p = _struct(b, p, hi, CHUNK_FIELDS, st)
    if seen & (1 << 1 | 1 << 8 | 1 << 9):
        _leave(st, L_METADATA)
    return _column_meta(b, st[A_CHUNK + 3], hi, levels, st), p


# --- pages ------------------------------------------------------------------------------

@kernel(nogil=True)
def _page_header(b, p, hi, st):
    """PageHeader: ``(type, uncompressed size, compressed size, values, encoding,
    definition level encoding, nulls, rows, definition levels' bytes, repetition levels'
    bytes, compressed, next position)`` (-1: not given), from the header of its type;
    every header given is checked."""
    seen, p = _struct(b, p, hi, PAGE_FIELDS, st)
    ptype, usize, csize = st[A_PAGE + 1], st[A_PAGE + 2], st[A_PAGE + 3]
    nv, enc, denc, nulls, rows, dlen, rlen, comp = -1, -1, -1, -1, -1, -1, -1, 1
    if seen & (1 << 5):
        _struct(b, st[A_PAGE + 5], hi, DATA_FIELDS, st)
        if ptype == DATA_PAGE:
            nv, enc, denc = st[A_SUB + 1], st[A_SUB + 2], st[A_SUB + 3]
    if seen & (1 << 7):
        _struct(b, st[A_PAGE + 7], hi, DICT_FIELDS, st)
        if ptype == DICTIONARY_PAGE:
            nv, enc = st[A_SUB + 1], st[A_SUB + 2]
    if seen & (1 << 8):
        _struct(b, st[A_PAGE + 8], hi, V2_FIELDS, st)
        if ptype == DATA_PAGE_V2:
            nv, nulls, rows, enc, dlen, rlen = st[A_SUB + 1], st[A_SUB + 2], \
                st[A_SUB + 3], st[A_SUB + 4], st[A_SUB + 5], st[A_SUB + 6]
            comp = 0 if st[A_SUB + 7] == 0 else 1
    if ptype < 0 or usize < 0 or csize < 0:
        _leave(st, L_PAGES)
    return ptype, usize, csize, nv, enc, denc, nulls, rows, dlen, rlen, comp, p


@kernel(nogil=True)
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


@kernel(nogil=True)
def _snappy(b, p, hi, out, m, st):
    """Decompress the raw snappy block ``b[p:hi]`` into ``out[:m]`` (exactly ``m`` bytes).
    (The loop breaks on a malformed element instead of raising in it: it runs once per
    element, a few bytes, and stays a tight loop that way.)"""
    n, p = _varint(b, p, hi, st, VARINT32)
    if n != m:
        _leave(st, L_PAGES)
    o = ZERO
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


@kernel(nogil=True)
def _run(b, p, hi, bw, st):
    """The run of the RLE / bit-packed hybrid (``bw`` bits a value) at ``p``: ``(values in
    it, bit-packed?, its value (RLE) or where its bits start (bit-packed), next run)``."""
    h, p = _varint(b, p, hi, st, VARINT32)
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


@kernel(nogil=True)
def _indices(b, p, hi, bw, n, dictionary, ndict, dst, at, tallies, st):
    """``n`` dictionary indices (the hybrid, ``bw`` bits each) at ``b[p:hi]``, as the values
    of ``dictionary[:ndict]`` they index, into ``dst[at:at + n]``; or, where ``tallies`` is
    not empty, counted there (``tallies[j]``: the rows of entry ``j``; a run of one index
    is one addition), with nothing written to ``dst``."""
    mask = (np.int64(1) << bw) - 1
    counting = tallies.size > 0
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
                if counting:
                    tallies[j] += 1
                else:
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
                if counting:
                    tallies[j] += 1
                else:
                    dst[at + i + k] = dictionary[j]
        else:
            if v >= ndict:
                _leave(st, L_PAGES)
            if counting:
                tallies[v] += take
            else:
                x = dictionary[v]
                for k in range(take):
                    dst[at + i + k] = x
        i += take


@kernel(inline="always")
def _put(v, dst, at, w, dense):
    """Hand over the value ``v``: counted in ``dense`` when it lies there (``dense[v]``: the
    rows of value ``v``), else written to ``dst[at + w]``. Returns the values written."""
    if 0 <= v < dense.size:
        dense[v] += 1
        return w
    dst[at + w] = v
    return w + 1


@kernel(nogil=True)
def _plain(b, p, hi, phys, n, dst, at, dense, st):
    """``n`` PLAIN int32 or int64 values at ``b[p:hi]`` into ``dst[at:]``; or, where
    ``dense`` is not empty, those from 0 to ``dense.size - 1`` counted there (`_put`) and
    only the others written. Returns the values written."""
    size = 4 if phys == INT32 else 8
    if n > (hi - p) // size or at < 0 or n > dst.size - at:
        _leave(st, L_PAGES)
    if dense.size == 0:
        if size == 4:
            for k in range(n):
                dst[at + k] = _load32(b, p + 4 * k)
        else:
            for k in range(n):
                dst[at + k] = _load64(b, p + 8 * k)
        return n
    w = ZERO
    for k in range(n):
        w = _put(_load32(b, p + 4 * k) if size == 4 else _load64(b, p + 8 * k), dst, at, w,
                 dense)
    return w


@kernel(nogil=True)
def _vlq(b, p, hi, bits, st):
    """``(the ULEB128 integer at p, next position)`` (`_varint`): one of ``bits`` bits (32
    or 64), in 5 or 10 bytes at most, or the page is left (arrow's reader takes no more)."""
    most = VARINT32 if bits == 32 else VARINT64
    v, q = _varint(b, p, hi, st, most)
    if q - p == most and np.int64(b[q - 1]) >> (bits - 7 * (most - 1)) != 0:
        _leave(st, L_PAGES)  # (its last byte holds bits past the width)
    return v, q


@kernel(nogil=True)
def _delta(b, p, hi, phys, n, dst, at, dense, st):
    """``n`` DELTA_BINARY_PACKED int32 or int64 values at ``b[p:hi]``, handed over as
    `_plain` hands them (into ``dst[at:]``, or counted in ``dense``). What arrow's decoder
    refuses is left (a header of other sizes than the spec's, a width past the type's, a
    miniblock cut short, padding included), and so is a page whose header counts other than
    ``n`` values. Sums wrap in the type's width, as arrow's do."""
    bits = np.int64(32) if phys == INT32 else np.int64(64)
    if at < 0 or n > dst.size - at:
        _leave(st, L_PAGES)
    per_block, p = _vlq(b, p, hi, 32, st)
    minis, p = _vlq(b, p, hi, 32, st)
    total, p = _vlq(b, p, hi, 32, st)
    u, p = _vlq(b, p, hi, bits, st)
    if per_block == 0 or per_block % 128 != 0 or minis == 0:
        _leave(st, L_PAGES)
    per_mini = per_block // minis
    if per_mini == 0 or per_mini % 32 != 0 or total != n:
        _leave(st, L_PAGES)
    if n == 0:
        return ZERO
    cur = _unzig(u)
    w = _put(cur, dst, at, ZERO, dense)
    left = n - 1
    while left > 0:  # a block: its least delta, its miniblocks' widths, its miniblocks
        u, p = _vlq(b, p, hi, bits, st)
        least = _unzig(u)
        _has(p, minis, hi, st)
        widths = p
        p += minis
        for i in range(minis):
            if left == 0:
                break
            width = np.int64(b[widths + i])
            if width > bits:
                _leave(st, L_PAGES)
            size = (per_mini * width) >> 3  # (whole bytes: per_mini is a multiple of 32)
            _has(p, size, hi, st)
            take = min(per_mini, left)
            mask = np.int64(-1) if width == 64 else (np.int64(1) << width) - 1
            words = width <= 56 and p + size + 8 <= b.size
            for k in range(take):
                bit = k * width
                if words:
                    x = (_load64(b, p + (bit >> 3)) >> (bit & 7)) & mask
                else:
                    x = np.int64(0)
                    for j in range(width):
                        q = bit + j
                        x |= np.int64((b[p + (q >> 3)] >> (q & 7)) & 1) << j
                cur = cur + least + x
                if bits == 32:
                    cur = ((cur + 0x80000000) & 0xFFFFFFFF) - 0x80000000
                w = _put(cur, dst, at, w, dense)
            p += size
            left -= take
    return w


@kernel(nogil=True)
def _page_values(b, p, hi, enc, phys, nn, dictionary, ndict, values, at, tallies, dense, st):
    """The ``nn`` non-null values of a data page (its values section at ``b[p:hi]``) into
    ``values[at:]``, or their dictionary indices counted into ``tallies`` (see `_indices`),
    or PLAIN and DELTA values into ``dense`` (`_put`). Returns the values written."""
    if enc == PLAIN:
        return _plain(b, p, hi, phys, nn, values, at, dense, st)
    if enc == DELTA_BINARY_PACKED:
        return _delta(b, p, hi, phys, nn, values, at, dense, st)
    if enc != PLAIN_DICTIONARY and enc != RLE_DICTIONARY:
        _leave(st, L_ENCODING)
    if ndict < 0:
        _leave(st, L_PAGES)
    if nn == 0:
        return ZERO
    _has(p, 1, hi, st)
    bw = np.int64(b[p])
    if bw > 32:
        _leave(st, L_PAGES)
    _indices(b, p + 1, hi, bw, nn, dictionary, ndict, values, at, tallies, st)
    return ZERO if tallies.size > 0 else nn


@kernel(nogil=True)
def _levels(b, p, hi, n, valid, at, st):
    """Decode ``n`` definition levels (max 1: the hybrid, 1 bit each) at ``b[p:hi]`` into
    ``valid[at:]`` (only counted if ``valid`` is empty): the non-null count."""
    i, nn = ZERO, ZERO
    write = valid.size > 0
    while i < n:
        count, packed, v, p = _run(b, p, hi, LEVEL_BITS, st)
        take = min(count, n - i)
        if packed:
            for k in range(take):
                d = (b[v + (k >> 3)] >> (k & 7)) & 1
                if write:
                    valid[at + i + k] = d == 1
                nn += d
        else:
            if v > 1:
                _leave(st, L_PAGES)
            if write:
                for k in range(take):
                    valid[at + i + k] = v == 1
            nn += take * v
        i += take
    return nn


@kernel(nogil=True)
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


@kernel(inline="always")
def _compressed(ptype, comp):
    """Whether a page's values are compressed by its chunk's codec (a version 2 page says
    so itself, and its levels never are)."""
    return ptype != DATA_PAGE_V2 or comp == 1


@kernel(nogil=True)
def _chunk(b, p, hi, codec, phys, max_def, nvals, scratch, dictionary, values, valid, at,
           tallies, dense, zpages, unpacked, st):
    """Decode the pages of one column chunk (``b[p:hi]``, ``nvals`` rows) into
    ``values[at:]`` and ``valid[at:]``. Where ``tallies`` is not empty (and ``valid`` is),
    dictionary-encoded pages are counted into it instead (see `_indices`), PLAIN and DELTA
    pages' non-null values into ``dense`` (`_put`), and only the values neither counts are
    written, back to back from ``values[at]``. A zstd chunk's
    pages were decompressed by the caller into ``unpacked``, as `zstd_pages` listed them in
    ``zpages`` (this chunk's: rows ``st[W_PAGE]`` to ``st[W_PAGES]``; none listed: zstd is
    left). Returns ``(the nulls, the values written, the dictionary's entries)``."""
    if codec != UNCOMPRESSED and codec != SNAPPY and (codec != ZSTD or zpages.shape[0] == 0):
        _leave(st, L_CODEC)
    counting = tallies.size > 0
    seen, nulls, ndict, written = ZERO, ZERO, MISSING, ZERO
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
        packed = codec != UNCOMPRESSED and _compressed(ptype, comp)
        if packed and codec == ZSTD:  # the next page decompressed for this chunk
            k = st[W_PAGE]
            st[W_PAGE] = k + 1
            if k >= st[W_PAGES] or zpages[k, 2] != usize - lead or zpages[k, 3] < 0:
                _leave(st, L_PAGES)
            src, lo, top = unpacked, zpages[k, 3], zpages[k, 3] + usize - lead
        elif packed:
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
            if nv > dictionary.size or (counting and nv > tallies.size):
                st[W_NEED] = usize
                _leave(st, L_ROOM)
            if nv * size != top - lo:
                _leave(st, L_PAGES)
            _plain(src, lo, top, phys, nv, dictionary, ZERO, dense[:0], st)
            ndict = nv
            continue
        if nv > nvals - seen:
            _leave(st, L_PAGES)
        here = at + (written if counting else seen)
        if max_def == 0:
            nn = nv
            if ptype == DATA_PAGE_V2 and pnulls != 0:
                _leave(st, L_PAGES)
            if not counting:
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
        w = _page_values(src, lo, top, enc, phys, nn, dictionary, ndict, values, here, tallies,
                         dense, st)
        if not counting:
            if nn < nv:
                _spread(values, valid, here, nv, nn)
            written += nv
        else:
            written += w
        nulls += nv - nn
        seen += nv
    return nulls, written, ndict


# --- files ------------------------------------------------------------------------------

@kernel(nogil=True)
def _fits(v, width):
    """Whether ``v`` is a value of a signed ``width``-bit column (int32 and int64 columns
    hold only their own values)."""
    return width >= 32 or -(np.int64(1) << (width - 1)) <= v < np.int64(1) << (width - 1)


@kernel(nogil=True)
def _in_range(values, valid, at, n, width):
    if width >= 32:  # (no value to check)
        return True
    for k in range(n):
        if valid[at + k] and not _fits(values[at + k], width):
            return False
    return True


@kernel(nogil=True)
def _footer(b, lo, hi, size, name, width, f, info, st):
    """The FileMetaData at ``b[lo:hi]``, the footer of a file of ``size`` bytes: ``(rows,
    row groups, where the first lies, the length column's leaf, physical type and maximum
    definition level, leaves)``. ``info[f]`` gets the rows and where the schema and
    ``ARROW:schema`` lie in ``b`` (file ``f > 0``'s must equal file 0's, byte for byte)."""
    st[W_BAD] = L_METADATA
    seen, _ = _struct(b, lo, hi, FILE_FIELDS, st)
    if seen & (1 << 8 | 1 << 9):
        _leave(st, L_METADATA)  # encrypted
    schema, num_rows, rgs = st[A_FILE + 2], st[A_FILE + 3], st[A_FILE + 4]
    kv = st[A_FILE + 5] if seen & (1 << 5) else -1
    s0, s1 = schema, _skip(b, schema, hi, T_LIST, st)
    if num_rows < 0:
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
    n, t, p = _list(b, rgs, hi, st)
    if t != T_STRUCT:
        _leave(st, L_METADATA)
    return num_rows, n, p, leaf, phys, max_def, leaves


@kernel(nogil=True)
def _group(b, p, hi, leaves, leaf, phys, size, flen, left, st):
    """The RowGroup at ``p`` of a file of ``size`` bytes and a footer of ``flen``, which
    may hold at most ``left`` rows: ``(its rows, where the length column's chunk starts
    in the file, its bytes, codec, 1 if the chunk lists only encodings the kernel decodes
    (`_decodable`, else 0), next position)``."""
    seen, p = _struct(b, p, hi, ROW_GROUP_FIELDS, st)
    cols, rows = st[A_ROW_GROUP + 1], st[A_ROW_GROUP + 3]
    if cols < 0 or rows < 0 or rows > left:
        _leave(st, L_METADATA)
    nc, t, q = _list(b, cols, hi, st)
    if nc != leaves or t != T_STRUCT:
        _leave(st, L_METADATA)
    meta = (MISSING, MISSING, MISSING, MISSING, MISSING, MISSING, MISSING)
    for k in range(nc):  # every one, as pyarrow parses (and checks) them all
        chunk, q = _column_chunk(b, q, hi, st[LEAF_AT + k], st)
        if k == leaf:
            meta = chunk
    typ, codec, nvals, csize, data, dic, encodings = meta
    if typ != phys or nvals != rows:
        _leave(st, L_METADATA)
    start = dic if 0 < dic < data else data
    if rows and (start < 4 or csize > size - 8 - flen - start):
        _leave(st, L_METADATA)
    return rows, start, csize, codec, _decodable(b, encodings, hi, st), p


@kernel(nogil=True)
def _magic(b, p):
    """Whether ``b[p:p + 4]`` is ``PAR1``."""
    return b[p] == 80 and b[p + 1] == 65 and b[p + 2] == 82 and b[p + 3] == 49


@kernel(nogil=True)
def _footer_length(b, e, size, st):
    """The length of the footer of a file of ``size`` bytes that ends at ``b[e]`` (its
    footer, the footer's length, ``PAR1``); the file is left unless it ends so."""
    if size < 12 or not _magic(b, e - 4):
        _leave(st, L_FOOTER)
    flen = _u32(b, e - 8)
    if flen > size - 12:
        _leave(st, L_FOOTER)
    return flen


@kernel(nogil=True)
def _opened(b, s, size, f, name, width, info, st):
    """The whole file ``b[s:s + size]`` opened by its footer: ``(footer length, where the
    footer ends, then what `_footer` returns)``, as `_file` decodes it and `file_chunks`
    lists its chunks."""
    st[W_BAD] = L_FOOTER
    if size < 12 or not _magic(b, s):
        _leave(st, L_FOOTER)
    flen = _footer_length(b, s + size, size, st)
    hi = s + size - 8
    num_rows, n, p, leaf, phys, max_def, leaves = _footer(b, hi - flen, hi, size, name, width,
                                                          f, info, st)
    return flen, hi, num_rows, n, p, leaf, phys, max_def, leaves


@kernel(nogil=True)
def _file(b, s, size, f, name, width, scratch, dictionary, values, valid, at, info, zpages,
          first, unpacked, chunk, st):
    """Decode one whole file ``b[s:s + size]`` to ``values[at:]``: ``(rows, nulls)``. Its
    zstd pages were decompressed into ``unpacked`` as `zstd_pages` listed them in ``zpages``
    (its column chunks: rows ``first[chunk]`` on of ``first``; none: zstd is left)."""
    flen, hi, num_rows, n, p, leaf, phys, max_def, leaves = _opened(b, s, size, f, name,
                                                                     width, info, st)
    if num_rows > values.size - at:
        _leave(st, L_ROOM)
    rows, nulls = ZERO, ZERO
    for _ in range(n):
        rg_rows, start, csize, codec, _, p = _group(b, p, hi, leaves, leaf, phys, size, flen,
                                                    num_rows - rows, st)
        if rg_rows == 0:
            continue
        st[W_BAD] = L_PAGES
        if zpages.shape[0]:
            if chunk + 1 >= first.size:
                _leave(st, L_PAGES)
            st[W_PAGE], st[W_PAGES] = first[chunk], first[chunk + 1]
            chunk += 1
        nulls += _chunk(b, s + start, s + start + csize, codec, phys, max_def, rg_rows,
                        scratch, dictionary, values, valid, at + rows, values[:0], values[:0],
                        zpages, unpacked, st)[0]
        st[W_BAD] = L_METADATA
        rows += rg_rows
    if rows != num_rows:
        _leave(st, L_METADATA)
    if not _in_range(values, valid, at, rows, width):
        _leave(st, L_RANGE)
    return rows, nulls


@kernel(nogil=True)
def file_chunks(buf, starts, sizes, name, width, info, table, first_file, work):
    """The length column's chunks of every whole file ``buf[starts[f]:+sizes[f]]`` as
    `lengths` visits them (row groups with rows, in order): ``table[c]`` = (where the chunk
    starts in ``buf``, where it ends, its codec), file f's from row ``first_file[f]``; a
    file whose footer is not read has none. Returns ``(chunks,)``, or ``(-1,)`` when
    ``table`` lacks room."""
    c = ZERO
    for f in range(starts.size):
        first_file[f] = c
        s, size = starts[f], sizes[f]
        if s < 0 or size < 0 or s > buf.size - size:
            continue
        try:
            flen, hi, num_rows, n, p, leaf, phys, max_def, leaves = _opened(
                buf, s, size, f, name, width, info, work)
            rows = ZERO
            for _ in range(n):
                rg_rows, start, csize, codec, _, p = _group(buf, p, hi, leaves, leaf, phys,
                                                            size, flen, num_rows - rows, work)
                if rg_rows == 0:
                    continue
                if c == table.shape[0]:
                    return (MISSING,)
                table[c, 0], table[c, 1], table[c, 2] = s + start, s + start + csize, codec
                c += 1
                rows += rg_rows
        except Exception:  # noqa: BLE001 (`lengths` leaves the file there)
            pass
    first_file[starts.size] = c
    return (c,)


@kernel(nogil=True)
def lengths(buf, starts, sizes, name, width, scratch, dictionary, values, valid, info, zpages,
            first, first_file, unpacked, work):
    """Decode the length column ``name`` (UTF-8 bytes; a signed integer of ``width`` bits)
    of every whole Parquet file ``buf[starts[f]:+sizes[f]]`` into ``values`` and ``valid``,
    the files read back to back, in order. ``info[f]``: its status (READ, or why it was
    left), rows, nulls, the scratch bytes it lacked (if so), and where its schema and
    ``ARROW:schema`` lie (every file's must equal file 0's byte for byte). zstd pages: as
    `_file` takes them, file f's chunks from row ``first_file[f]`` of ``first``
    (`file_chunks`). Returns ``(values written, nulls among them)``."""
    at, nulls = ZERO, ZERO
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
                            valid, at, info, zpages, first, unpacked,
                            first_file[f] if zpages.shape[0] else ZERO, work)
            info[f, I_ROWS] = rows
            info[f, I_NULLS] = n
            at += rows
            nulls += n
        except Exception:
            info[f, I_STATUS] = work[W_WHY] if work[W_WHY] != READ else L_METADATA
            info[f, I_NEED] = work[W_NEED]
    return at, nulls


@kernel(nogil=True)
def row_groups(tail, size, name, width, table, info, work):
    """The row groups of a file of ``size`` bytes whose last ``tail.size`` bytes (the
    footer among them) are ``tail``: ``table[g]`` gets row group ``g``'s rows, where its
    length column's chunk starts in the file, the chunk's bytes, its codec and whether it
    has a dictionary page (1, else 0); ``info[0]``
    as `lengths` fills it. Returns ``(status, row groups, physical type, maximum definition
    level)``: status READ, or why the file is left (`L_ROOM`: ``work[W_NEED]`` tail bytes
    or table rows were lacking). With ``width`` 0 no column is sought and ``table`` is left
    as it is: the footer is checked and ``info[0]`` filled (its schema, for planning)."""
    work[W_WHY] = READ
    work[W_NEED] = 0
    for k in range(NINFO):
        info[0, k] = 0
    try:
        t = tail.size
        if t < 12 or t > size:
            _leave(work, L_FOOTER)
        flen = _footer_length(tail, t, size, work)
        if flen > t - 8:
            work[W_NEED] = flen + 8
            _leave(work, L_ROOM)
        num_rows, n, p, leaf, phys, max_def, leaves = _footer(tail, t - 8 - flen, t - 8, size,
                                                              name, width, 0, info, work)
        if not width:  # (the footer alone: its schema, rows and row groups' count)
            return READ, n, ZERO, ZERO
        if n > table.shape[0]:
            work[W_NEED] = n
            _leave(work, L_ROOM)
        rows = ZERO
        for g in range(n):
            r, start, csize, codec, dictionary, p = _group(tail, p, t - 8, leaves, leaf, phys,
                                                           size, flen, num_rows - rows, work)
            table[g, 0], table[g, 1], table[g, 2], table[g, 3] = r, start, csize, codec
            table[g, 4] = dictionary
            rows += r
        if rows != num_rows:
            _leave(work, L_METADATA)
        return READ, n, phys, max_def
    except Exception:
        return work[W_WHY] if work[W_WHY] != READ else L_METADATA, ZERO, ZERO, ZERO


@kernel(nogil=True)
def chunks(buf, starts, rows, codecs, phys, max_def, width, scratch, dictionary, tallies,
           dense, values, pairs, zpages, first, unpacked, work):
    """Count the length column of column chunks lying back to back in ``buf`` (chunk ``k``:
    ``buf[starts[k]:starts[k + 1]]``, ``rows[k]`` rows, codec ``codecs[k]``; the physical
    type, definition level and width `row_groups` found), decoding no value into an array
    where it can count it: each chunk's dictionary entries that occur go to ``pairs`` with
    their rows (``pairs[0, i]`` a value, ``pairs[1, i]`` its rows); the non-null values of
    PLAIN and DELTA pages are counted in ``dense`` (``dense[v]``: the rows of value ``v``,
    for the values the width holds below ``dense.size``), the others written to ``values``.
    ``tallies`` (zeros, at least ``dictionary.size``) counts a chunk's entries; ``dense``
    must be zeros too, and is left holding the counts. The zstd chunks' pages are in
    ``unpacked``, as `zstd_pages` listed them (``zpages``, ``first``). Returns ``(status,
    values written, pairs written, nulls)``: status READ, or why the chunks are left
    (`L_ROOM`: ``work[W_NEED]`` bytes of page lacked; ``dense`` then holds what was counted
    before)."""
    work[W_WHY] = READ
    work[W_NEED] = 0
    at, npairs, nulls = ZERO, ZERO, ZERO
    if width < 64:  # (every value counted there must fit the width: see `_fits`)
        dense = dense[:min(dense.size, np.int64(1) << (width - 1))]
    try:
        for k in range(rows.size):
            s, e = starts[k], starts[k + 1]
            if s < 0 or e < s or e > buf.size or rows[k] < 0 or rows[k] > values.size - at:
                _leave(work, L_PAGES)
            work[W_BAD] = L_PAGES
            if zpages.shape[0]:
                work[W_PAGE], work[W_PAGES] = first[k], first[k + 1]
            n0, w, ndict = _chunk(buf, s, e, codecs[k], phys, max_def, rows[k], scratch,
                                  dictionary, values, values[:0], at, tallies, dense,
                                  zpages, unpacked, work)
            for j in range(at, at + w):
                if not _fits(values[j], width):
                    _leave(work, L_RANGE)
            at += w
            nulls += n0
            for j in range(ndict):
                if tallies[j]:
                    if not _fits(dictionary[j], width):
                        _leave(work, L_RANGE)
                    if npairs == pairs.shape[1]:
                        _leave(work, L_ROOM)
                    pairs[0, npairs], pairs[1, npairs] = dictionary[j], tallies[j]
                    npairs += 1
                    tallies[j] = 0
        return READ, at, npairs, nulls
    except Exception:
        return work[W_WHY] if work[W_WHY] != READ else L_PAGES, ZERO, ZERO, ZERO


@kernel(nogil=True)
def _frame_size(b, p, hi):
    """The content size the zstd frame ``b[p:hi]`` declares, or -1: not one frame that
    ends exactly at ``hi`` (its blocks walked: so frames laid back to back decompress one
    by one), that declares its size and needs no dictionary. zstd checks what it decodes
    against that size, so a page decompressed without error into a buffer of its size
    filled it."""
    if hi - p < 6 or _u32(b, p) != ZSTD_MAGIC:
        return MISSING
    d = np.int64(b[p + 4])
    flag, single = d >> 6, (d >> 5) & 1
    if d & 8 or d & 3 or (flag == 0 and not single):  # reserved bit; a dictionary; no size
        return MISSING
    q = p + 5 + (1 - single)
    n = 1 if flag == 0 else 2 if flag == 1 else 4 if flag == 2 else 8
    if n > hi - q:
        return MISSING
    v = ZERO
    for k in range(min(n, 7)):
        v |= np.int64(b[q + k]) << (8 * k)
    if n == 8 and b[q + 7]:  # (2**56 bytes or more: no page)
        return MISSING
    q += n
    while True:  # the blocks: a 3-byte header each (last, type, size), then their bytes
        if hi - q < 3:
            return MISSING
        h = np.int64(b[q]) | (np.int64(b[q + 1]) << 8) | (np.int64(b[q + 2]) << 16)
        kind = (h >> 1) & 3
        if kind == 3:
            return MISSING
        q += 3 + (1 if kind == 1 else h >> 3)
        if q > hi:
            return MISSING
        if h & 1:
            break
    q += 4 if d & 4 else 0  # the content checksum
    if q != hi:
        return MISSING
    return v + 256 if n == 2 else v


@kernel(nogil=True)
def zstd_pages(buf, los, his, codecs, zpages, first, work):
    """List the pages of the zstd chunks ``buf[los[k]:his[k]]`` (as `chunks` and `_file`
    take them) for the caller to decompress: row i of ``zpages`` is a page's compressed
    bytes ``buf[zpages[i, 0]:zpages[i, 1]]`` and its size once decompressed (-1: not one
    frame declaring the size its header says, left); ``zpages[i, 3]`` is set to -1 for
    the caller to put where it is decompressed. Chunk k's rows are ``first[k]`` to
    ``first[k + 1]``. Returns ``(rows,)``, or ``(-1,)`` when ``zpages`` lacks room."""
    n = ZERO
    for k in range(codecs.size):
        first[k] = n
        p, hi = los[k], his[k]
        if codecs[k] != ZSTD or p < 0 or hi < p or hi > buf.size:
            continue
        work[W_BAD] = L_PAGES
        while p < hi:
            try:
                ptype, usize, csize, nv, enc, denc, pnulls, prows, dlen, rlen, comp, p = \
                    _page_header(buf, p, hi, work)
            except Exception:  # noqa: BLE001 (`chunks` leaves the chunk there)
                break
            if csize > hi - p:
                break
            body, p = p, p + csize
            if ptype == INDEX_PAGE or not _compressed(ptype, comp):
                continue  # (not decompressed: as `_chunk` takes them)
            lead = dlen if ptype == DATA_PAGE_V2 else 0
            if n == zpages.shape[0]:
                return (MISSING,)
            ok = 0 <= lead <= min(csize, usize)
            zpages[n, 0], zpages[n, 1] = body + lead if ok else body, p
            zpages[n, 2] = usize - lead if ok and \
                _frame_size(buf, body + lead, p) == usize - lead else MISSING
            zpages[n, 3] = MISSING
            n += 1
    first[codecs.size] = n
    return (n,)


@kernel(nogil=True)
def count_files(names, name_at, sizes, flags, buf, second, name, width, scratch, dictionary,
                values, valid, info, work, cap, grow, fold_after, row, st, state):
    """`lengths` for files read one by one and counted as they are decoded: file ``f`` is
    the one named at ``names[name_at[f]:]`` (NUL-terminated), of ``sizes[f]`` bytes, read
    into ``buf`` (file 0 at its start, where it stays: the schema every other must have;
    the others from ``second``), its column decoded into ``values[0:]`` and ``valid`` (a
    file of more rows is left, ``L_ROOM``) and tallied into ``row`` and ``st`` as the CPU
    kernel tallies. ``info[f]`` says why a file was left (or could not be read whole at
    its size: ``L_FOOTER``).

    From file ``state[0]``; ``grow`` and ``fold_after`` as in
    `gpu_profiler.kernels.streams.count_streams` (a file is decoded again after the call
    stops before it).

    Returns:
        ``(COUNT_DONE, COUNT_WIDEN or COUNT_FOLD,)``.
    """
    top = np.uint64(cap + 1)
    taken = ZERO
    while state[0] < sizes.size:
        f = state[0]
        s = ZERO if f == 0 else second
        for k in range(NINFO):
            info[f, k] = 0
        work[W_WHY] = READ
        work[W_NEED] = 0
        if not read_file(names, name_at[f], flags, buf[s:], sizes[f]):
            info[f, I_STATUS] = L_FOOTER
            state[0] += 1
            continue
        try:
            rows, nulls = _file(buf, s, sizes[f], f, name, width, scratch, dictionary, values,
                                valid, ZERO, info, info[:0], values[:0], scratch[:0], ZERO,
                                work)
        except Exception:  # noqa: BLE001 (the file is left: pyarrow says what is wrong)
            info[f, I_STATUS] = work[W_WHY] if work[W_WHY] != READ else L_METADATA
            info[f, I_NEED] = work[W_NEED]
            state[0] += 1
            continue
        info[f, I_ROWS] = rows
        info[f, I_NULLS] = nulls
        if grow:
            most = MISSING
            for j in range(rows):
                if valid[j] and values[j] > most:
                    most = values[j]
            if most > cap:
                state[1] = most
                return (COUNT_WIDEN,)
        if taken and taken + rows > fold_after:
            return (COUNT_FOLD,)
        taken += rows
        if nulls:
            for j in range(rows):
                if valid[j]:
                    tally(values[j], top, row, st)
                else:
                    st[NULLS] += 1
        else:
            tally_span(values, 0, rows, False, top, row, st)
        state[0] += 1
    return (COUNT_DONE,)
