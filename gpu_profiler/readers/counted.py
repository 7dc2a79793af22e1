"""Small shards counted as they are read (`Reading.counted`): what the two counting kernels
(`kernels.streams.count_streams` for IPC streams, `kernels.parquet.count_files` for
Parquet) share: their int32 bins, stats and resumption, turned into a `LengthHistogram`.

A counting kernel opens the files itself (named by `gpu_profiler.io.files.names`) and
reads one after another into a small buffer, decodes it and tallies its lengths while
they are still in the core's cache; it stops early for the caller to widen its bins
(``cap=None``: a file holds a length past them) or to fold them into int64 (before the next
file could overflow int32), and is called again from there."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from gpu_profiler.histogram import MAX_AUTO_CAP, LengthHistogram, auto_cap
from gpu_profiler.kernels import stats

#: Lengths a kernel tallies into its int32 bins between two folds into int64.
FOLD_AFTER = (1 << 31) - 1

#: ``call(bins, grow, fold_after, row, stats, state) -> (outcome,)``: one kernel call from
#: file ``state[0]`` (see `tally`).
Call = Callable[[int, bool, int, np.ndarray, np.ndarray, np.ndarray], tuple[int, ...]]


def tally(call: Call, files: int, cap: int | None) -> LengthHistogram:
    """The histogram of ``files`` files counted by ``call``, binned up to ``cap`` (None: up
    to the longest length, at most `MAX_AUTO_CAP`, the bins widened as longer ones come),
    as the numba backend bins them."""
    bins = cap or 0
    counts = np.zeros(bins + 1, np.int64)
    row = np.zeros(bins + 2, np.int32)
    st = np.zeros(6, np.int64)
    st[[stats.ABOVE_MIN, stats.ABOVE_MAX]] = -1
    state = np.zeros(4, np.int64)
    while state[0] < files:
        outcome, = call(bins, cap is None and bins < MAX_AUTO_CAP, FOLD_AFTER, row, st, state)
        counts += row[:bins + 1]  # folded after every call (`stats.COUNT_FOLD` asks for it)
        row[:] = 0
        if outcome == stats.COUNT_WIDEN:
            bins = auto_cap(int(state[1]))
            counts = np.concatenate([counts, np.zeros(bins + 1 - counts.size, np.int64)])
            row = np.zeros(bins + 2, np.int32)
    found = st[stats.ABOVE_COUNT] > 0
    return LengthHistogram(counts, int(st[stats.ABOVE_COUNT]), int(st[stats.ABOVE_TOKENS]),
                           int(st[stats.ABOVE_MIN]) if found else -1,
                           int(st[stats.ABOVE_MAX]) if found else -1, int(st[stats.NULLS]),
                           int(st[stats.INVALID]))
