"""Arrow IPC metadata, parsed in numba: a bounds-checked flatbuffer table reader and the
few Arrow tables a length scan needs (Message, RecordBatch, DictionaryBatch, Schema,
Footer), plus the kernels that gather the length column's bytes out of file bytes.

Every read is checked against the bytes it parses, so hostile metadata raises
:class:`Corrupt` instead of reading out of bounds; every loop is bounded by the input size,
so nothing can hang. Positions inside a message are relative to its flatbuffer; the
``state`` array tells the caller which message was being parsed. The constants named here
are in `gpu_profiler.kernels.ipc_format`; readers call these through
`gpu_profiler.readers.ipc.metadata`, natively compiled (`gpu_profiler.native`).
See https://arrow.apache.org/docs/format/Columnar.html#serialization-and-interprocess-communication-ipc
"""

from __future__ import annotations

import numpy as np
from numba import njit

from gpu_profiler.kernels.ipc_format import (
    DICTIONARY_BATCH,
    E_BODY,
    E_BOUNDS,
    E_BUFFERS,
    E_CODEC,
    E_FRAME,
    E_HEADER,
    E_NODES,
    E_TRUNC,
    E_VERSION,
    E_VTABLE,
    END,
    FULL,
    L_BUF,
    L_BUFS,
    L_DICT,
    L_NODE,
    L_NODES,
    L_VIEWS,
    L_VTOTAL,
    NEED_MORE,
    R_BODY,
    R_BODYLEN,
    R_CHILD,
    R_CODEC,
    R_DELTA,
    R_DICT,
    R_DLEN,
    R_DOFF,
    R_LEN,
    R_MSG,
    R_NULLS,
    R_ROWS,
    R_TYPE,
    R_VLEN,
    R_VOFF,
    RECORD_BATCH,
    SCHEMA,
    Corrupt,
)


@njit(cache=True)
def _chk(b, p, n):
    if p < 0 or n < 0 or p > b.size - n:
        raise Corrupt(p, E_BOUNDS)


# Unchecked little-endian reads: only ever called on positions already checked to lie in
# ``b`` (a whole table or vector at a time). Being unable to raise, they inline.

@njit(cache=True)
def _u8(b, p):
    return np.int64(b[p])


@njit(cache=True)
def _u16(b, p):
    return np.int64(b[p]) | (np.int64(b[p + 1]) << 8)


@njit(cache=True)
def _u32(b, p):
    return (np.int64(b[p]) | (np.int64(b[p + 1]) << 8) | (np.int64(b[p + 2]) << 16)
            | (np.int64(b[p + 3]) << 24))


@njit(cache=True)
def _i32(b, p):
    v = _u32(b, p)
    return v - (np.int64(1) << 32) if v >= (np.int64(1) << 31) else v


@njit(cache=True)
def _i64(b, p):
    return _u32(b, p) | (_i32(b, p + 4) << 32)


@njit(cache=True)
def _vtable(b, t):
    """Position of table ``t``'s vtable, after checking that the vtable lies inside ``b``
    (as flatbuffers' verifier does: the table's stated inline size is not checked, each
    field read is, by `_field`)."""
    if t < 0 or t > b.size - 4:
        raise Corrupt(t, E_BOUNDS)
    vt = t - _i32(b, t)
    if vt < 0 or vt > b.size - 4:
        raise Corrupt(t, E_BOUNDS)
    size = _u16(b, vt)
    if size < 4 or size % 2 or vt > b.size - size:
        raise Corrupt(vt, E_VTABLE)
    return vt


@njit(cache=True)
def _field(b, t, vt, i, size):
    """Position of field ``i`` (``size`` bytes) of table ``t``, or -1 when the field is
    absent; a field whose bytes run past ``b`` is corrupt."""
    o = 4 + 2 * i
    if o + 2 > _u16(b, vt):
        return -1
    f = _u16(b, vt + o)
    if f == 0:
        return -1
    if t + f > b.size - size:
        raise Corrupt(t, E_BOUNDS)
    return t + f


@njit(cache=True)
def _get64(b, t, vt, i, default):
    f = _field(b, t, vt, i, 8)
    return default if f < 0 else _i64(b, f)


@njit(cache=True)
def _get16(b, t, vt, i, default):
    f = _field(b, t, vt, i, 2)
    return default if f < 0 else _u16(b, f)


