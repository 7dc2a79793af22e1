"""CUDA histogram kernels (numba ``cuda.jit``), installed as ``gpu_profiler.kernels.cuda``.

Importing this module needs no GPU and compiles nothing: numba compiles each kernel lazily
for the argument types of its first launch (every integer dtype, no host-side cast).

Kernels (all grid-stride loops, unrolled by :data:`UNROLL` so each thread keeps several
loads in flight; lengths read as int64; ``offsets=True`` reads ``x[i+1] - x[i]``):

- :func:`hist_shared`: per-block privatized uint32 bins in dynamic shared memory
  (``(cap + 1) * 4`` bytes), one global int64 merge per block. A launch must cover at most
  :data:`MAX_LAUNCH` samples so a block's uint32 bin cannot wrap.
- :func:`hist_global`: int64 bins updated with global atomics, for caps whose bins do not
  fit the device's shared memory.
- :func:`max_length`: largest valid length (sizes ``cap=None``).

Both histogram kernels fuse the above-cap count / token sum / min / max and the null and
invalid (negative) counts into the same pass: per-thread registers, reduced per block with
shared-memory atomics, then one set of global atomics per block into ``stats`` (int64[6],
laid out as :data:`STATS`, initialized from :func:`new_stats`). Only plain atomics and
``syncthreads`` are used (no warp intrinsics), so numba's CUDA simulator runs the very same
code that is compiled for the GPU. Device helpers are ``register_jitable`` functions
(compiled into each kernel; ``compile_ptx`` then needs no device to resolve them).
"""

from __future__ import annotations

import numpy as np
from numba import cuda, int64, uint32
from numba.cuda.extending import register_jitable  # type: ignore[attr-defined]  # stub gap

#: Layout of the ``stats`` array: names in order.
STATS = ("above_count", "above_tokens", "above_min", "above_max", "null_count",
         "invalid_count")
#: Threads per block of every kernel (the launch configuration the PTX tests check).
THREADS = 256
#: Elements each thread loads before it updates bins (memory-level parallelism).
UNROLL = 4
#: Most samples one launch may cover (a block's uint32 shared bins cannot overflow).
MAX_LAUNCH = 1 << 31
#: Bytes of static shared memory the histogram kernels declare (the block's stats).
STATIC_SHARED = 6 * 8

_I64_MAX = 2**63 - 1


def new_stats() -> np.ndarray:
    """The initial value of a ``stats`` accumulator (min starts at int64 max, max at -1)."""
    return np.array([0, 0, _I64_MAX, -1, 0, 0], dtype=np.int64)


def shared_bytes(cap: int) -> int:
    """Dynamic shared memory :func:`hist_shared` needs for bins ``0..cap``."""
    return (cap + 1) * 4


def plan(cap: int, shared_per_block: int) -> tuple[str, int]:
    """``(kernel name, dynamic shared bytes)`` for bins ``0..cap`` on a device that allows
    ``shared_per_block`` bytes of shared memory per block (static + dynamic, opt-in max)."""
    dynamic = shared_bytes(cap)
    if dynamic + STATIC_SHARED <= shared_per_block:
        return "hist_shared", dynamic
    return "hist_global", 0


