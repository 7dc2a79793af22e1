"""Compile the CPU kernels ahead of time into one shared library (see `gpu_profiler.native`),
when the package is built or installed.

Each export becomes a numba ``cfunc`` ``int64 f(int64 *words)`` that views its array
arguments in place (``carray``), calls the ``njit`` kernel, stores its integer results after
the arguments, and returns 1 instead of raising. numba's LLVM IR for each is compiled to
position-independent object code for the target CPU (in one process a core), and the C
compiler links the objects into the library. The little of numba's runtime the code refers
to is stubbed in ``_RUNTIME``: the memory for an exception's arguments (allocated, then
dropped, when a kernel raises) and the Python-error path of an uncaught exception, which
the ``try`` makes unreachable.

``python -m gpu_profiler.native_build`` builds the library in place, next to its sources,
unless it is current there (an editable install; `make` runs it); ``--into DIR`` builds it
into a package being built (setup.py). The code is for this machine's CPU, or for the
x86-64 level ``GPU_PROFILER_CPU`` names (e.g. ``x86-64-v3``: a portable wheel). A build
that fails leaves a sidecar that says why, and the kernels run through numba's JIT.
"""

from __future__ import annotations

import argparse
import importlib
import json
import multiprocessing
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from itertools import repeat
from pathlib import Path
from typing import Any

import llvmlite.binding as llvm
import numpy as np
from numba import carray, cfunc, types
from numba.extending import intrinsic

from gpu_profiler import native

_RUNTIME = r"""  /* every symbol of numba's runtime a kernel may refer to */
#include <stdlib.h>
void *NRT_Allocate(size_t n) { return malloc(n); }
void NRT_Free(void *p) { free(p); }
void NRT_MemInfo_call_dtor(void *m) { abort(); }
void numba_gil_ensure(void *s) { abort(); }
void numba_gil_release(void *s) { abort(); }
void *numba_unpickle(const char *b, int n, const char *h) { abort(); }
void *numba_runtime_build_excinfo_struct(void *a, void *b) { abort(); }
void numba_do_raise(void *e) { abort(); }
"""
#: The functions ``_RUNTIME`` defines.
_STUBBED = set(re.findall(r"^\w[^(]*?(\w+)\(", _RUNTIME, re.MULTILINE))


class BuildError(Exception):
    """The library could not be built here (the JIT serves instead)."""


@intrinsic
def _pointer(typingctx: Any, address: Any, dtype: Any) -> Any:
    """``address`` (an int64) as a pointer to ``dtype`` values."""
    sig = types.CPointer(dtype.dtype)(address, dtype)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        return builder.inttoptr(args[0], context.get_value_type(signature.return_type))

    return sig, codegen


def _wrapper(name: str, export: Any) -> Any:
    """The cfunc for one export (its source is generated: one line per argument)."""
    lines, call, j = [], [], 0
    for i, spec in enumerate(export.args):
        if spec is None:
            call.append(f"a[{j}]")
            j += 1
        else:
            shape = ", ".join(f"a[{j + 1 + d}]" for d in range(spec.ndim))
            lines.append(f"    x{i} = carray(_pointer(a[{j}], np.{spec.dtype}), ({shape},))")
            call.append(f"x{i}")
            j += 1 + spec.ndim
    lines += ["    try:", f"        r = fn({', '.join(call)})", "    except Exception:",
              "        return 1"]
    lines += [f"    a[{j + k}] = np.int64(r[{k}])" for k in range(export.results)]
    src = f"def {name}(a):\n" + "\n".join(lines) + "\n    return 0\n"
    module = importlib.import_module(f"gpu_profiler.kernels.{export.module}")
    scope = {"np": np, "carray": carray, "_pointer": _pointer,
             "fn": getattr(module, export.function)}
    exec(compile(src, f"<native {name}>", "exec"), scope)  # noqa: S102
    return cfunc(types.int64(types.CPointer(types.int64)))(scope[name])