@njit(cache=True)
def _get8(b, t, vt, i, default):
    f = _field(b, t, vt, i, 1)
    return default if f < 0 else _u8(b, f)


@njit(cache=True)
def _ref(b, t, vt, i):
    """Position of the table/vector that field ``i`` points to (unchecked), or -1."""
    f = _field(b, t, vt, i, 4)
    return -1 if f < 0 else f + _u32(b, f)


@njit(cache=True)
def _vector(b, t, vt, i, size):
    """``(start, count)`` of the vector in field ``i`` (``(0, 0)`` when absent), its
    elements checked to lie inside ``b``."""
    v = _ref(b, t, vt, i)
    if v < 0:
        return np.int64(0), np.int64(0)
    if v > b.size - 4:
        raise Corrupt(v, E_BOUNDS)
    n = _u32(b, v)
    if n * size > b.size - 4 - v:
        raise Corrupt(v, E_BOUNDS)
    return v + 4, n


@njit(cache=True)
def _root(b):
    _chk(b, 0, 4)
    t = _u32(b, 0)
    return t, _vtable(b, t)


@njit(cache=True)
def _record_batch(b, t, rec, node, buf, nodes, bufs, views, vtotal):
    """Fill ``rec`` from RecordBatch table ``t``: row count, compression, and the FieldNode
    ``node`` with its buffers ``buf`` (validity) and ``buf + 1`` (values or offsets).
    ``views`` of the schema's ``vtotal`` view-typed fields precede the node: their variadic
    buffer counts shift the buffer index."""
    vt = _vtable(b, t)
    rec[R_ROWS] = _get64(b, t, vt, 0, 0)
    ns, nn = _vector(b, t, vt, 1, 16)
    bs, nb = _vector(b, t, vt, 2, 16)
    vs, nv = _vector(b, t, vt, 4, 8)
    before = np.int64(0)
    total = np.int64(0)
    for i in range(nv):
        c = _i64(b, vs + 8 * i)
        if c < 0 or c > nb:
            raise Corrupt(vs + 8 * i, E_BUFFERS)
        total += c
        if i < views:
            before += c
    if nn != nodes:
        raise Corrupt(ns - 4, E_NODES)
    if nv != vtotal or nb != bufs + total or buf + before + 2 > nb:
        raise Corrupt(bs - 4, E_BUFFERS)
    if node >= nn:
        raise Corrupt(ns - 4, E_NODES)
    rec[R_LEN] = _i64(b, ns + 16 * node)
    rec[R_NULLS] = _i64(b, ns + 16 * node + 8)
    # the next node: a list column's child (its length bounds the list's offsets)
    rec[R_CHILD] = _i64(b, ns + 16 * (node + 1)) if node + 1 < nn else -1
    p = bs + 16 * (buf + before)
    rec[R_VOFF] = _i64(b, p)
    rec[R_VLEN] = _i64(b, p + 8)
    rec[R_DOFF] = _i64(b, p + 16)
    rec[R_DLEN] = _i64(b, p + 24)
    rec[R_CODEC] = -1
    c = _ref(b, t, vt, 3)
    if c >= 0:
        cvt = _vtable(b, c)
        codec = _get8(b, c, cvt, 0, 0)
        if codec > 1 or _get8(b, c, cvt, 1, 0) != 0:
            raise Corrupt(c, E_CODEC)
        rec[R_CODEC] = codec


@njit(cache=True)
def _message(b, rec, layout):
    """Parse one Message flatbuffer ``b`` into ``rec`` (header type, body length, and the
    length column's node and buffers for record batches and matching dictionary batches)."""
    t, vt = _root(b)
    version = _get16(b, t, vt, 0, 0)
    if version < 3 or version > 4:
        raise Corrupt(0, E_VERSION)
    kind = _get8(b, t, vt, 1, 0)
    h = _ref(b, t, vt, 2)
    body = _get64(b, t, vt, 3, 0)
    if body < 0:
        raise Corrupt(0, E_BODY)
    rec[R_TYPE] = kind
    rec[R_BODYLEN] = body
    rec[R_DICT] = -1
    rec[R_DELTA] = 0
    if kind == RECORD_BATCH and h >= 0:
        _record_batch(b, h, rec, layout[L_NODE], layout[L_BUF], layout[L_NODES],
                      layout[L_BUFS], layout[L_VIEWS], layout[L_VTOTAL])
    elif kind == DICTIONARY_BATCH and h >= 0:
        hvt = _vtable(b, h)
        rec[R_DICT] = _get64(b, h, hvt, 0, 0)
        rec[R_DELTA] = _get8(b, h, hvt, 2, 0)
        data = _ref(b, h, hvt, 1)
        if rec[R_DICT] == layout[L_DICT] and layout[L_DICT] >= 0:
            if data < 0:
                raise Corrupt(h, E_HEADER)
            _record_batch(b, data, rec, 0, 0, 1, 2, 0, 0)
    else:
        raise Corrupt(0, E_HEADER)


