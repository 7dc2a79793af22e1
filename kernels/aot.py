"""Compile the CPU kernels ahead of time into one shared library (see `gpu_profiler.native`).

Each export becomes a numba ``cfunc`` ``int64 f(int64 *words)`` that views its array
arguments in place (``carray``), calls the ``njit`` kernel, stores its integer results after
the arguments, and returns 1 instead of raising. numba's LLVM IR for each is compiled to
position-independent object code for this CPU, and the C compiler links the objects into
the library. The little of numba's runtime the code refers to is stubbed in ``_RUNTIME``:
the memory for an exception's arguments (allocated, then dropped, when a kernel raises) and
the Python-error path of an uncaught exception, which the ``try`` makes unreachable.
"""

from __future__ import annotations

import importlib
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import llvmlite.binding as llvm
import numpy as np
from numba import carray, cfunc, types
from numba.extending import intrinsic

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


def build(path: Path, exports: dict[str, Any]) -> None:
    """Compile ``exports`` and link them into the shared library ``path`` (atomically)."""
    try:
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        machine = llvm.Target.from_default_triple().create_target_machine(
            cpu=llvm.get_host_cpu_name(), features=llvm.get_host_cpu_features().flatten(),
            opt=3, reloc="pic", codemodel="default")
        # A build killed midway (SIGKILL, or Ctrl-C while a reading thread built) leaves its
        # folder behind; the caller holds this library's build lock, so none is in use.
        for stale in path.parent.glob(f"{path.stem}.build-*"):
            shutil.rmtree(stale, ignore_errors=True)
        with tempfile.TemporaryDirectory(prefix=f"{path.stem}.build-", dir=path.parent) as tmp:
            # the C compiler first: a broken one fails in milliseconds, not after numba
            # has compiled every kernel
            cc = os.environ.get("CC", "cc")
            Path(tmp, "runtime.c").write_text(_RUNTIME)
            objects = [Path(tmp, "runtime.o")]
            _cc(cc, "-c", "-fPIC", "-O2", "-o", str(objects[0]), str(Path(tmp, "runtime.c")))
            for name, export in exports.items():
                f = _wrapper(name, export)
                module = llvm.parse_assembly(f._library.get_llvm_str())
                missing = {g.name for g in module.functions if g.is_declaration
                           and g.name.startswith(("NRT_", "numba_"))} - _STUBBED
                if missing:  # e.g. an array allocated in a kernel: not for this library
                    raise BuildError(f"kernel {name} needs numba's runtime: {sorted(missing)}")
                module.get_function(f.native_name).name = f"gp_{name}"
                objects.append(Path(tmp, f"{name}.o"))
                objects[-1].write_bytes(machine.emit_object(module))
            out = Path(tmp, "lib.so")
            _cc(cc, "-shared", "-fPIC", "-O2", "-o", str(out), *map(str, objects), "-lm")
            os.replace(out, path)
    except BuildError:
        raise
    except Exception as exc:  # any failure leaves the JIT in charge, with the reason
        raise BuildError(f"{type(exc).__name__}: {exc}") from exc


def _cc(cc: str, *args: str) -> None:
    """Run the C compiler; a `BuildError` with its last line of errors if it fails."""
    p = subprocess.run([cc, *args], capture_output=True, text=True)
    if p.returncode:
        raise BuildError(f"{cc} failed: {p.stderr.strip().splitlines()[-1:]}")
