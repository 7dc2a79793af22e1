"""JSON Lines shards (``.jsonl``, and zstd-compressed ``.jsonl.zst``): one JSON object per
line, the length an integer field (``--column``).

The text is streamed in blocks cut at newlines, so memory stays bounded whatever the file
size (no line may exceed :data:`MAX_LINE`). Each block is parsed for the one field by a
native pass per core (`gpu_profiler.kernels.jsonl.lengths`: JSON and UTF-8 checked, every
other value skipped, nothing built); a line it does not take is checked (UTF-8; it opens an
object) and parsed alone by pyarrow's JSON reader, which reads it or names it, and the
native pass goes on after it (from the `HANDED`-th such line of a block, pyarrow parses
the rest of the block at once, bisected by lines to name its first bad line if it fails).
The native pass takes what pyarrow takes, and hands it the rest: pyarrow decides.
Stricter than pyarrow, a line must hold exactly one object: pyarrow also takes ``{..}{..}``
on one line, an object spread over lines, and a ``null`` line (as a row of nulls; as the
first value of a buffer, it crashes pyarrow 26, so such a line never reaches it). Blank
lines are skipped; a missing field or ``null`` is a null length; a float, string, bool,
object or array is an error.

Bounds, whatever the file holds (a zstd stream is decompressed as it is read, in the same
blocks: no ratio or size limit is needed). Memory: four blocks of :data:`BLOCK` (4 MiB),
the values parsed from two (at most 3 bytes a byte of text), and the longest line twice
over while it is buffered (a line is at most :data:`MAX_LINE`,
256 MiB); naming a bad line costs 24 bytes per non-blank line of its block. Time: linear in
the text. Blank lines (nothing but JSON whitespace) cost no memory: a block of nothing
else is told by its first 64 bytes and one screening pass and never parsed (~0.06 ns a
byte); the native parse crosses the blank lines among others; a block that pyarrow parses
is first screened by one native pass (`gpu_profiler.kernels.jsonl.screen`: newlines
counted, every line's first byte checked, nothing allocated per line); and whitespace
running on without a newline is dropped as it comes instead of buffered. So 1 GiB of
newlines in a 33 KB ``.jsonl.zst`` reads in ~0.5 s (the whole process), in the memory of
any small file.

Runs of small shards are read together, one native pass a file and no stream, thread or
schema of their own (`many`).

A scan whose every line the native pass takes never loads pyarrow (~30 ms of a process
start): the file is read by Python's own file object and planned by its `fields`.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import os
import re
from collections.abc import Callable, Generator, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from gpu_profiler import native
from gpu_profiler.chunk import Chunk
from gpu_profiler.errors import ProfilerError, first_line, shard_error
from gpu_profiler.frozen import frozen
from gpu_profiler.io.pread import PositionedFile, io_mode
from gpu_profiler.prefetch import prefetched
from gpu_profiler.readers.arrow import arrays_to_chunks
from gpu_profiler.readers.base import (
    ZSTD_MAGIC,
    Field,
    Fields,
    FileShard,
    Joined,
    LengthSpec,
    Reading,
)

if TYPE_CHECKING:  # (loaded only where pyarrow parses: see the module's docstring)
    import pyarrow as pa
    import pyarrow.json as pj

BOM = b"\xef\xbb\xbf"  # pyarrow takes one at the start of a file, and so do we
#: Bytes of text read and parsed at a time (the buffer grows only for a longer line; 16 MiB
#: held 55 MiB more over 1e7 lines, in no less time).
BLOCK = 4 << 20
#: pyarrow's own block: the unit its threads parse in parallel.
PARSE_BLOCK = 1 << 20
#: Pieces of a block parsed at once by the native scan (`_scanned`), one per core; a block
#: under `PIECE_BYTES` is one piece, parsed in the caller's thread, and a shard of fewer
#: bytes is read there too, not by a read-ahead thread of its own (a thread started for one
#: block cost 2,000 shards of 54 KB a third of their time).
PIECES = max(1, min(os.cpu_count() or 1, 8))
PIECE_BYTES = 1 << 20
#: Lines of a block the native parse does not take that pyarrow parses one at a time before
#: it parses the rest of the block at once.
HANDED = 8
#: A line running over this many bytes without a newline is taken for a corrupt file (or
#: not JSON Lines) rather than buffered without bound.
MAX_LINE = 256 << 20
#: Bytes at the head of a file whose objects give its schema (more for a longer first line),
#: and at most this many of those objects (each is parsed by Python's json: 500 lines of
#: 108 bytes cost a 54 KB shard 1.5 ms, more than reading it; bench/results/layouts.md).
SCHEMA_BYTES = 64 << 10
SCHEMA_OBJECTS = 64

_WS = b" \t\r\n"  # JSON's whitespace
#: A field name the native scan cannot compare as raw bytes (JSON would escape it).
_UNPLAIN = re.compile(rb'["\\\x00-\x1f]')
_IN_ROW = re.compile(r"\.? in row \d+$")
_TWO = "holds {} JSON values, not one object (a missing newline?)"


@frozen
class JsonlPart(FileShard):
    """A JSON Lines shard, plain or zstd-compressed (told by its magic bytes, not its name)."""

    on_device = False
    read_ahead = True  # parsing works in the scan's thread: a read-ahead thread pays
    list_offsets = False  # lengths come from an integer field only (no --offsets-of)

    @staticmethod
    def together(parts: list[JsonlPart], reading: Reading,
                 like: tuple[str, Any] | None) -> Joined:
        """Small shards read many at once (`many`)."""
        from gpu_profiler.readers.jsonl import many

        return many.together(parts, reading, like)

    def joins(self, reading: Reading) -> bool:
        """Whether `together` takes this part in such a scan: when the native pass can find
        the field by its raw bytes (`together` then takes the small parts of a run)."""
        return plain_name(reading.spec.name)

    def fields(self) -> Fields:
        return fields(self.path)

    def schema(self) -> pa.Schema:
        return _arrow(fields(self.path))

    def chunks(self, reading: Reading) -> Iterator[Chunk]:
        if reading.spec.offsets:  # refused when the source is opened (FORMAT.takes)
            raise ProfilerError(f"{self.path}: JSON Lines lengths come from an integer field "
                                "(--column), not --offsets-of")
        return chunks(self.path, reading.spec, ahead=self.nbytes >= PIECE_BYTES)

    def batches(self, columns: list[str], codes: tuple[str, ...] = ()
                ) -> Iterator[pa.RecordBatch]:
        """The rows of ``columns`` (typed as `schema` types them; absent: null; ``codes``
        are plain strings), parsed by pyarrow block by block: for a scan that needs a field
        besides the lengths (`gpu_profiler.columns`)."""
        import pyarrow as pa
        import pyarrow.json as pj

        schema = self.schema()
        explicit = pa.schema([schema.field(c) for c in columns])
        parse = pj.ParseOptions(explicit_schema=explicit, unexpected_field_behavior="ignore")
        try:
            yield from pj.open_json(_open(self.path, arrow=True),
                                    pj.ReadOptions(block_size=16 << 20), parse)
        except (OSError, pa.ArrowException) as exc:
            raise ProfilerError(f"{self.path}: not JSON Lines pyarrow can read "
                                f"({first_line(exc)})") from None


def plain_name(name: str) -> bool:
    """Whether the native pass can find the field ``name`` by its raw bytes (JSON would
    escape none of them)."""
    return not _UNPLAIN.search(name.encode())


def fields(path: Path) -> Fields:
    """The top-level fields of the objects in the first :data:`SCHEMA_BYTES` (at least the
    first object, at most `SCHEMA_OBJECTS`), in the order they first appear, typed
    coarsely (int64, double, bool, string, ``struct<>``, ``list<item: null>``) so that shards
    whose nested values differ still agree. A field seen only as null is int64: it may be
    the length field (what it holds is checked when read). A file without objects has no
    fields."""
    types: dict[str, str | None] = {}
    objects = 0
    for block, line, seen in _blocks(path, SCHEMA_BYTES, grow=True):
        if seen is None or not seen.solid:  # blank lines only (in blocks growing to BLOCK)
            continue
        assert line is not None  # (checked blocks are counted)
        # the first block's lines, or those of a later one (after blank blocks) within
        # SCHEMA_BYTES of its first non-blank line
        first = line == 1
        rows = screen(block, line, min(seen.solid, SCHEMA_OBJECTS) if first else
                      min(seen.solid, SCHEMA_BYTES // 2 + 1, SCHEMA_OBJECTS))[1]
        base = 0 if first else int(rows[0, 0])
        limit = max(len(block) if first else base + SCHEMA_BYTES, int(rows[0, 2]))
        for start, k, end in rows.tolist():
            if end > limit or objects == SCHEMA_OBJECTS:
                break
            text = block[start:end].tobytes()
            text = text.removeprefix(BOM if line + k == 1 else b"").strip(_WS)
            try:
                obj = json.loads(text) if text[:1] == b"{" else None
            except (ValueError, RecursionError):  # RecursionError: nested over ~1000 deep
                obj = None
            if not isinstance(obj, dict):  # a bad line: reading names it, unless it is first
                if not objects:
                    raise ProfilerError(f"{path}: line {line + k}: {_line_reason(text)}")
                break
            objects += 1
            for key, value in obj.items():
                if types.get(key) is None:
                    types[key] = _coarse(value)
        if objects:
            break
    return Fields(tuple(Field(k, t or "int64") for k, t in types.items()))


def _coarse(value: object) -> str | None:
    """The coarse type of a JSON value, as pyarrow names it (`_arrow` makes it)."""
    for kind, name in ((bool, "bool"), (int, "int64"), (float, "double"), (str, "string"),
                       (dict, "struct<>"), (list, "list<item: null>")):
        if isinstance(value, kind):
            return name
    return None


def _arrow(fields: Fields) -> pa.Schema:
    """The pyarrow schema of `fields`' coarse types."""
    import pyarrow as pa

    types = {"bool": pa.bool_(), "int64": pa.int64(), "double": pa.float64(),
             "string": pa.string(), "struct<>": pa.struct([]),
             "list<item: null>": pa.list_(pa.null())}
    return pa.schema([(f.name, types[f.type]) for f in fields])


