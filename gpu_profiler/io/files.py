"""Many files named to native code at once: their names back to back (`names`), for the
kernels that open them themselves; and the listing of a corpus of thousands of shards,
which otherwise costs Python a ``stat`` call (and, for a file a directory walk or a glob
found, an ``open`` and a read of its first bytes) each, on one core: `sizes` (an HF dir's
shards, named by its metadata) and `look` (files found)."""

from __future__ import annotations

import gc
import os
import stat
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import NamedTuple

import numpy as np

from gpu_profiler import native
from gpu_profiler.io.pread import OPEN_FLAGS
from gpu_profiler.kernels.stats import MISSING, OTHER, STATX_WORDS

#: Fewer paths than this are looked up one by one in Python (no thread worth starting).
NATIVE_FROM = 256
#: Paths a thread looks up, at least: a shared filesystem answers each lookup in turn, so
#: threads beyond the cores still help there, as long as each has enough of them.
PER_THREAD = 512
#: Threads a lookup starts, at most.
THREADS = 16
#: Bytes of a file's head `look` reads (what telling its format needs).
HEAD = 16


class Found(NamedTuple):
    """What `look` found at a path: the size of a regular file (else `MISSING` or
    `OTHER`), its identity (device, inode: two paths may name one file), and its first
    `HEAD` bytes (None where it could not be read: its reader then says why)."""

    size: int
    identity: tuple[int, int]
    head: bytes | None


def names(paths: Sequence[str | os.PathLike[str]]) -> tuple[np.ndarray, np.ndarray]:
    """``(bytes, starts)``: the file names, NUL-terminated, back to back, for a kernel that
    opens the files itself (encoded at once: a path holds no NUL)."""
    blob = np.frombuffer(os.fsencode("\0".join([os.fspath(p) for p in paths]) + "\0"),
                         np.uint8)
    ends = np.flatnonzero(blob == 0)
    if ends.size != max(len(paths), 1):
        raise ValueError("a file name holds a NUL byte")
    starts = np.zeros(len(paths), np.int64)
    starts[1:] = ends[:-1] + 1
    return blob, starts


def sizes(paths: Sequence[str]) -> list[int]:
    """Each path's size where it names a regular file (a link is not followed), else
    `MISSING` or `OTHER`: ``os.lstat`` 's answers (see `look`)."""
    found = _native(paths, follow=False, width=0)
    if found is None:
        return [_size(p) for p in paths]
    return [_size(p) if n == MISSING else n for p, n in zip(paths, found[0][:, 0].tolist(),
                                                             strict=True)]


def look(paths: Sequence[str], heads: bool = True) -> list[Found]:
    """What each path names, a link followed (`Found`): ``os.stat`` 's answers, and the
    file's first bytes (None without ``heads``). Thousands of paths are looked up by the
    native kernel (`kernels.posix.look`) in threads of their own, without the GIL; fewer,
    or where the native kernels are not built, in Python: the same answers (what the
    kernel finds missing, cannot read or cannot identify is asked again so: a sandbox may
    refuse ``statx`` itself)."""
    width = HEAD if heads else 0
    found = _native(paths, follow=True, width=width)
    if found is None:
        return [_look(p, heads) for p in paths]
    out, read = found
    blob = read.tobytes()
    return [_look(p, heads) if size == MISSING or got < 0 or ino < 0 else
            Found(size, (dev, ino), blob[i * width:i * width + got]
                  if size >= 0 and heads else None)
            for i, (p, (size, dev, ino, got)) in enumerate(zip(paths, out.tolist(),
                                                               strict=True))]


def _native(paths: Sequence[str], follow: bool, width: int
            ) -> tuple[np.ndarray, np.ndarray] | None:
    """``(out, heads)`` of `kernels.posix.look` for every path, on up to `THREADS`
    threads; None where Python should ask instead (few paths, no native kernel here, a
    name that cannot be encoded)."""
    if len(paths) < NATIVE_FROM or "look" not in native.EXPORTS or native.library() is None:
        return None
    try:
        blob, starts = names(paths)
    except ValueError:  # a name that cannot be encoded (or holds a NUL)
        return None
    out = np.empty((len(paths), 4), np.int64)
    heads = np.empty(len(paths) * width, np.uint8)
    kernel = native.kernel("look")
    threads = min(THREADS, -(-len(paths) // PER_THREAD))
    cuts = [len(paths) * k // threads for k in range(threads + 1)]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(threads, thread_name_prefix="gpu-profiler-list") as pool:
        for _ in pool.map(lambda k: kernel(blob, starts, cuts[k], cuts[k + 1], follow,
                                           OPEN_FLAGS, np.empty(STATX_WORDS, np.uint64),
                                           heads, width, out),
                          range(threads)):
            pass
    return out, heads


def _size(path: str) -> int:
    try:
        st = os.lstat(path)
    except (OSError, ValueError):  # (ValueError: a NUL in the name)
        return MISSING
    return st.st_size if stat.S_ISREG(st.st_mode) else OTHER


def _look(path: str, heads: bool = True) -> Found:
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return Found(MISSING, (0, 0), None)
    if not stat.S_ISREG(st.st_mode):
        return Found(OTHER, (0, 0), None)
    identity = (os.major(st.st_dev) << 32 | os.minor(st.st_dev), st.st_ino)
    try:
        first = head(path) if heads else None
    except OSError:
        first = None
    return Found(st.st_size, identity, first)


def head(path: str | os.PathLike[str]) -> bytes:
    """The first `HEAD` bytes of a file (opened as the kernels open files: a FIFO put in
    its place cannot block)."""
    fd = os.open(path, OPEN_FLAGS)
    try:
        return os.read(fd, HEAD)
    finally:
        os.close(fd)


@contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector paused (in the whole process: it has one) while a
    listing makes a part for each of thousands of shards: the parts hold no cycles and
    live as long as the scan, yet every few hundred made would start a collection, and the
    first listing in a process one of every object the process holds."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
