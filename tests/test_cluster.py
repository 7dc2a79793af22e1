"""Scans on a real Dask cluster (`distributed.LocalCluster`, 2 worker processes): exactly
the single-process histogram on multi-shard HF dirs, DatasetDicts and Parquet shards, and
again when a worker is SIGKILLed mid-task (dask reruns its tasks elsewhere)."""

from __future__ import annotations

import os
import signal
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
                                  dashboard_address=None) as cluster, \
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
    from gpu_profiler.engine import prepare

    planned = prepare(str(corpora / "one.parquet"), cap=8192)
    tasks = groups([("", p) for p in planned.parts], 2, planned.reading)
    ranges = [p.row_groups for _, ps in tasks for p in ps]
    assert len(tasks) >= 4 and ranges[0][0] == 0 and ranges[-1][1] == 40
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:], strict=False))
    alone = gp.histogram(corpora / "one.parquet")  # profile bins the whole length range
    cached = gp.profile(corpora / "one.parquet", client=client, cache_dir=str(tmp_path))
    assert cached.histogram == alone and cached.report.cache["scanned"] == len(ranges)
    again = gp.profile(corpora / "one.parquet", client=client, cache_dir=str(tmp_path))
    assert again.histogram == alone and again.report.cache["reused"] == len(ranges)


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
