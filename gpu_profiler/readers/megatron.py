"""Megatron-LM / NeMo indexed datasets: ``PREFIX.idx`` (the index) beside ``PREFIX.bin``
(the tokens). The lengths are the index's sequence sizes, read from the .idx alone: the
.bin is never opened.

The index, as Megatron-LM's ``_IndexWriter`` writes it (little-endian)::

    b"MMIDIDX\\x00\\x00"               9 bytes
    version        <Q  (1)         offset 9
    dtype code     <B              offset 17 (the .bin's token dtype)
    sequence count <Q  S           offset 18
    document count <Q  D           offset 26
    sizes          int32[S]        offset 34
    pointers       int64[S]        (byte offsets into the .bin; not needed)
    document index int64[D]        starts at 0; document j is sequences idx[j]:idx[j+1]
    modes          int8[S]         optional (multimodal datasets)

``--unit document`` sums each document's sequences. Every count and offset is checked
against the file size before anything is allocated, and the document index against the
sequence count as it streams; sizes and the document index are read in bounded windows.
"""

from __future__ import annotations

import glob
import os
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import numpy as np

from gpu_profiler import native
from gpu_profiler.chunk import Chunk
from gpu_profiler.errors import ProfilerError
from gpu_profiler.frozen import frozen
from gpu_profiler.io.pread import PositionedFile, Reuse
from gpu_profiler.readers.base import (
    FixedShard,
    Reading,
    ShardFormat,
    SourceOptions,
)

MAGIC = b"MMIDIDX\x00\x00"
HEADER = 34  # magic, version, dtype code, sequence and document counts
#: Megatron-LM's ``DType`` codes (the .bin's token dtype; named in messages only).
DTYPES = {1: "uint8", 2: "int8", 3: "int16", 4: "int32", 5: "int64", 6: "float64",
          7: "float32", 8: "uint16"}
#: Sizes (or document boundaries) per chunk: 4 MiB of sizes stay in cache from their read
#: to their count (4 times as many took 1e8 sequences 157 ms, not 98; documents 633, not 414).
WINDOW = 1 << 20
#: Sizes summed at a time before the document boundaries among them are read (8 KiB of
#: sums: L1).
SPAN = 1 << 10


@frozen
class Index:
    """A validated index header: where its arrays lie."""

    path: Path
    sequences: int
    documents: int  # entries of the document index (one more than documents)
    sizes_at: ClassVar[int] = HEADER

    @property
    def documents_at(self) -> int:
        return HEADER + 12 * self.sequences


def _corrupt(path: Path, offset: int, what: str) -> ProfilerError:
    return ProfilerError(f"{path}: corrupt Megatron-LM index at offset {offset}: {what}")


def read_index(path: Path) -> Index:
    """The header of the index at ``path``, checked against its size."""
    try:
        with open(path, "rb") as f:
            head = f.read(HEADER)
            size = os.fstat(f.fileno()).st_size
    except OSError as exc:
        raise ProfilerError(f"{path}: cannot read ({exc.strerror})") from None
    if not head.startswith(MAGIC):
        raise ProfilerError(f"{path}: not a Megatron-LM index (no {MAGIC!r} header at "
                            "offset 0)")
    if len(head) < HEADER:
        raise _corrupt(path, len(head), f"the file ends inside the {HEADER}-byte header")
    version, code, sequences, documents = struct.unpack("<QBQQ", head[9:])
    if version != 1:
        raise _corrupt(path, 9, f"version {version} (only version 1 exists)")
    if code not in DTYPES:
        raise _corrupt(path, 17, f"unknown token dtype code {code} (known: 1..8)")
    need = HEADER + 12 * sequences + 8 * documents
    if size not in (need, need + sequences):  # with or without the int8 modes
        raise _corrupt(path, 18, f"{sequences:,} sequences and {documents:,} document index "
                       f"entries need {need:,} bytes (or {need + sequences:,} with modes), "
                       f"the file has {size:,}")
    return Index(path, sequences, documents)


def is_index(path: Path) -> bool:
    """Whether ``path`` is a file that starts like a Megatron-LM index."""
    try:
        with open(path, "rb") as f:
            return f.read(len(MAGIC)) == MAGIC
    except OSError:
        return False


def companion(path: Path) -> Path | None:
    """The index of the Megatron dataset whose data file ``path`` is (``PREFIX.bin`` beside
    a ``PREFIX.idx``), else None."""
    if path.suffix != ".bin":
        return None
    idx = path.with_suffix(".idx")
    return idx if is_index(idx) else None


@frozen
class MegatronPart(FixedShard):
    """A Megatron-LM indexed dataset, named by its ``.idx``."""

    def length_source(self, options: SourceOptions) -> str:
        return f"Megatron-LM index: {options.unit or 'sequence'} lengths"

    def chunks(self, reading: Reading) -> Iterator[Chunk]:
        if (reading.source.unit or "sequence") == "document":
            return _documents(self.path)
        return _sequences(self.path)


