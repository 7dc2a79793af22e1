"""The C library's ``open``, ``pread``, ``close`` and ``statx`` for numba kernels (as
intrinsics that call them by name: the JIT finds them in the process, the native library
links them from libc), so that a kernel reads many small files in one call
(`gpu_profiler.kernels.streams`), or looks up their sizes (`sizes`), without the GIL or the
interpreter between them. ``statx`` is Linux's, in glibc 2.28 and later: the native library
exports `sizes` only where the C library has it (`gpu_profiler.native.EXPORTS`)."""

from __future__ import annotations

from typing import Any

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from gpu_profiler.kernels.stats import MISSING, OTHER, STATX_WORDS

_I32, _I64 = ir.IntType(32), ir.IntType(64)
_PTR = ir.IntType(8).as_pointer()

#: ``statx`` (linux/stat.h): a path relative to the working directory, a link not followed,
#: and the type and size asked for; where its buffer holds the mask, mode and size (as
#: indices of that buffer viewed as uint32, uint16 and uint64).
_AT_FDCWD, _AT_SYMLINK_NOFOLLOW, _STATX_TYPE_SIZE = -100, 0x100, 0x1 | 0x200
_MASK_AT, _MODE_AT, _SIZE_AT = 0, 14, 5
_S_IFMT, _S_IFREG = 0o170000, 0o100000


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


@intrinsic
def _statx(typingctx: Any, path: Any, buf: Any) -> Any:
    """``statx(AT_FDCWD, path, AT_SYMLINK_NOFOLLOW, STATX_TYPE | STATX_SIZE, buf)``
    (``path``, ``buf``: addresses; ``buf`` holds 256 bytes)."""
    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(_I32, [_I32, _PTR, _I32, _I32, _PTR]), "statx")
        r = builder.call(fn, [ir.Constant(_I32, _AT_FDCWD), builder.inttoptr(args[0], _PTR),
                              ir.Constant(_I32, _AT_SYMLINK_NOFOLLOW),
                              ir.Constant(_I32, _STATX_TYPE_SIZE),
                              builder.inttoptr(args[1], _PTR)])
        return builder.sext(r, _I64)

    return types.int64(types.int64, types.int64), codegen


@njit(cache=True, nogil=True)
def sizes(names, starts, lo, hi, buf, out):
    """``out[i]``, for files ``lo..hi-1`` named at ``names[starts[i]:]`` (NUL-terminated):
    the size of a regular file (a link is not followed), else `MISSING` or `OTHER`.
    ``buf``: the caller's room for ``statx``'s answer (at least `STATX_WORDS` uint64s)."""
    if buf.size < STATX_WORDS:
        raise ValueError("sizes: buf holds fewer than STATX_WORDS words")
    mask, mode = buf.view(np.uint32), buf.view(np.uint16)
    for i in range(lo, hi):
        if _statx(names[starts[i]:].ctypes.data, buf.ctypes.data) != 0:
            out[i] = MISSING
        elif (mask[_MASK_AT] & _STATX_TYPE_SIZE != _STATX_TYPE_SIZE
              or mode[_MODE_AT] & _S_IFMT != _S_IFREG):
            out[i] = OTHER
        else:
            out[i] = np.int64(buf[_SIZE_AT])


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
