"""Columns of the CPU histogram kernel's stats row (`gpu_profiler.kernels.cpu`), shared with
the numba backend that reads them, the outcomes of the kernels that count files as they
read them, and what the kernel that looks up file sizes says of a path that names no
regular file; numba-free, so importing it starts nothing."""

ABOVE_COUNT, ABOVE_TOKENS, ABOVE_MIN, ABOVE_MAX, NULLS, INVALID = range(6)

# What a counting kernel (`count_streams`, `parquet.count_files`) returns: every file
# counted; wider bins needed first (cap=None); its int32 bins to be folded first, before
# the next file could overflow them.
COUNT_DONE, COUNT_WIDEN, COUNT_FOLD = 0, 1, 2

# What `posix.look` says of a path that names no regular file: nothing is there (or it
# cannot be looked up); something else is (a link, a directory, a FIFO...).
MISSING, OTHER = -1, -2
# The room `posix.look` needs for one answer of ``statx`` (256 bytes), in uint64s.
STATX_WORDS = 32
