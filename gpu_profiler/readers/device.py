"""Sources already on a GPU, histogrammed in place by the cuda backend (never copied back):
cupy arrays, numba device arrays, any 1-D integer array exposing
``__cuda_array_interface__``, and cudf Series / DataFrames. Also Parquet decoded on the GPU
by cudf when it is installed. Nothing here imports cupy, cudf or numba at module level."""

from __future__ import annotations

from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa

from gpu_profiler.chunk import Chunk
from gpu_profiler.errors import ProfilerError, first_line
from gpu_profiler.frozen import frozen
from gpu_profiler.readers.base import LengthSpec, Reading


def _is_cudf(obj: Any) -> bool:
    return type(obj).__module__.split(".", 1)[0] == "cudf"


def is_device_source(obj: Any) -> bool:
    """Whether ``obj`` lives in GPU memory (a device array or a cudf object)."""
    return (hasattr(obj, "__cuda_array_interface__")
            or bool(getattr(obj, "__cuda_ndarray__", False)) or _is_cudf(obj))


def _shape_dtype(array: Any) -> tuple[tuple[int, ...], np.dtype]:
    if hasattr(array, "dtype") and hasattr(array, "shape"):
        return tuple(array.shape), np.dtype(array.dtype)
    cai = array.__cuda_array_interface__
    return tuple(cai["shape"]), np.dtype(cai["typestr"])


@frozen
class DeviceArrayPart:
    """A 1-D integer array of lengths in GPU memory (no nulls)."""

    array: Any
    label: str = "<device array>"
    on_device: ClassVar[bool] = True
    read_ahead: ClassVar[bool] = False

    @property
    def nbytes(self) -> int:
        shape, dtype = _shape_dtype(self.array)
        return int(np.prod(shape)) * dtype.itemsize

    def schema(self) -> pa.Schema:
        return pa.schema([("length", pa.from_numpy_dtype(_shape_dtype(self.array)[1]))])

    def chunks(self, reading: Reading) -> Iterator[Chunk]:
        yield Chunk(self.array)


@frozen
class CudfPart:
    """A cudf DataFrame: integer length columns, or list columns (``--offsets-of``)."""

    frame: Any
    label: str = "<cudf DataFrame>"
    on_device: ClassVar[bool] = True
    read_ahead: ClassVar[bool] = False

    @property
    def nbytes(self) -> int:
        return int(self.frame.memory_usage(deep=False).sum())

    def schema(self) -> pa.Schema:
        return self.frame.head(0).to_arrow().schema

    def chunks(self, reading: Reading) -> Iterator[Chunk]:
        yield series_chunk(self.frame[reading.spec.name], reading.spec)


def series_chunk(column: Any, spec: LengthSpec) -> Chunk:
    """A device `Chunk` of a cudf column: its values, or its list lengths (``list.len()``,
    computed on the GPU) for ``--offsets-of``; nulls become the validity mask."""
    if spec.offsets:
        column = column.list.len()
    if column.null_count:
        return Chunk(column.fillna(0).values, column.notna().values)
    return Chunk(column.values)


def splits(source: Any) -> dict[str, list[Any]]:
    """``{"": [part]}`` for a GPU-resident source."""
    if _is_cudf(source):
        kind = type(source).__name__
        if kind == "Series":
            return {"": [CudfPart(source.to_frame(name=source.name or "length"),
                                  "<cudf Series>")]}
        if kind == "DataFrame":
            return {"": [CudfPart(source)]}
        raise ProfilerError(f"unsupported cudf object {kind}; give a Series or DataFrame")
    shape, dtype = _shape_dtype(source)
    if len(shape) != 1:
        raise ProfilerError(f"lengths must be a 1-D array, got shape {shape}")
    if dtype.kind not in "iu":
        raise ProfilerError(f"lengths must be integers, got a {dtype} device array")
    return {"": [DeviceArrayPart(source)]}


@cache
def cudf_available() -> bool:
    """Whether cudf can be imported (it needs a GPU and the ``[cudf]`` extra)."""
    try:
        import cudf  # noqa: F401
    except Exception:
        return False
    return True


def parquet_chunks(path: Path, spec: LengthSpec) -> Iterator[Chunk]:
    """The length column of a Parquet file decoded on the GPU by cudf (one device chunk)."""
    import cudf

    try:
        frame = cudf.read_parquet(str(path), columns=[spec.name])
    except (OSError, ValueError, RuntimeError) as exc:
        raise ProfilerError(f"{path}: corrupt or truncated Parquet file: "
                            f"{first_line(exc)}") from None
    if len(frame):
        yield series_chunk(frame[spec.name], spec)
