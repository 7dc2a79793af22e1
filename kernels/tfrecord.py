"""TensorBoard event files in numba: the TFRecord framing with both CRC32Cs checked, and the
scalar summaries of each event decoded by a strict protobuf walk (`gpu_profiler.losslog`
calls it through `gpu_profiler.native`).

A record is ``uint64 length, uint32 masked CRC32C(length), data, uint32 masked
CRC32C(data)``, little-endian. The CRC is table-driven, 8 bytes a step (slicing-by-8).

The walk decodes what TensorBoard's writers put in an event (``Event.step``,
``Event.wall_time``, ``Event.summary.value[]`` with its ``tag``, ``metadata`` and a
``simple_value`` or a ``tensor`` of ``dtype``, ``tensor_shape``, ``float_val``,
``double_val``, ``tensor_content``) and nothing else: an event holding any other field
beside a summary, a string that is not ASCII, a value of another kind (an image, a
histogram), a field twice where protobuf would merge it, or any encoding it is not sure
protobuf reads the same way, is handed back whole (`FALLBACK`) for tensorboard's own
protobuf classes to decode. An event with no summary yields nothing, as protobuf would
make of it. So every value it does decode is the value protobuf decodes.

Every read is bounds-checked against the record, every loop is bounded by the bytes, and
nothing is allocated: hostile bytes give `CORRUPT` (a CRC that does not match) or a record
handed back, never a read out of bounds.
"""

from __future__ import annotations

import numpy as np

from gpu_profiler.kernels.jit import kernel
from gpu_profiler.kernels.tfrecord_format import (
    CORRUPT,
    DONE,
    F16,
    F32,
    F64,
    FALLBACK,
    NONE,
    ROOM,
    S_REBUILD,
    S_STORE,
    S_TAGS,
    TAGS,
)

_POLY = 0x82F63B78  # CRC-32C (Castagnoli), reflected


def _crc_tables() -> np.ndarray:
    t = np.zeros((8, 256), np.uint32)
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ (_POLY if c & 1 else 0)
        t[0, i] = c
    for k in range(1, 8):
        for i in range(256):
            c = int(t[k - 1, i])
            t[k, i] = (c >> 8) ^ int(t[0, c & 0xFF])
    return t


_T = _crc_tables()
_M32 = 0xFFFFFFFF
_FNV_OFFSET, _FNV_PRIME = np.uint64(0xCBF29CE484222325), np.uint64(0x100000001B3)


@kernel
def crc32c(b, p, n):
    """The CRC32C of ``b[p:p + n]`` (the caller checked the bounds)."""
    t = _T
    crc = np.int64(_M32)
    while n >= 8:
        crc ^= (np.int64(b[p]) | (np.int64(b[p + 1]) << 8) | (np.int64(b[p + 2]) << 16)
                | (np.int64(b[p + 3]) << 24))
        crc = (np.int64(t[7, crc & 0xFF]) ^ np.int64(t[6, (crc >> 8) & 0xFF])
               ^ np.int64(t[5, (crc >> 16) & 0xFF]) ^ np.int64(t[4, crc >> 24])
               ^ np.int64(t[3, b[p + 4]]) ^ np.int64(t[2, b[p + 5]])
               ^ np.int64(t[1, b[p + 6]]) ^ np.int64(t[0, b[p + 7]]))
        p += 8
        n -= 8
    while n > 0:
        crc = np.int64(t[0, (crc ^ np.int64(b[p])) & 0xFF]) ^ (crc >> 8)
        p += 1
        n -= 1
    return crc ^ _M32


@kernel
def masked_crc32c(b, p, n):
    """TFRecord's masked CRC32C of ``b[p:p + n]``."""
    c = crc32c(b, p, n)
    return ((((c >> 15) | (c << 17)) & _M32) + 0xA282EAD8) & _M32


@kernel
def _u32(b, p):
    return (np.int64(b[p]) | (np.int64(b[p + 1]) << 8) | (np.int64(b[p + 2]) << 16)
            | (np.int64(b[p + 3]) << 24))


@kernel
def _varint(b, p, end):
    """``(value, next)``: the varint at ``p`` as a uint64 in an int64 (two's complement),
    and where it ends; next = -1 when it runs past ``end``, or takes ten bytes whose last
    is above 1 (which protobuf may read otherwise: the record is handed back)."""
    v = np.uint64(0)
    shift = np.uint64(0)
    for i in range(10):
        if p >= end:
            return np.int64(0), np.int64(-1)
        c = b[p]
        p += 1
        if i == 9 and c > 1:
            return np.int64(0), np.int64(-1)
        v |= np.uint64(c & 0x7F) << shift
        if c < 0x80:
            return np.int64(v), np.int64(p)
        shift += np.uint64(7)
    return np.int64(0), np.int64(-1)


