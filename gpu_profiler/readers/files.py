"""Many files named to native code at once: their names back to back (`names`), for the
kernels that open them themselves, and their sizes (`sizes`), for the listing of a corpus
of thousands of shards, which otherwise costs a Python ``stat`` call each on one core."""

from __future__ import annotations

import gc
import os
import stat
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import numpy as np

from gpu_profiler import native
from gpu_profiler.kernels.stats import MISSING, OTHER, STATX_WORDS

#: Fewer paths than this are looked up one by one in Python (no thread worth starting).
NATIVE_FROM = 256
#: Paths a thread looks up, at least: a shared filesystem answers each lookup in turn, so
#: threads beyond the cores still help there, as long as each has enough of them.
PER_THREAD = 512
#: Threads `sizes` starts, at most.
THREADS = 16


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
    `MISSING` or `OTHER`. Thousands of paths are looked up by the native kernel
    (`kernels.posix.sizes`) in threads of their own, without the GIL; fewer, or where the
    native kernels are not built, by ``os.lstat``: the same answers (what the kernel finds
    missing is asked again so: a sandbox may refuse ``statx`` itself)."""
    if len(paths) < NATIVE_FROM or "sizes" not in native.EXPORTS or not native.ready():
        return [_size(p) for p in paths]
    try:
        blob, starts = names(paths)
    except ValueError:  # a name that cannot be encoded (or holds a NUL): said one by one
        return [_size(p) for p in paths]
    out = np.empty(len(paths), np.int64)
    kernel = native.kernel("sizes")
    threads = min(THREADS, -(-len(paths) // PER_THREAD))
    cuts = [len(paths) * k // threads for k in range(threads + 1)]
    with ThreadPoolExecutor(threads, thread_name_prefix="gpu-profiler-list") as pool:
        for _ in pool.map(lambda k: kernel(blob, starts, cuts[k], cuts[k + 1],
                                           np.empty(STATX_WORDS, np.uint64), out),
                          range(threads)):
            pass
    return [_size(p) if n == MISSING else n for p, n in zip(paths, out.tolist(), strict=True)]


def _size(path: str) -> int:
    try:
        st = os.lstat(path)
    except (OSError, ValueError):  # (ValueError: a NUL in the name)
        return MISSING
    return st.st_size if stat.S_ISREG(st.st_mode) else OTHER


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
