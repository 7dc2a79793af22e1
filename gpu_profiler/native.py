"""The CPU kernels, compiled into a shared library when the package is built or installed,
and called without starting numba.

Starting numba costs every process ~0.3-0.45 s (its import, its CPU target, loading cached
kernels): a third of a billion-sample scan. So building or installing the package compiles
the numba sources in ``gpu_profiler.kernels`` ahead of time into one shared library in that
package (`gpu_profiler.native_build`), which a process loads with ctypes in a millisecond.
Nothing is ever built while a scan runs.

Each kernel in :data:`EXPORTS` is one C function ``int64 f(int64 *words)``: the words hold
its arguments in order (an array as its address then its shape, a scalar as itself),
followed by room for its integer results. It returns 0, or 1 when the kernel raised; the
call is then replayed through numba's JIT, which raises the same exception with its
arguments (corrupt input is rare; starting numba then costs nothing that matters).

Beside the library, a JSON sidecar (:data:`SIDECAR`) says what it needs: the CPU flags its
code uses, the kernels it holds, and, for a library built in place next to its sources (an
editable install, `make`), each source's size and modification time. When this CPU lacks a
flag, a source changed since the build, the library is missing or does not load, or with
``GPU_PROFILER_NATIVE=0``, the same kernels run through numba's JIT (``cache=True``)
instead: the same code, the same results; `status` says why, and the fix.
"""

from __future__ import annotations

import ctypes
import importlib
import json
import os
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
    "walk_files": Export("ipc", "walk_files", (_BYTES, _I8, _I8, _BYTES, _OUT_I8_2D, _OUT_I8,
                                               _OUT_I8_2D, _I8, _OUT_I8, Arr("int8", out=True)),
                         1),
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
    "running_sums": Export("documents", "running_sums",
                           (Arr("int32"), _I8, I, I, _OUT_I8, _OUT_I8), 1),
    "document_bounds": Export("documents", "document_bounds", (_I8, I), 2),
    "interleave": Export("plan", "interleave", (_I8, _I8, I, I, I, Arr("int32", out=True), _OUT_I8),
                         1),
    "blending_counts": Export("blend", "blending_counts", (Arr("float64"), I, _OUT_I8), 0),
    "tfrecord_events": Export("tfrecord", "events",
                              (_BYTES, I, _OUT_I8, Arr("uint8", out=True), _OUT_I8_2D, _OUT_I8,
                               _OUT_I8, _OUT_I8, Arr("int32", out=True), Arr("int8", out=True)),
                              4),
    **{f"clip_counts_{t}": Export("plan", "clip_counts", (Arr(t), I, _OUT_I8), 0)
       for t in ("int32", "int64")},
    **{f"pile_sort_{t}": Export("plan", "pile_sort",
                                (Arr(t), I, _I8, _I8, I, _OUT_I8, _OUT_I8, I), 0)
       for t in ("int32", "int64")},
    "shuffle_segments": Export("plan", "shuffle_segments", (_OUT_I8, _I8, I), 0),
    "expand": Export("plan", "expand", (Arr("int32"), _I8, I, _OUT_I8, _OUT_I8), 0),
    **{f"source_counts_{t}": Export("plan", "source_counts",
                                    (Arr(t), I, _I8, Arr("int16"), I, _OUT_I8), 0)
       for t in ("int32", "int64")},
    "sorted_cuts": Export("plan", "sorted_cuts",
                          (_I8, _I8, I, _I8, Arr("float64"), I, _OUT_I8_2D), 2),
    "jsonl_screen": Export("jsonl", "screen", (_BYTES, I, _OUT_I8_2D), 3),
    "jsonl_utf8_error": Export("jsonl", "utf8_error", (_BYTES,), 1),
    "jsonl_lengths": Export("jsonl", "lengths", (_BYTES, I, _BYTES, _OUT_I8, Arr("bool", out=True)),
                            3),
    "parquet_lengths": Export("parquet", "lengths",
                              (_BYTES, _I8, _I8, _BYTES, I, Arr("uint8", out=True), _OUT_I8,
                               _OUT_I8, Arr("bool", out=True), _OUT_I8_2D, _I8_2D, _I8, _I8,
                               _BYTES, _OUT_I8), 2),
    "parquet_file_chunks": Export("parquet", "file_chunks",
                                  (_BYTES, _I8, _I8, _BYTES, I, _OUT_I8_2D, _OUT_I8_2D,
                                   _OUT_I8, _OUT_I8), 1),
    "parquet_row_groups": Export("parquet", "row_groups",
                                 (_BYTES, I, _BYTES, I, _OUT_I8_2D, _OUT_I8_2D, _OUT_I8), 4),
    "parquet_chunks": Export("parquet", "chunks",
                             (_BYTES, _I8, _I8, _I8, I, I, I, Arr("uint8", out=True), _OUT_I8,
                              _OUT_I8, _OUT_I8, _OUT_I8, _OUT_I8_2D, _I8_2D, _I8, _BYTES,
                              _OUT_I8), 4),
    "parquet_zstd_pages": Export("parquet", "zstd_pages",
                                 (_BYTES, _I8, _I8, _I8, _OUT_I8_2D, _OUT_I8, _OUT_I8), 1),
    **({"look": Export("posix", "look", (_BYTES, _I8, I, I, I, I, Arr("uint64", out=True),
                                         Arr("uint8", out=True), I, _OUT_I8_2D), 0)}
       if _libc_has("statx") else {}),
    "parquet_count": Export("parquet", "count_files",
                            (_BYTES, _I8, _I8, I, Arr("uint8", out=True), I, _BYTES, I,
                             Arr("uint8", out=True), _OUT_I8, _OUT_I8, Arr("bool", out=True),
                             _OUT_I8_2D, _OUT_I8, I, I, I, Arr("int32", out=True), _OUT_I8,
                             _OUT_I8), 1),
}

