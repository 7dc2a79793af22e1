"""Parquet footer statistics for ``--trust-statistics``, read in a helper process.

pyarrow's accessor of a column chunk's metadata (``RowGroupMetaData.column``) lets a C++
exception escape on some malformed footers ("ColumnMetaData type does not match
ColumnDescriptor physical type"), which aborts the whole process. The default scan never
calls it; a scan that trusts statistics calls it in one helper process (a fresh
interpreter: it inherits no threads), started on first use and reused for every file, so a
footer that aborts pyarrow costs the helper, and the scan stops with one line naming the
file.

The helper is a plain child on two pipes, not a process pool: it ends when its input
does, that is when the process that started it has gone, however it went (the CLI leaves
by ``os._exit``, running no shutdown). A pool's worker waited on its queue for ever after
that, and with it the forkserver and the resource tracker, holding the CLI's stdout and
stderr open: ``gpu-profiler ... --trust-statistics | tail`` never ended. Its stderr is
``/dev/null`` (an abort's message is not the CLI's line) and it ignores Ctrl-C (the CLI
says it was interrupted).
"""

from __future__ import annotations

import atexit
import json
import os
import pickle
import signal
import struct
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO, Any

import pyarrow.parquet as pq

from gpu_profiler.errors import ProfilerError
from gpu_profiler.runs import Run

_helper: subprocess.Popen[bytes] | None = None
_lock = threading.Lock()  # one request at a time on the helper's pipes
_SERVE = ("import json, sys; sys.path[:0] = json.loads(sys.argv[1]); "
          "from gpu_profiler.readers.parquet.stats import serve; serve()")


def runs(path: Path, leaf: int) -> list[Run | None]:
    """Per row group of ``path``, the `Run` its statistics prove (see `_run`), else None."""
    global _helper
    with _lock:
        if _helper is None or _helper.poll() is not None:
            _helper = subprocess.Popen([sys.executable, "-c", _SERVE, json.dumps(sys.path)],
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                       stderr=subprocess.DEVNULL)
            atexit.register(_stop, _helper)
        helper = _helper
        assert helper.stdin is not None and helper.stdout is not None
        try:
            _send(helper.stdin, (str(path), leaf))
            ok, value = _receive(helper.stdout)
        except (OSError, EOFError, pickle.UnpicklingError):
            helper.kill()
            helper.wait()
            _helper = None
            raise ProfilerError(f"{path}: pyarrow aborted reading the footer's statistics (a "
                                "malformed footer); scan without --trust-statistics to read "
                                "the row groups instead") from None
    if not ok:
        raise value  # as the helper raised it (a pyarrow error: the caller names the file)
    return value


def _stop(helper: subprocess.Popen[bytes]) -> None:
    """End the helper with this process: its stdin closed, it returns (`serve`)."""
    if helper.poll() is None and helper.stdin is not None and helper.stdout is not None:
        helper.stdin.close()
        helper.stdout.close()
        try:
            helper.wait(timeout=5)
        except subprocess.TimeoutExpired:
            helper.kill()
            helper.wait()


def _send(f: IO[bytes], value: Any) -> None:
    data = pickle.dumps(value)
    f.write(struct.pack("<Q", len(data)) + data)
    f.flush()


def _receive(f: IO[bytes]) -> Any:
    head = f.read(8)
    if len(head) < 8:
        raise EOFError
    (n,) = struct.unpack("<Q", head)
    data = f.read(n)
    if len(data) < n:
        raise EOFError
    return pickle.loads(data)


def serve() -> None:
    """The helper: ``(path, leaf)`` requests from stdin, ``(True, runs)`` or ``(False,
    exception)`` answers to stdout, until stdin ends. Anything else written to fd 1 goes to
    /dev/null, never into the answers."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    requests = os.fdopen(os.dup(0), "rb")
    answers = os.fdopen(os.dup(1), "wb")
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    while True:
        try:
            path, leaf = _receive(requests)
        except EOFError:
            return
        try:
            answer: tuple[bool, Any] = (True, _runs(path, leaf))
        except Exception as exc:  # noqa: BLE001 - raised again in the scan
            answer = (False, exc)
        try:
            pickle.dumps(answer)
        except Exception:  # noqa: BLE001 - an exception that does not pickle: said plainly
            answer = (False, ValueError(f"{type(answer[1]).__name__}: {answer[1]}"))
        _send(answers, answer)


def _runs(path: str, leaf: int) -> list[Run | None]:
    """In the worker: every row group's `_run`."""
    md = pq.ParquetFile(path, memory_map=False).metadata
    return [_run(md.row_group(i), leaf) for i in range(md.num_row_groups)]


def _run(rg: pq.RowGroupMetaData, leaf: int) -> Run | None:
    """A `Run` when the statistics alone give this row group's histogram exactly: every
    non-null value equal (min == max) or every value null, with the null count known and
    consistent with the row count. Otherwise None (the row group is decoded)."""
    if not rg.num_rows:
        return None
    col = rg.column(leaf)
    stats = col.statistics
    if stats is None or not stats.has_null_count or col.physical_type not in ("INT32", "INT64"):
        return None
    nulls, values = stats.null_count, stats.num_values
    if nulls < 0 or values < 0 or nulls + values != rg.num_rows:
        return None
    if values == 0:
        return Run(0, 0, nulls)
    if not stats.has_min_max:
        return None
    lo, hi = stats.min, stats.max
    if not isinstance(lo, int) or lo != hi:
        return None
    return Run(lo, values, nulls)
