"""`lengths`: every sample's length, in the source's row order (what a batch sampler needs;
the histogram forgets the order)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from gpu_profiler import engine
from gpu_profiler.chunk import Chunk
from gpu_profiler.engine import Planned
from gpu_profiler.errors import ProfilerError
from gpu_profiler.readers import Reading
from gpu_profiler.request import Execution, Source, gather
from gpu_profiler.runs import Run, Runs

if TYPE_CHECKING:
    from gpu_profiler.shapes import Shape

#: What a null length reads as: like any negative length, it fits no bucket.
NULL = -1


def lengths(source: Any, *, shape: Shape | None = None, **options: Any) -> np.ndarray:
    """The length of every sample of ``source`` as int64, in row order (row ``i`` of the
    dataset is entry ``i``); null lengths read as :data:`NULL`. With ``shape`` (SFT or DPO
    samples: `gpu_profiler.shapes.shape_of`), each sample's length that sets memory (a
    sample with a null or negative part: :data:`NULL`).

    ``source`` is a `Source` or its ``data``, the options its fields (as in
    :func:`gpu_profiler.histogram`); a source with several splits needs ``split`` (row
    indices are per split). Read with the project's readers (the selective IPC reader for
    HF dirs and IPC files; Parquet row groups in order), never through Python lists, after
    the same schema checks as a scan; a Megatron-LM dataset's sequences (or documents) and
    a token stream's documents in the order they are stored.
    """
    src, _, _ = gather(source, options, takes=())
    if shape is not None:
        from gpu_profiler import shapes

        return shapes.sample_lengths(src, shape, ROW_ORDER)[0]
    return of_plan(engine.plan(src, ROW_ORDER))


#: How a per-sample read plans: the backend is never asked to count anything.
ROW_ORDER = Execution(backend="numpy")


def analysed_lengths(source: Source, shape: Shape | None = None
                     ) -> tuple[np.ndarray, str | None]:
    """Every sample's length of the split an analysis plans (`Planned.analysed_split`:
    ``split``, else train, else the only one) and its name, the source listed once; a
    saved histogram is refused (it has no per-sample lengths). ``shape``: as in
    :func:`lengths`."""
    from gpu_profiler.histogram import LengthHistogram

    data = source.data if isinstance(source.data, (list, tuple)) else [source.data]
    saved = next((p for p in data if LengthHistogram.is_saved(p)), None)
    if saved:
        raise ProfilerError(f"{saved}: a saved histogram has no per-sample lengths; a plan "
                            "reads the corpus itself")
    if shape is not None:
        from gpu_profiler import shapes

        return shapes.sample_lengths(source, shape, ROW_ORDER, analysed=True)
    planned = engine.plan(source, ROW_ORDER)
    split = planned.analysed_split()
    return of_plan(planned.only(split)), split


def of_plan(planned: Planned) -> np.ndarray:
    """Every sample's length of a plan of one split (see :func:`lengths`)."""
    if len(planned.splits) > 1:
        names = ", ".join(repr(s) for s in planned.splits)
        raise ProfilerError(f"the source has splits {names}: pass split= (row indices are "
                            "per split)")
    if planned.reading is None:
        return np.zeros(0, np.int64)
    parts = planned.parts
    engine.check_schemas(parts, planned.like, planned.reading.spec)
    reading = Reading(planned.reading.spec, ordered=True, source=planned.reading.source)
    out = [lengths_of(_no_run(c, p.label)) for p in parts for c in p.chunks(reading)]
    return np.concatenate(out) if out else np.zeros(0, np.int64)


def _no_run(chunk: Chunk | Run | Runs, label: str) -> Chunk:
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


