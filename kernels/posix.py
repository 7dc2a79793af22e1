"""The C library's ``open``, ``pread``, ``close`` and ``statx`` for numba kernels (as
intrinsics that call them by name: the JIT finds them in the process, the native library
links them from libc), so that a kernel reads many small files in one call
(`gpu_profiler.kernels.streams`), or looks them up (`look`), without the GIL or the
interpreter between them. ``statx`` is Linux's, in glibc 2.28 and later: the native library
exports `look` only where the C library has it (`gpu_profiler.native.EXPORTS`)."""

from __future__ import annotations

from typing import Any

import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from gpu_profiler.kernels.jit import kernel
from gpu_profiler.kernels.stats import MISSING, OTHER, STATX_WORDS

_I32, _I64 = ir.IntType(32), ir.IntType(64)
_PTR = ir.IntType(8).as_pointer()

#: ``statx`` (linux/stat.h): paths relative to the working directory, a link not followed
#: (unless asked), the type, size and inode asked for; where its answer holds the mask,
#: mode, inode, size and device numbers (as indices of it viewed as uint32, uint16 and
#: uint64).
_AT_FDCWD, _AT_SYMLINK_NOFOLLOW = -100, 0x100
_STATX_TYPE, _STATX_SIZE, _STATX_INO = 0x1, 0x200, 0x100
_MASK_AT, _MODE_AT, _INO_AT, _SIZE_AT, _DEV_MAJOR_AT, _DEV_MINOR_AT = 0, 14, 4, 5, 34, 35
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
def _statx(typingctx: Any, path: Any, flags: Any, mask: Any, buf: Any) -> Any:
    """``statx(AT_FDCWD, path, flags, mask, buf)`` (``path``, ``buf``: addresses; ``buf``
    holds 256 bytes)."""
    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(_I32, [_I32, _PTR, _I32, _I32, _PTR]), "statx")
        r = builder.call(fn, [ir.Constant(_I32, _AT_FDCWD), builder.inttoptr(args[0], _PTR),
                              builder.trunc(args[1], _I32), builder.trunc(args[2], _I32),
                              builder.inttoptr(args[3], _PTR)])
        return builder.sext(r, _I64)

    return types.int64(types.int64, types.int64, types.int64, types.int64), codegen


@kernel(nogil=True)
def look(names, starts, lo, hi, follow, flags, buf, heads, width, out):
    """For files ``lo..hi-1`` named at ``names[starts[i]:]`` (NUL-terminated; a link is
    followed only where ``follow``): ``out[i]`` = (size, device, inode, head bytes read) of
    a regular file, and where ``width`` > 0 its first ``width`` bytes in
    ``heads[i * width:]`` (opened with ``flags``: `os.open` 's; -1 head bytes where it
    cannot be opened or read; inode -1 where the filesystem did not say); ``out[i, 0]`` =
    `MISSING` or `OTHER` for anything else (`MISSING` too where the filesystem did not say
    its type and size: the caller asks again).
    ``buf``: the caller's room for ``statx`` 's answer (`STATX_WORDS` uint64s)."""
    if buf.size < STATX_WORDS:
        raise ValueError("look: buf holds fewer than STATX_WORDS words")
    if heads.size < hi * width:
        raise ValueError("look: heads holds fewer than hi * width bytes")
    asked = _STATX_TYPE | _STATX_SIZE | _STATX_INO
    at_flags = 0 if follow else _AT_SYMLINK_NOFOLLOW
    word, mode = buf.view(np.uint32), buf.view(np.uint16)
    for i in range(lo, hi):
        name = names[starts[i]:].ctypes.data
        out[i, 1] = out[i, 2] = out[i, 3] = 0
        if _statx(name, at_flags, asked, buf.ctypes.data) != 0:
            out[i, 0] = MISSING
            continue
        said = word[_MASK_AT]
        if said & (_STATX_TYPE | _STATX_SIZE) != _STATX_TYPE | _STATX_SIZE:
            out[i, 0] = MISSING
            continue
        if mode[_MODE_AT] & _S_IFMT != _S_IFREG:
            out[i, 0] = OTHER
            continue
        out[i, 0] = np.int64(buf[_SIZE_AT])
        out[i, 1] = (np.int64(word[_DEV_MAJOR_AT]) << 32) | np.int64(word[_DEV_MINOR_AT])
        out[i, 2] = np.int64(buf[_INO_AT]) if said & _STATX_INO else -1
        if width > 0:
            got, failed = _read_start(name, flags, heads[i * width:(i + 1) * width])
            out[i, 3] = -1 if failed else got


@kernel
def _read_start(name, flags, into):
    """Read the start of the file at address ``name`` into ``into`` (as much as fits):
    ``(bytes read, whether a read failed)``; ``(-1, True)`` where it cannot be opened."""
    fd = _open(name, flags)
    if fd < 0:
        return np.int64(-1), True
    got = np.int64(0)
    failed = False
    while got < into.size:
        n = _pread(fd, into[got:].ctypes.data, into.size - got, got)
        if n <= 0:
            failed = n < 0
            break
        got += n
    _close(fd)
    return got, failed


@kernel
def read_file(names, at, flags, buf, size):
    """Read the file named at ``names[at:]`` (NUL-terminated) into ``buf[:size + 1]`` from
    its start; whether it held exactly ``size`` bytes (one more is asked for, to tell a
    file that grew). ``flags``: `os.open`'s (read only, close on exec)."""
    got, _ = _read_start(names[at:].ctypes.data, flags, buf[:min(size + 1, buf.size)])
    return got == size