@njit(cache=True, nogil=True)
def frame(b, p):
    """``(prefix, metadata length)`` of the message framed at ``p``: a 0xFFFFFFFF
    continuation marker and an int32 length, or the legacy bare int32 length. The length is
    0 at end of stream and -1 when ``b`` holds too few bytes to tell."""
    if p < 0:
        raise Corrupt(p, E_BOUNDS)
    if p + 4 > b.size:
        return np.int64(0), np.int64(-1)
    w = _i32(b, p)
    if w != -1:
        if w < 0:
            raise Corrupt(p, E_FRAME)
        return np.int64(4), w
    if p + 8 > b.size:
        return np.int64(0), np.int64(-1)
    m = _i32(b, p + 4)
    if m < 0:
        raise Corrupt(p + 4, E_FRAME)
    return np.int64(8), m


@njit(cache=True, inline="always")
def _same(b, w, a, c, m):
    """Whether ``b[a:a + m] == b[c:c + m]``; ``w`` is ``b`` viewed as uint64 words."""
    if (a | c | m) & 7 == 0:
        for i in range(m >> 3):
            if w[(a >> 3) + i] != w[(c >> 3) + i]:
                return False
        return True
    for i in range(m):
        if b[a + i] != b[c + i]:
            return False
    return True


@njit(cache=True, inline="always")
def _words(b):
    return b[:b.size - b.size % 8].view(np.uint64)


@njit(cache=True)
def _parse(b, w, at, m, last, last_m, out, k, layout):
    """Parse the ``m`` metadata bytes at ``at`` into ``out[k]``, or copy ``out[k - 1]`` when
    they repeat the previous message's (``last_m`` bytes at ``last``) byte for byte."""
    if m == last_m and _same(b, w, at, last, m):
        for c in range(out.shape[1]):  # (a slice copy would allocate: same array)
            out[k, c] = out[k - 1, c]
    else:
        _message(b[at:at + m], out[k], layout)


@njit(cache=True, nogil=True)
def walk(b, start, limit, out, layout, state):
    """Parse the consecutive framed messages of a stream held in ``b``, from ``start``;
    ``limit`` is the end of the file relative to ``b``.

    Stops at end of stream, when ``out`` is full, or when the next message's framing or
    metadata is not entirely inside ``b`` (its body may run past ``b``: only metadata is
    parsed). Record positions are relative to ``b``. ``state[0]`` is the position of the
    message being parsed; on ``NEED_MORE`` ``state[1]`` is how many bytes from the returned
    position are needed at least.

    A message whose metadata repeats the previous one's byte for byte (all the full batches
    of a typical file) is not parsed again: its record is a copy.

    Returns:
        ``(messages parsed, position of the next message, NEED_MORE | END | FULL)``.
    """
    w = _words(b)
    p = np.int64(start)
    k = 0
    last, last_m = np.int64(-1), np.int64(-1)
    while k < out.shape[0]:
        state[0] = p
        pre, m = frame(b, p)
        if m < 0 or p + pre + m > b.size:
            state[1] = 8 if m < 0 else pre + m
            return k, p, NEED_MORE
        if m == 0:
            return k, p + pre, END
        rec = out[k]
        _parse(b, w, p + pre, m, last, last_m, out, k, layout)
        last, last_m = p + pre, m
        if rec[R_BODYLEN] > limit - (p + pre + m):
            raise Corrupt(p, E_TRUNC)
        rec[R_MSG] = p
        rec[R_BODY] = p + pre + m
        p = p + pre + m + rec[R_BODYLEN]
        k += 1
    return k, p, FULL


