"""Readers on real formats: HF dirs written by `datasets`, Parquet and IPC by pyarrow."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import assert_matches_reference, reference_table, sft_lengths

import gpu_profiler as gp
from gpu_profiler import ProfilerError
from gpu_profiler.backends import get_backend
from gpu_profiler.readers.arrow import arrays_to_chunks, coalesce
from gpu_profiler.readers.base import LengthSpec

BOUNDS = [0, 770, 1216, 1728, 2432, 3296, 8193]


@pytest.mark.parametrize("kw", [dict(column="length"), dict(offsets_of="input_ids"), {}])
def test_hf_dir_matches_reference(hf_dir, kw):
    path, lengths = hf_dir
    got = gp.profile(str(path), **kw).to_dict()
    assert_matches_reference(got, reference_table(lengths.tolist(), BOUNDS))
    assert got["length_source"] == ("offsets of 'input_ids'" if "offsets_of" in kw
                                    else "column 'length'")


def test_dataset_dict_reports_every_split_and_the_total(tmp_path):
    import datasets

    a, b = sft_lengths(700, seed=1), sft_lengths(300, seed=2)
    dd = datasets.DatasetDict({"train": datasets.Dataset.from_dict({"length": a}),
                               "test": datasets.Dataset.from_dict({"length": b})})
    dd.save_to_disk(str(tmp_path / "dd"))
    got = gp.profile(str(tmp_path / "dd")).to_dict()
    assert set(got["splits"]) == {"train", "test"}
    assert_matches_reference(got["splits"]["train"], reference_table(a.tolist(), BOUNDS))
    assert_matches_reference(got["splits"]["test"], reference_table(b.tolist(), BOUNDS))
    assert_matches_reference(got, reference_table(a.tolist() + b.tolist(), BOUNDS))
    only = gp.profile(str(tmp_path / "dd"), split="test").to_dict()
    assert_matches_reference(only, reference_table(b.tolist(), BOUNDS))
    with pytest.raises(ProfilerError, match="no split 'val'.*'train'"):
        gp.profile(str(tmp_path / "dd"), split="val")


def test_in_memory_datasets_objects_honour_select_and_shuffle():
    import datasets

    x = sft_lengths(1000, seed=5)
    ds = datasets.Dataset.from_dict({"length": x})
    view = ds.shuffle(seed=0).select(range(100))
    expect = np.array(view["length"])
    assert gp.histogram(view, cap=8192) == gp.histogram(expect, cap=8192)
    assert gp.histogram(ds, cap=8192) == gp.histogram(x, cap=8192)


def _table(n, seed=0, nulls=False):
    x = sft_lengths(n, seed)
    mask = np.random.default_rng(seed).random(n) < 0.05 if nulls else None
    ids = pa.ListArray.from_arrays(pa.array(np.concatenate([[0], np.cumsum(x)]).astype(np.int32)),
                                   pa.array(np.zeros(int(x.sum()), np.int32)), mask=
                                   pa.array(mask) if nulls else None)
    return pa.table({"input_ids": ids, "n_tokens": pa.array(x, mask=mask), "score":
                     pa.array(np.ones(n))}), x, mask


@pytest.mark.parametrize("writer", ["parquet", "ipc-file", "ipc-stream"])
def test_shard_formats_dir_and_glob(tmp_path, writer):
    parts = [_table(500, seed=s, nulls=True) for s in range(3)]
    for i, (t, _, _) in enumerate(parts):
        p = tmp_path / f"part-{i}.{'parquet' if writer == 'parquet' else 'arrow'}"
        if writer == "parquet":
            pq.write_table(t, p, row_group_size=128)
        elif writer == "ipc-file":
            with pa.ipc.new_file(str(p), t.schema) as w:
                w.write_table(t, max_chunksize=100)
        else:
            with pa.ipc.new_stream(str(p), t.schema) as w:
                w.write_table(t, max_chunksize=100)
    lengths = [None if m else int(v) for _, x, mask in parts for v, m in zip(x, mask, strict=True)]
    ref = reference_table(lengths, BOUNDS)
    for source in (str(tmp_path), str(tmp_path / "part-*")):
        got = gp.profile(source)  # the only integer column is picked
        assert got.length_source == "column 'n_tokens'"
        assert_matches_reference(got.to_dict(), ref)
        via_offsets = gp.profile(source, offsets_of="input_ids").to_dict()
        assert_matches_reference(via_offsets, ref)


def test_format_is_sniffed_not_taken_from_the_extension(tmp_path):
    t, x, _ = _table(100)
    pq.write_table(t, tmp_path / "looks_like.arrow")
    assert gp.histogram(str(tmp_path / "looks_like.arrow"), cap=8192) == \
        gp.histogram(x, cap=8192)


def test_large_list_offsets(tmp_path):
    x = np.array([3, 0, 5, 9000], np.int64)
    ids = pa.LargeListArray.from_arrays(pa.array(np.concatenate([[0], np.cumsum(x)])),
                                        pa.array(np.zeros(int(x.sum()), np.int8)))
    pq.write_table(pa.table({"ids": ids}), tmp_path / "l.parquet")
    h = gp.histogram(str(tmp_path / "l.parquet"), offsets_of="ids", cap=8192)
    assert h == gp.histogram(x, cap=8192)


def test_coalesce_rebases_offsets_across_record_batches():
    x = sft_lengths(2500, seed=9)
    ids = pa.ListArray.from_arrays(pa.array(np.concatenate([[0], np.cumsum(x)]).astype(np.int32)),
                                   pa.array(np.zeros(int(x.sum()), np.int32)))
    arrays = [ids.slice(i, 333) for i in range(0, len(ids), 333)]  # sliced: non-zero offsets
    chunks = list(coalesce(arrays_to_chunks(arrays, LengthSpec("ids", True)), rows=2000))
    assert [c.samples for c in chunks] == [2331, 169]
    ref = get_backend("numpy")
    assert ref.histogram(iter(chunks), 8192) == gp.histogram(x, cap=8192)


def test_dictionary_encoded_length_column():
    x = np.array([5, 5, 7, 9000, 5])
    t = pa.table({"length": pa.array(x).dictionary_encode()})
    assert gp.histogram(t, cap=8192) == gp.histogram(x, cap=8192)


def test_column_resolution_errors(tmp_path):
    t = pa.table({"a": [1, 2], "b": [3, 4], "f": [1.5, 2.0], "ids": [[1], [2, 3]]})
    pq.write_table(t, tmp_path / "t.parquet")
    p = str(tmp_path / "t.parquet")
    with pytest.raises(ProfilerError, match="several integer columns.*a \\(int64\\)"):
        gp.histogram(p)
    with pytest.raises(ProfilerError, match="no column 'zz'; columns: a"):
        gp.histogram(p, column="zz")
    with pytest.raises(ProfilerError, match="'f' has type double"):
        gp.histogram(p, column="f")
    with pytest.raises(ProfilerError, match="--offsets-of needs a list column"):
        gp.histogram(p, offsets_of="a")
    with pytest.raises(ProfilerError, match="either --column or --offsets-of"):
        gp.histogram(p, column="a", offsets_of="ids")
    with pytest.raises(ProfilerError, match="lengths must be integers"):
        gp.histogram(np.array([1.5, 2.0]))


def test_shards_whose_length_columns_differ(tmp_path):
    """Only the length source must agree: a shard whose length column is not an integer
    stops the scan, named."""
    pq.write_table(pa.table({"length": pa.array([1, 2], pa.int64())}), tmp_path / "a.parquet")
    pq.write_table(pa.table({"length": pa.array([1, 2], pa.float64())}), tmp_path / "b.parquet")
    with pytest.raises(ProfilerError, match="b.parquet: schema differs .*length source.*"
                                            "length: double vs int64"):
        gp.histogram(str(tmp_path))
    (tmp_path / "b.parquet").unlink()
    pq.write_table(pa.table({"n": pa.array([1, 2])}), tmp_path / "c.parquet")
    with pytest.raises(ProfilerError, match="c.parquet: schema differs .*length: missing"):
        gp.histogram(str(tmp_path))


def test_empty_hf_dataset_gives_zeros(tmp_path):
    import datasets

    features = datasets.Features({"length": datasets.Value("int64")})
    datasets.Dataset.from_dict({"length": []}, features=features).save_to_disk(
        str(tmp_path / "empty"))
    t = gp.profile(str(tmp_path / "empty")).table
    assert t.total_samples == 0 and t.steps_per_epoch == 0
    assert [b.samples for b in t.buckets] == [0] * 6


def test_empty_parquet_file_gives_zeros(tmp_path):
    pq.write_table(pa.table({"length": pa.array([], pa.int64())}), tmp_path / "e.parquet")
    assert gp.profile(str(tmp_path / "e.parquet")).table.total_samples == 0
