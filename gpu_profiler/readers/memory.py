"""In-memory sources: numpy arrays, pyarrow arrays and tables, ``datasets`` objects."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa

from gpu_profiler.chunk import Chunk
from gpu_profiler.errors import ProfilerError
from gpu_profiler.frozen import frozen
from gpu_profiler.readers.arrow import CHUNK_ROWS, arrays_to_chunks
from gpu_profiler.readers.base import Reading


@frozen
class TablePart:
    """A pyarrow Table (or a bare array wrapped as a one-column table); ``indices``, when
    given, selects rows (a ``datasets`` view after select/shuffle)."""

    table: pa.Table
    label: str = "<table>"
    indices: pa.ChunkedArray | None = None

    @property
    def nbytes(self) -> int:
        return int(self.table.nbytes)

    def schema(self) -> pa.Schema:
        return self.table.schema

    on_device = False
    read_ahead = False

    def chunks(self, reading: Reading) -> Iterator[Chunk]:
        column = self.table.column(reading.spec.name)
        if self.indices is not None:
            column = column.take(self.indices)
        return arrays_to_chunks(column.chunks, reading.spec)

    def batches(self, columns: list[str], codes: tuple[str, ...] = ()
                ) -> Iterator[pa.RecordBatch]:
        """The rows of ``columns``, as they are (`gpu_profiler.columns`)."""
        table = self.table.select(columns)
        if self.indices is not None:
            table = table.take(self.indices)
        return iter(table.to_batches(CHUNK_ROWS))


@frozen
class NumpyPart:
    """A 1-D numpy integer array of lengths (no nulls)."""

    array: np.ndarray
    label: str = "<numpy array>"

    @property
    def nbytes(self) -> int:
        return int(self.array.nbytes)

    def schema(self) -> pa.Schema:
        return pa.schema([("length", pa.from_numpy_dtype(self.array.dtype))])

    on_device = False
    read_ahead = False

    def chunks(self, reading: Reading) -> Iterator[Chunk]:
        for lo in range(0, self.array.size, CHUNK_ROWS * 4):
            yield Chunk(self.array[lo:lo + CHUNK_ROWS * 4])


def splits(source: Any) -> dict[str, list[Any]]:
    """``{split: [part]}`` for an in-memory source."""
    from gpu_profiler.readers import device

    if device.is_device_source(source):  # GPU memory: histogrammed in place (cuda backend)
        return device.splits(source)
    if isinstance(source, np.ndarray):
        if source.ndim != 1:
            raise ProfilerError(f"lengths must be a 1-D array, got shape {source.shape}")
        if source.dtype.kind not in "iu":
            raise ProfilerError(f"lengths must be integers, got a {source.dtype} array")
        return {"": [NumpyPart(np.ascontiguousarray(source))]}
    if isinstance(source, (pa.Array, pa.ChunkedArray)):
        return {"": [TablePart(pa.table({"length": source}))]}
    if isinstance(source, pa.RecordBatch):
        return {"": [TablePart(pa.Table.from_batches([source]))]}
    if isinstance(source, pa.Table):
        return {"": [TablePart(source)]}
    kind = type(source).__name__
    if kind == "DatasetDict":
        return {name: [_dataset_part(ds, name)] for name, ds in source.items()}
    if kind in ("Dataset", "IterableDataset") and hasattr(source, "data"):
        return {"": [_dataset_part(source, "")]}
    raise ProfilerError(f"unsupported source type {type(source).__module__}.{kind}; give a "
                        "path, numpy array, pyarrow Array/Table or datasets.Dataset")


def _dataset_part(ds: Any, name: str) -> TablePart:
    """A ``datasets.Dataset``'s Arrow table, honouring a select/shuffle indices mapping."""
    indices = getattr(ds, "_indices", None)
    return TablePart(ds.data.table, f"<Dataset{' ' + name if name else ''}>",
                     None if indices is None else indices.column(0))
