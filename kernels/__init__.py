"""numba kernels (CPU ``njit`` and CUDA ``jit``), installed as ``gpu_profiler.kernels``.

Importing this package compiles nothing and needs no GPU; each module compiles lazily on
first call and caches the machine code on disk (``NUMBA_CACHE_DIR``).
"""
