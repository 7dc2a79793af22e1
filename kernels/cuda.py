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
- :func:`docs_shared` / :func:`docs_global`: the same two histograms of the documents of
  a flat token stream (`gpu_profiler.chunk.Documents`): each block scans a tile of
  :data:`DOC_TOKENS` ids per thread, a block-wide scan finds the cut before each thread's
  first one, and the cut before the tile is searched backwards, a block's width at a time
  (usually within the previous tile), bounded by the piece's start and its ``carry``.

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
#: Token ids each thread of the document kernels scans per tile.
DOC_TOKENS = 16
#: Static shared memory of the document kernels: the stats, every thread's last cut, the
#: cut found before the tile (16 bytes, so the dynamic bins stay 16-byte aligned).
DOC_STATIC_SHARED = STATIC_SHARED + THREADS * 8 + 16

_I64_MAX = 2**63 - 1


def new_stats() -> np.ndarray:
    """The initial value of a ``stats`` accumulator (min starts at int64 max, max at -1)."""
    return np.array([0, 0, _I64_MAX, -1, 0, 0], dtype=np.int64)


def shared_bytes(cap: int) -> int:
    """Dynamic shared memory :func:`hist_shared` needs for bins ``0..cap``."""
    return (cap + 1) * 4


def plan(cap: int, shared_per_block: int, documents: bool = False) -> tuple[str, int]:
    """``(kernel name, dynamic shared bytes)`` for bins ``0..cap`` on a device that allows
    ``shared_per_block`` bytes of shared memory per block (static + dynamic, opt-in max);
    ``documents``: the kernels for token ids."""
    dynamic = shared_bytes(cap)
    prefix, static = ("docs", DOC_STATIC_SHARED) if documents else ("hist", STATIC_SHARED)
    if dynamic + static <= shared_per_block:
        return f"{prefix}_shared", dynamic
    return f"{prefix}_global", 0


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
def _fresh():
    """A thread's running statistics before its first sample: above count, tokens, min,
    max, nulls, invalid."""
    return int64(0), int64(0), int64(_I64_MAX), int64(-1), int64(0), int64(0)


@register_jitable
def _scan(bins, one, x, valid, has_mask, offsets, n, cap):
    """This thread's grid-stride share of the samples; returns its running statistics."""
    ac, at, amin, amax, nn, ni = _fresh()
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


@register_jitable
def _zero_shared(bins, bst, cap):
    """Zero a block's shared bins ``0..cap`` and its stats (the caller then syncs)."""
    tid = cuda.threadIdx.x
    for b in range(tid, cap + 1, cuda.blockDim.x):
        bins[b] = 0
    if tid == 0:
        _init_block_stats(bst)


@register_jitable
def _flush_shared(bins, bst, cap, counts, stats):
    """Add a block's shared bins and stats to the global ones (after a sync)."""
    tid = cuda.threadIdx.x
    for b in range(tid, cap + 1, cuda.blockDim.x):
        c = bins[b]
        if c != 0:
            cuda.atomic.add(counts, b, int64(c))
    if tid == 0:
        _add_stats(stats, bst[0], bst[1], bst[2], bst[3], bst[4], bst[5])


def _hist_shared(x, valid, has_mask, offsets, n, cap, counts, stats):
    """Histogram of ``n`` samples into ``counts`` (int64[cap+1]) and ``stats`` (int64[6]).

    Launch with ``shared_bytes(cap)`` bytes of dynamic shared memory.
    """
    bins = cuda.shared.array(0, uint32)
    bst = cuda.shared.array(6, int64)
    _zero_shared(bins, bst, cap)
    cuda.syncthreads()
    ac, at, amin, amax, nn, ni = _scan(bins, uint32(1), x, valid, has_mask, offsets, n, cap)
    _add_stats(bst, ac, at, amin, amax, nn, ni)
    cuda.syncthreads()
    _flush_shared(bins, bst, cap, counts, stats)


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


@register_jitable
def _before_tile(x, eot, shift, carry, t0, found):
    """The last cut found by the ids before ``t0`` (``-carry`` when none is: the piece
    starts inside a document that long), searched backwards by the whole block, one id
    per thread per step. Every thread of the block must call it."""
    tid = cuda.threadIdx.x
    nt = cuda.blockDim.x
    if tid == 0:
        found[0] = -1
    cuda.syncthreads()
    q0 = t0 - 1  # the step looks at ids q0 - nt + 1 .. q0
    while True:
        q = q0 - tid
        if q >= 0 and x[q] == eot:
            cuda.atomic.max(found, 0, q + shift)
        cuda.syncthreads()
        f = found[0]
        if f >= 0 or q0 - nt < 0:  # the same for every thread: the loop ends together
            break
        q0 -= nt
        cuda.syncthreads()  # every thread has read found[0] before the next step writes it
    cuda.syncthreads()
    return f if f >= 0 else -carry


