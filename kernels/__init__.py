"""numba kernels (CPU ``njit`` and CUDA ``jit``), installed as ``gpu_profiler.kernels``.

Importing this package compiles nothing and needs no GPU. The CPU kernels are compiled into
a native library here when the package is built or installed (`gpu_profiler.native`);
through numba's JIT instead, each module compiles on first call and caches the machine code
on disk.
"""
