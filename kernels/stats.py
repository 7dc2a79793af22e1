"""Columns of the CPU histogram kernel's stats row (`gpu_profiler.kernels.cpu`), shared with
the numba backend that reads them; numba-free, so importing it starts nothing."""

ABOVE_COUNT, ABOVE_TOKENS, ABOVE_MIN, ABOVE_MAX, NULLS, INVALID = range(6)
