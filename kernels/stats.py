"""Columns of the CPU histogram kernel's stats row (`gpu_profiler.kernels.cpu`), shared with
the numba backend that reads them, and the outcomes of the kernels that count files as
they read them; numba-free, so importing it starts nothing."""

ABOVE_COUNT, ABOVE_TOKENS, ABOVE_MIN, ABOVE_MAX, NULLS, INVALID = range(6)

# What a counting kernel (`count_streams`, `parquet.count_files`) returns: every file
# counted; wider bins needed first (cap=None); its int32 bins to be folded first, before
# the next file could overflow them.
COUNT_DONE, COUNT_WIDEN, COUNT_FOLD = 0, 1, 2