@kernel
def _length(b, p, end):
    """``(start, stop)`` of the length-delimited field whose length is at ``p``; -1, -1 when
    it does not fit in ``end``."""
    n, q = _varint(b, p, end)
    if q < 0 or n < 0 or n > end - q:
        return np.int64(-1), np.int64(-1)
    return q, q + n


@kernel
def _ascii(b, p, q):
    """Whether ``b[p:q]`` is ASCII (valid UTF-8 that protobuf decodes to the same string)."""
    bad = np.uint8(0)
    for i in range(p, q):
        bad |= b[i]
    return bad < 0x80


@kernel
def _key(b, p, end):
    """``(field, wire type, next)`` of the field key at ``p``; next = -1 when it is not one
    this walk knows protobuf reads the same way."""
    k, q = _varint(b, p, end)
    if q < 0 or k < 8 or k > _M32:
        return np.int64(0), np.int64(0), np.int64(-1)
    return k >> 3, k & 7, q


@kernel
def _plain_field(b, f, w, p, end, varints, texts, blobs):
    """Where the field ``f`` of wire type ``w`` whose payload starts at ``p`` ends, when it
    is a varint field (its number a bit of the mask ``varints``), an ASCII string
    (``texts``) or bytes (``blobs``); -1 when it is none of them."""
    bit = np.int64(1) << f if f < 63 else np.int64(0)
    if w == 0 and varints & bit:
        return _varint(b, p, end)[1]
    if w == 2 and (texts | blobs) & bit:
        s, e = _length(b, p, end)
        if s < 0 or (texts & bit and not _ascii(b, s, e)):
            return np.int64(-1)
        return e
    return np.int64(-1)


@kernel
def _plain(b, p, end, varints, texts, blobs):
    """Whether ``b[p:end]`` is a message of `_plain_field` fields only."""
    while p < end:
        f, w, p = _key(b, p, end)
        if p < 0:
            return False
        p = _plain_field(b, f, w, p, end, varints, texts, blobs)
        if p < 0:
            return False
    return True


@kernel
def _message(b, p, end, varints, texts, field, sub_varints, sub_texts, sub_blobs):
    """Whether ``b[p:end]`` is a message of `_plain_field` fields (by ``varints`` and
    ``texts``) and, in field ``field``, messages that are `_plain` by the ``sub_`` masks:
    a SummaryMetadata (plugin_data {plugin_name, content}, display_name,
    summary_description, data_class) or a TensorShapeProto (dim {size, name},
    unknown_rank), which protobuf reads as this walk does."""
    while p < end:
        f, w, p = _key(b, p, end)
        if p < 0:
            return False
        if f == field and w == 2:
            s, p = _length(b, p, end)
            if s < 0 or not _plain(b, s, p, sub_varints, sub_texts, sub_blobs):
                return False
        else:
            p = _plain_field(b, f, w, p, end, varints, texts, np.int64(0))
            if p < 0:
                return False
    return True