@njit(cache=True, nogil=True)
def walk_streams(b, starts, ends, schema, out, owner, layout, state, left):
    """`walk` over many whole streams at once: stream ``i`` is ``b[starts[i]:ends[i]]``;
    each must open with ``schema`` (the first stream's framed schema message and its body)
    byte for byte. A stream that does not, that ends inside a message, or whose metadata is
    corrupt is *left* (``left[i] = 1``): its own reader then reads it or says why.

    Goes on from stream ``state[0]``, at position ``state[1]`` in it (-1: its start), and
    stops when every stream is walked (``state[0] == starts.size``) or ``out`` is full;
    ``state[2:4]`` is `walk`'s state.
    Record positions are relative to ``b``; ``owner[k]`` is the stream of record ``k``
    (records of a stream left later still come out: the caller drops them by ``owner``).

    Returns:
        ``(records written,)``.
    """
    sub = state[2:4]
    n = schema.size
    k = 0
    while state[0] < starts.size and k < out.shape[0]:
        i = state[0]
        s, e = starts[i], ends[i]
        f = b[s:e]
        p = state[1]
        state[1] = -1
        if p < 0:
            p = n
            if f.size < n:
                left[i] = 1
            else:
                for j in range(n):
                    if f[j] != schema[j]:
                        left[i] = 1
                        break
        if left[i]:
            state[0] += 1
            continue
        try:
            got, nxt, status = walk(f, p, f.size, out[k:], layout, sub)
        except Exception:  # noqa: BLE001 (a Corrupt: this stream's reader will say it)
            left[i] = 1
            state[0] += 1
            continue
        for j in range(k, k + got):
            out[j, R_MSG] += s
            out[j, R_BODY] += s
            owner[j] = i
        k += got
        if status == FULL:
            state[1] = nxt
        else:
            if status == NEED_MORE and nxt != f.size:
                left[i] = 1  # it ends inside a message
            state[0] += 1
    return (k,)


@njit(cache=True, nogil=True)
def walk_files(b, starts, ends, schema, out, owner, blocks, layout, state, left):
    """`walk_streams` for whole IPC *files*: file ``i`` is ``b[starts[i]:ends[i]]``. It must
    open with the ARROW1 magic and ``schema`` (the first file's framed schema message and
    its body, at byte 8) byte for byte and end with a footer and the magic; its record
    batches are its footer's Blocks, each between the schema and the footer, its message a
    record batch of the Block's body length, parsed as `parse_at` parses them (the reads
    the selective reader makes of one file). A file that does not, that has dictionary
    batches or more Blocks than ``blocks`` (scratch rows) or ``out`` holds, or whose
    metadata is corrupt is *left* (``left[i] = 1``): its own reader then reads it or says
    why.

    Goes on from file ``state[0]``, and stops when every file is walked or the next file's
    records do not fit in what is left of ``out``. Record positions are relative to ``b``;
    ``owner[k]`` is the file of record ``k``.

    Returns:
        ``(records written,)``.
    """
    k = 0
    while state[0] < starts.size:
        i = state[0]
        f = b[starts[i]:ends[i]]
        got = _file_records(f, schema, out[k:], blocks, layout)
        if got > out.shape[0] - k:  # it fits in a call of its own
            if k > 0:
                return (k,)
            got = -1
        if got < 0:
            left[i] = 1
        else:
            for j in range(k, k + got):
                out[j, R_MSG] += starts[i]
                out[j, R_BODY] += starts[i]
                owner[j] = i
            k += got
        state[0] += 1
    return (k,)


@njit(cache=True)
def _file_records(f, schema, out, blocks, layout):
    """The record batches of the whole IPC file ``f`` parsed into ``out`` (see
    `walk_files`): how many, more than ``out`` holds (nothing parsed), or -1 to leave it."""
    n = schema.size
    size = f.size
    if size < 8 + n + 10 or not _arrow1(f, 0) or not _arrow1(f, size - 6):
        return -1
    for j in range(n):
        if f[8 + j] != schema[j]:
            return -1
    flen = np.int64(_i32(f, size - 10))
    fstart = size - 10 - flen
    if flen <= 0 or fstart < 8 + n:
        return -1
    try:
        nd, nr = footer_blocks(f[fstart:fstart + flen], blocks)
    except Exception:  # noqa: BLE001 (a Corrupt footer: its own reader says it)
        nd, nr = np.int64(1), np.int64(0)
    if nd > 0:
        return -1
    if nr > out.shape[0]:
        return nr
    try:
        ok = _blocks_parsed(f, blocks[:nr], n, fstart, out, layout)
    except Exception:  # noqa: BLE001 (a Corrupt message)
        ok = False
    return nr if ok else -1


