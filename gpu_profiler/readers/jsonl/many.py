"""Many small JSON Lines shards read together (`gpu_profiler.readers.base.Together`): a run
of them read into one buffer (one ``preadv`` each), each file's text parsed for the length
field by the native pass (`gpu_profiler.kernels.jsonl.lengths`, one call a file) into one
array, handed over as one chunk per `RUN_BYTES` of text. A shard's own reader costs ~0.6
ms of set-up (its stream and buffers, its schema parsed by Python's json from up to 64
objects), more than parsing a 50 KB shard (bench/results/layouts.md).

A shard is read here only when the native pass takes all of it and its first object holds
the field as an integer: its own reader would then find the field in its schema, typed
int64, and read the same values. Any other (zstd, a first object without the field or
with it null, a line the pass does not take, a file not its listed size) is left to its
own reader, which reads it or names its bad line."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from gpu_profiler import native
from gpu_profiler.chunk import Chunk
from gpu_profiler.io.pread import read_whole
from gpu_profiler.readers.base import ZSTD_MAGIC, Joined, Leave, Reading
from gpu_profiler.readers.jsonl import JsonlPart

#: A shard larger than this is read by its own reader (its blocks parsed on every core).
MOST_BYTES = 1 << 20
#: Text read and parsed at a time: its lengths make one chunk (the buffer it is read into
#: is touched as far as it goes: 16 MiB held 2 x 12 MiB more than polars at 2,000 shards).
RUN_BYTES = 4 << 20


def together(parts: list[JsonlPart], reading: Reading, like: tuple[str, Any] | None
             ) -> Joined:
    """See `Together`: the parts of at most `MOST_BYTES` (`Lines`), of a field name the
    native pass compares as raw bytes (the parts' `joins`)."""
    mine = [i for i, p in enumerate(parts) if p.nbytes <= MOST_BYTES]
    if not mine:
        return Leave(len(parts))
    return Lines(parts, mine, reading.spec.name.encode())


class Lines:
    """The `Joined` of `together`: parts ``mine`` (indices among ``parts``), the integer
    field ``name``. ``read[i]``: whether part ``mine[i]`` was read here."""

    def __init__(self, parts: list[JsonlPart], mine: list[int], name: bytes) -> None:
        self._n, self._mine = len(parts), mine
        self._parts = [parts[i] for i in mine]
        self._name = np.frombuffer(name, np.uint8)
        self.read = np.zeros(len(mine), bool)

    def counting(self) -> None:
        return None

    def chunks(self) -> Iterator[Chunk]:
        """The parts' fields, `RUN_BYTES` of text at a time."""
        sizes = np.array([p.nbytes for p in self._parts], np.int64)
        lo = 0
        while lo < len(self._parts):
            hi = lo + 1
            total = int(sizes[lo])
            while hi < len(self._parts) and total + sizes[hi] <= RUN_BYTES:
                total += int(sizes[hi])
                hi += 1
            chunk = self._run(lo, hi, sizes[lo:hi])
            if chunk is not None:
                yield chunk
            lo = hi

    def _run(self, lo: int, hi: int, sizes: np.ndarray) -> Chunk | None:
        """Parts ``lo..hi - 1`` (of ``sizes`` bytes) read and parsed."""
        buf, starts, unread = read_whole([p.at for p in self._parts[lo:hi]], sizes)
        # (a line holds 2 bytes or more: `{}`; untouched pages of these cost nothing)
        values = np.empty(int((sizes // 2 + 1).sum()), np.int64)
        valid = np.empty(values.size, np.bool_)
        lengths = native.kernel("jsonl_lengths")
        at = 0
        for k in range(hi - lo):
            text = buf[int(starts[k]):int(starts[k] + sizes[k])]
            if unread[k] or bytes(text[:4]) == ZSTD_MAGIC:
                continue
            pos, rows, _ = lengths(text, 1, self._name, values[at:], valid[at:])
            if pos == text.size and rows and valid[at]:
                self.read[lo + k] = True
                at += rows
        if not at:
            return None
        return Chunk(values[:at], None if valid[:at].all() else valid[:at])

    def left(self) -> list[int]:
        done = {self._mine[i] for i in np.flatnonzero(self.read)}
        return [i for i in range(self._n) if i not in done]
