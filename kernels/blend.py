"""The blending kernel (numba ``njit``, natively compiled like the others): how many samples
Megatron-LM's `BlendedDataset` takes from each dataset of a weighted blend.

It is ``build_blending_indices`` of Megatron-LM's ``megatron/core/datasets/helpers.cpp``,
less the two index arrays: each step picks the dataset furthest below its share so far
(largest ``weight * max(step, 1) - taken``, ties to the lower index), in IEEE double as
that C++ is built (``-O3 -std=c++17``: no contraction into fused multiply-adds). The
counts depend on every earlier choice (they are not a rounding of ``weight * size``), so
it runs all ``size`` steps: O(size x datasets), ~9 s per billion samples of three
datasets natively on one shared core (as Megatron-LM does it once per run, in C++).
"""

from __future__ import annotations

from gpu_profiler.kernels.jit import kernel


@kernel(nogil=True)
def blending_counts(weights, size, counts):
    """Fill ``counts`` (int64, one per dataset) with the samples Megatron-LM's greedy
    blending takes from each of the ``weights`` (float64, normalized) in ``size`` steps."""
    k = weights.size
    for i in range(k):
        counts[i] = 0
    for t in range(size):
        x = max(float(t), 1.0)
        best = 0
        top = weights[0] * x - float(counts[0])
        for i in range(1, k):
            e = weights[i] * x - float(counts[i])
            if e > top:
                top = e
                best = i
        counts[best] += 1
