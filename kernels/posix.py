"""The C library's ``open``, ``pread`` and ``close`` for numba kernels (as intrinsics that
call them by name: the JIT finds them in the process, the native library links them from
libc), so that a kernel reads many small files in one call, without the GIL or the
interpreter between them (`gpu_profiler.kernels.streams`)."""

from __future__ import annotations

from typing import Any

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

_I32, _I64 = ir.IntType(32), ir.IntType(64)
_PTR = ir.IntType(8).as_pointer()


@intrinsic
def _open(typingctx: Any, path: Any, flags: Any) -> Any:
    """``open(path, flags)`` (``path``: the address of a NUL-terminated name)."""
    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(_I32, [_PTR, _I32], var_arg=True), "open")
        fd = builder.call(fn, [builder.inttoptr(args[0], _PTR), builder.trunc(args[1], _I32)])
        return builder.sext(fd, _I64)

    return types.int64(types.int64, types.int64), codegen


@intrinsic
def _pread(typingctx: Any, fd: Any, at: Any, n: Any, offset: Any) -> Any:
    """``pread(fd, at, n, offset)`` (``at``: an address)."""
    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(_I64, [_I32, _PTR, _I64, _I64]), "pread")
        return builder.call(fn, [builder.trunc(args[0], _I32), builder.inttoptr(args[1], _PTR),
                                 args[2], args[3]])

    return types.int64(types.int64, types.int64, types.int64, types.int64), codegen


@intrinsic
def _close(typingctx: Any, fd: Any) -> Any:
    """``close(fd)``."""
    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_I32, [_I32]),
                                            "close")
        return builder.sext(builder.call(fn, [builder.trunc(args[0], _I32)]), _I64)

    return types.int64(types.int64), codegen


@njit(cache=True)
def read_file(names, at, flags, buf, size):
    """Read the file named at ``names[at:]`` (NUL-terminated) into ``buf[:size + 1]`` from
    its start; whether it held exactly ``size`` bytes (one more is asked for, to tell a
    file that grew). ``flags``: `os.open`'s (read only, close on exec)."""
    fd = _open(names[at:].ctypes.data, flags)
    if fd < 0:
        return False
    got = np.int64(0)
    want = min(size + 1, buf.size)
    while got < want:
        n = _pread(fd, buf[got:].ctypes.data, want - got, got)
        if n <= 0:
            break
        got += n
    _close(fd)
    return got == size
