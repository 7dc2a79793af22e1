"""Plan files (``gpu-profiler plan -o batches.npz``): written atomically, read back as hostile
input, and the step <-> consumed-samples arithmetic of frameworks that count samples
(Megatron-LM's ``consumed_samples``), since this plan's batches vary in size."""

from __future__ import annotations

import io
import json
import zipfile
from typing import Any

import numpy as np

from gpu_profiler.errors import ProfilerError
from gpu_profiler.frozen import frozen

#: The arrays of a plan file (``tokens``: not in the files of earlier versions), and the
#: most entries a hostile one may declare (2**36 samples: far past any corpus, far short of
#: what would exhaust memory before the check).
ARRAYS = ("indices", "offsets", "bucket", "params")
OPTIONAL = ("tokens",)
_MAX_ENTRIES = 1 << 36


def save_plan(path: str, indices: np.ndarray, offsets: np.ndarray, bucket: np.ndarray,
              summary: dict[str, Any], tokens: np.ndarray) -> None:
    """Write a plan as ``.npz``: ``indices`` (int64, every sample index in batch order),
    ``offsets`` (batch ``j`` is ``indices[offsets[j]:offsets[j + 1]]``), ``bucket`` and
    ``tokens`` (per batch: its clipped tokens, the batch length ``diagnose`` regresses on)
    and ``params`` (the summary, as JSON text, with the grad_accum ``diagnose`` aligns
    with); atomically."""
    from gpu_profiler.io.output import write_atomic

    buf = io.BytesIO()
    np.savez(buf, indices=indices, offsets=offsets, bucket=bucket, tokens=tokens,
             params=np.array(json.dumps(summary)))
    write_atomic(path, buf.getvalue())


@frozen
class SavedPlan:
    """One epoch's plan read from a file: batch ``j`` of step ``j // world_size`` for rank
    ``j % world_size``; ``tokens`` of each batch (None: a file of an earlier version)."""

    indices: np.ndarray
    offsets: np.ndarray
    bucket: np.ndarray
    summary: dict[str, Any]
    tokens: np.ndarray | None = None

    @property
    def world_size(self) -> int:
        return int(self.summary["params"]["world_size"])

    @property
    def grad_accum(self) -> int | None:
        """The plan's ``--grad-accum`` (None: a file of an earlier version, whose
        ``params.grad_accum`` is the default, not what it was told)."""
        value = self.summary.get("grad_accum")
        return None if value is None else int(value)

    @property
    def steps(self) -> int:
        return (self.offsets.size - 1) // self.world_size

    def batch(self, step: int, rank: int = 0) -> np.ndarray:
        """The sample indices of ``rank``'s micro-batch of ``step``."""
        if not (0 <= step < self.steps and 0 <= rank < self.world_size):
            raise ProfilerError(f"no batch for step {step}, rank {rank}: the plan has "
                                f"{self.steps} steps of {self.world_size} ranks")
        j = step * self.world_size + rank
        return self.indices[self.offsets[j]:self.offsets[j + 1]]

    def consumed_samples(self, step: int) -> int:
        """Samples all ranks have trained before ``step`` (Megatron's count)."""
        if not 0 <= step <= self.steps:
            raise ProfilerError(f"step {step} is outside the plan's 0..{self.steps}")
        return int(self.offsets[step * self.world_size])

    def step_at(self, consumed_samples: int) -> int:
        """The step whose batches start after ``consumed_samples`` samples: an error when
        that count falls inside a step (it was not counted by this plan)."""
        at = self.offsets[::self.world_size]
        step = int(np.searchsorted(at, consumed_samples))
        if step >= at.size or int(at[step]) != consumed_samples:
            raise ProfilerError(
                f"{consumed_samples:,} consumed samples is no step boundary of this plan "
                f"(steps start at {', '.join(f'{int(v):,}' for v in at[max(step - 1, 0):step + 1])}"
                "...): was it counted under another plan or world size?")
        return step


def load_plan(path: str) -> SavedPlan:
    """A plan file, checked entry by entry before use (a one-line error for anything a
    plan file cannot hold; never a pickle, never more memory than its entries declare)."""
    try:
        with np.load(path, allow_pickle=False) as z:
            extra = sorted(set(z.files) - set(ARRAYS))
            if not set(ARRAYS) <= set(z.files) or not set(extra) <= set(OPTIONAL):
                raise ProfilerError(f"{path}: not a gpu-profiler plan (arrays {sorted(z.files)},"
                                    f" not {sorted(ARRAYS)} and {', '.join(OPTIONAL)})")
            arrays = {}
            for name in (*ARRAYS, *extra):
                info = z.zip.getinfo(f"{name}.npy")
                if info.file_size > 8 * _MAX_ENTRIES:
                    raise ProfilerError(f"{path}: {name} declares {info.file_size:,} bytes")
                arrays[name] = z[name]
    except ProfilerError:
        raise
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile) as exc:
        raise ProfilerError(f"{path}: not a readable plan file ({exc})") from None
    indices, offsets, bucket, params = (arrays[n] for n in ARRAYS)
    tokens = arrays.get("tokens")
    try:
        summary = json.loads(str(params[()]), parse_constant=_no_constant)
        world = summary["params"]["world_size"]
        accum = summary.get("grad_accum")
    except (ValueError, TypeError, KeyError, IndexError, RecursionError) as exc:
        raise ProfilerError(f"{path}: the plan's params are not its summary ({exc})") from None
    ok = (indices.ndim == offsets.ndim == bucket.ndim == 1
          and indices.dtype.kind == offsets.dtype.kind == "i" and bucket.dtype.kind == "i"
          and _positive(world) and (accum is None or _positive(accum))
          and offsets.size == bucket.size + 1 and offsets.size >= 1 and int(offsets[0]) == 0
          and int(offsets[-1]) == indices.size and bool((np.diff(offsets) > 0).all())
          and bucket.size % world == 0 and (indices.size == 0 or int(indices.min()) >= 0)
          and (tokens is None or (tokens.ndim == 1 and tokens.dtype.kind == "i"
                                  and tokens.size == bucket.size
                                  and (tokens.size == 0 or int(tokens.min()) >= 0))))
    if not ok:
        raise ProfilerError(f"{path}: a plan file's arrays do not agree (offsets, batches, "
                            "tokens, world size, grad_accum or indices out of range)")
    return SavedPlan(indices.astype(np.int64, copy=False), offsets.astype(np.int64, copy=False),
                     bucket, summary, tokens)


def _positive(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number a plan holds")