def chunks(path: Path, spec: LengthSpec, ahead: bool = True) -> Iterator[Chunk]:
    """Chunks of the integer field ``spec.name``, in line order (null where it is absent);
    unless ``ahead``, the blocks are read in the caller's thread."""
    name = np.frombuffer(spec.name.encode(), np.uint8)
    fast = plain_name(spec.name)
    # blocks are read (and screened, unless fast) ahead in a thread while the last two are
    # parsed: four buffers, one being read, one queued, two parsed
    blocks = _blocks(path, BLOCK, buffers=4, checked=not fast, mapped=True)
    if ahead:
        blocks = prefetched(blocks, depth=1)
    at = 1  # the line a fast block starts at: its parse counts its lines
    with ThreadPoolExecutor(PIECES) as pool:
        held: _Scan | None = None  # finished once the next block's pieces are parsing
        try:
            for block, line, seen in blocks:
                at = at if line is None else line
                scan = _Scan(block, line, name, pool) if seen is None else None
                if held is not None:
                    done, held = held, None
                    at = yield from done.finish(path, spec, at)
                held = scan
                if seen is not None:  # screened: checked, or blank lines only
                    if seen.solid:
                        table = _parse(block, at, seen, spec.name, path)
                        yield from arrays_to_chunks(table.column(0).chunks, spec)
                    at += seen.newlines
        except Exception as exc:  # reading a later block failed: the lines before come first
            if held is not None:
                at = yield from held.finish(path, spec, at)
            if isinstance(exc, _AtLine):
                raise ProfilerError(exc.said(at)) from None
            raise
        if held is not None:
            yield from held.finish(path, spec, at)