#: LLVM's names of CPU features that /proc/cpuinfo spells otherwise.
_CPUINFO = {"sse3": "pni", "sse4.1": "sse4_1", "sse4.2": "sse4_2", "bmi": "bmi1",
            "lzcnt": "abm", "pclmul": "pclmulqdq", "rdrnd": "rdrand", "sahf": "lahf_lm",
            "sha": "sha_ni", "prfchw": "3dnowprefetch", "avxvnni": "avx_vnni"}


def target(name: str) -> tuple[str, str, list[str]]:
    """The LLVM CPU name and features to compile for, and the CPU flags the code then needs:
    ``host``, this machine's (its features that /proc/cpuinfo also lists); else an x86-64
    level of `native.LEVELS`."""
    if name == "host":
        features = llvm.get_host_cpu_features()
        have = native.cpu_flags() or set()
        needs = {flag for feature, on in features.items() if on
                 for flag in (_CPUINFO.get(feature, feature),
                              feature.replace("avx512", "avx512_", 1)) if flag in have}
        return llvm.get_host_cpu_name(), features.flatten(), sorted(needs)
    if name not in native.LEVELS:
        raise BuildError(f"GPU_PROFILER_CPU={name!r}: choose one of host, "
                         f"{', '.join(native.LEVELS)}")
    if platform.machine() != "x86_64":
        raise BuildError(f"GPU_PROFILER_CPU={name} is for x86_64, not {platform.machine()}")
    return name, "", sorted(native.level_flags(name))


def build(where: Path, exports: dict[str, Any], cpu: str, features: str) -> None:
    """Compile ``exports`` for the LLVM CPU ``cpu`` with ``features`` and link them into the
    library in ``where`` (by rename). numba must compile for the same CPU (`main` sets it)."""
    try:
        if sys.platform != "linux":
            raise BuildError(f"native kernels are built on Linux only, not {sys.platform}")
        cc = os.environ.get("CC", "cc")
        if not shutil.which(cc):
            raise BuildError(f"no C compiler ({cc}) to link the native kernels: install gcc")
        from numba.core.registry import cpu_target

        numba_cpu = cpu_target.target_context.codegen().magic_tuple()[1:]
        if numba_cpu != (cpu, features):
            raise BuildError(f"numba compiles for {numba_cpu[0]}, not {cpu}")
        with tempfile.TemporaryDirectory(prefix="gpu-profiler-aot-") as tmp:
            # the C compiler first: a broken one fails in milliseconds, not after numba
            # has compiled every kernel
            Path(tmp, "runtime.c").write_text(_RUNTIME)
            objects = [Path(tmp, "runtime.o")]
            _cc(cc, "-c", "-fPIC", "-O2", "-o", str(objects[0]), str(Path(tmp, "runtime.c")))
            # one process a core (at most 4: each holds numba and LLVM), forked, so that
            # they have the modules as this process imported them (setup.py's build has
            # the packages without their __init__); the kernels of the largest modules
            # first, so that the slowest to compile do not start last
            big = {m: Path(native.folder(), f"{m}.py").stat().st_size
                   for m in {e.module for e in exports.values()}}
            order = sorted(exports, key=lambda n: -big[exports[n].module])
            with ProcessPoolExecutor(min(4, len(os.sched_getaffinity(0)), len(order)),
                                     mp_context=multiprocessing.get_context("fork")) as pool:
                objects += pool.map(_object, order, [exports[n] for n in order], repeat(tmp),
                                    repeat(cpu), repeat(features))
            out = Path(tmp, "lib.so")
            _cc(cc, "-shared", "-fPIC", "-O2", "-o", str(out), *map(str, objects), "-lm")
            shutil.copyfile(out, where / f".{native.LIBRARY}.tmp")
            os.replace(where / f".{native.LIBRARY}.tmp", where / native.LIBRARY)
    except BuildError:
        raise
    except Exception as exc:  # any failure leaves the JIT in charge, with the reason
        raise BuildError(f"{type(exc).__name__}: {exc}") from exc


