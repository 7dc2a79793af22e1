"""Scans on a real Dask cluster (`distributed.LocalCluster`, 2 worker processes): exactly
the single-process histogram on multi-shard HF dirs, DatasetDicts and Parquet shards, on
one huge Parquet or Arrow IPC shard cut into ranges, and again when a worker is SIGKILLed
mid-task (dask reruns its tasks elsewhere)."""

from __future__ import annotations

import json
import os
import signal
import struct
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import run_cli

import gpu_profiler as gp

distributed = pytest.importorskip("distributed")


@pytest.fixture(scope="module")
def client():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=":0") as cluster, \
            distributed.Client(cluster) as c:
        yield c


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    import datasets

    d = tmp_path_factory.mktemp("cluster")
    rng = np.random.default_rng(15)
    lens = rng.integers(0, 9000, 4000)
    ids = [list(range(n % 50)) for n in lens]
    ds = datasets.Dataset.from_dict({"length": lens.tolist(), "input_ids": ids})
    ds.save_to_disk(str(d / "hf"), num_shards=5)
    datasets.DatasetDict({"train": ds.select(range(3000)), "test": ds.select(range(3000, 4000))}
                         ).save_to_disk(str(d / "dd"), num_shards={"train": 4, "test": 2})
    (d / "pq").mkdir()
    for i in range(12):
        x = pa.array(rng.integers(-3, 20000, 500 + 37 * i), mask=rng.random(500 + 37 * i) < .05)
        pq.write_table(pa.table({"length": x}), d / "pq" / f"s{i:02}.parquet", row_group_size=200)
    one = pa.array(rng.integers(0, 30000, 20000), mask=rng.random(20000) < .05)
    pq.write_table(pa.table({"length": one}), d / "one.parquet", row_group_size=500)
    return d


@pytest.mark.parametrize("name,kwargs", [("hf", {}), ("hf", {"offsets_of": "input_ids"}),
                                         ("pq", {}), ("pq", {"cap": None}),
                                         ("one.parquet", {})])
def test_cluster_histogram_equals_single_process(client, corpora, name, kwargs):
    kwargs = {"cap": 8192, **kwargs}
    alone = gp.histogram(corpora / name, **kwargs)
    assert alone.total > 0
    assert gp.histogram(corpora / name, client=client, **kwargs) == alone


def test_one_large_shard_is_cut_into_row_group_tasks_and_cached(client, corpora, tmp_path):
    from gpu_profiler.cluster import groups
    from gpu_profiler.engine import plan

    planned = plan(gp.Source(str(corpora / "one.parquet")), gp.Execution(cap=8192))
    tasks = groups([("", p) for p in planned.parts], 2, planned.reading)
    ranges = [p.span for _, ps in tasks for p in ps]
    assert len(tasks) >= 4 and ranges[0][1] == 0 and ranges[-1][2] == 40
    assert all(a[2] == b[1] for a, b in zip(ranges, ranges[1:], strict=False))
    alone = gp.histogram(corpora / "one.parquet")  # profile bins the whole length range
    cached = gp.profile(corpora / "one.parquet", client=client, cache_dir=str(tmp_path))
    assert cached.histogram == alone and cached.report.cache["scanned"] == len(ranges)
    again = gp.profile(corpora / "one.parquet", client=client, cache_dir=str(tmp_path))
    assert again.histogram == alone and again.report.cache["reused"] == len(ranges)


