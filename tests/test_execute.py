"""The scan's plan and execution (issue 15): many shards at once on worker threads, each
read inline, give exactly the numpy reference, and the sequential path's result, on
every reader path that handles such shards; errors name the shard; huge record batches
are fetched in bounded groups."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import gpu_profiler as gp
from gpu_profiler import engine, execute
from gpu_profiler.backends import get_backend
from gpu_profiler.backends.numba_backend import cores
from gpu_profiler.errors import ProfilerError
from gpu_profiler.progress import ScanProgress
from gpu_profiler.readers import LengthSpec, Reading, open_source
from gpu_profiler.readers.ipc import IpcPart
from gpu_profiler.readers.ipc import selective as ipc_selective
from gpu_profiler.readers.parquet import ParquetPart

#: Enough shards that the plan runs them at once, whatever the core count.
SHARDS = engine.PARTS_PER_WORKER * cores() + 3


def _lengths(k: int) -> np.ndarray:
    rng = np.random.default_rng([7, k])
    return rng.integers(0, 3000 + 500 * k, 1000 + 37 * k)


def _reference(arrays: list[np.ndarray], cap: int) -> np.ndarray:
    x = np.concatenate(arrays)
    return np.bincount(x[x <= cap], minlength=cap + 1)


@pytest.fixture(scope="module")
def parquet_shards(tmp_path_factory):
    """Parquet shards with nulls, several row groups, and row groups that the footer's
    statistics count (all one length)."""
    d = tmp_path_factory.mktemp("pq")
    arrays = []
    for k in range(SHARDS):
        x = _lengths(k)
        if k % 3 == 0:
            x[:500] = 42  # one row group of 500 equal lengths: counted from statistics
        arrays.append(x)
        mask = np.zeros(x.size, bool)
        mask[k::97] = k % 2 == 1
        pq.write_table(pa.table({"length": pa.array(x, mask=mask)}), d / f"{k:03d}.parquet",
                       row_group_size=500)
        arrays[-1] = x[~mask]
    return d, arrays


@pytest.fixture(scope="module")
def hf_shards(tmp_path_factory):
    import datasets

    d = tmp_path_factory.mktemp("hf") / "ds"
    arrays = [_lengths(k) for k in range(SHARDS)]
    datasets.Dataset(pa.table({"length": np.concatenate(arrays)})).save_to_disk(
        str(d), num_shards=SHARDS)
    return d, arrays


def _sequential(monkeypatch) -> None:
    monkeypatch.setattr(engine, "PARTS_PER_WORKER", 10**9)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize(("cap", "trust"), [(2000, False), (None, False), (2000, True)])
def test_parquet_shards_at_once_match_the_reference(parquet_shards, backend, cap, trust,
                                                    monkeypatch):
    """Also with footer statistics trusted: their `Run` s are counted per task."""
    d, arrays = parquet_shards
    at_once = gp.histogram(d, cap=cap, backend=backend, trust_statistics=trust)
    want = _reference(arrays, cap if cap is not None else max(a.max() for a in arrays))
    assert np.array_equal(at_once.counts, want)
    assert at_once.null_count == sum(_lengths(k).size - a.size for k, a in enumerate(arrays))
    _sequential(monkeypatch)
    assert gp.histogram(d, cap=cap, backend=backend, trust_statistics=trust) == at_once


@pytest.mark.parametrize("together", [True, False])
def test_hf_shards_at_once_match_the_reference(hf_shards, together, monkeypatch):
    d, arrays = hf_shards
    if not together:  # each stream by its own reader
        monkeypatch.setattr(IpcPart, "together", None)
    at_once = gp.histogram(d, cap=4000, backend="numba")
    assert np.array_equal(at_once.counts, _reference(arrays, 4000))
    assert at_once.above_count == sum(int((a > 4000).sum()) for a in arrays)
    assert at_once.above_tokens == sum(int(a[a > 4000].sum()) for a in arrays)
    _sequential(monkeypatch)
    assert gp.histogram(d, cap=4000, backend="numpy") == at_once


def test_one_histogram_per_part_when_asked(parquet_shards):
    d, arrays = parquet_shards
    parts = open_source(d)[""]
    reading = Reading(LengthSpec("length"), inline=True)
    with ScanProgress(len(parts), False) as bar:
        got = {tuple(task): h for task, h in execute.histograms(
            parts, reading, get_backend("numpy"), 6000, bar, task_bytes=0)}
    assert sorted(got) == [(i,) for i in range(SHARDS)]
    for (i,), h in got.items():
        assert np.array_equal(h.counts, _reference([arrays[i]], 6000)), i


def test_a_corrupt_shard_among_many_is_named(parquet_shards, tmp_path):
    d, _ = parquet_shards
    for p in sorted(d.iterdir()):
        (tmp_path / p.name).write_bytes(p.read_bytes())
    bad = sorted(tmp_path.iterdir())[SHARDS // 2]
    data = bytearray(bad.read_bytes())
    data[8:400] = b"\xff" * 392  # pages destroyed, footer intact
    bad.write_bytes(bytes(data))
    with pytest.raises(ProfilerError, match=bad.name):
        gp.histogram(tmp_path, cap=2000)


@pytest.mark.parametrize("why", ["read alone", "trusting statistics"])
def test_a_shard_with_another_schema_is_named_before_any_is_read(parquet_shards, tmp_path,
                                                                monkeypatch, why):
    """Shards read on their own are all checked before any is read: shards of a class
    that cannot read them together, and those its together-reader would not take in
    this scan (with --trust-statistics, Parquet's). (Small shards read together are
    checked as they are read: tests/test_parquet_many.py.)"""
    d, _ = parquet_shards
    for p in sorted(d.iterdir()):
        (tmp_path / p.name).write_bytes(p.read_bytes())
    odd = tmp_path / f"{SHARDS - 1:03d}.parquet"
    pq.write_table(pa.table({"length": pa.array([1, 2], pa.float32())}), odd)
    read = []
    monkeypatch.setattr(execute, "tasks_histogram", lambda *a, **k: read.append(1))
    if why == "read alone":
        monkeypatch.setattr(ParquetPart, "together", None)
    with pytest.raises(ProfilerError, match=f"{odd.name}: schema differs .*float"):
        gp.histogram(tmp_path, cap=2000, trust_statistics=why == "trusting statistics")
    assert not read


def test_huge_batches_are_fetched_in_bounded_groups(tmp_path, monkeypatch):
    """Record batches whose column exceeds the sparse-read threshold are fetched a few at a
    time (FETCH_BYTES of column bytes), not SPARSE_BATCH at once."""
    from gpu_profiler.io import pread

    monkeypatch.setattr(ipc_selective, "SPARSE_SKIP", 1000)
    monkeypatch.setattr(ipc_selective, "FETCH_BYTES", 10_000)
    x = np.random.default_rng(3).integers(1, 9000, 20 * 4000).astype(np.int32)
    schema = pa.schema([("length", pa.int32())])
    path = tmp_path / "big.arrow"
    with pa.OSFile(str(path), "wb") as f, pa.ipc.new_file(f, schema) as w:
        for k in range(20):
            w.write_batch(pa.record_batch([pa.array(x[k * 4000:(k + 1) * 4000])], schema))
    sizes = []
    real = pread.PositionedFile.fetch

    def spy(self, lo, hi, into=None):
        got = real(self, lo, hi, into)
        sizes.append(int((hi - lo).sum()))
        return got

    monkeypatch.setattr(pread.PositionedFile, "fetch", spy)
    h = gp.histogram(path, cap=9000, backend="numba")
    assert np.array_equal(h.counts, np.bincount(x, minlength=9001))
    column = [s for s in sizes if s >= 16_000]  # fetches of column bytes, not metadata
    assert column and max(column) <= 10_000 + 16_000, sizes  # one batch past the bound


@pytest.mark.parametrize("kind", ["file", "stream"])
def test_one_huge_batch_is_fetched_in_bounded_pieces(tmp_path, monkeypatch, kind):
    """A record batch whose column alone exceeds FETCH_BYTES is fetched in pieces of rows:
    its lengths (with nulls) and a list column's offsets read as from pyarrow."""
    from gpu_profiler.io import pread

    monkeypatch.setattr(ipc_selective, "SPARSE_SKIP", 1000)
    monkeypatch.setattr(ipc_selective, "FETCH_BYTES", 10_000)
    rng = np.random.default_rng(5)
    x = rng.integers(1, 900, 20_001).astype(np.int32)
    mask = rng.random(x.size) < 0.1
    ids = pa.ListArray.from_arrays(np.r_[0, np.cumsum(x)].astype(np.int32),
                                   np.zeros(int(x.sum()), np.int16))
    t = pa.table({"length": pa.array(x, mask=mask), "input_ids": ids})
    path = tmp_path / ("one.arrow" if kind == "file" else "one.arrows")
    with pa.OSFile(str(path), "wb") as f, (pa.ipc.new_file if kind == "file"
                                           else pa.ipc.new_stream)(f, t.schema) as w:
        w.write_table(t)  # one record batch
    sizes = []
    real = pread.PositionedFile.fetch

    def spy(self, lo, hi, into=None):
        sizes.append(int((hi - lo).sum()))
        return real(self, lo, hi, into)

    monkeypatch.setattr(pread.PositionedFile, "fetch", spy)
    h = gp.histogram(path, cap=900, backend="numpy")
    assert np.array_equal(h.counts, np.bincount(x[~mask], minlength=901))
    assert h.null_count == mask.sum()
    offsets = gp.histogram(path, offsets_of="input_ids", cap=900, backend="numpy")
    assert np.array_equal(offsets.counts, np.bincount(x, minlength=901))
    assert sizes and max(sizes) <= 2 * 10_000 + 400, sizes  # a group: the bound + a piece
