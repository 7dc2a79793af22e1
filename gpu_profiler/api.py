"""The public Python API: `histogram` and `profile`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from gpu_profiler.analysis.buckets import BucketTable, bucket_table
from gpu_profiler.analysis.policies import PolicyResult, evaluate_policies
from gpu_profiler.engine import scan
from gpu_profiler.histogram import LengthHistogram
from gpu_profiler.params import DEFAULT_BOUNDS, BucketParams, parse_bounds

SCHEMA = "gpu-profiler/profile/v1"


def histogram(source: Any, *, column: str | None = None, offsets_of: str | None = None,
              format: str | None = None, split: str | None = None, backend: str = "auto",
              cap: int | None = None, progress: bool = False,
              backend_options: dict[str, Any] | None = None) -> LengthHistogram:
    """Exact length histogram of ``source`` (all splits together).

    Args:
        source: path (HF save_to_disk dir, Parquet/IPC file, directory or glob of shards)
            or an in-memory numpy array, pyarrow Array/Table, or ``datasets.Dataset``.
        column: integer length column (default: ``length``, else the only integer column).
        offsets_of: derive lengths from this list column's offsets instead.
        format: force ``hf``, ``parquet``, ``ipc`` or ``ipc-stream``.
        split: one split of a DatasetDict.
        backend: ``auto`` (for inputs up to ``engine.LIGHT_BYTES``: numba, or numpy until
            its native kernels are built here; else the first usable of cuda, numba,
            numpy), ``numpy``, ``numba`` or ``cuda``.
        cap: bins ``0..cap``; lengths above are summarized (count, tokens, min, max).
            ``None`` bins up to the largest length seen.
        progress: draw a progress bar on a terminal.
        backend_options: keyword arguments of the backend, e.g. ``{"devices": [0, 1]}``
            for cuda (see :class:`~gpu_profiler.backends.cuda_backend.CudaBackend`).

    A histogram file written by ``LengthHistogram.save`` (``--save-hist``) is read back
    instead of scanned (re-binned to ``cap`` when one is given).
    """
    if LengthHistogram.is_saved(source):
        saved = LengthHistogram.load(source)
        return saved if cap is None else saved.with_cap(cap)
    return scan(source, column=column, offsets_of=offsets_of, format=format, split=split,
                backend=backend, cap=cap, progress=progress,
                backend_options=backend_options).total


@dataclass(frozen=True)
class ProfileResult:
    """A profile: the bucket table of the whole source, and of each split when it has them."""

    source: str
    backend: str
    length_source: str
    table: BucketTable
    histogram: LengthHistogram
    splits: dict[str, BucketTable]
    seconds: float
    policies: tuple[PolicyResult, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The stable JSON interface (``schema`` names its version)."""
        d: dict[str, Any] = {"schema": SCHEMA, "source": self.source, "backend": self.backend,
                             "length_source": self.length_source}
        d.update(self.table.to_dict())
        if self.splits:
            d["splits"] = {name: t.to_dict() for name, t in self.splits.items()}
        if self.policies:
            d["policies"] = [p.to_dict() for p in self.policies]
        d["seconds"] = self.seconds
        return d


def profile(source: Any, *, bounds: Sequence[int] | str = DEFAULT_BOUNDS,
            max_seq_len: int = 8192, token_budget: int = 49152, max_batch_size: int = 64,
            grad_accum: int = 4, world_size: int = 1, column: str | None = None,
            offsets_of: str | None = None, format: str | None = None,
            split: str | None = None, backend: str = "auto",
            progress: bool = False,
            backend_options: dict[str, Any] | None = None,
            policies: Sequence[str] | str = (), drop_last: bool = False) -> ProfileResult:
    """Scan ``source`` once and build the bucket table (see DESIGN.md for the semantics).

    ``source`` may also be a `LengthHistogram` (no scan). ``policies`` (e.g. ``"all"`` or
    ``["fixed", "packed"]``) adds exact batching policies of the whole source (see
    :mod:`gpu_profiler.analysis.policies`). Other arguments as in :func:`histogram` and
    :class:`~gpu_profiler.params.BucketParams`.
    """
    result = _profile(source, bounds, max_seq_len, token_budget, max_batch_size, grad_accum,
                      world_size, column, offsets_of, format, split, backend, progress,
                      backend_options)
    if not policies:
        return result
    return replace(result, policies=evaluate_policies(result.histogram, policies,
                                                      result.table.params, drop_last=drop_last))


def _profile(source: Any, bounds: Sequence[int] | str, max_seq_len: int, token_budget: int,
             max_batch_size: int, grad_accum: int, world_size: int, column: str | None,
             offsets_of: str | None, format: str | None, split: str | None, backend: str,
             progress: bool, backend_options: dict[str, Any] | None) -> ProfileResult:
    params = BucketParams(parse_bounds(bounds), max_seq_len, token_budget, max_batch_size,
                          grad_accum, world_size)
    if LengthHistogram.is_saved(source):
        hist = LengthHistogram.load(source)
        return ProfileResult(str(source), "none", "saved histogram", bucket_table(hist, params),
                             hist, {}, 0.0)
    if isinstance(source, LengthHistogram):
        return ProfileResult("<histogram>", "none", "histogram", bucket_table(source, params),
                             source, {}, 0.0)
    s = scan(source, column=column, offsets_of=offsets_of, format=format, split=split,
             backend=backend, cap=max_seq_len, progress=progress,
             backend_options=backend_options)
    total = s.total
    named = {k: bucket_table(h, params) for k, h in s.histograms.items() if k}
    label = str(source) if isinstance(source, (str, bytes)) or hasattr(source, "__fspath__") \
        else f"<{type(source).__name__}>"
    return ProfileResult(label, s.backend, s.spec.describe(), bucket_table(total, params),
                         total, named, s.seconds)
