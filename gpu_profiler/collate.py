"""`PackedCollator`: the samples of one packed batch -> the model's inputs, in rows.

For ``DataLoader(ds, batch_sampler=..., collate_fn=PackedCollator(max_seq_len))`` over the
batches of `gpu_profiler.packing.pack_epoch`. Each sample's token ids are truncated to
``max_seq_len`` (as the profiler clips lengths), then cut into rows greedily: a new row
when the next sample would overflow ``max_seq_len``. On a packed batch that gives back the
packer's rows exactly (the row order of `gpu_profiler.packing`).

Outputs (numpy; torch tensors with ``return_tensors="pt"``):

- ``input_ids``: ``rows x max_seq_len``, padded with ``pad_id`` (``rows="fixed"``), or one
  row of every sample concatenated, no padding (``rows="flat"``, as transformers'
  ``DataCollatorWithFlattening``).
- ``position_ids``: from 0 in each sample; 0 in padding.
- ``labels``: ``input_ids`` with -100 at padding and at each sample's first token (no
  token predicts across a sample boundary).
- ``cu_seqlens`` (int32) and ``max_seqlen``: flash-attention's varlen boundaries over the
  flattened rows. A row's padding tail is a sequence of its own, so ``cu_seqlens[-1] ==
  input_ids.size`` and the flattened tensors go to ``flash_attn_varlen_func`` as they are
  (padding attends only to padding, and its labels are -100). Zero-length samples add no
  boundary, so the boundaries strictly increase. ``max_seqlen`` is the longest sequence,
  padding tails included.

Other fields of the samples are ignored.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from gpu_profiler.errors import ProfilerError

IGNORE = -100


class PackedCollator:
    """A ``collate_fn`` for packed batches (see the module docstring).

    Args:
        max_seq_len: tokens per row; longer samples are truncated to it.
        column: the samples' token-id field.
        pad_id: the token id of padding.
        rows: ``fixed`` (rows of ``max_seq_len``) or ``flat`` (one row, no padding).
        return_tensors: ``np`` or ``pt`` (torch, imported on first use).
    """

    def __init__(self, max_seq_len: int, column: str = "input_ids", pad_id: int = 0,
                 rows: str = "fixed", return_tensors: str = "np") -> None:
        if isinstance(max_seq_len, bool) or not isinstance(max_seq_len, int) \
                or max_seq_len <= 0:
            raise ProfilerError(f"max_seq_len must be a positive integer, got {max_seq_len!r}")
        if rows not in ("fixed", "flat"):
            raise ProfilerError(f"rows must be fixed or flat, got {rows!r}")
        if return_tensors not in ("np", "pt"):
            raise ProfilerError(f"return_tensors must be np or pt, got {return_tensors!r}")
        self.max_seq_len, self.column, self.pad_id = max_seq_len, column, pad_id
        self.rows, self.return_tensors = rows, return_tensors

    def __call__(self, samples: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        seqs = [np.asarray(s[self.column], dtype=np.int64)[:self.max_seq_len]
                for s in samples]
        if self.rows == "flat":
            groups, width = [seqs], sum(s.size for s in seqs)
        else:
            groups, width = _greedy_rows(seqs, self.max_seq_len), self.max_seq_len
        input_ids = np.full((len(groups), width), self.pad_id, np.int64)
        position_ids = np.zeros((len(groups), width), np.int64)
        labels = np.full((len(groups), width), IGNORE, np.int64)
        bounds = [0]
        for r, group in enumerate(groups):
            at = 0
            for s in group:
                n = s.size
                input_ids[r, at:at + n] = s
                position_ids[r, at:at + n] = np.arange(n)
                labels[r, at + 1:at + n] = s[1:]
                at += n
                if n:
                    bounds.append(r * width + at)
            if at < width:  # the padding tail: a sequence of its own
                bounds.append((r + 1) * width)
        cu_seqlens = np.asarray(bounds, np.int32)
        out: dict[str, Any] = {
            "input_ids": input_ids, "position_ids": position_ids, "labels": labels,
            "cu_seqlens": cu_seqlens,
            "max_seqlen": int(np.diff(cu_seqlens).max()) if cu_seqlens.size > 1 else 0}
        if self.return_tensors == "pt":
            import torch

            for name in ("input_ids", "position_ids", "labels", "cu_seqlens"):
                out[name] = torch.from_numpy(out[name])
        return out


def _greedy_rows(seqs: list[np.ndarray], width: int) -> list[list[np.ndarray]]:
    """``seqs`` in order, a new row whenever the next would overflow ``width``."""
    groups: list[list[np.ndarray]] = []
    free = -1
    for s in seqs:
        if s.size > free:
            groups.append([])
            free = width
        groups[-1].append(s)
        free -= s.size
    return groups