class _AtLine(Exception):
    """An error of the text after the blocks read so far, in a read that does not count
    their lines (`_blocks`, not ``checked``): ``said(line)`` is its message, once the caller
    (whose parse counts them) knows the number of the line it begins."""

    def __init__(self, said: Callable[[int], str]) -> None:
        super().__init__(said(0))
        self.said = said


def _said(said: Callable[[int], str], line: int | None) -> Exception:
    """The error ``said(line)``; an `_AtLine` when the line is not counted (None)."""
    return ProfilerError(said(line)) if line is not None else _AtLine(said)


class _Scan:
    """One block's field, parsed by `gpu_profiler.kernels.jsonl.lengths` in `PIECES` pieces
    of whole lines on the pool's threads (a block under `PIECE_BYTES`: one piece, in the
    caller's thread), started at once and `finish`ed after the next block's start, so that
    no core waits at the end of a block for its last piece. A line that kernel does not
    take is checked and parsed alone by pyarrow (`_parse`), which reads it or names it, and
    the kernel goes on after it; from the `HANDED`-th such line of a block, pyarrow parses
    the rest of the block at once (a file of lines the kernel never takes costs what
    pyarrow's parse does, not a call a line)."""

    def __init__(self, block: memoryview, line: int | None, name: np.ndarray,
                 pool: ThreadPoolExecutor) -> None:
        self.block = block
        text = np.frombuffer(block, np.uint8)
        pieces = PIECES if len(text) >= PIECE_BYTES else 1
        cuts = [0]
        for k in range(1, pieces):
            cuts.append(_line_after(block, max(cuts[-1], len(text) * k // pieces)))
        cuts.append(len(text))
        lengths = native.kernel("jsonl_lengths")
        bom = line == 1  # (the first block: a byte order mark may open it)

        def scan(lo: int, hi: int) -> tuple[np.ndarray, np.ndarray, int, int, int]:
            values = np.empty((hi - lo) // 3 + 1, np.int64)  # a line has 3 bytes or more
            valid = np.empty(values.size, np.bool_)
            pos, taken, newlines = lengths(text[lo:hi], int(bom and lo == 0), name, values,
                                           valid)
            return values[:taken], valid[:taken], lo + pos, hi, newlines

        self.scan = scan
        self.pieces = [pool.submit(scan, lo, hi) if pieces > 1 else _Done(scan(lo, hi))
                       for lo, hi in zip(cuts[:-1], cuts[1:], strict=True)]

    def finish(self, path: Path, spec: LengthSpec, line: int) -> Generator[Chunk, None, int]:
        """The block's chunks, its first line being ``line``; returns the line after it."""
        values: list[np.ndarray] = []
        valid: list[np.ndarray] = []
        handed = 0
        for piece in self.pieces:
            v, ok, stop, hi, newlines = piece.result()
            values.append(v)
            valid.append(ok)
            while stop < hi:  # a line the kernel does not take, at line + newlines
                handed += 1
                end = len(self.block) if handed == HANDED else _line_after(self.block, stop)
                one = self.block[stop:end]  # the line, or the rest of the block
                _check_utf8(one, line + newlines, path)
                seen = screen(one, line + newlines)[0]
                yield from _gathered(values, valid)
                if seen.solid:
                    table = _parse(one, line + newlines, seen, spec.name, path)
                    yield from arrays_to_chunks(table.column(0).chunks, spec)
                if handed == HANDED:
                    return line + newlines + seen.newlines
                v, ok, stop, _, more = self.scan(end, hi)
                values.append(v)
                valid.append(ok)
                newlines += seen.newlines + more
            line += newlines
        yield from _gathered(values, valid)
        return line


def _gathered(values: list[np.ndarray], valid: list[np.ndarray]) -> Iterator[Chunk]:
    """The values parsed so far as one chunk (none if there are none), emptying the lists."""
    if sum(v.size for v in values):
        mask = np.concatenate(valid)
        yield Chunk(np.concatenate(values), None if mask.all() else mask)
    values.clear()
    valid.clear()


@frozen
class _Done:
    """A piece parsed in the caller's thread, with a future's `result`."""

    value: tuple[np.ndarray, np.ndarray, int, int, int]

    def result(self) -> tuple[np.ndarray, np.ndarray, int, int, int]:
        return self.value


@frozen
class Screened:
    """What `screen` found in a block: its newlines, its non-blank lines (up to and
    including ``stray``), and the index in the block of the first non-blank line that does
    not open an object (None: every one does)."""

    newlines: int
    solid: int
    stray: int | None

    @property
    def objects(self) -> int:
        return self.solid - (self.stray is not None)


def screen(block: memoryview, line: int, rows: int = 0) -> tuple[Screened, np.ndarray]:
    """The block's `Screened` (one native pass, no per-line memory: see
    `gpu_profiler.kernels.jsonl.screen`), and its first ``rows`` non-blank lines as rows of
    ``(start, index in the block, end)``. A line opens with ``{`` after whitespace (and a
    byte order mark on line 1)."""
    out = np.empty((rows, 3), np.int64)
    newlines, solid, stray = native.kernel("jsonl_screen")(
        np.frombuffer(block, np.uint8), int(line == 1), out)
    return Screened(newlines, solid, None if stray < 0 else stray), out[:min(rows, solid)]


def _line_after(block: memoryview, at: int) -> int:
    """Where the first line that starts after byte ``at`` of ``block`` starts (or its end)."""
    while at < len(block):
        k = block[at:at + (64 << 10)].tobytes().find(b"\n")
        if k >= 0:
            return at + k + 1
        at += 64 << 10
    return len(block)


def _blocks(path: Path, size: int, buffers: int = 1, grow: bool = False,
            checked: bool = True, mapped: bool = False
            ) -> Iterator[tuple[memoryview, int | None, Screened | None]]:
    """The file's text in blocks of whole lines (the last may lack its newline), each
    checked to be UTF-8 and screened, read ``size`` bytes at a time (doubled after each
    blank block, up to `BLOCK`, if ``grow``): ``(block, number of its first line, what
    `screen` found)``. Ends after a block with a stray line (whose reader stops there).
    Unless ``checked``, the caller's parse does all three (a pass over the text fewer:
    ~5% of a scan of short lines): every block comes with None for its first line's number
    but the first's (1), and for what `screen` found but in a blank one (`_blank`); an
    error of the text read next is an `_AtLine`. A block is a view of one of ``buffers``
    buffers, taken in turn: the caller may still hold ``buffers - 1`` blocks when it asks
    for the next. No buffer starts larger than a plain file (a small shard's block is not
    4 MiB of zeroed memory). If ``mapped`` (a scan's blocks, not the few a schema reads),
    a plain file of more than one block that the page cache holds is `_mapped_blocks`
    instead.
    """
    if mapped:
        with _positioned(path, size) as warm:
            if warm is not None:
                yield from _mapped_blocks(warm, size, checked)
                return
    with _open(path) as f:
        plain = isinstance(f, io.FileIO)
        if plain:
            size = min(size, os.fstat(f.fileno()).st_size + 1)  # + 1: its end in one read
        ring: list[bytearray | None] = [bytearray(size), *[None] * (buffers - 1)]
        k, buf = 0, ring[0]
        assert buf is not None
        view = memoryview(buf)
        # buf[:have]: the start of a line whose newline is still unread; line: its number,
        # while counted (checked, or before the first block: then the caller counts)
        have, line, counted = 0, 1, True
        while True:
            if have == len(buf) and not screen(view[:have], line if counted else 0)[0].solid:
                have = 0  # the start of a line, all whitespace: dropped, not buffered
            elif have == len(buf):  # no newline in the whole buffer: a longer one
                if have > MAX_LINE:
                    raise _said(lambda at: f"{path}: line {at} runs over {_mib(MAX_LINE)} "
                                "without a newline: not JSON Lines", line if counted else None)
                buf = ring[k] = bytearray(min(2 * len(buf), MAX_LINE + 1))
                buf[:have] = view[:have]
                view = memoryview(buf)
            try:
                n = f.readinto(view[have:])
            except Exception as exc:
                if not shard_error(exc):
                    raise
                def said(at: int, what: str = "read error" if plain else
                         "corrupt or truncated zstd stream", why: str = first_line(exc)) -> str:
                    return f"{path}: {what} at line {at}: {why}"
                raise _said(said, line if counted else None) from None
            if not n:
                if have:
                    yield from _handed(view[:have], line, counted, checked, path, size, grow)
                return
            end = have + n
            cut = buf.rfind(b"\n", have, end) + 1
            if not cut:
                have = end
                continue
            stop, line, size = yield from _handed(view[:cut], line, counted, checked, path,
                                                  size, grow)
            if stop:
                return
            counted = checked
            # the unfinished line moves to the start of the next buffer (one that fits it,
            # dropping one grown far beyond what it holds)
            have = end - cut
            want = max(size, min(2 * have, MAX_LINE + 1), have + 1)
            k = (k + 1) % buffers
            nxt = ring[k]
            if nxt is None or not want <= len(nxt) <= 4 * want:
                nxt = ring[k] = bytearray(want)
            nxt_view = view if nxt is buf else memoryview(nxt)
            nxt_view[:have] = view[cut:end]
            buf, view = nxt, nxt_view


@contextlib.contextmanager
def _positioned(path: Path, size: int) -> Iterator[PositionedFile | None]:
    """The file as a `PositionedFile` when it is larger than ``size``, maps it (held by the
    page cache) and is no zstd stream, else None (a file it cannot open or read is
    `_open`'s to name). A file of one block is read in one copy: opening, sampling and
    mapping it cost a 54 KB shard more (0.24 ms against 0.15-0.22)."""
    io_mode()  # (a bad GPU_PROFILER_IO is an error here, as for every reader)
    try:
        f = PositionedFile(path) if os.stat(path).st_size > size else None
    except (OSError, ProfilerError):
        f = None
    if f is None:
        yield None
        return
    with f:
        try:
            plain = f.mapped and os.pread(f.fd, len(ZSTD_MAGIC), 0) != ZSTD_MAGIC
        except OSError:
            plain = False
        yield f if plain else None


def _mapped_blocks(f: PositionedFile, size: int, checked: bool
                   ) -> Iterator[tuple[memoryview, int | None, Screened | None]]:
    """`_blocks` of a file the page cache holds: each block a view of a window mapped at
    the line it starts with (populated at once), none copied into a buffer. The copy was a
    tenth of a scan of short lines, a third of one of 2 KB documents, in CPU time
    (bench/results/layouts.md)."""
    pos, n, line, counted = 0, size, 1, True
    while pos < f.size:
        n = min(n, f.size - pos)
        window = f.values(pos, n, "u1").data
        cut = _line_end(window)
        if pos + n == f.size and n - cut <= MAX_LINE:
            cut = n  # with the last line, which has no newline
        if not cut:  # no newline: a line that starts with whitespace only is dropped,
            if not screen(window, line if counted else 0)[0].solid:  # else mapped longer
                pos += n
            elif n > MAX_LINE:
                raise _said(lambda at: f"{f.path}: line {at} runs over {_mib(MAX_LINE)} "
                            "without a newline: not JSON Lines", line if counted else None)
            else:
                n = min(2 * n, MAX_LINE + 1)
            continue
        stop, line, _ = yield from _handed(window[:cut], line, counted, checked, f.path,
                                           size, False)
        if stop:
            return
        counted = checked
        pos, n = pos + cut, size


def _handed(block: memoryview, line: int, counted: bool, checked: bool, path: Path,
            size: int, grow: bool) -> Generator[
                tuple[memoryview, int | None, Screened | None], None, tuple[bool, int, int]]:
    """Hand one block of `_blocks` over, with the number of its first line if ``counted``
    and what `screen` found (``checked``: checked to be UTF-8 and screened; else only
    told if blank); return whether the read stops there (a stray line), the number of the
    line after it (counted only if ``checked``) and the block size next: ``size``, doubled
    after a blank block up to `BLOCK` if ``grow``."""
    seen, newlines = _checked(block, line, path) if checked else \
        (_blank(block, line if counted else 0), 0)
    yield block, line if counted else None, seen
    if grow and seen is not None and not seen.solid:
        size = min(2 * size, max(size, BLOCK))
    return seen is not None and seen.stray is not None, line + newlines, size


def _line_end(block: memoryview) -> int:
    """Where the last line that ends with a newline in ``block`` ends (0: none does)."""
    hi = len(block)
    while hi > 0:
        lo = max(0, hi - (64 << 10))
        k = block[lo:hi].tobytes().rfind(b"\n")
        if k >= 0:
            return lo + k + 1
        hi = lo
    return 0


def _blank(block: memoryview, line: int) -> Screened | None:
    """What `screen` finds in a block of blank lines only (none to parse: a file of them is
    crossed at the screen's speed, not a line at a time), told by its first 64 bytes, then
    screened whole; None for any other block, whose parse counts its lines."""
    if (np.frombuffer(block[:64], np.uint8) > 32).any():
        return None
    seen = screen(block, line)[0]
    return None if seen.solid else seen


def _checked(block: memoryview, line: int, path: Path) -> tuple[Screened, int]:
    """What `screen` finds in the block once it is checked to be UTF-8, and its newlines."""
    _check_utf8(block, line, path)
    seen = screen(block, line)[0]
    return seen, seen.newlines


def _open(path: Path, arrow: bool = False) -> Any:
    """The file's text: the file itself (as pyarrow's stream if ``arrow``, for pyarrow's
    parse), or pyarrow's decompressing stream of a zstd one."""
    try:
        zstd = _zstd(path)
        if not (zstd or arrow):
            return open(path, "rb", buffering=0)
        import pyarrow as pa

        return pa.input_stream(str(path), compression="zstd" if zstd else None)
    except Exception as exc:
        if not shard_error(exc):
            raise
        raise ProfilerError(f"{path}: cannot read ({first_line(exc)})") from None


def _zstd(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(4) == ZSTD_MAGIC


def _mib(n: int) -> str:
    return f"{n / (1 << 20):g} MiB"


@functools.lru_cache(maxsize=8)
def _options(name: str | None) -> pj.ParseOptions:
    """pyarrow's parse of the integer field ``name`` (None: of no field, JSON only checked),
    every other field ignored."""
    import pyarrow as pa
    import pyarrow.json as pj

    return pj.ParseOptions(explicit_schema=pa.schema([] if name is None else
                                                     [(name, pa.int64())]),
                           unexpected_field_behavior="ignore")


def _read_options(nbytes: int, threads: bool = False) -> pj.ReadOptions:
    """Threads parse ``PARSE_BLOCK`` pieces; one thread takes the text as one block (so no
    line straddles two)."""
    import pyarrow.json as pj

    return pj.ReadOptions(use_threads=threads,
                          block_size=PARSE_BLOCK if threads else max(nbytes, PARSE_BLOCK))


def _parse(block: memoryview, line: int, seen: Screened, name: str, path: Path) -> pa.Table:
    """One block's field, checked (valid JSON, the field an integer, one object per
    non-blank line), or the error of a bad line."""
    import pyarrow as pa
    import pyarrow.json as pj

    objects = seen.objects
    if seen.stray is not None:
        raise _bad_block(block, line, name, path, seen)
    data = pa.py_buffer(block)
    try:
        table = pj.read_json(data, read_options=_read_options(len(block), True),
                             parse_options=_options(name))
    except pa.ArrowInvalid as exc:
        if "straddl" not in str(exc):  # straddling: a line longer than PARSE_BLOCK
            raise _bad_block(block, line, name, path) from None
        try:
            table = pj.read_json(data, read_options=_read_options(len(block)),
                                 parse_options=_options(name))
        except pa.ArrowInvalid:
            raise _bad_block(block, line, name, path) from None
    if table.num_rows != objects:
        raise _bad_block(block, line, name, path)
    return table


def _check_utf8(block: memoryview, line: int, path: Path) -> None:
    """Raise, naming the line, unless the block is valid UTF-8 (as JSON must be; pyarrow
    does not check the strings it skips)."""
    bad, = native.kernel("jsonl_utf8_error")(np.frombuffer(block, np.uint8))
    if bad < 0:
        return
    before = block[:bad].tobytes()
    at, column = line + before.count(b"\n"), bad - before.rfind(b"\n")
    raise ProfilerError(f"{path}: line {at}: invalid UTF-8 (byte 0x{block[bad]:02x} at byte "
                        f"{column} of the line)")


def _bad_block(block: memoryview, line: int, name: str, path: Path,
               seen: Screened | None = None) -> ProfilerError:
    """The error of the first bad line of a block that failed as a whole, or of its stray
    line (one that opens no object: ``seen.stray``) when no line before it is bad.
    Bisected over the non-blank lines (blank ones cost nothing, and take no memory here):
    each step parses half of what is left, never a stray line (see the module's
    docstring)."""
    import pyarrow as pa
    import pyarrow.json as pj

    if seen is None:
        seen = screen(block, line)[0]
    solid = screen(block, line, seen.solid)[1]  # (start, index in the block, end) rows
    bounds = np.append(solid[:, 0], len(block))

    def fault(i: int, j: int) -> str | None:
        data = pa.py_buffer(block[bounds[i]:bounds[j]])
        try:
            table = pj.read_json(data, read_options=_read_options(data.size),
                                 parse_options=_options(name))
        except pa.ArrowInvalid as exc:
            return _reason(str(exc), name)
        if table.num_rows == j - i:
            return None
        if j - i == 1:
            return _TWO.format(table.num_rows)
        return f"{table.num_rows} JSON values in {j - i} lines"

    lo, hi = 0, len(solid)
    if seen.stray is not None:
        hi -= 1  # the stray line, the last one screened
        if not hi or fault(0, hi) is None:
            start, _, end = solid[hi]
            text = block[start:end].tobytes()
            text = text.removeprefix(BOM if line == 1 and not start else b"").strip(_WS)
            return ProfilerError(f"{path}: line {line + seen.stray}: {_line_reason(text)}")
    if not hi:  # no non-blank line (cannot fail): said rather than assumed
        return ProfilerError(f"{path}: line {line}: not one JSON object per line")
    while hi - lo > 1:  # the first bad line is in [lo, hi)
        mid = (lo + hi) // 2
        if fault(lo, mid) is not None:
            hi = mid
        else:
            lo = mid
    reason = fault(lo, lo + 1) or "not one JSON object per line"  # e.g. one over two lines
    if solid[lo, 2] == len(block) and block[-1] != 10 and reason.startswith("invalid JSON"):
        reason += " (the file ends inside this line: truncated?)"
    return ProfilerError(f"{path}: line {line + int(solid[lo, 1])}: {reason}")


def _reason(message: str, name: str) -> str:
    """pyarrow's message about one line, said in terms of the line and the field."""
    message = _IN_ROW.sub("", message.splitlines()[0] if message else "")
    if m := re.match(r"Failed to convert JSON to int64, couldn't parse:(.*)", message):
        value = m.group(1)[:40]
        what = "outside the int64 range" if re.fullmatch(r"-?\d+", value) else "not an integer"
        return f"{name!r} is {value}: {what}"
    if m := re.match(r"JSON parse error: Column\(/.*\) changed from number to (\w+)", message):
        return f"{name!r} is {_a(m.group(1))}, not an integer"
    if m := re.match(r"JSON parse error: Column\(\) changed from object to (\w+)", message):
        return f"not a JSON object but {_a(m.group(1))}"
    if "was specified twice" in message:
        return f"{name!r} appears twice in the object"
    return "invalid JSON: " + message.removeprefix("JSON parse error: ").rstrip(".")


def _line_reason(text: bytes) -> str:
    """Why one line (stripped) is not a JSON object; said without pyarrow when the line
    does not open with ``{`` (a ``null`` first value crashes it)."""
    if text[:1] == b"{":
        import pyarrow as pa
        import pyarrow.json as pj

        try:
            rows = pj.read_json(pa.py_buffer(text), read_options=_read_options(len(text)),
                                parse_options=_options(None)).num_rows
        except pa.ArrowInvalid as exc:
            return _reason(str(exc), "")
        # pyarrow reads one object where Python's json failed: nested beyond its recursion
        return _TWO.format(rows) if rows > 1 else "nested too deeply to read its fields"
    if text.startswith(BOM):
        return "invalid JSON: a byte order mark (one may open only the file)"
    if len(text) > 1 << 16:  # too long to parse for a message: its first byte says
        kind = _KINDS.get(text[:1])
        return f"not a JSON object but {kind}" if kind else "invalid JSON"
    try:
        value = json.loads(text.decode())
    except ValueError as exc:
        return "invalid JSON: " + (exc.msg if isinstance(exc, json.JSONDecodeError) else
                                   first_line(exc))
    except RecursionError:
        return "nested too deeply to read its fields"
    kinds: list[tuple[type | tuple[type, ...], str]] = [
        (bool, "a boolean"), ((int, float), "a number"), (str, "a string"), (list, "an array"),
        (dict, "an object")]
    kind = next((k for t, k in kinds if isinstance(value, t)), "null")
    return f"not a JSON object but {kind}"


_KINDS = {b"n": "null", b"t": "a boolean", b"f": "a boolean", b'"': "a string",
          b"[": "an array", b"{": "an object", **dict.fromkeys(
              [b"-", *(str(d).encode() for d in range(10))], "a number")}


def _a(kind: str) -> str:
    return ("an " if kind[:1] in "aeiou" else "a ") + kind
