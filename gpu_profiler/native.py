"""The CPU kernels, compiled once into a shared library and called without starting numba.

Starting numba costs every process ~0.3-0.45 s (its import, its CPU target, loading cached
kernels): a third of a billion-sample scan. So the numba sources in ``gpu_profiler.kernels``
are compiled by numba once, ahead of time, into one shared library in the kernel cache
(`gpu_profiler.kernels.aot`), which later processes load with ctypes in a millisecond.

Each kernel in :data:`EXPORTS` is one C function ``int64 f(int64 *words)``: the words hold
its arguments in order (an array as its address then its shape, a scalar as itself),
followed by room for its integer results. It returns 0, or 1 when the kernel raised; the
call is then replayed through numba's JIT, which raises the same exception with its
arguments (corrupt input is rare; starting numba then costs nothing that matters).

Without a C compiler, with ``GPU_PROFILER_NATIVE=0``, or when the build fails (recorded
next to the library, not retried), the same kernels run through numba's JIT
(``cache=True``) instead: the same code, the same results.
"""

from __future__ import annotations

import ctypes
import fcntl
import hashlib
import importlib
import importlib.util
import os
import shutil
import sys
import time
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np


class Arr(NamedTuple):
    """An array argument of exactly this dtype and number of dimensions; an input is made
    C-contiguous when it is not, an output (written by the kernel) must be."""

    dtype: str
    ndim: int = 1
    out: bool = False


I = None  # an integer argument (passed as int64)  # noqa: E741

_BYTES, _I8, _I8_2D, _BOOL = Arr("uint8"), Arr("int64"), Arr("int64", 2), Arr("bool")
_OUT_I8, _OUT_I8_2D = Arr("int64", out=True), Arr("int64", 2, out=True)


class Export(NamedTuple):
    """One kernel: ``module.function`` in ``gpu_profiler.kernels``, its arguments, and how
    many integers it returns (a tuple of them, or nothing)."""

    module: str
    function: str
    args: tuple[Arr | None, ...]
    results: int


def _histogram(dtype: str) -> Export:
    row = Arr("int32", out=True)
    return Export("cpu", "histogram_block",
                  (Arr(dtype), _I8, _I8, _I8, _BOOL, I, I, I, I, row, _OUT_I8), 0)


def _libc_has(name: str) -> bool:
    """Whether this process's C library has the function ``name``."""
    try:
        return hasattr(ctypes.CDLL(None), name)
    except OSError:
        return False