@kernel
def _tensor(b, p, end):
    """``(kind, bits, ok)`` of a TensorProto in ``b[p:end]``: its first ``float_val``, else
    its first ``double_val``, else its ``tensor_content`` when that is one float32,
    float64 or float16 of its ``dtype``; ok is False for a tensor this walk does not read
    as protobuf would (another field, a field protobuf would reject)."""
    dtype = np.int64(0)
    content, content_n = np.int64(-1), np.int64(0)
    kind_f, bits_f = NONE, np.int64(0)
    kind_d, bits_d = NONE, np.int64(0)
    while p < end:
        f, w, p = _key(b, p, end)
        if p < 0:
            return NONE, np.int64(0), False
        if f == 1 and w == 0:
            dtype, p = _varint(b, p, end)
        elif f == 3 and w == 0:
            _, p = _varint(b, p, end)
        elif f == 2 and w == 2:
            s, e = _length(b, p, end)
            if s < 0 or not _message(b, s, e, 1 << 3, 0, 2, 1 << 1, 1 << 2, 0):  # its shape
                return NONE, np.int64(0), False
            p = e
        elif f == 4 and w == 2:
            s, e = _length(b, p, end)
            if s < 0:
                return NONE, np.int64(0), False
            content, content_n = s, e - s
            p = e
        elif f == 5 and w == 5:  # float_val, one unpacked
            if end - p < 4:
                return NONE, np.int64(0), False
            if kind_f == NONE:
                kind_f, bits_f = F32, _u32(b, p)
            p += 4
        elif f == 5 and w == 2:  # float_val, packed
            s, e = _length(b, p, end)
            if s < 0 or (e - s) % 4:
                return NONE, np.int64(0), False
            if kind_f == NONE and e > s:
                kind_f, bits_f = F32, _u32(b, s)
            p = e
        elif f == 6 and w == 1:  # double_val, one unpacked
            if end - p < 8:
                return NONE, np.int64(0), False
            if kind_d == NONE:
                kind_d, bits_d = F64, _u32(b, p) | (_u32(b, p + 4) << 32)
            p += 8
        elif f == 6 and w == 2:  # double_val, packed
            s, e = _length(b, p, end)
            if s < 0 or (e - s) % 8:
                return NONE, np.int64(0), False
            if kind_d == NONE and e > s:
                kind_d, bits_d = F64, _u32(b, s) | (_u32(b, s + 4) << 32)
            p = e
        else:
            return NONE, np.int64(0), False
        if p < 0:
            return NONE, np.int64(0), False
    if kind_f != NONE:
        return kind_f, bits_f, True
    if kind_d != NONE:
        return kind_d, bits_d, True
    dt = dtype & _M32  # an enum: protobuf keeps the low 32 bits
    if content >= 0:
        if dt == 1 and content_n == 4:
            return F32, _u32(b, content), True
        if dt == 2 and content_n == 8:
            return F64, _u32(b, content) | (_u32(b, content + 4) << 32), True
        if dt == 19 and content_n == 2:
            return F16, np.int64(b[content]) | (np.int64(b[content + 1]) << 8), True
    return NONE, np.int64(0), True


@kernel
def _value(b, p, end, at, steps, bits, ids, kinds):
    """Decode the Summary.Value in ``b[p:end]`` into slot ``at`` (its tag's place in
    ``steps`` and its length in ``ids``, until the record is accepted); False when it is
    not one this walk reads as protobuf would."""
    tag, tag_n = np.int64(0), np.int64(0)
    kind, x = NONE, np.int64(0)
    members = 0
    while p < end:
        f, w, p = _key(b, p, end)
        if p < 0:
            return False
        if w == 2 and (f == 1 or f == 7 or f == 9 or f == 8):
            s, e = _length(b, p, end)
            if s < 0:
                return False
            if f == 1 or f == 7:  # tag, node_name
                if not _ascii(b, s, e):
                    return False
                if f == 1:
                    tag, tag_n = s, e - s
            elif f == 9:
                if not _message(b, s, e, 1 << 4, 1 << 2 | 1 << 3, 1, 0, 1 << 1, 1 << 2):
                    return False
            else:
                members += 1
                kind, x, ok = _tensor(b, s, e)
                if not ok:
                    return False
            p = e
        elif f == 2 and w == 5:  # simple_value
            if end - p < 4:
                return False
            members += 1
            kind, x = F32, _u32(b, p)
            p += 4
        else:  # an image, a histogram, audio, or a field this walk does not know
            return False
    if members > 1 or tag_n > 0x7FFFFFFF:  # oneof: protobuf keeps the last
        return False
    steps[at] = tag
    ids[at] = tag_n
    bits[at] = x
    kinds[at] = kind
    return True


@kernel
def _event(b, p, end, at, steps, bits, ids, kinds):
    """``(values, step, ok)``: decode the Event in ``b[p:end]`` into slots from ``at``;
    values = -1 when the room ran out, ok False when protobuf must decode it."""
    step = np.int64(0)
    n = 0
    summaries = 0
    other = False
    room = kinds.size
    while p < end:
        f, w, p = _key(b, p, end)
        if p < 0:
            return n, step, False
        if f == 1 and w == 1:  # wall_time
            if end - p < 8:
                return n, step, False
            p += 8
        elif f == 2 and w == 0:
            step, p = _varint(b, p, end)
            if p < 0:
                return n, step, False
        elif f == 5 and w == 2:
            summaries += 1
            s, e = _length(b, p, end)
            if s < 0 or summaries > 1:
                return n, step, False
            while s < e:
                g, x, s = _key(b, s, e)
                if s < 0 or g != 1 or x != 2:
                    return n, step, False
                s2, e2 = _length(b, s, e)
                if s2 < 0:
                    return n, step, False
                if at + n >= room:
                    return np.int64(-1), step, True
                if not _value(b, s2, e2, at + n, steps, bits, ids, kinds):
                    return n, step, False
                n += 1
                s = e2
            p = e
        else:  # another field: skipped, and the event handed back if it has a summary
            other = True
            if w == 0:
                _, p = _varint(b, p, end)
            elif w == 1:
                p = p + 8 if end - p >= 8 else np.int64(-1)
            elif w == 2:
                _, p = _length(b, p, end)
            elif w == 5:
                p = p + 4 if end - p >= 4 else np.int64(-1)
            else:
                p = np.int64(-1)
            if p < 0:
                return n, step, False
    return n, step, not (other and summaries)