@register_jitable
def _docs(bins, one, x, eot, start, carry, last, n, cap):
    """This block's tiles of the ``n`` token ids: count every document that ends in them
    (and, when ``last``, the one open at the end); returns the thread's running stats."""
    ac, at, amin, amax, nn, ni = _fresh()
    lasts = cuda.shared.array(THREADS, int64)
    found = cuda.shared.array(2, int64)  # [0] used: 16 bytes keep what follows aligned
    tid = cuda.threadIdx.x
    nt = cuda.blockDim.x
    shift = int64(0) if start else int64(1)
    tile = int64(nt) * DOC_TOKENS
    t0 = int64(cuda.blockIdx.x) * tile
    while t0 < n:  # the same for every thread of the block
        lo = t0 + int64(tid) * DOC_TOKENS
        hi = min(lo + DOC_TOKENS, n)
        first = int64(-1)
        prev = int64(-1)
        for i in range(lo, hi):
            if x[i] == eot:
                p = i + shift
                if prev >= 0:
                    ac, at, amin, amax, nn, ni = _count(bins, one, cap, p - prev, True, ac,
                                                        at, amin, amax, nn, ni)
                else:
                    first = p
                prev = p
        lasts[tid] = prev
        cuda.syncthreads()
        d = 1
        while d < nt:  # inclusive max-scan: lasts[t] = the last cut up to thread t's ids
            v = lasts[tid - d] if tid >= d else int64(-1)
            cuda.syncthreads()
            if v > lasts[tid]:
                lasts[tid] = v
            cuda.syncthreads()
            d *= 2
        before = lasts[tid - 1] if tid > 0 else int64(-1)
        if first >= 0 and before >= 0:
            ac, at, amin, amax, nn, ni = _count(bins, one, cap, first - before, True, ac, at,
                                                amin, amax, nn, ni)
        tile_last = lasts[nt - 1]
        ends = last and t0 + tile >= n
        if tile_last >= 0 or ends:  # the same for every thread of the block
            b = _before_tile(x, eot, shift, carry, t0, found)
            if first >= 0 and before < 0 and first - b > 0:  # the tile's first cut
                ac, at, amin, amax, nn, ni = _count(bins, one, cap, first - b, True, ac, at,
                                                    amin, amax, nn, ni)
            if ends and tid == 0:
                open_from = tile_last if tile_last >= 0 else b
                if n - open_from > 0:
                    ac, at, amin, amax, nn, ni = _count(bins, one, cap, n - open_from, True,
                                                        ac, at, amin, amax, nn, ni)
        cuda.syncthreads()  # lasts is rewritten by the next tile
        t0 += int64(cuda.gridDim.x) * tile
    return ac, at, amin, amax, nn, ni


def _docs_shared(x, eot, start, carry, last, n, cap, counts, stats):
    """Histogram of the documents of ``n`` token ids (`gpu_profiler.chunk.Documents`: end
    of text ``eot``, ``start``, ``carry``, ``last``) into ``counts`` and ``stats``, as
    :func:`hist_shared` does for lengths. Launch with ``shared_bytes(cap)`` bytes of
    dynamic shared memory and at most :data:`THREADS` threads per block."""
    bins = cuda.shared.array(0, uint32)
    bst = cuda.shared.array(6, int64)
    _zero_shared(bins, bst, cap)
    cuda.syncthreads()
    ac, at, amin, amax, nn, ni = _docs(bins, uint32(1), x, eot, start, carry, last, n, cap)
    _add_stats(bst, ac, at, amin, amax, nn, ni)
    cuda.syncthreads()
    _flush_shared(bins, bst, cap, counts, stats)


def _docs_global(x, eot, start, carry, last, n, cap, counts, stats):
    """Like :func:`docs_shared`, with bins updated by global atomics (any cap; ``cap=-1``
    sends every document to ``stats``, whose maximum then sizes ``cap=None``)."""
    bst = cuda.shared.array(6, int64)
    if cuda.threadIdx.x == 0:
        _init_block_stats(bst)
    cuda.syncthreads()
    ac, at, amin, amax, nn, ni = _docs(counts, int64(1), x, eot, start, carry, last, n, cap)
    _add_stats(bst, ac, at, amin, amax, nn, ni)
    cuda.syncthreads()
    if cuda.threadIdx.x == 0:
        _add_stats(stats, bst[0], bst[1], bst[2], bst[3], bst[4], bst[5])


#: The kernels' Python functions by name (for ``numba.cuda.compile_ptx``).
PY_FUNCS = {"hist_shared": _hist_shared, "hist_global": _hist_global,
            "max_length": _max_length, "docs_shared": _docs_shared,
            "docs_global": _docs_global}

hist_shared = cuda.jit(cache=True)(_hist_shared)
hist_global = cuda.jit(cache=True)(_hist_global)
max_length = cuda.jit(cache=True)(_max_length)
docs_shared = cuda.jit(cache=True)(_docs_shared)
docs_global = cuda.jit(cache=True)(_docs_global)


def signature(name: str, dtype: np.dtype | str, layout: str = "C") -> tuple:
    """The numba argument types a launch of kernel ``name`` on ``dtype`` input compiles to."""
    from numba import from_dtype, types

    arr = types.Array(from_dtype(np.dtype(dtype)), 1, layout)  # type: ignore[call-overload]
    mask = types.Array(types.boolean, 1, "C")
    i64 = types.Array(types.int64, 1, "C")
    if name.startswith("docs_"):
        return (arr, types.int64, types.boolean, types.int64, types.boolean, types.int64,
                types.int64, i64, i64)
    head = (arr, mask, types.boolean, types.boolean, types.int64)
    if name == "max_length":
        return (*head, i64)
    return (*head, types.int64, i64, i64)