#: Every CPU kernel a scan calls, by name (`look` where the C library has ``statx``:
#: glibc 2.28 and later; a library linked against a missing symbol would not load).
EXPORTS: dict[str, Export] = {
    **{f"histogram_{t}": _histogram(t) for t in ("int32", "int64")},
    "frame": Export("ipc", "frame", (_BYTES, I), 2),
    "walk": Export("ipc", "walk", (_BYTES, I, I, _OUT_I8_2D, _I8, _OUT_I8), 3),
    "walk_streams": Export("ipc", "walk_streams", (_BYTES, _I8, _I8, _BYTES, _OUT_I8_2D, _OUT_I8,
                                                   _I8, _OUT_I8, Arr("int8", out=True)), 1),
    "parse_at": Export("ipc", "parse_at", (_BYTES, _I8, _I8, _OUT_I8_2D, _I8, _OUT_I8), 0),
    "schema_info": Export("ipc", "schema_info", (_BYTES, I), 4),
    "footer_blocks": Export("ipc", "footer_blocks", (_BYTES, _OUT_I8_2D), 2),
    "check": Export("ipc", "check", (_I8_2D, I, I, I, I, _OUT_I8_2D), 2),
    "count_streams": Export("streams", "count_streams",
                            (_BYTES, _I8, _I8, I, Arr("uint8", out=True), _BYTES, _OUT_I8_2D,
                             _OUT_I8_2D, _I8, I, I, I, I, I, Arr("int32", out=True), _OUT_I8,
                             Arr("int8", out=True), _OUT_I8), 1),
    **{f"gather_{t}": Export("ipc", "gather", (Arr(t), _I8, _I8, Arr(t, out=True), _I8), 0)
       for t in ("uint8", "uint32", "uint64")},
    "unpack_validity": Export("ipc", "unpack_validity",
                              (_BYTES, _I8, _I8, Arr("bool", out=True), _I8), 0),
    **{f"offset_lengths_{t}": Export("ipc", "offset_lengths",
                                     (Arr(t), _I8, _I8, _OUT_I8, _I8), 0)
       for t in ("int32", "int64")},
    **{f"documents_{t}": Export("documents", "documents_block",
                                (Arr(t), Arr(t), I, I, I, I, Arr("int32", out=True), _OUT_I8), 2)
       for t in ("uint16", "uint32")},
    "interleave": Export("plan", "interleave", (_I8, I, Arr("int32", out=True), _OUT_I8), 1),
    **{f"clip_counts_{t}": Export("plan", "clip_counts", (Arr(t), I, _OUT_I8), 0)
       for t in ("int32", "int64")},
    **{f"pile_sort_{t}": Export("plan", "pile_sort",
                                (Arr(t), I, _I8, _I8, I, _OUT_I8, _OUT_I8, I), 0)
       for t in ("int32", "int64")},
    "shuffle_segments": Export("plan", "shuffle_segments", (_OUT_I8, _I8, I), 0),
    "expand": Export("plan", "expand", (Arr("int32"), _I8, I, _OUT_I8, _OUT_I8), 0),
    "sorted_cuts": Export("plan", "sorted_cuts", (_I8, _I8, I, I, I, _OUT_I8_2D), 2),
    "jsonl_screen": Export("jsonl", "screen", (_BYTES, I, _OUT_I8_2D), 3),
    "parquet_lengths": Export("parquet", "lengths",
                              (_BYTES, _I8, _I8, _BYTES, I, Arr("uint8", out=True), _OUT_I8,
                               _OUT_I8, Arr("bool", out=True), _OUT_I8_2D, _OUT_I8), 2),
    **({"look": Export("posix", "look", (_BYTES, _I8, I, I, I, I, Arr("uint64", out=True),
                                         Arr("uint8", out=True), I, _OUT_I8_2D), 0)}
       if _libc_has("statx") else {}),
    "parquet_count": Export("parquet", "count_files",
                            (_BYTES, _I8, _I8, I, Arr("uint8", out=True), I, _BYTES, I,
                             Arr("uint8", out=True), _OUT_I8, _OUT_I8, Arr("bool", out=True),
                             _OUT_I8_2D, _OUT_I8, I, I, I, Arr("int32", out=True), _OUT_I8,
                             _OUT_I8), 1),
}

#: Modules the library is built from, besides the kernels' own (their sources and every
#: gpu_profiler module they import are part of its key: see `key_sources`).
_BUILDERS = ("gpu_profiler.native", "gpu_profiler.kernels.aot")


@cache
def kernel(name: str) -> Callable[..., tuple[int, ...]]:
    """The kernel ``name`` of :data:`EXPORTS`: native when the library loads, else JIT."""
    lib = library()
    if lib is None:
        return _Jit(name)
    return _Native(name, lib[f"gp_{name}"])


def status(build: bool = True) -> str:
    """How the CPU kernels run in this process, in words (``build=False``: without building
    the library when it is not there yet)."""
    path = _library_path()
    if (not build and not _why_jit() and not path.exists()
            and not Path(f"{path}.failed").exists()):
        return "native, built by the first scan that needs it (5-15 s, once)"
    lib, why = _load()
    return f"native ({lib._name})" if lib is not None else f"numba JIT ({why})"


def ready() -> bool:
    """Whether the library is built here and loads (so that calling a kernel builds
    nothing, and runs natively)."""
    return not _why_jit() and _library_path().exists() and library() is not None


