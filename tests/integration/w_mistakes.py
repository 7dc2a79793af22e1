"""Worker: one of the two sampler spellings that would train the wrong data in a
2-process job, run for real; writes what iterating it raised to ``said-<mode>-rank<r>.txt``.

- ``sharded-twice``: a ``rank=r`` sampler inside ``accelerator.prepare`` (each rank would
  train half its share);
- ``undealt``: a ``rank=None`` sampler iterated directly under torch.distributed (each rank
  would train every batch).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from accelerate import Accelerator
from harness import SAMPLER_KW, corpus, finish, quiet_env
from torch.utils.data import DataLoader

import gpu_profiler as gp


def main() -> None:
    quiet_env()
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--mode", choices=("sharded-twice", "undealt"), required=True)
    a = ap.parse_args()
    acc = Accelerator(cpu=True)
    lengths = corpus()
    world, rank = acc.num_processes, acc.process_index
    if a.mode == "sharded-twice":
        sampler = gp.BucketBatchSampler(lengths, rank=rank, world_size=world, **SAMPLER_KW)
        loader = acc.prepare(DataLoader(torch.arange(lengths.size), batch_sampler=sampler))
    else:
        sampler = gp.BucketBatchSampler(lengths, world_size=world, **SAMPLER_KW)
        loader = DataLoader(torch.arange(lengths.size), batch_sampler=sampler)
    try:
        next(iter(loader))
        said = "nothing raised"
    except gp.ProfilerError as exc:
        said = str(exc)
    Path(a.out, f"said-{a.mode}-rank{rank}.txt").write_text(said)
    acc.wait_for_everyone()
    finish()


if __name__ == "__main__":
    main()
