"""Samples grouped and shuffled in O(samples), no argsort: the first step of every epoch's
plan (`gpu_profiler.sampler`, `gpu_profiler.packing`)."""

from __future__ import annotations

import numpy as np

#: Samples per shuffled pile: 1 MiB of int64, a core's L2 here, small enough to shuffle in
#: cache with few enough piles to scatter into (bench/results/plan.md sweeps it).
PILE = 1 << 17


def shuffled_groups(x: np.ndarray, cap: int, group: np.ndarray, groups: int, key: int
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The indices ``i`` of ``x`` grouped by ``group[min(x[i], cap)]`` (``group[cap + 1]``
    for negatives; -1: in no group), groups in order, each a uniform random permutation
    (random piles, each shuffled: `gpu_profiler.kernels.plan.pile_sort`). Returns the
    indices, each group's size, and the counts of each clipped length."""
    from gpu_profiler import native

    kind = "int32" if x.dtype == np.int32 else "int64"
    counts = np.zeros(cap + 2, np.int64)
    native.kernel(f"clip_counts_{kind}")(x, cap, counts)
    inside = group >= 0
    sizes = np.zeros(groups, np.int64)
    np.add.at(sizes, group[inside], counts[inside])
    piles = np.maximum(1, -(-sizes // PILE))
    first_pile = np.concatenate(([0], np.cumsum(piles)[:-1])).astype(np.int64)
    first = np.where(inside, first_pile[np.maximum(group, 0)] if groups else -1, -1)
    per = np.where(inside, piles[np.maximum(group, 0)] if groups else 1, 1)
    first, per = first.astype(np.int64), per.astype(np.int64)
    cursor = np.zeros(int(piles.sum()), np.int64)
    pile_sort = native.kernel(f"pile_sort_{kind}")
    pile_sort(x, cap, first, per, key, cursor, np.zeros(0, np.int64), 0)
    bounds = np.concatenate(([0], np.cumsum(cursor))).astype(np.int64)
    out = np.empty(int(bounds[-1]), np.int64)
    cursor = bounds[:-1].copy()
    pile_sort(x, cap, first, per, key, cursor, out, 1)
    native.kernel("shuffle_segments")(out, bounds, key)
    return out, sizes, counts