def _object(name: str, export: Any, tmp: str, cpu: str, features: str) -> Path:
    """Compile the export ``name`` into an object file in ``tmp`` (in a worker process)."""
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    machine = llvm.Target.from_default_triple().create_target_machine(
        cpu=cpu, features=features, opt=3, reloc="pic", codemodel="default")
    f = _wrapper(name, export)
    module = llvm.parse_assembly(f._library.get_llvm_str())
    missing = {g.name for g in module.functions if g.is_declaration
               and g.name.startswith(("NRT_", "numba_"))} - _STUBBED
    if missing:  # e.g. an array allocated in a kernel: not for this library
        raise BuildError(f"kernel {name} needs numba's runtime: {sorted(missing)}")
    module.get_function(f.native_name).name = f"gp_{name}"
    out = Path(tmp, f"{name}.o")
    out.write_bytes(machine.emit_object(module))
    return out


def _cc(cc: str, *args: str) -> None:
    """Run the C compiler; a `BuildError` with its last line of errors if it fails."""
    p = subprocess.run([cc, *args], capture_output=True, text=True)
    if p.returncode:
        said = p.stderr.strip().splitlines()
        raise BuildError(f"{cc} failed: {said[-1]}" if said else
                         f"{cc} failed (exit {p.returncode})")


def _write_sidecar(where: Path, said: dict[str, Any]) -> None:
    tmp = where / f".{native.SIDECAR}.tmp"
    tmp.write_text(json.dumps(said, indent=1) + "\n")
    os.replace(tmp, where / native.SIDECAR)


def main(argv: list[str] | None = None) -> int:
    """Build the library and its sidecar (see the module's docstring); 1 when the build
    failed (the sidecar then says why)."""
    parser = argparse.ArgumentParser(prog="python -m gpu_profiler.native_build",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--into", type=Path, help="build into this folder (a package being "
                        "built), without recording the sources")
    args = parser.parse_args(argv)
    name = os.environ.get("GPU_PROFILER_CPU") or "host"
    in_place = args.into is None
    where = native.folder() if in_place else args.into
    found = native.sidecar(where)
    if (in_place and found is not None and found.get("target") == name and "sources" in found
            and not native.why_not(where)):
        print(f"gpu-profiler: the native CPU kernels in {where} are up to date")
        return 0
    began = time.perf_counter()
    (where / native.SIDECAR).unlink(missing_ok=True)  # no sidecar for a library half-built
    said: dict[str, Any] = {"target": name}
    if in_place:  # as they are before the build (one edited meanwhile is then stale)
        said["sources"] = [[os.path.relpath(p, where.parent), st.st_size, st.st_mtime_ns]
                           for p in native.key_sources(native.source_roots())
                           for st in [p.stat()]]
    try:
        cpu, features, flags = target(name)
        with tempfile.TemporaryDirectory(prefix="gpu-profiler-numba-") as cache:
            # numba compiles for the target (its IR is optimized for it), caching nothing
            # in the sources or the package being built
            os.environ.update(NUMBA_CPU_NAME=cpu, NUMBA_CPU_FEATURES=features,
                              NUMBA_CACHE_DIR=cache)
            from numba.core import config

            config.reload_config()
            build(where, native.EXPORTS, cpu, features)
    except BuildError as exc:
        (where / native.LIBRARY).unlink(missing_ok=True)
        _write_sidecar(where, {**said, "error": str(exc)})
        print(f"gpu-profiler: the native CPU kernels were not built: {exc}; they will run "
              "through numba's JIT", file=sys.stderr)
        return 1
    said |= {"cpu": cpu, "flags": flags, "exports": sorted(native.EXPORTS)}
    _write_sidecar(where, said)
    print(f"gpu-profiler: native CPU kernels built for {name} ({cpu}) in {where} in "
          f"{time.perf_counter() - began:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
