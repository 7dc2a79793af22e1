"""Arrow IPC metadata for the selective reader: the numba parsers of
`gpu_profiler.kernels.ipc` as the readers call them (native, see `gpu_profiler.native`;
they raise `gpu_profiler.kernels.ipc_format.Corrupt` on hostile metadata, and their records
and codes are named there), and how the readers name a damaged IPC file."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from gpu_profiler import native
from gpu_profiler.errors import ProfilerError, first_line
from gpu_profiler.kernels import ipc_format as fmt


def corrupt(path: Path, kind: str, offset: int, reason: str) -> ProfilerError:
    """The one-line error for a damaged IPC file: names the file and the byte offset."""
    return ProfilerError(f"{path}: corrupt or truncated {what(kind)} at byte {offset}: "
                         f"{reason}")


def what(kind: str) -> str:
    """How errors name an IPC ``file`` or ``stream``."""
    return "Arrow IPC file" if kind == "file" else "Arrow IPC stream"


def big_endian_error(path: Path) -> ProfilerError:
    """The one-line refusal of a big-endian IPC file."""
    return ProfilerError(f"{path}: big-endian Arrow IPC files are not supported; "
                         "rewrite it on a little-endian machine")


#: What pyarrow raises on a schema message it cannot read (see `arrow_schema`).
SCHEMA_ERRORS = (pa.ArrowException, OSError, ValueError)


def arrow_schema(framed: bytes | np.ndarray) -> pa.Schema:
    """pyarrow's reading of a framed schema message, its field names decoded (pyarrow
    decodes them lazily: a name that is not UTF-8 fails here, not later). Raises one of
    `SCHEMA_ERRORS`."""
    schema = pa.ipc.read_schema(pa.py_buffer(framed))
    schema.names  # noqa: B018
    return schema


def checked_schema(path: Path, kind: str, at: int, framed: bytes | np.ndarray,
                   meta: np.ndarray) -> tuple[pa.Schema, int]:
    """``(schema, body length)`` of the framed schema message at byte ``at`` (``meta``: its
    flatbuffer): a damaged or big-endian one refused, and one whose flatbuffer counts other
    fields than pyarrow reads (the column a field's buffers belong to is told by that
    count)."""
    try:
        big, fields, _, body = schema_info(meta, -1)
    except fmt.Corrupt as exc:
        raise corrupt(path, kind, at, f"schema message: {fmt.REASONS[exc.args[1]]}") from None
    if big:
        raise big_endian_error(path)
    try:
        schema = arrow_schema(framed)
    except SCHEMA_ERRORS as exc:
        raise corrupt(path, kind, at, f"schema message: {first_line(exc)}") from None
    if len(schema) != fields:
        raise corrupt(path, kind, at, "schema message: field count mismatch")
    return schema, int(body)


def frame(b: np.ndarray, p: int) -> tuple[int, ...]:
    """``(prefix, metadata length)`` of the message framed at ``p`` (see kernels.ipc)."""
    return native.kernel("frame")(b, p)


def walk(b: np.ndarray, start: int, limit: int, out: np.ndarray, layout: np.ndarray,
         state: np.ndarray) -> tuple[int, ...]:
    """``(messages parsed, next position, NEED_MORE | END | FULL)`` (see kernels.ipc)."""
    return native.kernel("walk")(b, start, limit, out, layout, state)


def walk_streams(b: np.ndarray, starts: np.ndarray, ends: np.ndarray, schema: np.ndarray,
                 out: np.ndarray, owner: np.ndarray, layout: np.ndarray, state: np.ndarray,
                 left: np.ndarray) -> tuple[int, ...]:
    """``(records written,)`` of many whole streams in ``b`` (see kernels.ipc)."""
    return native.kernel("walk_streams")(b, starts, ends, schema, out, owner, layout, state,
                                         left)


def walk_files(b: np.ndarray, starts: np.ndarray, ends: np.ndarray, schema: np.ndarray,
               out: np.ndarray, owner: np.ndarray, layout: np.ndarray, state: np.ndarray,
               left: np.ndarray) -> tuple[int, ...]:
    """``(records written,)`` of many whole files in ``b`` (see kernels.ipc)."""
    blocks = np.empty((out.shape[0], 3), np.int64)
    return native.kernel("walk_files")(b, starts, ends, schema, out, owner, blocks, layout,
                                       state, left)


def parse_at(b: np.ndarray, starts: np.ndarray, meta_lens: np.ndarray, out: np.ndarray,
             layout: np.ndarray, state: np.ndarray) -> None:
    """Parse the file format's messages at ``starts`` into ``out`` (see kernels.ipc)."""
    native.kernel("parse_at")(b, starts, meta_lens, out, layout, state)


def schema_info(b: np.ndarray, field: int) -> tuple[int, ...]:
    """``(big endian?, fields, dictionary id of ``field`` or -1, body length)``."""
    return native.kernel("schema_info")(b, field)


def footer_blocks(b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The footer's dictionary and record-batch Blocks as ``(n, 3)`` int64 arrays of
    ``(offset, metadata length, body length)``."""
    out = np.empty((2 * (b.size // 24) + 2, 3), np.int64)  # both vectors lie inside b
    nd, nr = native.kernel("footer_blocks")(b, out)
    return out[:nd], out[nd:nd + nr]


def check(recs: np.ndarray, dict_id: int, offsets: bool, item_w: int, dict_w: int,
          out: np.ndarray) -> tuple[int, ...]:
    """``(first refused record, index in CHECKS)`` or ``(-1, -1)``; byte ranges to ``out``."""
    return native.kernel("check")(recs, dict_id, offsets, item_w, dict_w, out)


def gather(src: np.ndarray, src_pos: np.ndarray, counts: np.ndarray, dst: np.ndarray,
           dst_pos: np.ndarray) -> None:
    """Copy ``src[src_pos[i]:+counts[i]]`` to ``dst[dst_pos[i]:]`` for every i (elements of
    1, 4 or 8 bytes, as in ``src`` and ``dst``)."""
    t = np.dtype(f"u{src.itemsize}")  # the kernels exist for uint8, uint32 and uint64
    native.kernel(f"gather_{t}")(src.view(t), src_pos, counts, dst.view(t), dst_pos)


def unpack_validity(src: np.ndarray, src_pos: np.ndarray, rows: np.ndarray, dst: np.ndarray,
                    dst_row: np.ndarray) -> None:
    """Expand validity bitmaps at byte positions ``src_pos`` into bools at ``dst_row``."""
    native.kernel("unpack_validity")(src, src_pos, rows, dst, dst_row)


def offset_lengths(offsets: np.ndarray, starts: np.ndarray, rows: np.ndarray,
                   dst: np.ndarray, dst_row: np.ndarray) -> None:
    """Lengths (int64) of every batch's list offsets, at ``dst_row`` of ``dst``."""
    native.kernel(f"offset_lengths_{offsets.dtype}")(offsets, starts, rows, dst, dst_row)
