"""`gp.lengths`: per-sample lengths in row order, from every source the scans read, equal to
pyarrow's own reading."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import gpu_profiler as gp
from gpu_profiler import ProfilerError
from gpu_profiler.lengths import NULL


def reference(values):
    """What pyarrow reads, nulls as NULL."""
    return np.array([NULL if v is None else v for v in values], np.int64)


def test_hf_dir_by_column_and_by_offsets(hf_dir):
    path, x = hf_dir
    assert np.array_equal(gp.lengths(path), x)
    assert np.array_equal(gp.lengths(path, offsets_of="input_ids"), x)
    assert gp.lengths(path).dtype == np.int64


def test_parquet_row_groups_in_order_with_nulls_and_constant_groups(tmp_path):
    # constant row groups are counted from statistics by the scan: here they must be read
    values = [5] * 300 + [None, 7, 9] * 200 + [11] * 250 + list(range(500))
    path = tmp_path / "x.parquet"
    pq.write_table(pa.table({"length": pa.array(values, pa.int32())}), path,
                   row_group_size=128)
    assert pq.ParquetFile(path).metadata.num_row_groups > 5
    assert np.array_equal(gp.lengths(path), reference(values))


def test_parquet_list_offsets(tmp_path):
    rows = [[1, 2, 3], [], None, [4] * 9]
    path = tmp_path / "l.parquet"
    pq.write_table(pa.table({"ids": rows}), path, row_group_size=2)
    assert gp.lengths(path, offsets_of="ids").tolist() == [3, 0, NULL, 9]


@pytest.mark.parametrize("kind", ["file", "stream"])
def test_arrow_ipc(tmp_path, kind):
    values = [3, None, 4000, 0, 12] * 1000
    table = pa.table({"length": pa.array(values, pa.int64())})
    path = tmp_path / f"x.{'arrow' if kind == 'file' else 'arrows'}"
    new = pa.ipc.new_file if kind == "file" else pa.ipc.new_stream
    with new(path, table.schema) as w:
        for batch in table.to_batches(max_chunksize=333):
            w.write_batch(batch)
    assert np.array_equal(gp.lengths(path), reference(values))


def test_shards_in_path_order(tmp_path):
    for i in range(3):
        pq.write_table(pa.table({"length": [i * 10 + j for j in range(4)]}),
                       tmp_path / f"part-{i}.parquet")
    assert gp.lengths(tmp_path).tolist() == [0, 1, 2, 3, 10, 11, 12, 13, 20, 21, 22, 23]


def test_in_memory_sources():
    assert gp.lengths(np.array([3, 1, 2], np.int16)).tolist() == [3, 1, 2]
    assert gp.lengths(pa.chunked_array([[1, None], [5]])).tolist() == [1, NULL, 5]


def test_splits_need_a_choice(tmp_path):
    datasets = pytest.importorskip("datasets")
    d = datasets.DatasetDict({"train": datasets.Dataset.from_dict({"length": [1, 2, 3]}),
                              "test": datasets.Dataset.from_dict({"length": [9]})})
    d.save_to_disk(str(tmp_path / "d"))
    with pytest.raises(ProfilerError, match="pass split="):
        gp.lengths(tmp_path / "d")
    assert gp.lengths(tmp_path / "d", split="test").tolist() == [9]


def test_bad_input_is_one_line(tmp_path):
    junk = tmp_path / "x.parquet"
    junk.write_bytes(b"PAR1" + b"\0" * 40 + b"PAR1")
    with pytest.raises(ProfilerError):
        gp.lengths(junk)
    with pytest.raises(ProfilerError, match="no such file"):
        gp.lengths(tmp_path / "missing")