@njit(cache=True)
def _blocks_parsed(f, blocks, n, fstart, out, layout):
    """Whether every record-batch Block of the file ``f`` lies between its schema message
    (``n`` bytes from byte 8) and its footer (at ``fstart``) and holds a record batch of
    its body length, parsed into ``out`` as `parse_at` parses them."""
    w = _words(f)
    last, last_m = np.int64(-1), np.int64(-1)
    for j in range(blocks.shape[0]):
        off, meta, body = blocks[j, 0], blocks[j, 1], blocks[j, 2]
        if off < 8 + n or meta <= 0 or body < 0 or meta > fstart or body > fstart \
                or off > fstart - meta - body:
            return False
        pre, m = frame(f, off)
        if m <= 0 or pre + m != meta:
            return False
        _parse(f, w, off + pre, m, last, last_m, out, j, layout)
        last, last_m = off + pre, m
        if out[j, R_TYPE] != RECORD_BATCH or out[j, R_BODYLEN] != body:
            return False
        out[j, R_MSG] = off
        out[j, R_BODY] = off + meta
    return True


@njit(cache=True, inline="always")
def _arrow1(f, p):
    """Whether ``f`` holds the ARROW1 magic at ``p``."""
    return f[p] == 65 and f[p + 1] == 82 and f[p + 2] == 82 and f[p + 3] == 79 \
        and f[p + 4] == 87 and f[p + 5] == 49


@njit(cache=True, nogil=True)
def parse_at(b, starts, meta_lens, out, layout, state):
    """Parse the messages at ``starts`` in ``b`` (the file format's Blocks: each message's
    framing plus metadata is ``meta_lens`` bytes and its body follows); repeated metadata
    is copied, as in `walk`."""
    w = _words(b)
    last, last_m = np.int64(-1), np.int64(-1)
    for k in range(starts.size):
        p = starts[k]
        state[0] = p
        pre, m = frame(b, p)
        if m <= 0 or pre + m != meta_lens[k]:
            raise Corrupt(p, E_FRAME)
        _chk(b, p, pre + m)
        rec = out[k]
        _parse(b, w, p + pre, m, last, last_m, out, k, layout)
        last, last_m = p + pre, m
        rec[R_MSG] = p
        rec[R_BODY] = p + pre + m


@njit(cache=True, nogil=True)
def schema_info(b, field):
    """``(big endian?, number of fields, dictionary id of top-level ``field`` or -1, body
    length)`` from a Schema Message flatbuffer."""
    t, vt = _root(b)
    version = _get16(b, t, vt, 0, 0)
    if version < 3 or version > 4:
        raise Corrupt(0, E_VERSION)
    body = _get64(b, t, vt, 3, 0)
    if body < 0:
        raise Corrupt(0, E_BODY)
    h = _ref(b, t, vt, 2)
    if _get8(b, t, vt, 1, 0) != SCHEMA or h < 0:
        raise Corrupt(0, E_HEADER)
    hvt = _vtable(b, h)
    big = _get16(b, h, hvt, 0, 0) != 0
    fs, nf = _vector(b, h, hvt, 1, 4)
    dict_id = np.int64(-1)
    if 0 <= field < nf:
        f = fs + 4 * field + _u32(b, fs + 4 * field)
        fvt = _vtable(b, f)
        d = _ref(b, f, fvt, 4)
        if d >= 0:
            dict_id = _get64(b, d, _vtable(b, d), 0, 0)
    return big, nf, dict_id, body


@njit(cache=True, nogil=True)
def footer_blocks(b, out):
    """Write the file footer's dictionary Blocks, then its record-batch Blocks, to ``out``
    as rows ``(offset, metadata length, body length)``; returns how many of each."""
    t, vt = _root(b)
    ds, nd = _vector(b, t, vt, 2, 24)
    rs, nr = _vector(b, t, vt, 3, 24)
    if nd + nr > out.shape[0]:
        raise Corrupt(0, E_BOUNDS)
    for k in range(nd + nr):
        p = ds + 24 * k if k < nd else rs + 24 * (k - nd)
        out[k, 0] = _i64(b, p)
        out[k, 1] = _i32(b, p + 8)
        out[k, 2] = _i64(b, p + 16)
    return nd, nr