def _sequences(path: Path) -> Iterator[Chunk]:
    """The sizes, a window at a time (int32: negative ones are counted as invalid)."""
    index = read_index(path)
    with PositionedFile(path) as f:
        for lo in range(0, index.sequences, WINDOW):
            count = min(WINDOW, index.sequences - lo)
            yield Chunk(f.values(index.sizes_at + 4 * lo, count, "<i4"))


def _documents(path: Path) -> Iterator[Chunk]:
    """Each document's tokens, as list offsets: the running sum of the sizes at every
    document boundary, a window of boundaries at a time (consecutive windows share one)."""
    index = read_index(path)
    if index.documents == 0:
        raise _corrupt(path, 26, "no document index (document count 0): --unit document "
                       "needs one")
    with PositionedFile(path) as f:
        sums = _RunningSum(f, index)
        window = np.empty(min(index.documents, WINDOW + 1), "<i8")
        for lo in range(0, max(index.documents - 1, 1), WINDOW):
            hi = min(index.documents, lo + WINDOW + 1)
            bounds = f.values(index.documents_at + 8 * lo, hi - lo, "<i8", window)
            _check_bounds(index, bounds, lo)
            yield Chunk(sums.at(bounds), offsets=True)


def _check_bounds(index: Index, bounds: np.ndarray, lo: int) -> None:
    """Document index entries ``lo..`` start at 0, never decrease, and end at the sequence
    count (as Megatron-LM asserts when it opens a dataset)."""
    at = index.documents_at + 8 * lo
    if lo == 0 and bounds[0] != 0:
        raise _corrupt(index.path, at, f"the document index starts at {bounds[0]}, not 0")
    outside, down = native.kernel("document_bounds")(bounds, index.sequences)
    if outside >= 0:
        raise _corrupt(index.path, at + 8 * outside, f"document boundary {bounds[outside]} "
                       f"lies outside the {index.sequences:,} sequences")
    if down >= 0:
        raise _corrupt(index.path, at + 8 * down, f"document boundary {bounds[down]} comes "
                       f"after {bounds[down - 1]} (the document index must not decrease)")
    if lo + bounds.size == index.documents and bounds[-1] != index.sequences:
        raise _corrupt(index.path, at + 8 * (bounds.size - 1),
                       f"the document index ends at {bounds[-1]}, not at the sequence count "
                       f"{index.sequences:,}")


class _RunningSum:
    """Sums of the sizes before given sequence numbers, for non-decreasing numbers: the
    sizes are read once, in order, a window at a time, and summed at the numbers in one
    native pass (`gpu_profiler.kernels.documents.running_sums`)."""

    def __init__(self, f: PositionedFile, index: Index) -> None:
        self.f, self.index = f, index
        self.pos = 0  # sizes before this sequence are summed ...
        self.total = 0  # ... to this
        self.sizes = np.empty(min(index.sequences, WINDOW), "<i4")
        self.spans = np.empty(SPAN + 1, np.int64)  # the kernel's prefix sums of a span
        self.outs = Reuse(4)  # the sums handed out, taken again once nothing uses them

    def at(self, bounds: np.ndarray) -> np.ndarray:
        out = self.outs.take(bounds.size, np.int64)[:bounds.size]
        i = 0
        while i < bounds.size:
            k = int(np.searchsorted(bounds, self.pos, side="right"))
            out[i:k] = self.total  # boundaries at the current position
            i = k
            if i == bounds.size:
                break
            count = min(WINDOW, int(bounds[-1]) - self.pos)
            sizes = self.f.values(self.index.sizes_at + 4 * self.pos, count, "<i4",
                                  self.sizes)
            k = int(np.searchsorted(bounds, self.pos + count, side="right"))
            total = native.kernel("running_sums")(sizes, bounds[i:k], self.pos, self.total,
                                                  out[i:k], self.spans)[0]
            i, self.pos, self.total = k, self.pos + count, total
        return out


def expand(source: str) -> list[Path]:
    """The indexes a path or glob that names no file stands for: Megatron prefixes
    (``data/books_text_document`` names ``data/books_text_document.idx``)."""
    return sorted(Path(p) for p in glob.glob(source + ".idx", recursive=True)
                  if Path(p).is_file() and is_index(Path(p)))


def _sniff(head: bytes, path: str) -> bool:
    """An index by its magic bytes; a ``.bin`` beside an index of the same prefix is that
    dataset's data file (never a token stream)."""
    return head.startswith(MAGIC) or (path.endswith(".bin")
                                      and companion(Path(path)) is not None)


def _part(path: str | Path) -> MegatronPart:
    return MegatronPart(companion(Path(path)) or path)


FORMAT = ShardFormat("megatron", "Megatron-LM indexed dataset", (".idx",), _sniff, _part,
                     takes=frozenset({"unit"}), expand=expand)
