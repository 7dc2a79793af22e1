"""Read-ahead: same items in the same order, the producer's errors raised in the consumer,
bounded look-ahead, and a producer that stops (and closes its source) when abandoned."""

from __future__ import annotations

import threading
import time

import pytest

from gpu_profiler import ProfilerError
from gpu_profiler.prefetch import DEPTH, prefetched


def test_items_in_order():
    assert list(prefetched(range(1000))) == list(range(1000))
    assert list(prefetched([])) == []


def test_producer_errors_are_raised_in_the_consumer():
    def items():
        yield 1
        yield 2
        raise ProfilerError("shard 3: corrupt")

    got = []
    with pytest.raises(ProfilerError, match="shard 3: corrupt"):
        for x in prefetched(items()):
            got.append(x)
    assert got == [1, 2]


def test_look_ahead_is_bounded():
    produced = []

    def items():
        for i in range(100):
            produced.append(i)
            yield i

    it = prefetched(items())
    assert next(it) == 0
    time.sleep(0.3)  # give the producer every chance to run ahead
    assert len(produced) <= DEPTH + 2  # queued + the one being put + the one consumed
    it.close()


def test_abandoned_consumer_stops_and_closes_the_producer():
    closed = threading.Event()

    def items():
        try:
            i = 0
            while True:
                yield i
                i += 1
        finally:
            closed.set()

    it = prefetched(items())
    assert [next(it) for _ in range(5)] == [0, 1, 2, 3, 4]
    it.close()
    assert closed.wait(5)
    assert not any(t.name == "gpu-profiler-readahead" for t in threading.enumerate())


def test_cpu_kernels_run_without_the_gil_and_serially():
    """The histogram's blocks and the read-ahead thread's kernels run at once, in their own
    threads: every CPU kernel releases the GIL (through the JIT too) and none starts
    numba's own threads (its workqueue layer aborts on two parallel kernels at once)."""
    from gpu_profiler import native

    for name in native.EXPORTS:
        f = native._jit_function(name)
        assert f.targetoptions.get("nogil") and not f.targetoptions.get("parallel"), name


def test_scans_read_ahead_only_where_it_pays(tmp_path, monkeypatch):
    """IPC shards are read ahead, unless so many that workers read them at once (inline);
    Parquet decodes ahead in its own threads and in-memory sources have nothing to read."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    import gpu_profiler as gp
    from gpu_profiler import engine, execute
    from gpu_profiler.backends.numba_backend import cores

    calls = []
    real = execute.prefetched
    monkeypatch.setattr(execute, "prefetched", lambda it: calls.append(1) or real(it))
    t = pa.table({"length": pa.array(np.arange(5000) % 300)})
    with pa.ipc.new_stream(tmp_path / "x.arrows", t.schema) as w:
        w.write_table(t)
    pq.write_table(t, tmp_path / "x.parquet")
    many = tmp_path / "many"
    many.mkdir()
    shards = engine.PARTS_PER_WORKER * cores()
    for k in range(shards):
        with pa.ipc.new_stream(many / f"{k:03d}.arrows", t.schema) as w:
            w.write_table(t)
    want = np.bincount(np.arange(5000) % 300, minlength=301)
    calls.clear()
    assert np.array_equal(gp.histogram(many, cap=300).counts, want * shards)
    assert not calls
    for source, expect in ((tmp_path / "x.arrows", 1), (tmp_path / "x.parquet", 0),
                           (np.arange(5000) % 300, 0)):
        calls.clear()
        assert np.array_equal(gp.histogram(source, cap=300).counts, want)
        assert len(calls) == expect, source
