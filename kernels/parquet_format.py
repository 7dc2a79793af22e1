"""The vocabulary of the Parquet kernel (`gpu_profiler.kernels.parquet`), shared with the
reader that calls it (`gpu_profiler.readers.parquet.metadata`): why a file was left, and the
columns of the per-file ``info`` array it fills. numba-free (numpy only), so importing it
starts nothing."""

import numpy as np

# Why a file was left (``info[f, I_STATUS]``); READ: its lengths are in ``values``.
(READ, L_FOOTER, L_METADATA, L_SCHEMA, L_COLUMN, L_CODEC, L_ENCODING, L_PAGES, L_ROOM,
 L_REFERENCE, L_RANGE) = map(np.int64, range(11))  # (np.int64: see kernels.parquet)
LEFT = {
    L_FOOTER: "no Parquet footer (bad magic or length, or an encrypted footer)",
    L_METADATA: "footer metadata malformed or of a kind not read here",
    L_SCHEMA: "schema differs from the first file's",
    L_COLUMN: "length column missing, nested, repeated or not a signed integer of the "
              "expected width",
    L_CODEC: "compression other than none, snappy or zstd (zstd where files are counted as "
             "they are read: a run that starts with a snappy file)",
    L_ENCODING: "an encoding other than PLAIN or dictionary",
    L_PAGES: "pages malformed or disagreeing with the metadata",
    L_ROOM: "more rows or a larger page than the buffers hold",
    L_REFERENCE: "the first file's footer could not be read",
    L_RANGE: "a value outside the column's integer width",
}

# Parquet's CompressionCodec values the kernel reads (ZSTD: with the pages decompressed by
# the reader, `gpu_profiler.readers.parquet.metadata.Unzstd`).
UNCOMPRESSED, SNAPPY, ZSTD = 0, 1, 6

# Columns of the per-file ``info`` array.
(I_STATUS, I_ROWS, I_NULLS, I_NEED, I_SCHEMA, I_SCHEMA_END, I_ARROW, I_ARROW_END) = range(8)
NINFO = 8

# The kernel's work array: [W_WHY] why the file is being left, [W_NEED] a size the buffers
# lacked (bytes of page or footer, rows of table), [W_BAD] the reason a malformed read gives
# there; [W_PAGE] and [W_PAGES]: the next zstd page a chunk takes among those decompressed
# for it (`gpu_profiler.kernels.parquet.zstd_pages`), and the end of its own.
W_WHY, W_NEED, W_BAD, W_PAGE, W_PAGES = 0, 1, 2, 3, 4
