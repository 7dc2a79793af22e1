"""The selective Arrow IPC reader: reads the length column's bytes and nothing else.

It walks the IPC framing itself, parses every message's metadata in numba
(:mod:`.ipc_format`), and fetches with positioned reads (:mod:`.pread`) only the length
column's buffers: validity (only for batches with nulls) and values, or validity and list
offsets for ``--offsets-of``; token values are never read. Runs of small messages (a length
column and little else) are read in large windows, with no per-batch Python work: their
batches are gathered into large chunks, or, for a backend that takes segmented chunks,
handed over where they lie in the window. A message with a large body (token ids) costs a
page of metadata plus the column's own bytes. Compressed buffers (LZ4 frame, ZSTD) are
decompressed one needed buffer at a time; dictionary batches are read only when the length
column is dictionary-encoded. Every offset and length taken from the file is checked against
the file first: a corrupt file raises :class:`ProfilerError` naming the file and byte
offset. Big-endian files are refused.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

import numpy as np
import pyarrow as pa

from gpu_profiler.chunk import Chunk
from gpu_profiler.errors import ProfilerError, first_line
from gpu_profiler.io.pread import PAGE, Fetched, PositionedFile, Reuse
from gpu_profiler.kernels import ipc_format as fmt
from gpu_profiler.readers.arrow import CHUNK_ROWS
from gpu_profiler.readers.base import ARROW_MAGIC, LengthSpec
from gpu_profiler.readers.ipc import metadata as parsers
from gpu_profiler.readers.ipc.layout import column_layout
from gpu_profiler.readers.ipc.metadata import corrupt

#: First read of a stream (its schema and first messages' metadata).
FIRST_READ = 16 << 10
#: Bytes read at once from a run of small messages.
WINDOW = 8 << 20
#: Bytes read at once from a run of small messages when only their metadata is wanted
#: (`SelectiveReader.batch_spans`).
METADATA_WINDOW = 1 << 20
#: A message holding more than this besides the column's buffers is read sparsely.
SPARSE_SKIP = 64 << 10
#: Sparsely read messages whose buffers are fetched together (concurrently).
SPARSE_BATCH = 64
#: Column bytes fetched at once from sparsely read messages (more only for one message
#: whose column alone is larger): bounds the memory a file of huge batches holds.
FETCH_BYTES = 64 << 20
#: Decompressed bytes produced per step (bounds memory whatever a buffer declares).
INFLATE_STEP = 4 << 20
#: Fewest rows of plain batches handed over in place as one segmented chunk (fewer are
#: gathered, so that small groups do not each cost a kernel launch).
SEGMENTED_MIN = CHUNK_ROWS // 8
_MAX_MESSAGES = 1 << 14  # parsed per kernel call
_OUTPUTS = 3  # output buffers kept for reuse
_CODECS = {0: "lz4", 1: "zstd"}



def chunks(path: Path, kind: str, spec: LengthSpec, segmented: bool = False,
           between: tuple[int, int] | None = None,
           dictionaries: tuple[int, ...] = ()) -> Iterator[Chunk]:
    """Chunks of the length column of one IPC file (``kind='file'``) or stream (of the
    record batches whose messages start ``between`` two byte positions, if given, after
    a stream's ``dictionaries``: see `SelectiveReader`)."""
    with SelectiveReader(path, kind, between, dictionaries) as r:
        yield from r.chunks(spec, segmented)


class SelectiveReader:
    """One IPC file or stream, read selectively: every record batch, or those whose
    messages start ``between`` two byte positions (a range of `batch_spans`). A stream is
    then walked from the first to the second, after the messages at ``dictionaries`` (the
    length column's dictionary batches before the range that its batches depend on: the
    last replacement and the deltas after it); a file's footer Blocks are picked by their
    offsets, and every dictionary batch of a file is still read.

    Attributes:
        schema: the file's Arrow schema.
    """

    def __init__(self, path: Path, kind: str, between: tuple[int, int] | None = None,
                 dictionaries: tuple[int, ...] = ()) -> None:
        self.path = Path(path)
        self.kind = kind
        self._dictionaries = dictionaries
        self._file = PositionedFile(self.path)
        self._lo, self._hi = between or (0, self._file.size)
        # where a walk of the stream stops (a file's Blocks may point anywhere in it)
        self._end = min(self._hi, self._file.size) if kind == "stream" else self._file.size
        try:
            self._start, self._schema_meta, self.schema = self._read_schema()
        except BaseException:
            self._file.close()
            raise

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> SelectiveReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def file_size(self) -> int:
        return self._file.size

    @property
    def bytes_requested(self) -> int:
        """Bytes asked of the operating system so far (after coalescing)."""
        return self._file.requested

    def error(self, offset: int, reason: str) -> ProfilerError:
        return corrupt(self.path, self.kind, offset, reason)

    def _corrupt(self, exc: fmt.Corrupt, offset: int, what: str = "message") -> ProfilerError:
        return self.error(int(offset), f"{what}: {fmt.REASONS[exc.args[1]]}")

    def _window(self, pos: int, n: int) -> Fetched:
        """File bytes from ``pos``: mapped, or in a window buffer nothing else refers to any
        more."""
        return self._file.window(pos, max(0, min(n, self._end - pos)))

    # -- schema --------------------------------------------------------------------------

    def _read_schema(self) -> tuple[int, np.ndarray, pa.Schema]:
        pos = 0
        if self.kind == "file":
            if bytes(self._file.read(0, 6).data) != ARROW_MAGIC:
                raise self.error(0, "no ARROW1 magic (not an Arrow IPC file)")
            pos = 8
        b = self._file.read(pos, FIRST_READ).data
        try:
            pre, m = parsers.frame(b, 0)
        except fmt.Corrupt as exc:
            raise self._corrupt(exc, pos, "schema message") from None
        if 0 < m and pre + m > b.size:
            b = self._file.read(pos, int(pre + m)).data
        if m <= 0 or pre + m > b.size:
            raise self.error(pos, "the file ends before its schema message")
        meta = b[pre:pre + m].copy()
        sch, body = parsers.checked_schema(self.path, self.kind, pos, b[:pre + m], meta)
        return int(pos + pre + m + body), meta, sch

    # -- chunks --------------------------------------------------------------------------

    def chunks(self, spec: LengthSpec, segmented: bool = False) -> Iterator[Chunk]:
        """Chunks of the length column: at least ``CHUNK_ROWS`` rows each but the last,
        and, if ``segmented``, the plain batches of each window as they lie in it."""
        col, layout = self._column(spec)
        groups = self._file_groups(layout, col) if self.kind == "file" else \
            self._stream_groups(layout, col)
        out = Assembler(self, col, segmented)
        for recs, fetched in groups:
            yield from out.add(recs, fetched)
        yield from out.finish()

    def batch_spans(self, spec: LengthSpec) -> Iterator[np.ndarray]:
        """``(start, end, dictionary)`` rows of the record-batch messages (byte positions
        of framing, metadata and body; ``dictionary`` -1) and of a stream's dictionary
        batches of the length column (0 for a replacement, 1 for a delta), in file order,
        some at a time, reading metadata only: a file's footer Blocks; a stream's
        framing, walked through windows of :data:`METADATA_WINDOW` over runs of small
        messages and, after a message with a large body, just the next one's metadata (a
        4 GB stream of 100 batches costs 100 page reads). Memory stays bounded whatever
        the number of batches."""
        if self.kind == "file":
            off, meta, body = self._footer()[1].T
            yield np.stack([off, off + meta + body, np.full_like(off, -1)], axis=1)
            return
        col, layout = self._column(spec)
        state = np.zeros(2, np.int64)
        pos, want = self._lo_stream(), FIRST_READ
        while pos < self._end:
            _, recs, pos, status = self._messages(pos, want, layout, state)
            rb = recs[col.active(recs)]
            yield np.stack([rb[:, fmt.R_MSG], rb[:, fmt.R_BODY] + rb[:, fmt.R_BODYLEN],
                            np.where(rb[:, fmt.R_TYPE] == fmt.RECORD_BATCH, -1,
                                     rb[:, fmt.R_DELTA] != 0)], axis=1)
            if status == fmt.END or not len(recs):
                return
            last = recs[-1]
            want = METADATA_WINDOW
            if last[fmt.R_BODYLEN] > SPARSE_SKIP:  # likely another: read just its metadata
                want = _to_granule(pos, int(last[fmt.R_BODY] - last[fmt.R_MSG]) + 256,
                                   self._file.granule)

    def _column(self, spec: LengthSpec) -> tuple[Column, np.ndarray]:
        """The length column and the layout vector the parsers find it by."""
        index = self.schema.get_field_index(spec.name)
        if index < 0:
            raise ProfilerError(f"{self.path}: no column {spec.name!r}")
        t = self.schema.field(index).type
        dict_id = -1
        if pa.types.is_dictionary(t):
            try:
                dict_id = int(parsers.schema_info(self._schema_meta, index)[2])
            except fmt.Corrupt as exc:
                raise self._corrupt(exc, 0, "schema message") from None
        return Column(t, spec.offsets, dict_id), \
            column_layout(self.schema, index, dict_id).vector()

    def _checked(self, recs: np.ndarray, col: Column) -> tuple[np.ndarray, ...]:
        """Validate parsed records against their bodies; return their needed byte ranges
        ``(validity lo, hi, data lo, hi)`` (empty ranges where nothing is needed)."""
        ranges = np.empty((len(recs), 4), np.int64)
        bad, why = parsers.check(recs, col.dict_id, col.offsets, col.item.itemsize,
                                 col.dtype.itemsize, ranges)
        if bad >= 0:
            rec = recs[bad]
            raise self.error(int(rec[fmt.R_MSG]), f"{col.what(rec)}: {fmt.CHECKS[why]}")
        return ranges[:, 0], ranges[:, 1], ranges[:, 2], ranges[:, 3]

    # -- stream format -------------------------------------------------------------------

    def _lo_stream(self) -> int:
        """Where a stream's walk starts: after its schema, or at the range's first batch."""
        return max(self._start, self._lo)

    def _messages(self, pos: int, want: int, layout: np.ndarray, state: np.ndarray
                  ) -> tuple[Fetched, np.ndarray, int, int]:
        """``(window, records, next position, walk status)`` of the stream's messages whose
        metadata lies in a window of at least ``want`` bytes from ``pos``, grown until it
        holds one (no record only at the end of the stream)."""
        while True:
            win = self._window(pos, want)
            recs, nxt, status = self._walk(win.data, pos, layout, state)
            if len(recs) or status == fmt.END:
                return win, recs, nxt, status
            need = int(state[1])
            if pos + need > self._end:
                raise self.error(pos, "the file ends inside a message's metadata")
            want = _to_granule(pos, need, self._file.granule)

    def _stream_groups(self, layout: np.ndarray,
                       col: Column) -> Iterator[tuple[np.ndarray, Fetched]]:
        state = np.zeros(2, np.int64)
        for at in self._dictionaries:  # the message at each, alone
            yield from self._fetch(self._messages(at, FIRST_READ, layout, state)[1][:1], col)
        pos, want = self._lo_stream(), FIRST_READ
        pending: list[np.ndarray] = []
        while pos < self._end:
            win, recs, nxt, status = self._messages(pos, want, layout, state)
            if not len(recs):
                break
            vlo, vhi, dlo, dhi = self._checked(recs, col)
            last = recs[-1]
            total = int(last[fmt.R_BODY] + last[fmt.R_BODYLEN] - last[fmt.R_MSG])
            sparse = total - int(vhi[-1] - vlo[-1] + dhi[-1] - dlo[-1]) > SPARSE_SKIP
            later = None
            if not (win.covers(vlo[-1:], vhi[-1:]) & win.covers(dlo[-1:], dhi[-1:]))[0]:
                recs = recs[:-1]  # only the last message can run past the window
                if sparse or total > WINDOW:  # fetched on its own, in bounded pieces
                    later = last[None]
                else:  # read it again, whole, at the start of the next window
                    nxt, status = int(last[fmt.R_MSG]), fmt.NEED_MORE
            if len(recs):  # batches come out in file order
                if pending:
                    yield from self._fetch(np.concatenate(pending), col)
                    pending = []
                yield recs, win
            if later is not None:
                pending.append(later)
            if pending and (col.ordered or len(pending) >= SPARSE_BATCH
                            or status == fmt.END):
                yield from self._fetch(np.concatenate(pending), col)
                pending = []
            if status == fmt.END:
                break
            if sparse and self._file.mapped:  # map the rest: a walk touches only the
                want = self._end - nxt  # pages of its metadata, and does so in one call
            elif sparse:  # likely another large message: read just its metadata
                want = _to_granule(nxt, int(last[fmt.R_BODY] - last[fmt.R_MSG]) + 256,
                                  self._file.granule)
            else:
                want = max(WINDOW, total if nxt == int(last[fmt.R_MSG]) else 0)
            pos = nxt
        if pending:
            yield from self._fetch(np.concatenate(pending), col)

    def _walk(self, data: np.ndarray, pos: int, layout: np.ndarray,
              state: np.ndarray) -> tuple[np.ndarray, int, int]:
        """Every message whose metadata lies in ``data`` (file bytes from ``pos``)."""
        parts, start, status = [], 0, fmt.FULL
        out = np.empty((min(_MAX_MESSAGES, data.size // 128 + 1), fmt.NREC), np.int64)
        while status == fmt.FULL:
            try:
                k, start, status = parsers.walk(data, start, self._end - pos, out, layout, state)
            except fmt.Corrupt as exc:
                raise self._corrupt(exc, pos + state[0]) from None
            parts.append(out[:k].copy())
        recs = np.concatenate(parts) if len(parts) > 1 else parts[0]
        recs[:, fmt.R_MSG] += pos
        recs[:, fmt.R_BODY] += pos
        return recs, pos + int(start), int(status)

    def _fetch(self, recs: np.ndarray, col: Column) -> Iterator[tuple[np.ndarray, Fetched]]:
        """The column's buffers of ``recs``, fetched in groups of about
        :data:`FETCH_BYTES` (chunks read ahead hold a few groups, never the whole file)."""
        self._checked(recs, col)  # the records as the file declares them, then their pieces
        recs = _pieces(recs, col)
        vlo, vhi, dlo, dhi = self._checked(recs, col)
        size = (vhi - vlo) + (dhi - dlo)
        group = (np.cumsum(size) - size) // FETCH_BYTES
        cuts = np.r_[0, np.flatnonzero(np.diff(group)) + 1, len(recs)]
        for lo, hi in zip(cuts[:-1], cuts[1:], strict=True):
            yield recs[lo:hi], self._file.fetch(np.concatenate([vlo[lo:hi], dlo[lo:hi]]),
                                                np.concatenate([vhi[lo:hi], dhi[lo:hi]]))

    # -- file format ---------------------------------------------------------------------

    def _file_groups(self, layout: np.ndarray,
                     col: Column) -> Iterator[tuple[np.ndarray, Fetched]]:
        dicts, batches = self._footer()
        if col.dict_id >= 0:
            yield from self._blocks(dicts, fmt.DICTIONARY_BATCH, layout, col)
        off = batches[:, 0]
        yield from self._blocks(batches[(off >= self._lo) & (off < self._hi)],
                                fmt.RECORD_BATCH, layout, col)

    def _footer(self) -> tuple[np.ndarray, np.ndarray]:
        """The footer's dictionary and record-batch Blocks, each checked to lie inside the
        file."""
        size = self._file.size
        if size < 8 + 10:
            raise self.error(size, "too short for an Arrow IPC file")
        tail = self._file.read(size - 10, 10).data
        if bytes(tail[4:]) != ARROW_MAGIC:
            raise self.error(size - 6, "no ARROW1 magic at the end of the file")
        flen = int(tail[:4].view("<i4")[0])
        fstart = size - 10 - flen
        if flen <= 0 or fstart < 8:
            raise self.error(size - 10, f"footer length {flen} out of range")
        try:
            dicts, batches = parsers.footer_blocks(self._file.read(fstart, flen).data)
        except fmt.Corrupt as exc:
            raise self.error(fstart, f"footer: {fmt.REASONS[exc.args[1]]}") from None
        for name, blocks in (("dictionary", dicts), ("record batch", batches)):
            off, meta, body = blocks[:, 0], blocks[:, 1], blocks[:, 2]
            bad = ((off < 8) | (meta <= 0) | (body < 0) | (meta > fstart) | (body > fstart)
                   | (off > fstart - meta - body))
            if bad.any():
                i = int(np.argmax(bad))
                raise self.error(fstart, f"footer: {name} block {i} (offset {off[i]}, "
                                         f"{meta[i]} + {body[i]} bytes) lies outside the file")
        return dicts, batches

    def _blocks(self, blocks: np.ndarray, kind: int, layout: np.ndarray,
                col: Column) -> Iterator[tuple[np.ndarray, Fetched]]:
        """Parse and fetch the messages of footer Blocks: runs of small adjacent messages
        in windows, large ones by their metadata and then their column's buffers."""
        if not len(blocks):
            return
        off, meta, body = blocks[:, 0], blocks[:, 1], blocks[:, 2]
        end = off + meta + body
        small = meta + body <= SPARSE_SKIP
        new = np.ones(len(blocks), bool)
        gap = off[1:] - end[:-1]
        new[1:] = ~small[1:] | ~small[:-1] | (gap < 0) | (gap > PAGE)
        seg = np.cumsum(new)
        first = np.flatnonzero(new)
        # split runs into windows
        key = seg * (1 << 40) + (off - off[first][seg - 1]) // WINDOW
        cuts = np.flatnonzero(np.diff(key)) + 1
        big: list[int] = []
        for lo, hi in zip(np.r_[0, cuts], np.r_[cuts, len(blocks)], strict=True):
            if not small[lo]:
                big.extend(range(lo, hi))
                if len(big) >= SPARSE_BATCH or col.ordered:
                    yield from self._big_blocks(blocks[big], kind, layout, col)
                    big = []
                continue
            if big:
                yield from self._big_blocks(blocks[big], kind, layout, col)
                big = []
            base = int(off[lo])
            win = self._window(base, int(end[hi - 1]) - base)
            recs = self._parse_at(win, blocks[lo:hi], kind, layout)
            self._checked(recs, col)
            yield recs, win
        if big:
            yield from self._big_blocks(blocks[big], kind, layout, col)

    def _big_blocks(self, blocks: np.ndarray, kind: int, layout: np.ndarray,
                    col: Column) -> Iterator[tuple[np.ndarray, Fetched]]:
        metas = self._file.fetch(blocks[:, 0], blocks[:, 0] + blocks[:, 1])
        yield from self._fetch(self._parse_at(metas, blocks, kind, layout), col)

    def _parse_at(self, fetched: Fetched, blocks: np.ndarray, kind: int,
                  layout: np.ndarray) -> np.ndarray:
        out = np.empty((len(blocks), fmt.NREC), np.int64)
        state = np.zeros(2, np.int64)
        starts = fetched.locate(blocks[:, 0])
        try:
            parsers.parse_at(fetched.data, starts, blocks[:, 1], out, layout, state)
        except fmt.Corrupt as exc:
            k = int(np.argmax(starts == state[0]))
            raise self._corrupt(exc, blocks[k, 0]) from None
        out[:, fmt.R_MSG] = blocks[:, 0]
        out[:, fmt.R_BODY] = blocks[:, 0] + blocks[:, 1]
        bad = (out[:, fmt.R_TYPE] != kind) | (out[:, fmt.R_BODYLEN] != blocks[:, 2])
        if bad.any():
            i = int(np.argmax(bad))
            raise self.error(int(blocks[i, 0]), "message disagrees with its footer block")
        return out


class Column:
    """What the length column is made of: element widths, offsets or not, dictionary (for
    this reader, and for `ipc_many`, which reads it out of many streams at once)."""

    def __init__(self, t: pa.DataType, offsets: bool, dict_id: int) -> None:
        self.offsets = offsets
        self.dict_id = dict_id
        self.ordered = dict_id >= 0  # dictionary state follows message order
        if offsets:
            self.item = np.dtype(np.int64 if pa.types.is_large_list(t) else np.int32)
            self.dtype = np.dtype(np.int64)
        elif dict_id >= 0:
            self.item = np.dtype(t.index_type.to_pandas_dtype())
            self.dtype = np.dtype(t.value_type.to_pandas_dtype())
        else:
            self.item = self.dtype = np.dtype(t.to_pandas_dtype())

    def active(self, recs: np.ndarray) -> np.ndarray:
        """Messages whose buffers are needed: record batches, and dictionary batches of
        the column's dictionary."""
        kind = recs[:, fmt.R_TYPE]
        return (kind == fmt.RECORD_BATCH) | ((kind == fmt.DICTIONARY_BATCH)
                                             & (recs[:, fmt.R_DICT] == self.dict_id)
                                             & (self.dict_id >= 0))

    def width(self, recs: np.ndarray) -> np.ndarray:
        return np.where(recs[:, fmt.R_TYPE] == fmt.DICTIONARY_BATCH, self.dtype.itemsize,
                        self.item.itemsize)

    @staticmethod
    def what(rec: np.ndarray) -> str:
        return "dictionary batch" if rec[fmt.R_TYPE] == fmt.DICTIONARY_BATCH else \
            "record batch"


class AssemblerSource(Protocol):
    """What `Assembler` asks of the reader whose bytes it assembles (a `SelectiveReader`,
    or `ipc_many`'s run of streams in one buffer)."""

    @property
    def file_size(self) -> int: ...

    def error(self, offset: int, reason: str) -> ProfilerError: ...


class Assembler:
    """Gathers the column out of fetched bytes into chunks of at least ``CHUNK_ROWS``, or
    (``segmented``) hands plain batches over where they were read: for this reader, and
    for `ipc_many`, whose streams read together become chunks the same way."""

    def __init__(self, reader: AssemblerSource, col: Column, segmented: bool) -> None:
        self.r = reader
        self.col = col
        self.segmented = segmented and not col.offsets
        self.out: np.ndarray | None = None
        self.valid: np.ndarray | None = None
        self.fill = 0
        self.outputs = Reuse(_OUTPUTS)
        self.dictionary: tuple[np.ndarray, np.ndarray | None] | None = None

    def add(self, recs: np.ndarray, fetched: Fetched) -> Iterator[Chunk]:
        if self.col.ordered:
            for rec in recs[self.col.active(recs)]:
                yield from self._dictionary_message(rec, fetched)
            return
        rb = _subset(recs, (recs[:, fmt.R_TYPE] == fmt.RECORD_BATCH) & (recs[:, fmt.R_LEN] > 0))
        plain = rb[:, fmt.R_CODEC] < 0
        gather = plain
        if self.segmented:
            here = plain & (rb[:, fmt.R_NULLS] == 0)
            if rb[here, fmt.R_LEN].sum() >= SEGMENTED_MIN:
                chunk = self._in_place(_subset(rb, here), fetched)
                if chunk is not None:
                    yield chunk
                    gather = plain & ~here
        if gather.any():
            yield from self._gather(rb[gather], fetched)
        for rec in rb[~plain]:
            yield from self._inflated(rec, fetched)

    def finish(self) -> Iterator[Chunk]:
        if self.fill:
            yield self._emit()

    def _reserve(self, n: int) -> Iterator[Chunk]:
        """Room for ``n`` more rows. A buffer holds ``1.5 * CHUNK_ROWS`` rows (fewer for a
        small file) and is handed out as a chunk once it holds ``CHUNK_ROWS``."""
        if self.out is not None and self.fill + n > self.out.size:
            if self.fill + n > 2 * CHUNK_ROWS:
                yield self._emit()
            else:  # grow (rare: a small-file guess was too small, or huge batches)
                grown = self._output(min(max(2 * self.out.size, self.fill + n),
                                         2 * CHUNK_ROWS))
                grown[:self.fill] = self.out[:self.fill]
                self.out = grown
                if self.valid is not None:
                    self.valid = np.concatenate([self.valid[:self.fill],
                                                 np.ones(grown.size - self.fill, bool)])
        if self.out is None:
            rows = CHUNK_ROWS * 3 // 2
            if not self.outputs.bufs:  # first buffer: no more rows than the file could hold
                rows = min(rows, self.r.file_size // self.col.item.itemsize + 1)
            self.out = self._output(max(rows, n))

    def _output(self, rows: int) -> np.ndarray:
        return self.outputs.take(rows, self.col.dtype)

    def _emit(self) -> Chunk:
        assert self.out is not None
        valid = None if self.valid is None else self.valid[:self.fill]
        chunk = Chunk(self.out[:self.fill], valid)
        self.out, self.valid, self.fill = None, None, 0
        return chunk

    def _valid_mask(self) -> np.ndarray:
        assert self.out is not None
        if self.valid is None:
            self.valid = np.ones(self.out.size, bool)
        return self.valid

    def _put(self, values: np.ndarray, valid: np.ndarray | None) -> Iterator[Chunk]:
        n = len(values)
        yield from self._reserve(n)
        assert self.out is not None
        self.out[self.fill:self.fill + n] = values
        if valid is not None:
            self._valid_mask()[self.fill:self.fill + n] = valid
        self.fill += n
        if self.fill >= CHUNK_ROWS:
            yield self._emit()

    def _in_place(self, recs: np.ndarray, fetched: Fetched) -> Chunk | None:
        """Plain batches without nulls as one segmented chunk of the fetched bytes; None
        when a buffer is not aligned to its element width (then they are gathered)."""
        w = self.col.item.itemsize
        rows = recs[:, fmt.R_LEN]
        src = fetched.locate(recs[:, fmt.R_BODY] + recs[:, fmt.R_DOFF])
        if (src % w).any() or fetched.data.ctypes.data % w:
            return None
        if (src < 0).any() or (src + rows * w > fetched.data.size).any():
            raise self.r.error(int(recs[0, fmt.R_MSG]), "buffers outside the bytes read")
        data = fetched.data[:fetched.data.size - fetched.data.size % w].view(self.col.item)
        return Chunk(data, segments=(src // w, rows))

    def _gather(self, recs: np.ndarray, fetched: Fetched) -> Iterator[Chunk]:
        """Uncompressed batches: one numba gather for all of them."""
        rows = recs[:, fmt.R_LEN]
        n = int(rows.sum())
        yield from self._reserve(n)
        assert self.out is not None
        dst = self.fill + _starts(rows)
        src = fetched.locate(recs[:, fmt.R_BODY] + recs[:, fmt.R_DOFF])
        nulls = recs[:, fmt.R_NULLS] > 0
        bits = fetched.locate(recs[nulls, fmt.R_BODY] + recs[nulls, fmt.R_VOFF])
        w = self.col.item.itemsize
        # the kernels do not check bounds: re-check what the validation above guarantees
        if ((src < 0).any() or (src + (rows + self.col.offsets) * w > fetched.data.size).any()
                or (bits < 0).any() or (bits + (rows[nulls] + 7) // 8 > fetched.data.size).any()
                or dst[-1] + rows[-1] > self.out.size):
            raise self.r.error(int(recs[0, fmt.R_MSG]), "buffers outside the bytes read")
        if self.col.offsets:
            tmp = np.empty(n + len(rows), self.col.item)
            at = _starts(rows + 1)
            _gather(fetched.data, src, rows + 1, tmp, at)
            parsers.offset_lengths(tmp, at, rows, self.out, dst)
            self._check_offsets(recs, tmp[at], tmp[at + rows], self.out[dst[0]:dst[0] + n])
        else:
            _gather(fetched.data, src, rows, self.out, dst)
        if nulls.any():
            parsers.unpack_validity(fetched.data, bits, rows[nulls], self._valid_mask(),
                                    dst[nulls])
        self.fill += n
        if self.fill >= CHUNK_ROWS:
            yield self._emit()

    def _check_offsets(self, recs: np.ndarray, first: np.ndarray, last: np.ndarray,
                       lengths: np.ndarray) -> None:
        """List offsets that start below 0, end past the child array or decrease are
        corrupt by the Arrow format's rules (pyarrow's validation refuses them too)."""
        bad = (first < 0) | (last > recs[:, fmt.R_CHILD])
        if bad.any():
            rec = recs[int(np.argmax(bad))]
            raise self.r.error(int(rec[fmt.R_MSG]), "list offsets reach outside the child "
                                                    f"array of {int(rec[fmt.R_CHILD])} values")
        if lengths.size and lengths.min() < 0:
            raise self.r.error(int(recs[0, fmt.R_MSG]), "list offsets decrease")

    def _dictionary_message(self, rec: np.ndarray, fetched: Fetched) -> Iterator[Chunk]:
        if rec[fmt.R_TYPE] == fmt.DICTIONARY_BATCH:
            values = self._data(rec, fetched)
            valid = self._validity(rec, fetched)
            if rec[fmt.R_DELTA] and self.dictionary is not None:
                old, ov = self.dictionary
                if ov is not None or valid is not None:
                    ov = np.ones(len(old), bool) if ov is None else ov
                    valid = np.concatenate([ov, np.ones(len(values), bool)
                                            if valid is None else valid])
                values = np.concatenate([old, values])
            self.dictionary = values, valid
            return
        if rec[fmt.R_LEN] == 0:
            return
        if self.dictionary is None:
            raise self.r.error(int(rec[fmt.R_MSG]), "record batch before its dictionary")
        values, dvalid = self.dictionary
        index = self._data(rec, fetched).astype(np.int64)
        valid = self._validity(rec, fetched)
        used = index if valid is None else index[valid]
        if used.size and (used.min() < 0 or used.max() >= len(values)):
            raise self.r.error(int(rec[fmt.R_MSG]), "dictionary index out of range")
        index = index if valid is None else np.where(valid, index, 0)
        lengths = values[index] if len(values) else np.zeros(len(index), self.col.dtype)
        if dvalid is not None and len(values):
            valid = dvalid[index] if valid is None else valid & dvalid[index]
        yield from self._put(lengths, valid)

    def _data(self, rec: np.ndarray, fetched: Fetched) -> np.ndarray:
        """The values of one batch of a dictionary-encoded column: a dictionary batch's
        values, or a record batch's indices (never list offsets: those are not
        dictionary-encoded, and compressed ones are `_inflated`)."""
        rows = int(rec[fmt.R_LEN])
        w = int(self.col.width(rec[None])[0])
        raw = self._buffer(rec, fetched, fmt.R_DOFF, fmt.R_DLEN, rows * w)
        dictionary = rec[fmt.R_TYPE] == fmt.DICTIONARY_BATCH
        return raw.view(self.col.dtype if dictionary else self.col.item)

    def _validity(self, rec: np.ndarray, fetched: Fetched) -> np.ndarray | None:
        rows = int(rec[fmt.R_LEN])
        if rec[fmt.R_NULLS] == 0:
            return None
        raw = self._buffer(rec, fetched, fmt.R_VOFF, fmt.R_VLEN, (rows + 7) // 8)
        return np.unpackbits(raw, bitorder="little")[:rows].view(bool)

    def _buffer(self, rec: np.ndarray, fetched: Fetched, off: int, length: int,
                need: int) -> np.ndarray:
        """The first ``need`` bytes of one buffer of ``rec``, decompressed if need be."""
        buf = _Inflater(self.r, rec, fetched, off, length, need)
        out = buf.read(need)
        buf.close()
        return out

    def _inflated(self, rec: np.ndarray, fetched: Fetched) -> Iterator[Chunk]:
        """A compressed record batch, inflated ``INFLATE_STEP`` bytes at a time and handed
        on as it comes: a buffer declaring gigabytes (a 40 KB file can) costs a step of
        memory, not the buffer."""
        rows = int(rec[fmt.R_LEN])
        w = self.col.item.itemsize
        extra = int(self.col.offsets)
        data = _Inflater(self.r, rec, fetched, fmt.R_DOFF, fmt.R_DLEN, (rows + extra) * w)
        bits = _Inflater(self.r, rec, fetched, fmt.R_VOFF, fmt.R_VLEN, (rows + 7) // 8) \
            if rec[fmt.R_NULLS] else None
        step = max(8, INFLATE_STEP // w // 8 * 8)  # whole bytes of the validity bitmap
        last = data.read(w).view(self.col.item).astype(np.int64) if extra else None
        for lo in range(0, rows, step):
            k = min(step, rows - lo)
            values = data.read(k * w).view(self.col.item)
            if last is not None:
                offsets = np.concatenate([last, values.astype(np.int64)])
                values = np.diff(offsets)
                self._check_offsets(rec[None], offsets[:1], offsets[-1:], values)
                last = offsets[-1:]
            valid = None if bits is None else \
                np.unpackbits(bits.read((k + 7) // 8), bitorder="little")[:k].view(bool)
            yield from self._put(values, valid)
        data.close()
        if bits is not None:
            bits.close()


class _Inflater:
    """One buffer of a message read front to back, decompressed a piece at a time when it
    is compressed, and checked against the size it declares once closed."""

    def __init__(self, reader: AssemblerSource, rec: np.ndarray, fetched: Fetched,
                 off: int, length: int, need: int) -> None:
        self.r = reader
        self.where = int(rec[fmt.R_BODY] + rec[off])
        at = int(fetched.locate(np.array([self.where]))[0])
        self.pos = 0
        self.stream: pa.CompressedInputStream | None = None
        codec = int(rec[fmt.R_CODEC])
        if codec < 0:
            self.raw = fetched.data[at:at + need]
            return
        raw = fetched.data[at:at + int(rec[length])]
        self.declared = int(raw[:8].view("<i8")[0])
        if self.declared == -1:  # stored uncompressed
            if raw.size - 8 < need:
                raise reader.error(self.where, "buffer too short for the batch's rows")
            self.raw = raw[8:8 + need]
        elif self.declared < need:
            raise reader.error(self.where, f"compressed buffer declares {self.declared} bytes, "
                                           f"the batch's rows need {need}")
        else:
            self.stream = pa.CompressedInputStream(pa.BufferReader(pa.py_buffer(raw[8:])),
                                                   _CODECS[codec])

    def read(self, n: int) -> np.ndarray:
        """The next ``n`` bytes (a copy)."""
        if self.stream is None:
            piece = self.raw[self.pos:self.pos + n].copy()
            self.pos += n
            return piece
        pieces = self._inflate(n)
        got = sum(len(p) for p in pieces)
        self.pos += got
        if got < n:
            raise self.r.error(self.where, f"buffer decompresses to fewer than the "
                                           f"{self.declared} bytes it declares")
        return np.frombuffer(b"".join(pieces), np.uint8)

    def close(self) -> None:
        """Inflate (and drop) the rest: exactly the declared size, not a byte more."""
        if self.stream is None:
            return
        while self.pos < self.declared:
            got = sum(len(p) for p in self._inflate(min(INFLATE_STEP, self.declared - self.pos)))
            if not got:
                break
            self.pos += got
        if self.pos != self.declared or self._inflate(1):
            raise self.r.error(self.where, f"buffer decompresses to a size other than the "
                                           f"{self.declared} bytes it declares")

    def _inflate(self, n: int) -> list[bytes]:
        assert self.stream is not None
        pieces: list[bytes] = []
        try:
            while n > 0:
                piece = self.stream.read(n)
                if not piece:
                    break
                pieces.append(piece)
                n -= len(piece)
        except (pa.ArrowException, OSError, ValueError) as exc:
            raise self.r.error(self.where, f"cannot decompress buffer: {first_line(exc)}") \
                from None
        return pieces


def _gather(data: np.ndarray, src: np.ndarray, counts: np.ndarray, out: np.ndarray,
            dst: np.ndarray) -> None:
    """Copy ``counts`` elements of ``out``'s type from byte positions ``src`` of ``data``
    to element positions ``dst`` of ``out``: element-wise when aligned (4- and 8-byte
    types), else bytewise."""
    w = out.itemsize
    if w in (4, 8) and (src % w == 0).all() and data.ctypes.data % w == 0:
        parsers.gather(data[:data.size - data.size % w].view(out.dtype), src // w, counts, out, dst)
    else:
        parsers.gather(data, src, counts * w, out.view(np.uint8), dst * w)


def _pieces(recs: np.ndarray, col: Column) -> np.ndarray:
    """``recs`` with every plain record batch whose column holds more than
    :data:`FETCH_BYTES` cut into records of consecutive rows (a multiple of 8 each, so
    that validity bitmaps stay byte-aligned): a huge batch is fetched in bounded pieces."""
    w = col.item.itemsize
    rows = recs[:, fmt.R_LEN]
    huge = ((recs[:, fmt.R_TYPE] == fmt.RECORD_BATCH) & (recs[:, fmt.R_CODEC] < 0)
            & (rows * w > FETCH_BYTES))
    if col.ordered or not huge.any():
        return recs
    step = max(8, FETCH_BYTES // w // 8 * 8)
    out = []
    for rec, cut in zip(recs, huge, strict=True):
        if not cut:
            out.append(rec[None])
            continue
        first = np.arange(0, rec[fmt.R_LEN], step, dtype=np.int64)
        n = np.minimum(step, rec[fmt.R_LEN] - first)
        piece = np.repeat(rec[None], len(first), axis=0)
        piece[:, fmt.R_LEN] = piece[:, fmt.R_ROWS] = n
        piece[:, fmt.R_NULLS] = np.minimum(rec[fmt.R_NULLS], n)  # > 0: the bitmap is read
        piece[:, fmt.R_DOFF] += first * w
        piece[:, fmt.R_DLEN] = (n + int(col.offsets)) * w
        piece[:, fmt.R_VOFF] += first // 8
        piece[:, fmt.R_VLEN] = (n + 7) // 8
        out.append(piece)
    return np.concatenate(out)


def _subset(recs: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """``recs[keep]``, without the copy when every record is kept (the usual case)."""
    return recs if keep.all() else recs[keep]


def _starts(n: np.ndarray) -> np.ndarray:
    """Exclusive prefix sum."""
    out = np.zeros(len(n), np.int64)
    np.cumsum(n[:-1], out=out[1:])
    return out


def _to_granule(pos: int, n: int, granule: int) -> int:
    """``n`` rounded up so that ``pos + n`` ends on a ``granule`` boundary (a read costs
    whole granules: pages, or sectors when direct)."""
    return -(-(pos + n) // granule) * granule - pos