def blocks_per_sm(regs: int, static: int, dynamic: int, threads: int, threads_per_sm: int,
                  regs_per_sm: int, shared_per_sm: int) -> int:
    """Resident blocks per SM for a kernel using ``regs`` registers per thread (allocated
    per warp in units of 8 per thread) and ``static + dynamic`` shared bytes (plus the 1 KiB
    the driver reserves per block)."""
    regs = -(-regs // 8) * 8
    return min(threads_per_sm // threads, regs_per_sm // (regs * threads),
               shared_per_sm // (static + dynamic + 1024))


@register_jitable
def _take(x, valid, has_mask, offsets, i):
    """(length of sample i as int64, whether it is non-null)."""
    if offsets:
        v = int64(x[i + 1]) - int64(x[i])
    else:
        v = int64(x[i])
    ok = True
    if has_mask:
        ok = bool(valid[i])
    return v, ok


@register_jitable
def _count(bins, one, cap, v, ok, ac, at, amin, amax, nn, ni):
    """Add one sample to ``bins`` (atomically) or to the thread's running statistics."""
    if not ok:
        nn += 1
    elif v < 0:
        ni += 1
    elif v <= cap:
        cuda.atomic.add(bins, v, one)
    else:
        ac += 1
        at += v
        amin = min(amin, v)
        amax = max(amax, v)
    return ac, at, amin, amax, nn, ni


@register_jitable
def _scan(bins, one, x, valid, has_mask, offsets, n, cap):
    """This thread's grid-stride share of the samples; returns its running statistics."""
    ac = int64(0)
    at = int64(0)
    amin = int64(_I64_MAX)
    amax = int64(-1)
    nn = int64(0)
    ni = int64(0)
    stride = int64(cuda.gridDim.x) * int64(cuda.blockDim.x)
    i = int64(cuda.blockIdx.x) * int64(cuda.blockDim.x) + int64(cuda.threadIdx.x)
    while i + 3 * stride < n:  # UNROLL == 4: all loads first, then the updates
        v0, k0 = _take(x, valid, has_mask, offsets, i)
        v1, k1 = _take(x, valid, has_mask, offsets, i + stride)
        v2, k2 = _take(x, valid, has_mask, offsets, i + 2 * stride)
        v3, k3 = _take(x, valid, has_mask, offsets, i + 3 * stride)
        ac, at, amin, amax, nn, ni = _count(bins, one, cap, v0, k0, ac, at, amin, amax, nn, ni)
        ac, at, amin, amax, nn, ni = _count(bins, one, cap, v1, k1, ac, at, amin, amax, nn, ni)
        ac, at, amin, amax, nn, ni = _count(bins, one, cap, v2, k2, ac, at, amin, amax, nn, ni)
        ac, at, amin, amax, nn, ni = _count(bins, one, cap, v3, k3, ac, at, amin, amax, nn, ni)
        i += 4 * stride
    while i < n:
        v, k = _take(x, valid, has_mask, offsets, i)
        ac, at, amin, amax, nn, ni = _count(bins, one, cap, v, k, ac, at, amin, amax, nn, ni)
        i += stride
    return ac, at, amin, amax, nn, ni


@register_jitable
def _init_block_stats(bst):
    bst[0] = 0
    bst[1] = 0
    bst[2] = _I64_MAX
    bst[3] = -1
    bst[4] = 0
    bst[5] = 0


@register_jitable
def _add_stats(dst, ac, at, amin, amax, nn, ni):
    """Atomically fold running statistics into ``dst`` (block-shared or global)."""
    if ac != 0:
        cuda.atomic.add(dst, 0, ac)
        cuda.atomic.add(dst, 1, at)
        cuda.atomic.min(dst, 2, amin)
        cuda.atomic.max(dst, 3, amax)
    if nn != 0:
        cuda.atomic.add(dst, 4, nn)
    if ni != 0:
        cuda.atomic.add(dst, 5, ni)


def _hist_shared(x, valid, has_mask, offsets, n, cap, counts, stats):
    """Histogram of ``n`` samples into ``counts`` (int64[cap+1]) and ``stats`` (int64[6]).

    Launch with ``shared_bytes(cap)`` bytes of dynamic shared memory.
    """
    bins = cuda.shared.array(0, uint32)
    bst = cuda.shared.array(6, int64)
    tid = cuda.threadIdx.x
    nt = cuda.blockDim.x
    for b in range(tid, cap + 1, nt):
        bins[b] = 0
    if tid == 0:
        _init_block_stats(bst)
    cuda.syncthreads()
    ac, at, amin, amax, nn, ni = _scan(bins, uint32(1), x, valid, has_mask, offsets, n, cap)
    _add_stats(bst, ac, at, amin, amax, nn, ni)
    cuda.syncthreads()
    for b in range(tid, cap + 1, nt):
        c = bins[b]
        if c != 0:
            cuda.atomic.add(counts, b, int64(c))
    if tid == 0:
        _add_stats(stats, bst[0], bst[1], bst[2], bst[3], bst[4], bst[5])


def _hist_global(x, valid, has_mask, offsets, n, cap, counts, stats):
    """Like :func:`hist_shared`, with bins updated by global atomics (any cap)."""
    bst = cuda.shared.array(6, int64)
    if cuda.threadIdx.x == 0:
        _init_block_stats(bst)
    cuda.syncthreads()
    ac, at, amin, amax, nn, ni = _scan(counts, int64(1), x, valid, has_mask, offsets, n, cap)
    _add_stats(bst, ac, at, amin, amax, nn, ni)
    cuda.syncthreads()
    if cuda.threadIdx.x == 0:
        _add_stats(stats, bst[0], bst[1], bst[2], bst[3], bst[4], bst[5])


def _max_length(x, valid, has_mask, offsets, n, out):
    """``out[0] = max(out[0], largest valid length)``; ``out`` starts at -1."""
    bmax = cuda.shared.array(1, int64)
    if cuda.threadIdx.x == 0:
        bmax[0] = -1
    cuda.syncthreads()
    m = int64(-1)
    stride = int64(cuda.gridDim.x) * int64(cuda.blockDim.x)
    i = int64(cuda.blockIdx.x) * int64(cuda.blockDim.x) + int64(cuda.threadIdx.x)
    while i < n:
        v, ok = _take(x, valid, has_mask, offsets, i)
        if ok and v > m:
            m = v
        i += stride
    if m >= 0:
        cuda.atomic.max(bmax, 0, m)
    cuda.syncthreads()
    if cuda.threadIdx.x == 0 and bmax[0] >= 0:
        cuda.atomic.max(out, 0, bmax[0])


#: The kernels' Python functions by name (for ``numba.cuda.compile_ptx``).
PY_FUNCS = {"hist_shared": _hist_shared, "hist_global": _hist_global,
            "max_length": _max_length}

hist_shared = cuda.jit(cache=True)(_hist_shared)
hist_global = cuda.jit(cache=True)(_hist_global)
max_length = cuda.jit(cache=True)(_max_length)


def signature(name: str, dtype: np.dtype | str, layout: str = "C") -> tuple:
    """The numba argument types a launch of kernel ``name`` on ``dtype`` input compiles to."""
    from numba import from_dtype, types

    arr = types.Array(from_dtype(np.dtype(dtype)), 1, layout)  # type: ignore[call-overload]
    mask = types.Array(types.boolean, 1, "C")
    i64 = types.Array(types.int64, 1, "C")
    head = (arr, mask, types.boolean, types.boolean, types.int64)
    if name == "max_length":
        return (*head, i64)
    return (*head, types.int64, i64, i64)