@njit(cache=True, inline="always")
def _refused(r, w, extra):
    """Index in `CHECKS` of the first check record ``r`` fails, -1 if none."""
    rows, nulls, body = r[R_LEN], r[R_NULLS], r[R_BODYLEN]
    voff, vlen, doff, dlen = r[R_VOFF], r[R_VLEN], r[R_DOFF], r[R_DLEN]
    plain = r[R_CODEC] < 0
    if rows < 0 or rows != r[R_ROWS]:
        return 0
    if nulls < 0 or nulls > rows:
        return 1
    if voff < 0 or vlen < 0 or doff < 0 or dlen < 0:
        return 2
    if voff > body - vlen or doff > body - dlen:
        return 3
    # (written so that no count a file claims can overflow them: rows may be 2**63 - 1)
    if plain and rows > 0 and dlen // w - extra < rows:
        return 4
    if plain and nulls > 0 and vlen < rows // 8 + (rows % 8 > 0):
        return 5
    if not plain and ((rows > 0 and dlen < 8) or (nulls > 0 and vlen < 8)):
        return 6
    return -1


@njit(cache=True, nogil=True)
def check(recs, dict_id, offsets, item_w, dict_w, out):
    """Validate the parsed records whose buffers are needed (record batches, and the
    dictionary batches of dictionary ``dict_id``) against their message bodies, and write
    each record's needed byte ranges to ``out[k] = (validity lo, hi, data lo, hi)``
    (empty where nothing is needed). Element widths: ``item_w`` for record batches,
    ``dict_w`` for dictionary values; list ``offsets`` hold one more entry than rows.

    Returns ``(index of the first refused record, index in CHECKS)``, or ``(-1, -1)``.
    """
    for k in range(recs.shape[0]):
        r = recs[k]
        out[k, :] = 0
        batch = r[R_TYPE] == RECORD_BATCH
        if not batch and not (r[R_TYPE] == DICTIONARY_BATCH and dict_id >= 0
                              and r[R_DICT] == dict_id):
            continue
        w = item_w if batch else dict_w
        extra = 1 if batch and offsets else 0
        why = _refused(r, w, extra)
        if why >= 0:
            return k, why
        rows, nulls, plain = r[R_LEN], r[R_NULLS], r[R_CODEC] < 0
        out[k, 0] = r[R_BODY] + r[R_VOFF]
        if nulls > 0:
            out[k, 1] = out[k, 0] + ((rows + 7) // 8 if plain else r[R_VLEN])
        else:
            out[k, 1] = out[k, 0]
        out[k, 2] = r[R_BODY] + r[R_DOFF]
        need = (min(rows, r[R_DLEN]) + extra) * w if plain else r[R_DLEN]
        out[k, 3] = out[k, 2] + (need if rows > 0 else 0)
    return -1, -1


@njit(cache=True, nogil=True)
def gather(src, src_pos, counts, dst, dst_pos):
    """Copy ``src[src_pos[i]:+counts[i]]`` to ``dst[dst_pos[i]:]`` for every i."""
    for i in range(src_pos.size):
        s = src_pos[i]
        d = dst_pos[i]
        n = counts[i]
        for j in range(n):  # (a slice copy would allocate a temporary)
            dst[d + j] = src[s + j]


@njit(cache=True, nogil=True)
def unpack_validity(src, src_pos, rows, dst, dst_row):
    """Expand little-endian validity bitmaps (bit offset 0) into bools at ``dst_row``."""
    for i in range(src_pos.size):
        s = src_pos[i]
        d = dst_row[i]
        for j in range(rows[i]):
            dst[d + j] = (src[s + (j >> 3)] >> (j & 7)) & 1


@njit(cache=True, nogil=True)
def offset_lengths(offsets, starts, rows, dst, dst_row):
    """Lengths ``offsets[s+j+1] - offsets[s+j]`` (int64) of every batch's list offsets.
    (Serial: readers run in a background thread, and numba's workqueue threading layer
    must not run two parallel kernels at once.)"""
    for i in range(starts.size):
        s = starts[i]
        d = dst_row[i]
        for j in range(rows[i]):
            dst[d + j] = np.int64(offsets[s + j + 1]) - np.int64(offsets[s + j])