@pytest.fixture(scope="module")
def huge(tmp_path_factory):
    """One-shard corpora of many record batches (the cluster's tasks are an eighth of a
    corpus, so each is cut into ranges): an IPC stream and file of lengths (some null)
    and token lists in 40 batches of unequal rows, the stream LZ4-compressed, the file
    with the lengths dictionary-encoded, that as a stream, streams whose dictionary is
    replaced or grows by deltas every batch, one of one batch, and a one-shard HF dir."""
    import datasets

    d = tmp_path_factory.mktemp("huge")
    rng = np.random.default_rng(3)
    rows = 1000 + 37 * np.arange(40)
    lengths = rng.integers(0, 12000, int(rows.sum()))
    valid = rng.random(len(lengths)) > .05
    ids = pa.ListArray.from_arrays(np.r_[0, np.cumsum(lengths % 97)].astype(np.int32),
                                   pa.array(np.zeros(int((lengths % 97).sum()), np.int32)))
    table = pa.table({"length": pa.array(lengths, mask=~valid), "input_ids": ids})
    cuts = np.r_[0, np.cumsum(rows)]
    decoded = {"huge": lengths, "packed": lengths, "coded": lengths % 500}
    batches = [table.slice(a, b - a) for a, b in zip(cuts[:-1], cuts[1:], strict=True)]
    coded = pa.table({"length": pa.array(lengths % 500, mask=~valid).dictionary_encode()})
    lz4 = pa.ipc.IpcWriteOptions(compression="lz4")
    deltas = pa.ipc.IpcWriteOptions(emit_dictionary_deltas=True)
    changing = {}
    for name, grow in (("replaced", False), ("deltas", True)):
        values = [rng.permutation(12000)[:300] if not grow else
                  (np.arange(100 * (k + 1)) * 7919) % 12000 for k in range(40)]
        index = [rng.integers(0, len(v), int(n)) for v, n in zip(values, rows, strict=True)]
        changing[name] = [pa.record_batch([pa.DictionaryArray.from_arrays(
            pa.array(i, mask=~valid[a:b]), v)], names=["length"])
            for i, v, a, b in zip(index, values, cuts[:-1], cuts[1:], strict=True)]
        decoded[name] = np.concatenate([v[i] for i, v in zip(index, values, strict=True)])
    for name, opener, parts, options in (
            ("huge.arrows", pa.ipc.new_stream, batches, None),
            ("packed.arrows", pa.ipc.new_stream, batches, lz4),
            ("huge.arrow", pa.ipc.new_file, batches, None),
            ("coded.arrow", pa.ipc.new_file, coded.to_batches(max_chunksize=1500), None),
            ("coded.arrows", pa.ipc.new_stream, coded.to_batches(max_chunksize=1500), None),
            ("replaced.arrows", pa.ipc.new_stream, changing["replaced"], None),
            ("deltas.arrows", pa.ipc.new_stream, changing["deltas"], deltas),
            ("one.arrow", pa.ipc.new_file, [table], None)):
        with opener(d / name, parts[0].schema, options=options) as w:
            for b in parts:
                w.write(b)
    hf = datasets.Dataset.from_dict({"length": lengths[:6000].tolist()})
    hf.save_to_disk(str(d / "hf"), num_shards=1)
    numpy = {n: gp.histogram(pa.array(x, mask=~valid), backend="numpy", cap=8192)
             for n, x in decoded.items()}
    numpy["hf"] = gp.histogram(pa.array(lengths[:6000]), backend="numpy", cap=8192)
    return d, numpy


def _tasks(path, **kwargs):
    from gpu_profiler.cluster import groups
    from gpu_profiler.engine import plan

    planned = plan(gp.Source(str(path), **kwargs), gp.Execution(cap=8192))
    return [p for _, ps in groups([("", p) for p in planned.parts], 2, planned.reading)
            for p in ps]


@pytest.mark.parametrize("name,kwargs", [("huge.arrows", {}), ("huge.arrow", {}),
                                         ("huge.arrows", {"offsets_of": "input_ids"}),
                                         ("packed.arrows", {}), ("coded.arrow", {}),
                                         ("coded.arrows", {}), ("replaced.arrows", {}),
                                         ("deltas.arrows", {}), ("hf", {})])
def test_huge_ipc_shard_is_cut_into_batch_ranges(client, huge, name, kwargs):
    from gpu_profiler.readers.ipc import BatchRange

    d, numpy = huge
    ranges = _tasks(d / name, **kwargs)
    shard = ranges[0].path
    with pa.memory_map(str(shard)) as f:
        count = pa.ipc.open_file(f).num_record_batches if ranges[0].kind == "file" else \
            sum(1 for _ in pa.ipc.open_stream(f))
    assert len(ranges) >= 4 and all(isinstance(p, BatchRange) for p in ranges)
    assert [p.first for p in ranges] == [0] + [p.stop for p in ranges[:-1]]  # each batch once
    assert ranges[-1].stop == count and all(p.first < p.stop for p in ranges)
    assert [p.start for p in ranges] == [0] + [p.end for p in ranges[:-1]]
    assert ranges[-1].end == shard.stat().st_size
    if name in ("coded.arrows", "replaced.arrows", "deltas.arrows"):  # read from before
        assert all(p.dictionaries for p in ranges[1:]) and not ranges[0].dictionaries
    alone = gp.histogram(d / name, cap=8192, **kwargs)
    assert gp.histogram(d / name, cap=8192, client=client, **kwargs) == alone
    if not kwargs:
        assert alone == numpy[name.split(".")[0]]


