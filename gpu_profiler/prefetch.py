"""Read ahead: the readers run in a background thread while the backend histograms, so
reading (positioned reads, metadata walks, gathers: numba kernels that release the GIL)
and histogramming overlap instead of taking turns."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")

#: Items produced ahead of the consumer (bounds the memory held in flight).
DEPTH = 2
_END = object()


def prefetched(items: Iterable[T], depth: int = DEPTH) -> Iterator[T]:
    """``items``, produced by a background thread at most ``depth`` ahead, in order. An
    exception of the producer is raised here; closing this iterator stops the producer
    (and closes ``items``)."""
    out: queue.Queue = queue.Queue(depth)
    stop = threading.Event()

    def produce() -> None:
        source = iter(items)
        try:
            for item in source:
                if not put_unless_stopped(out, item, stop):
                    return
            put_unless_stopped(out, _END, stop)
        except BaseException as exc:  # handed to the consumer, raised there
            put_unless_stopped(out, _Failure(exc), stop)
        finally:
            close = getattr(source, "close", None)
            if close is not None:
                close()

    worker = threading.Thread(target=produce, name="gpu-profiler-readahead", daemon=True)
    worker.start()
    try:
        while (item := out.get()) is not _END:
            if isinstance(item, _Failure):
                raise item.exc
            yield item
    finally:
        stop.set()
        worker.join()


class _Failure:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


def put_unless_stopped(out: queue.Queue, item: object, stop: threading.Event) -> bool:
    """Queue ``item`` on a bounded queue unless ``stop`` is set (the consumer has gone);
    whether it was queued. Shared by every producer thread that hands work over a queue."""
    while not stop.is_set():
        try:
            out.put(item, timeout=0.05)
            return True
        except queue.Full:
            continue
    return False