#: Modules the library is built from besides the kernels' own (see `key_sources`).
_BUILDERS = ("gpu_profiler.native", "gpu_profiler.native_build")


#: The library and its sidecar, in the ``gpu_profiler.kernels`` package.
LIBRARY, SIDECAR = "libkernels.so", "libkernels.json"

#: The CPU flags (as /proc/cpuinfo names them) each x86-64 microarchitecture level adds to
#: the one before: ``GPU_PROFILER_CPU=<level>`` builds a library that needs exactly these.
LEVELS = {
    "x86-64": ("cmov", "cx8", "fpu", "fxsr", "mmx", "sse", "sse2"),
    "x86-64-v2": ("cx16", "lahf_lm", "popcnt", "pni", "sse4_1", "sse4_2", "ssse3"),
    "x86-64-v3": ("abm", "avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "movbe", "xsave"),
    "x86-64-v4": ("avx512bw", "avx512cd", "avx512dq", "avx512f", "avx512vl"),
}


def level_flags(level: str) -> set[str]:
    """Every CPU flag the x86-64 ``level`` of :data:`LEVELS` needs (its own and those below)."""
    names = list(LEVELS)
    return {f for name in names[:names.index(level) + 1] for f in LEVELS[name]}


@cache
def kernel(name: str) -> Callable[..., tuple[int, ...]]:
    """The kernel ``name`` of :data:`EXPORTS`: native when the library loads, else JIT."""
    lib = library()
    if lib is None:
        return _Jit(name)
    return _Native(name, lib[f"gp_{name}"])


def status() -> str:
    """How the CPU kernels run in this process, in words: ``native (<library>)``, or
    ``numba JIT (<why>)`` with what would make them native."""
    lib, why = _load()
    return f"native ({lib._name})" if lib is not None else f"numba JIT ({why})"


def library() -> ctypes.CDLL | None:
    """The kernel library; None when the kernels run through the JIT here (`status` says
    why)."""
    return _load()[0]


@cache
def _load() -> tuple[ctypes.CDLL | None, str]:
    """The library, or None and why not."""
    if os.environ.get("GPU_PROFILER_NATIVE", "1") == "0":
        return None, "GPU_PROFILER_NATIVE=0"
    where = folder()
    why = why_not(where)
    if why:
        return None, why
    try:
        return ctypes.CDLL(str(where / LIBRARY)), ""
    except OSError as exc:
        return None, f"the native library cannot be loaded: {exc}"


def folder() -> Path:
    """Where the library is: the ``gpu_profiler.kernels`` package (in a checkout installed
    in place, its ``kernels/``)."""
    return Path(importlib.import_module("gpu_profiler.kernels").__path__[0])


def sidecar(where: Path) -> dict[str, Any] | None:
    """The sidecar of the library in ``where``; None when there is none (or it is not one)."""
    try:
        found = json.loads((where / SIDECAR).read_text())
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None


def why_not(where: Path) -> str:
    """Why the library in ``where`` cannot run here ('' when it can), with the fix; from its
    sidecar and a few stat calls (nothing hashed, numba not imported)."""
    said = sidecar(where)
    if said is None:
        return (f"no native kernel library in {where}: the install did not build one; "
                "reinstall (`pip install .`; in a checkout, `make`)")
    rebuild = "run `make` or `pip install -e .`" if "sources" in said else \
        "reinstall (`pip install .`)"
    if said.get("error"):
        return f"the native build failed: {said['error']}; fix that, then {rebuild}"
    if not (where / LIBRARY).is_file():
        return f"{where / LIBRARY} is missing: {rebuild}"
    lacking = set(EXPORTS) - set(said.get("exports", ()))
    if lacking:
        return f"the native library lacks the kernels {', '.join(sorted(lacking))}: {rebuild}"
    needed = set(said.get("flags", ()))
    have = cpu_flags() if needed else set()
    if have is None:
        return "cannot read this CPU's flags in /proc/cpuinfo to check those the native " \
               "library needs"
    if needed - have:
        fits = [level for level in LEVELS if level_flags(level) <= have]
        other = f", or build it with GPU_PROFILER_CPU={fits[-1]}" if fits else ""
        return (f"this CPU lacks {', '.join(sorted(needed - have))}, which the native "
                f"library was built for ({said.get('target')}): reinstall on this "
                f"machine{other}")
    for name, size, mtime in said.get("sources", ()):
        try:
            st = os.stat(where.parent / name)
        except OSError:
            return f"{name} is gone since the native build: {rebuild}"
        if (st.st_size, st.st_mtime_ns) != (size, mtime):
            return f"{name} changed since the native build: {rebuild}"
    return ""


def cpu_flags() -> set[str] | None:
    """This CPU's flags as /proc/cpuinfo lists them (its first processor's); None when it
    cannot be read."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return set(line.partition(":")[2].split())
    except OSError:
        pass
    return None


def source_roots() -> dict[str, Path]:
    """Where the two source trees are (``kernels/`` installs as ``gpu_profiler.kernels``)."""
    return {package: Path(importlib.import_module(package).__path__[0])
            for package in ("gpu_profiler.kernels", "gpu_profiler")}


def key_sources(roots: dict[str, Path]) -> list[Path]:
    """The sources the library is built from: the kernel modules of :data:`EXPORTS` and the
    builders, and every module of this package they import at module level, transitively
    (read and parsed, not imported: the kernels import numba). A library built in place
    records each one's size and modification time (`why_not` checks them)."""
    import ast

    def file_of(module: str) -> Path | None:
        for package, where in roots.items():  # the most specific root first
            if module == package or module.startswith(package + "."):
                rel = Path(*module[len(package) + 1:].split(".")) if module != package \
                    else Path()
                for candidate in (where / rel.with_suffix(".py") if rel.parts else None,
                                  where / rel / "__init__.py"):
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
