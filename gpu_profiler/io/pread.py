"""Positioned reads: a file read only with ``os.preadv`` into numpy buffers. Ranges are
coalesced (without ever adding a granule nobody asked for) and read concurrently by a thread
pool, so many small reads reach the device's bandwidth; every requested byte is counted.

The page cache reads whole 4 KiB pages. For a *cold* file (almost none of it cached) small
pieces are read with ``O_DIRECT`` instead, in 512-byte sectors: a 1000-row batch's 8,000-byte
length column then costs ~8.5 KiB of storage traffic instead of ~12 KiB of pages. Direct
reads bypass the cache, so a file read that way stays cold for the next scan. A *warm* file
(99% of the sampled pages cached) has its large windows mapped instead (``mmap``): their
bytes are used where they lie in the page cache, not copied (the copy was a quarter of a
warm scan's CPU). ``GPU_PROFILER_IO=buffered`` (always copied through the cache),
``direct`` (whatever the cache holds) or ``mapped`` override the default ``auto``.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import sys
import threading
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from gpu_profiler.errors import ProfilerError
from gpu_profiler.frozen import frozen

if TYPE_CHECKING:  # (imported where the pool starts)
    from concurrent.futures import ThreadPoolExecutor

#: Page size the coalescing rounds to: merging two ranges never adds a page neither touches.
PAGE = 4096
#: Granule of direct reads (the logical block size of common devices).
SECTOR = 512
#: Largest piece read with O_DIRECT (larger ones are bandwidth-bound: the cache is free).
DIRECT_MAX = 1 << 20
#: A file with at most this fraction of its pages in the page cache is cold.
COLD = 0.01
#: A file with at least this fraction of its pages in the page cache is warm (a page that is
#: not is read on first touch, with the kernel's read-around).
WARM = 0.99
_SAMPLES, _SAMPLE = 16, 1 << 20  # cache residency is sampled in 16 windows of 1 MiB
#: Environment variable choosing the I/O mode: ``auto`` (default), ``buffered``, ``direct``,
#: ``mapped``.
IO_ENV = "GPU_PROFILER_IO"
IO_MODES = ("auto", "buffered", "direct", "mapped")
#: Reads larger than this are split into pieces read in parallel.
PIECE = 4 << 20
#: Reads in flight at once.
WORKERS = 8
#: Each piece sits at the same offset modulo this in the buffer as in the file, so buffers
#: aligned in the file are aligned in memory (and direct reads land on aligned addresses).
ALIGN = SECTOR
#: Window buffers a file keeps for reuse (chunks read ahead may still use a few).
WINDOWS_KEPT = 6

_executor: ThreadPoolExecutor | None = None


def _pool() -> ThreadPoolExecutor:
    global _executor
    if _executor is None:
        from concurrent.futures import ThreadPoolExecutor

        _executor = ThreadPoolExecutor(WORKERS, thread_name_prefix="gpu-profiler-read")
    return _executor


@frozen
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


_ALONE = [object()]  # an object nothing but a list refers to


def unused(items: list, i: int) -> bool:
    """Whether nothing but the list ``items`` refers to ``items[i]`` (a live view of a
    buffer refers to it). Counted against an object only a list refers to, the same way,
    so that the interpreter's own temporary references cancel out (Python 3.14 takes fewer
    of them than 3.11: a fixed threshold would take a buffer in use for a free one)."""
    return sys.getrefcount(items[i]) <= sys.getrefcount(_ALONE[0])


class Reuse:
    """Buffers handed out before, taken again once nothing else refers to them (a view of a
    buffer, such as a chunk's data, refers to it). Reuse spares the page faults of fresh
    memory, a large part of the cost at a billion samples a second."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self.bufs: list[np.ndarray] = []

    def take(self, size: int, dtype: np.dtype | type = np.uint8) -> np.ndarray:
        """A free buffer of at least ``size`` elements of ``dtype``, else a new one."""
        for i in range(len(self.bufs)):
            if self.bufs[i].size >= size and self.bufs[i].dtype == dtype and unused(self.bufs, i):
                buf = self.bufs.pop(i)
                break
        else:
            buf = np.empty(size, dtype)
        self.bufs = [buf, *self.bufs][:self.keep]
        return buf

    def aligned(self, n: int, align: int) -> np.ndarray:
        """``n`` bytes starting at a multiple of ``align``, in a buffer `take` gives."""
        raw = self.take(n + align)
        skip = -raw.ctypes.data % align
        return raw[skip:skip + n]


#: How small shards are opened to be read whole (`read_whole`, and the kernels that read
#: them: `gpu_profiler.readers.counted`): non-blocking, so that a shard swapped for a FIFO
#: since it was listed reads short, and is left, instead of blocking the scan.
OPEN_FLAGS = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK
#: Files `read_whole` reads sit in its buffer at multiples of this (Arrow aligns buffers to
#: 8 or 64 bytes in a file: they stay aligned in memory, and are histogrammed in place).
WHOLE_ALIGN = 64
#: Smallest buffer `read_whole` takes (one per thread, reused run after run).
WHOLE_BUFFER = 16 << 20
_WHOLE_KEPT = 2  # buffers kept per thread (chunks of the last run may still use one)
_whole = threading.local()


def whole_buffer(size: int) -> np.ndarray:
    """``size`` bytes at a multiple of `WHOLE_ALIGN`, in a buffer of this thread's (reused
    once nothing refers to it: fresh memory costs page faults)."""
    pool = getattr(_whole, "pool", None)
    if pool is None:
        pool = _whole.pool = Reuse(_WHOLE_KEPT)
    return pool.aligned(max(size, WHOLE_BUFFER), WHOLE_ALIGN)[:size]


def read_whole(paths: Sequence[str | Path], sizes: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(buffer, starts, unread)``: every file's bytes (``sizes``, as listed) read whole,
    one positioned read each, at `WHOLE_ALIGN`-ed ``starts`` of one `whole_buffer`;
    ``unread[i]`` when file ``i`` could not be read whole, or is no longer its listed size
    (one byte more is asked for, to tell). Many small shards are read so
    (`gpu_profiler.readers.base.Together`)."""
    starts = np.zeros(len(paths), np.int64)
    starts[1:] = np.cumsum((sizes + WHOLE_ALIGN) // WHOLE_ALIGN * WHOLE_ALIGN)[:-1]
    buf = whole_buffer(int(starts[-1] + sizes[-1]) + 1 if len(paths) else 0)
    unread = np.zeros(len(paths), bool)
    for i, path in enumerate(paths):
        try:
            fd = os.open(path, OPEN_FLAGS)
            try:
                got = os.preadv(fd, [buf.data[int(starts[i]):int(starts[i] + sizes[i]) + 1]], 0)
            finally:
                os.close(fd)
        except OSError:
            got = -1
        unread[i] = got != sizes[i]
    return buf, starts, unread


def aligned(n: int) -> np.ndarray:
    """An uninitialised uint8 buffer of ``n`` bytes starting at a multiple of ALIGN."""
    raw = np.empty(n + ALIGN, np.uint8)
    skip = -raw.ctypes.data % ALIGN
    return raw[skip:skip + n]


def io_mode() -> str:
    mode = os.environ.get(IO_ENV) or "auto"
    if mode not in IO_MODES:
        raise ProfilerError(f"{IO_ENV}={mode!r}: choose one of: {', '.join(IO_MODES)}")
    return mode


@cache
def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long]
    return libc


def cached_fraction(fd: int, size: int) -> float:
    """Fraction of the file's pages in the page cache, sampled over up to
    :data:`_SAMPLES` evenly spaced 1 MiB windows: ``mincore`` on a mapping that is never
    touched (no I/O, no resident memory). 1.0 where that cannot be told."""
    if size == 0:
        return 1.0
    try:
        libc = _libc()
        addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr is None or addr == ctypes.c_void_p(-1).value:
            return 1.0
        try:
            step = max(size // _SAMPLES, _SAMPLE)
            resident = total = 0
            for at in range(0, size, step):
                at -= at % mmap.PAGESIZE
                n = min(_SAMPLE, size - at)
                vec = np.zeros(-(-n // mmap.PAGESIZE), np.uint8)
                if libc.mincore(ctypes.c_void_p(addr + at), ctypes.c_size_t(n),
                                vec.ctypes.data_as(ctypes.c_void_p)):
                    return 1.0
                resident += int(np.count_nonzero(vec & 1))
                total += vec.size
        finally:
            libc.munmap(ctypes.c_void_p(addr), ctypes.c_size_t(size))
        return resident / total
    except (OSError, AttributeError):  # no libc mmap/mincore here
        return 1.0


class PositionedFile:
    """A read-only file descriptor read with positioned reads (readahead disabled: only
    what is asked for reaches the page cache), plus an ``O_DIRECT`` descriptor for small
    pieces of a cold file, or mapped windows of a warm one.

    Attributes:
        granule: the unit a read costs (``PAGE``, or ``SECTOR`` when reads are direct).
        mapped: whether :meth:`window` maps the file instead of copying it.
    """

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
        self._direct = -1
        mode = io_mode()
        cached = cached_fraction(self.fd, self.size) if mode == "auto" else -1.0
        if mode == "direct" or 0 <= cached <= COLD:
            try:
                self._direct = os.open(path, os.O_RDONLY | os.O_DIRECT)
            except (AttributeError, OSError):  # e.g. tmpfs: no direct I/O
                pass
        self.granule = SECTOR if self._direct >= 0 else PAGE
        self.mapped = mode == "mapped" or cached >= WARM
        self._maps: list[np.ndarray] = []  # mapped windows, until nothing else uses them
        self._buffers = Reuse(WINDOWS_KEPT)  # read windows, reused once nothing uses them

    def close(self) -> None:
        for fd in (self.fd, self._direct):
            if fd >= 0:
                os.close(fd)
        self.fd = self._direct = -1
        self._maps = []  # a window still in use is unmapped by its last user

    def __enter__(self) -> PositionedFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def read(self, offset: int, n: int, into: np.ndarray | None = None) -> Fetched:
        """The bytes ``[offset, offset + n)`` (clipped to the file)."""
        n = max(0, min(n, self.size - offset))
        return self.fetch(np.array([offset], np.int64), np.array([offset + n], np.int64), into)

    def window(self, offset: int, n: int) -> Fetched:
        """The bytes ``[offset, offset + n)`` (clipped to the file): mapped where they lie in
        the page cache if :attr:`mapped`, else read into a buffer of this file's, reused once
        nothing refers to it (fresh memory costs page faults)."""
        n = max(0, min(n, self.size - offset))
        got = self._map(offset, n, populate=False) if self.mapped else None
        if got is None:
            return self.read(offset, n, self._buffers.aligned(n + 2 * ALIGN, ALIGN))
        self.requested += n
        one = np.array([offset], np.int64)
        return Fetched(got, one, one + n, np.zeros(1, np.int64))

    def values(self, offset: int, count: int, dtype: str, into: np.ndarray | None = None
               ) -> np.ndarray:
        """``count`` items of ``dtype`` at byte ``offset``, all of them used: mapped (and
        populated) where the file is mapped and they lie aligned in it, else read (one
        positioned read) into the start of ``into`` or an aligned buffer of this file's,
        reused once nothing refers to it (a misaligned view would slow numpy's searches
        several times over)."""
        item = np.dtype(dtype).itemsize
        need = count * item
        if need > self.size - offset:
            raise ProfilerError(f"{self.path}: ends at byte {self.size:,}, before the "
                                f"{need:,} bytes at {offset:,} its header promises "
                                "(truncated while it was read?)")
        self.requested += need
        got = self._map(offset, need, populate=True) if self.mapped and offset % item == 0 \
            else None
        if got is None:
            if into is None:
                into = self._buffers.aligned(need, ALIGN)
            got = into.view(np.uint8)[:need]
            self._pread(got, offset, 0, need)
        return got.view(dtype)

    def _map(self, offset: int, n: int, populate: bool) -> np.ndarray | None:
        """The bytes ``[offset, offset + n)`` mapped (None where they cannot be), the page
        table filled at once if ``populate`` (page faults one at a time made a token stream's
        kernel take a fifth longer; where only some pages are used, as in an IPC window
        around a record batch's length column, the others are never made resident).

        A mapping is unmapped once nothing refers to it any more: by this file's next
        mapping (in the reading thread, not in a consumer's), or by its last user. Like any
        mapping, it assumes the file is not truncated while in use."""
        for i in reversed(range(len(self._maps))):
            if unused(self._maps, i):
                del self._maps[i]
        base = offset - offset % mmap.ALLOCATIONGRANULARITY
        flags = mmap.MAP_SHARED | (getattr(mmap, "MAP_POPULATE", 0) if populate else 0)
        try:
            m = mmap.mmap(self.fd, offset + n - base, flags, mmap.PROT_READ, offset=base)
        except (OSError, ValueError):  # nothing to map, or a filesystem that cannot
            return None
        whole = np.frombuffer(m, np.uint8)
        self._maps.append(whole)
        return whole[offset - base:]

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
        # a new piece starts where the gap to everything before holds a full untouched granule
        g = self.granule
        new = np.ones(lo.size, bool)
        new[1:] = lo[1:] // g > (reach[:-1] - 1) // g + 1
        first = np.flatnonzero(new)
        starts = lo[first]
        ends = np.maximum.reduceat(hi, first) if lo.size else hi
        sizes = ends - starts
        # whole ALIGN units per piece, plus slack for direct reads' spill either side
        room = (sizes // ALIGN + 3) * ALIGN
        pos = np.zeros(sizes.size, np.int64)
        np.cumsum(room[:-1], out=pos[1:])
        pos += starts % ALIGN
        total = int(pos[-1] + sizes[-1] + ALIGN) if sizes.size else 0
        if into is not None and into.size >= total and into.ctypes.data % ALIGN == 0:
            data = into[:total]
        else:
            data = aligned(total)
        jobs = [(int(s) + k, int(p) + k, min(PIECE, int(n) - k))
                for s, p, n in zip(starts, pos, sizes, strict=True)
                for k in range(0, int(n), PIECE)]
        if len(jobs) == 1:
            self._read_piece(data, *jobs[0])
        elif jobs:
            for f in [_pool().submit(self._read_piece, data, *j) for j in jobs]:
                f.result()
        self.requested += int(sizes.sum())
        # data[0] is the first byte asked for, data[-1] the last (not the slack after it)
        lo_at, hi_at = (int(pos[0]), int(pos[-1] + sizes[-1])) if pos.size else (0, 0)
        return Fetched(data[lo_at:hi_at], starts, ends, pos - lo_at)

    def _read_piece(self, data: np.ndarray, offset: int, at: int, n: int) -> None:
        if self._direct >= 0 and n <= DIRECT_MAX:
            # whole sectors into the same (sector-aligned) place: the spill before ``at``
            # and after ``at + n`` lands in the piece's slack
            lo = offset - offset % SECTOR
            hi = -(-(offset + n) // SECTOR) * SECTOR
            view = data.data[at - (offset - lo):at - (offset - lo) + (hi - lo)]
            try:
                got = os.preadv(self._direct, [view], lo) - (offset - lo)
            except OSError:  # the filesystem refused this direct read: read it buffered
                got = 0
            if got >= n:
                return
            done = max(got, 0)
            offset, at, n = offset + done, at + done, n - done
        self._pread(data, offset, at, n)

    def _pread(self, data: np.ndarray, offset: int, at: int, n: int) -> None:
        view = data.data[at:at + n]
        while n:
            try:
                got = os.preadv(self.fd, [view], offset)
            except OSError as exc:
                raise ProfilerError(f"{self.path}: read error at byte {offset} "
                                    f"({exc.strerror})") from None
            if got == 0:
                raise ProfilerError(f"{self.path}: file shrank while reading (byte {offset})")
            view, offset, n = view[got:], offset + got, n - got