def library() -> ctypes.CDLL | None:
    """The kernel library for this machine and these sources, built on first use; None
    when the kernels run through the JIT here (`status` says why)."""
    return _load()[0]


@cache
def _load() -> tuple[ctypes.CDLL | None, str]:
    """The library (built first if need be), or None and why not."""
    why = _why_jit()
    if why:
        return None, why
    path = _library_path()
    failed = Path(f"{path}.failed")
    try:
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)  # NUMBA_CACHE_DIR may be new
            with open(f"{path}.lock", "w") as lock:  # one process builds; the others wait
                fcntl.flock(lock, fcntl.LOCK_EX)
                if not path.exists() and not failed.exists():
                    _build(path, failed)
        if failed.exists():  # recorded by this or an earlier process: not retried
            said = failed.read_text().splitlines()
            return None, f"the native build failed: {said[0] if said else 'no reason given'}"
        return ctypes.CDLL(str(path)), ""
    except OSError as exc:
        return None, f"the native library cannot be built or loaded here: {exc}"


def _build(path: Path, failed: Path) -> None:
    # Said on any stderr, a terminal or a cluster job's log: a first scan or plan would
    # otherwise look hung for the build's seconds to minutes.
    print(f"gpu-profiler: building the native CPU kernels in {path.parent} (once per machine "
          "and version; 15 s to 2 min on a busy 2-core machine)", file=sys.stderr, flush=True)
    began = time.perf_counter()
    try:
        from gpu_profiler.kernels import aot
    except ImportError as exc:
        failed.write_text(f"cannot import the compiler: {exc}\n")
        return
    try:
        aot.build(path, EXPORTS)
    except aot.BuildError as exc:
        failed.write_text(f"{exc}\n")
    took = f"{time.perf_counter() - began:.0f} s"
    print("gpu-profiler: " + (f"the native CPU kernels' build failed after {took}; they run "
                              "through numba's JIT" if failed.exists() else
                              f"native CPU kernels built in {took}"),
          file=sys.stderr, flush=True)


@cache
def _why_jit() -> str:
    """Why kernels run through numba's JIT here ('' when they need not)."""
    if os.environ.get("GPU_PROFILER_NATIVE", "1") == "0":
        return "GPU_PROFILER_NATIVE=0"
    if sys.platform != "linux":
        return f"native kernels are built on Linux only, not {sys.platform}"
    if not shutil.which(os.environ.get("CC", "cc")):
        return "no C compiler to link the native kernels (install gcc)"
    return ""


@cache
def _library_path() -> Path:
    """``<kernel cache>/native-<key>.so``; the key covers the kernel sources and every
    module they import from this package (numba compiles their globals in), the numba and
    llvmlite installs, the interpreter and the CPU (the code uses its features)."""
    h = hashlib.sha256(sys.version.encode())
    h.update(" ".join(EXPORTS).encode())  # (which depends on the C library)
    for path in key_sources(_roots()):
        h.update(path.read_bytes())
    for mod in ("numba", "llvmlite"):
        spec = importlib.util.find_spec(mod)
        origin = spec.origin if spec and spec.origin else mod
        st = os.stat(origin) if os.path.exists(origin) else None
        h.update(f"{origin}:{st and st.st_mtime_ns}:{st and st.st_size}".encode())
    try:
        with open("/proc/cpuinfo") as f:
            h.update(next((ln for ln in f if ln.startswith(("flags", "Features"))), "").encode())
    except OSError:
        pass
    cache_dir = Path(os.environ["NUMBA_CACHE_DIR"])
    return cache_dir / f"native-{h.hexdigest()[:20]}.so"


def _roots() -> dict[str, Path]:
    """Where the two source trees are (``kernels/`` installs as ``gpu_profiler.kernels``)."""
    return {package: Path(importlib.import_module(package).__path__[0])
            for package in ("gpu_profiler.kernels", "gpu_profiler")}