@kernel
def _fnv(b, p, n):
    h = _FNV_OFFSET
    for i in range(p, p + n):
        h = (h ^ np.uint64(b[i])) * _FNV_PRIME
    return h


@kernel
def _tag_id(b, p, n, table, store, tags, state):
    """The id of the tag ``b[p:p + n]``, added to the tags when new; -1 when the table, the
    store or the tag list has no room for it."""
    mask = np.uint64(table.size - 1)
    slot = _fnv(b, p, n) & mask
    for _ in range(table.size):
        t = table[slot] - 1
        if t < 0:
            break
        s, m = tags[t, 0], tags[t, 1]
        if m == n:
            same = True
            for i in range(n):
                if store[s + i] != b[p + i]:
                    same = False
                    break
            if same:
                return t
        slot = (slot + np.uint64(1)) & mask
    count, used = state[S_TAGS], state[S_STORE]
    if count >= tags.shape[0] or 2 * (count + 1) > table.size or used + n > store.size:
        return np.int64(-1)
    for i in range(n):
        store[used + i] = b[p + i]
    tags[count, 0] = used
    tags[count, 1] = n
    table[slot] = count + 1
    state[S_TAGS] = count + 1
    state[S_STORE] = used + n
    return count


@kernel(nogil=True)
def events(b, n, table, store, tags, state, steps, bits, ids, kinds):
    """Walk the records in ``b[:n]`` from its start, checking both CRCs of each, and
    decode the values of their events into ``steps`` (the event's step), ``bits`` (the
    value's bits, by ``kinds``), ``ids`` (its tag's id: ``tags`` holds where each tag is
    in ``store``; ``table`` is their hash table, a power of two long) and ``kinds``; a
    record to decode with protobuf takes one slot of kind `FALLBACK`.

    Returns ``(pos, values, need, status)``: where the walk stopped (a record's start),
    the slots written, and why: `DONE` (the next record is not whole in ``b[:n]``: it needs
    ``need`` bytes from ``pos``, -1 when its length is beyond any file; need is 0 when
    ``pos == n``), `CORRUPT` (the record at ``pos`` fails a CRC), `ROOM` (no slots left for
    the next record's values) or `TAGS` (no room for its new tags: grow ``table``,
    ``store`` and ``tags`` and set ``state[S_REBUILD]``)."""
    if state[S_REBUILD]:
        table[:] = 0
        mask = np.uint64(table.size - 1)
        for t in range(state[S_TAGS]):
            slot = _fnv(store, tags[t, 0], tags[t, 1]) & mask
            while table[slot] != 0:
                slot = (slot + np.uint64(1)) & mask
            table[slot] = t + 1
        state[S_REBUILD] = 0
    pos = np.int64(0)
    at = np.int64(0)
    room = kinds.size
    while True:
        left = n - pos
        if left < 12:
            return pos, at, (np.int64(12) if left > 0 else np.int64(0)), DONE
        if masked_crc32c(b, pos, 8) != _u32(b, pos + 8):
            return pos, at, np.int64(0), CORRUPT
        if b[pos + 7] != 0 or b[pos + 6] >= 0x80:  # 2**55 bytes or more
            return pos, at, np.int64(-1), DONE
        length = np.int64(0)
        for i in range(7):
            length |= np.int64(b[pos + i]) << (8 * i)
        if length > left - 16:
            return pos, at, length + 16, DONE
        data = pos + 12
        if masked_crc32c(b, data, length) != _u32(b, data + length):
            return pos, at, np.int64(0), CORRUPT
        if at >= room:
            return pos, at, np.int64(0), ROOM
        got, step, ok = _event(b, data, data + length, at, steps, bits, ids, kinds)
        if got < 0:
            return pos, at, np.int64(0), ROOM
        if not ok:
            steps[at] = data
            bits[at] = length
            ids[at] = 0
            kinds[at] = FALLBACK
            at += 1
        else:
            for i in range(at, at + got):
                t = _tag_id(b, steps[i], np.int64(ids[i]), table, store, tags, state)
                if t < 0:
                    return pos, at, np.int64(0), TAGS
                ids[i] = t
                steps[i] = step
            at += got
        pos = data + length + 4
