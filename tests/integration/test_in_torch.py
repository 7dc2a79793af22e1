"""The sampler's torch faces in one process: lengths as torch tensors, a plain DataLoader,
and packed batches through `PackedCollator` with ``return_tensors="pt"``."""

from __future__ import annotations

import numpy as np
import pytest

import gpu_profiler as gp
from gpu_profiler.collate import PackedCollator
from gpu_profiler.sampler import summarize

pytestmark = pytest.mark.integration


def skewed(n, seed=0):
    rng = np.random.default_rng(seed)
    return np.minimum(rng.lognormal(6.3, 1.1, n).astype(np.int64) + 1, 12000)


def test_lengths_as_torch_tensors(stack):
    stack("torch")
    import torch

    x = skewed(3000)
    want = list(gp.BucketBatchSampler(x, seed=1))
    for t in (torch.as_tensor(x), torch.as_tensor(x, dtype=torch.int32), torch.as_tensor(x)[::1]):
        assert list(gp.BucketBatchSampler(t, seed=1)) == want
    with pytest.raises(gp.ProfilerError, match="1-D integer"):
        gp.BucketBatchSampler(torch.as_tensor(x, dtype=torch.float32))


def test_a_data_loader_sees_every_sample_once(stack):
    stack("torch")
    import torch

    x = skewed(4000, seed=2)
    loader = torch.utils.data.DataLoader(torch.arange(x.size), batch_sampler=gp.BucketBatchSampler(
        x), collate_fn=torch.stack)
    seen = torch.cat(list(loader))
    assert sorted(seen.tolist()) == list(range(x.size))


def test_packed_batches_collate_into_varlen_rows(stack):
    stack("torch", "datasets")
    import datasets
    import torch

    x = skewed(3000, seed=3)
    ds = datasets.Dataset.from_dict({"input_ids": [list(range(1, n + 1)) for n in x]})
    cap = 8192
    sampler = gp.BucketBatchSampler(x, policy="packed", max_seq_len=cap, seed=4)
    loader = torch.utils.data.DataLoader(
        ds, batch_sampler=sampler, num_workers=2,
        collate_fn=PackedCollator(cap, return_tensors="pt"))
    rows = tokens = 0
    for batch, indices in zip(loader, sampler, strict=True):
        ids, pos, cu = batch["input_ids"], batch["position_ids"], batch["cu_seqlens"]
        assert isinstance(ids, torch.Tensor) and ids.shape[1] == cap
        assert cu.dtype == torch.int32 and int(cu[-1]) == ids.numel()
        starts = (pos.reshape(-1) == 0) & (ids.reshape(-1) != 0)  # each sample starts at 0
        assert int(starts.sum()) == len(indices)
        rows += ids.shape[0]
        tokens += int((ids != 0).sum())
    summary = summarize(sampler)
    assert rows * cap == summary.padded_tokens and tokens == summary.tokens