def key_sources(roots: dict[str, Path]) -> list[Path]:
    """The source files of the kernel modules of :data:`EXPORTS` and the builders, and of
    every module of this package they import at module level, transitively (read and
    parsed, not imported: the kernels import numba)."""
    import ast

    def file_of(module: str) -> Path | None:
        for package, folder in roots.items():  # the most specific root first
            if module == package or module.startswith(package + "."):
                rel = Path(*module[len(package) + 1:].split(".")) if module != package \
                    else Path()
                for candidate in (folder / rel.with_suffix(".py") if rel.parts else None,
                                  folder / rel / "__init__.py"):
                    if candidate is not None and candidate.is_file():
                        return candidate
        return None

    todo = [*(f"gpu_profiler.kernels.{e.module}" for e in EXPORTS.values()), *_BUILDERS]
    seen: dict[str, Path] = {}
    while todo:
        module = todo.pop()
        path = file_of(module)
        if module in seen or path is None:
            continue
        seen[module] = path
        for node in ast.parse(path.read_text()).body:  # module level only
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                subs = [f"{node.module}.{a.name}" for a in node.names]
                todo += [m for m in subs if file_of(m)]  # names that are modules
                if not all(file_of(m) for m in subs):  # names defined in the module
                    todo.append(node.module)
            elif isinstance(node, ast.Import):
                todo += [a.name for a in node.names]
    return sorted(set(seen.values()))


def _jit_function(name: str) -> Any:
    e = EXPORTS[name]
    return getattr(importlib.import_module(f"gpu_profiler.kernels.{e.module}"), e.function)


def _arguments(e: Export, name: str, args: tuple[Any, ...]) -> list[Any]:
    """``args`` checked against ``e`` (inputs made C-contiguous, scalars ints)."""
    if len(args) != len(e.args):
        raise TypeError(f"kernel {name} takes {len(e.args)} arguments, got {len(args)}")
    checked: list[Any] = []
    for i, (spec, a) in enumerate(zip(e.args, args, strict=True)):
        if spec is None:
            checked.append(int(a))
            continue
        if not spec.out and isinstance(a, np.ndarray):
            a = np.ascontiguousarray(a)
        if not (isinstance(a, np.ndarray) and a.dtype == spec.dtype and a.ndim == spec.ndim
                and a.flags.c_contiguous):
            got = f"{a.dtype}[{a.ndim}d]" if isinstance(a, np.ndarray) else type(a).__name__
            raise TypeError(f"kernel {name}: argument {i} must be a C-contiguous "
                            f"{spec.dtype}[{spec.ndim}d] array, got {got}")
        checked.append(a)
    return checked


class _Jit:
    """A kernel called through numba's JIT (same argument checks as the native one)."""

    def __init__(self, name: str) -> None:
        self.name, self.export, self.fn = name, EXPORTS[name], _jit_function(name)

    def __call__(self, *args: Any) -> tuple[int, ...]:
        r = self.fn(*_arguments(self.export, self.name, args))
        return () if r is None else tuple(int(v) for v in r)


class _Native:
    """A kernel called in the shared library (ctypes releases the GIL during the call)."""

    def __init__(self, name: str, fn: Any) -> None:
        fn.argtypes, fn.restype = [ctypes.c_void_p], ctypes.c_int64
        self.name, self.export, self.fn = name, EXPORTS[name], fn

    def __call__(self, *args: Any) -> tuple[int, ...]:
        checked = _arguments(self.export, self.name, args)
        words: list[int] = []
        for a in checked:  # arrays stay referenced (by checked) until the call returns
            if isinstance(a, np.ndarray):
                words.append(a.ctypes.data)
                words.extend(a.shape)
            else:
                words.append(a)
        n = len(words)
        block = np.array(words + [0] * self.export.results, np.int64)
        if self.fn(block.ctypes.data):  # it raised: raise the same exception via the JIT
            _Jit(self.name)(*args)
            raise RuntimeError(f"native kernel {self.name} failed where numba's JIT did not")
        return tuple(int(v) for v in block[n:])
