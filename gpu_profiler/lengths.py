"""`lengths`: every sample's length, in the source's row order (what a batch sampler needs;
the histogram forgets the order)."""

from __future__ import annotations

from typing import Any

import numpy as np

from gpu_profiler.chunk import Chunk
from gpu_profiler.errors import ProfilerError
from gpu_profiler.readers import (
    Reading,
    SourceOptions,
    given_options,
    open_source,
    resolve_spec,
)
from gpu_profiler.runs import Run

#: What a null length reads as: like any negative length, it fits no bucket.
NULL = -1


def lengths(source: Any, *, column: str | None = None, offsets_of: str | None = None,
            format: str | None = None, split: str | None = None, unit: str | None = None,
            eot: int | None = None, eot_position: str | None = None,
            token_dtype: str | None = None) -> np.ndarray:
    """The length of every sample of ``source`` as int64, in row order (row ``i`` of the
    dataset is entry ``i``); null lengths read as :data:`NULL`.

    ``source`` and the options are those of :func:`gpu_profiler.histogram`; a source with
    several splits needs ``split`` (row indices are per split). Read with the project's
    readers (the selective IPC reader for HF dirs and IPC files; Parquet row groups in
    order), never through Python lists; a Megatron-LM dataset's sequences (or documents)
    and a token stream's documents in the order they are stored.
    """
    options = SourceOptions(unit, eot, eot_position, token_dtype)
    splits = open_source(source, format, split, given_options(column, offsets_of, options))
    if len(splits) > 1:
        names = ", ".join(repr(s) for s in splits)
        raise ProfilerError(f"the source has splits {names}: pass split= (row indices are "
                            "per split)")
    parts = next(iter(splits.values()), [])
    if not parts:
        return np.zeros(0, np.int64)
    reading = Reading(resolve_spec(parts[0].schema(), column, offsets_of, parts[0].label),
                      ordered=True, source=options)
    out = [lengths_of(_no_run(c, p.label)) for p in parts for c in p.chunks(reading)]
    return np.concatenate(out) if out else np.zeros(0, np.int64)


def _no_run(chunk: Chunk | Run, label: str) -> Chunk:
    if not isinstance(chunk, Chunk):  # an ordered reading yields none: a reader's bug
        raise RuntimeError(f"{label}: an ordered reading gave a Run")
    return chunk


def lengths_of(chunk: Chunk) -> np.ndarray:
    """One chunk's lengths as int64 (its documents', for token ids), nulls as
    :data:`NULL`."""
    chunk = chunk.gathered()
    data = chunk.data
    if chunk.docs is not None:
        return chunk.docs.lengths(np.asarray(data))
    if not isinstance(data, np.ndarray):  # a device array (cupy): bring it to the host
        data = data.get()
    v = data.astype(np.int64)  # a copy: chunks may be views of buffers reused later
    if chunk.offsets:
        v = np.diff(v)
    if chunk.valid is not None:
        valid = chunk.valid if isinstance(chunk.valid, np.ndarray) else chunk.valid.get()
        v[~np.asarray(valid, dtype=bool)] = NULL
    return v


