"""Positioned reads: a file read only with ``os.preadv`` into numpy buffers. Ranges are
coalesced (without ever adding a page nobody asked for) and read concurrently by a thread
pool, so many small reads reach the device's bandwidth; every requested byte is counted."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gpu_profiler.errors import ProfilerError

#: Page size the coalescing rounds to: merging two ranges never adds a page neither touches.
PAGE = 4096
#: Reads larger than this are split into pieces read in parallel.
PIECE = 4 << 20
#: Reads in flight at once.
WORKERS = 8
#: Each piece sits at the same offset modulo this in the buffer as in the file, so buffers
#: aligned in the file are aligned in memory.
ALIGN = 64

_executor: ThreadPoolExecutor | None = None


def _pool() -> ThreadPoolExecutor:
    global _executor
    if _executor is None:
        _executor = ThreadPoolExecutor(WORKERS, thread_name_prefix="gpu-profiler-read")
    return _executor


@dataclass(frozen=True)
class Fetched:
    """Bytes of some file ranges, packed into one buffer.

    Attributes:
        data: uint8 buffer holding the pieces back to back.
        starts: absolute file offset of each piece (sorted).
        ends: absolute end of each piece.
        pos: position of each piece in ``data``.
    """

    data: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    pos: np.ndarray

    def _piece(self, lo: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.starts, lo, side="right") - 1

    def covers(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """Whether each range ``[lo, hi)`` lies inside one fetched piece (empty ranges do)."""
        i = self._piece(lo)
        inside = (i >= 0) & (hi <= self.ends[np.maximum(i, 0)])
        return inside | (hi <= lo)

    def locate(self, lo: np.ndarray) -> np.ndarray:
        """Positions in :attr:`data` of absolute offsets that lie inside fetched pieces."""
        i = self._piece(lo)
        return self.pos[i] + (lo - self.starts[i])


def aligned(n: int) -> np.ndarray:
    """An uninitialised uint8 buffer of ``n`` bytes starting at a multiple of ALIGN."""
    raw = np.empty(n + ALIGN, np.uint8)
    skip = -raw.ctypes.data % ALIGN
    return raw[skip:skip + n]


class PositionedFile:
    """A read-only file descriptor read with positioned reads (readahead disabled: only
    what is asked for reaches the page cache)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self.fd = os.open(path, os.O_RDONLY)
        except OSError as exc:
            raise ProfilerError(f"{path}: cannot open ({exc.strerror})") from None
        self.size = os.fstat(self.fd).st_size
        self.requested = 0
        try:  # no readahead: only the pages asked for are read
            os.posix_fadvise(self.fd, 0, 0, os.POSIX_FADV_RANDOM)
        except (AttributeError, OSError):  # not on this platform or filesystem
            pass

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> PositionedFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def read(self, offset: int, n: int, into: np.ndarray | None = None) -> Fetched:
        """The bytes ``[offset, offset + n)`` (clipped to the file)."""
        n = max(0, min(n, self.size - offset))
        return self.fetch(np.array([offset], np.int64), np.array([offset + n], np.int64), into)

    def fetch(self, lo: np.ndarray, hi: np.ndarray, into: np.ndarray | None = None) -> Fetched:
        """Read the byte ranges ``[lo, hi)`` (any order, overlaps allowed, inside the file),
        into the uint8 buffer ``into`` when it is large enough (a reused buffer costs no
        page faults), else into a new one."""
        keep = hi > lo
        lo, hi = lo[keep], hi[keep]
        if lo.size and (lo.min() < 0 or hi.max() > self.size):
            raise AssertionError("read outside the file")  # callers validate metadata first
        order = np.argsort(lo, kind="stable")
        lo, hi = lo[order], hi[order]
        reach = np.maximum.accumulate(hi) if hi.size else hi
        # a new piece starts where the gap to everything before holds a full untouched page
        new = np.ones(lo.size, bool)
        new[1:] = lo[1:] // PAGE > (reach[:-1] - 1) // PAGE + 1
        first = np.flatnonzero(new)
        starts = lo[first]
        ends = np.maximum.reduceat(hi, first) if lo.size else hi
        sizes = ends - starts
        room = sizes + ALIGN
        pos = np.zeros(sizes.size, np.int64)
        np.cumsum(room[:-1], out=pos[1:])
        pos += starts % ALIGN
        total = int(pos[-1] + sizes[-1]) if sizes.size else 0
        if into is not None and into.size >= total and into.ctypes.data % ALIGN == 0:
            data = into[:total]
        else:
            data = aligned(total)
        jobs = [(int(s) + k, int(p) + k, min(PIECE, int(n) - k))
                for s, p, n in zip(starts, pos, sizes, strict=True)
                for k in range(0, int(n), PIECE)]
        if len(jobs) == 1:
            self._pread(data, *jobs[0])
        elif jobs:
            for f in [_pool().submit(self._pread, data, *j) for j in jobs]:
                f.result()
        self.requested += int(sizes.sum())
        first = int(pos[0]) if pos.size else 0  # data[0] is the first byte asked for
        return Fetched(data[first:], starts, ends, pos - first)

    def _pread(self, data: np.ndarray, offset: int, at: int, n: int) -> None:
        view = memoryview(data)[at:at + n]
        while n:
            try:
                got = os.preadv(self.fd, [view], offset)
            except OSError as exc:
                raise ProfilerError(f"{self.path}: read error at byte {offset} "
                                    f"({exc.strerror})") from None
            if got == 0:
                raise ProfilerError(f"{self.path}: file shrank while reading (byte {offset})")
            view, offset, n = view[got:], offset + got, n - got