def test_ipc_shard_of_one_batch_is_not_cut(huge):
    d, _ = huge
    (part,) = _tasks(d / "one.arrow")
    assert part.span is None and part.path == d / "one.arrow"


def test_batch_ranges_are_cached_apart_and_reused(client, huge, tmp_path):
    d, _ = huge
    ranges = len(_tasks(d / "huge.arrows"))
    alone = gp.histogram(d / "huge.arrows")
    for _ in range(2):
        done = gp.profile(d / "huge.arrows", client=client, cache_dir=str(tmp_path))
        assert done.histogram == alone
    assert done.report.cache["reused"] == ranges and len(list(tmp_path.iterdir())) == ranges


def test_corrupt_batch_inside_a_range_is_named(client, huge, tmp_path, capsys):
    d, _ = huge
    data = bytearray((d / "huge.arrows").read_bytes())
    table = pa.ipc.open_stream(bytes(data)).read_all()
    batch = table.to_batches()[25]  # the length column's FieldNode: (rows, nulls)
    node = struct.pack("<qq", batch.num_rows, batch.column(0).null_count)
    assert data.count(node) == 1
    at = data.index(node)
    data[at + 8:at + 16] = struct.pack("<q", batch.num_rows + 1)
    bad = tmp_path / "bad.arrows"
    bad.write_bytes(bytes(data))
    (hit,) = [p for p in _tasks(bad) if p.first <= 25 < p.stop]
    address = ["--dask", client.scheduler.address, "-q", "-f", "json"]
    code, _, err = run_cli(["profile", bad, *address], capsys)
    assert code == 2 and f"{bad}: corrupt or truncated Arrow IPC stream" in err
    assert "null count out of range" in err and "Traceback" not in err
    code, out, _ = run_cli(["profile", bad, *address, "--skip-bad-shards"], capsys)
    (skipped,) = json.loads(out)["skipped_shards"]
    assert code == 3 and skipped["shard"] == hit.label


def test_cluster_profile_of_dataset_dict_equals_single_process(client, corpora):
    alone = gp.profile(corpora / "dd").to_dict()
    spread = gp.profile(corpora / "dd", client=client).to_dict()
    for d in (alone, spread):
        d.pop("seconds")
    assert spread == alone and set(spread["splits"]) == {"train", "test"}


def test_cli_workers_equals_single_process(corpora, capsys):
    def run(*extra):
        code, out, _ = run_cli(["profile", corpora / "pq", "-q", "-f", "json", *extra], capsys)
        assert code == 0
        return out[:out.index('"seconds"')]

    assert run("--workers", "1") == run()


class Gate(distributed.WorkerPlugin):
    """Holds each task as it starts executing until ``go`` exists, having said which
    worker process holds it: the test kills one of those mid-task."""

    def __init__(self, folder: str) -> None:
        self.folder = folder

    def transition(self, key, start, finish, *args, **kwargs):
        if finish == "executing":
            Path(self.folder, f"started-{os.getpid()}").touch()
            while not Path(self.folder, "go").exists():
                time.sleep(0.005)


def _wait_for(predicate, what, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def test_worker_killed_mid_task_is_retried_with_the_same_result(client, corpora, tmp_path):
    alone = gp.histogram(corpora / "pq", cap=8192)
    client.register_plugin(Gate(str(tmp_path)), name="gate")
    result = {}
    scan = threading.Thread(target=lambda: result.update(
        hist=gp.histogram(corpora / "pq", cap=8192, client=client)))
    try:
        scan.start()
        _wait_for(lambda: any(tmp_path.glob("started-*")), "a task to start")
        victim = int(next(tmp_path.glob("started-*")).name.split("-")[1])
        os.kill(victim, signal.SIGKILL)
        (tmp_path / "go").touch()  # client.run waits on the other worker's loop until now
        scan.join(timeout=60)
    finally:
        (tmp_path / "go").touch()
        client.unregister_worker_plugin("gate")
    assert result["hist"] == alone
    client.wait_for_workers(2, timeout=30)  # the nanny restarted it
    assert victim not in client.run(os.getpid).values()
