"""Shards are compatible when their length sources are: integer widths and signs differ
(each is read as int64), other columns come and go, and every sample is still counted,
read together or alone, on every CPU backend and in row order."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.parquet as pq
import pytest

import gpu_profiler as gp
from gpu_profiler.readers.parquet import ParquetPart

TYPES = [pa.int64(), pa.int32(), pa.int16(), pa.uint16(), pa.int64(), pa.uint32()]


def _shards(tmp_path, fmt: str, offsets: bool = False) -> np.ndarray:
    rng = np.random.default_rng(4)
    xs = []
    for i, t in enumerate(TYPES * 3):
        x = rng.integers(0, 3000, 200 + 37 * i)
        xs.append(x)
        if offsets:
            ids = [[1] * int(k) for k in x % 50]
            xs[-1] = x % 50
            col = pa.array(ids, pa.large_list(pa.int32()) if i % 2 else pa.list_(pa.int32()))
            table = pa.table({"input_ids": col})
        else:
            table = pa.table({"length": pa.array(x, t)})
        if i % 3 == 1:
            table = table.append_column("text", pa.array(["x"] * len(x)))
        if i % 4 == 2:
            table = table.append_column(f"extra{i}", pa.array(np.arange(len(x)) % 100, pa.int8()))
        if fmt == "parquet":
            pq.write_table(table, tmp_path / f"{i:02d}.parquet")
        else:
            feather.write_feather(table, tmp_path / f"{i:02d}.arrow", compression="uncompressed")
    return np.concatenate(xs)


@pytest.mark.parametrize("fmt", ["parquet", "ipc"])
@pytest.mark.parametrize("alone", [False, True])
def test_int_widths_and_extra_columns_are_counted(tmp_path, monkeypatch, fmt, alone):
    """An int32 shard beside int64 ones, or one extra column, stopped the scan ("schema
    differs"); only the length column matters."""
    x = _shards(tmp_path, fmt)
    if alone:  # each shard by its own reader, not many at once
        monkeypatch.setattr(ParquetPart, "together", None)
        from gpu_profiler.readers.ipc import IpcPart

        monkeypatch.setattr(IpcPart, "together", None)
    want = np.bincount(x, minlength=3001)
    for backend in ("numpy", "numba"):
        h = gp.histogram(str(tmp_path), backend=backend, cap=3000)
        assert h.counts.tolist() == want.tolist() and h.total == x.size, backend
    assert gp.lengths(str(tmp_path)).tolist() == x.tolist()


def test_list_and_large_list_offsets_are_compatible(tmp_path):
    x = _shards(tmp_path, "parquet", offsets=True)
    h = gp.histogram(str(tmp_path), offsets_of="input_ids", cap=60)
    assert h.counts.tolist() == np.bincount(x, minlength=61).tolist()
