"""A progress bar for long scans: shown on a terminal after a short delay, silent otherwise."""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

#: Scans finishing sooner than this never show a bar.
SHOW_AFTER_S = 0.5


class ScanProgress:
    """Counts shards, samples and bytes; draws a rich bar on stderr when it is a TTY.

    The bar appears ``SHOW_AFTER_S`` seconds after the scan starts (from a timer, so a slow
    first shard shows it too) and disappears when the scan ends.
    """

    def __init__(self, total_parts: int, enabled: bool) -> None:
        self.total_parts = total_parts
        self.enabled = enabled and _is_tty(sys.stderr)
        self.samples = 0
        self.nbytes = 0
        self.parts = 0
        self._start = time.perf_counter()
        self._lock = threading.Lock()
        self._bar: Any = None
        self._task: Any = None
        self._closed = False
        self._timer: threading.Timer | None = None

    def __enter__(self) -> ScanProgress:
        if self.enabled:
            self._timer = threading.Timer(SHOW_AFTER_S, self._show)
            self._timer.daemon = True
            self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._timer is not None:
            self._timer.cancel()
        with self._lock:
            self._closed = True
            if self._bar is not None:
                self._bar.stop()

    def update(self, samples: int = 0, nbytes: int = 0, parts: int = 0) -> None:
        """Record ``samples`` scanned and ``parts`` (of ``nbytes`` bytes) finished."""
        self.samples += samples
        self.nbytes += nbytes
        self.parts += parts
        if self._bar is not None:
            with self._lock:
                self._refresh()

    def _rate(self) -> str:
        elapsed = max(time.perf_counter() - self._start, 1e-9)
        return (f"{self.samples:,} samples, {self.samples / elapsed / 1e6:,.1f} M samples/s, "
                f"{self.nbytes / elapsed / 1e6:,.0f} MB/s")

    def _refresh(self) -> None:
        if self._bar is not None and not self._closed:
            self._bar.update(self._task, completed=self.parts, rate=self._rate())

    def _show(self) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
        )

        with self._lock:
            if self._closed:
                return
            self._bar = Progress(TextColumn("scanning"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("shards  {task.fields[rate]}"),
                                 TimeRemainingColumn(), console=Console(stderr=True),
                                 transient=True)
            self._task = self._bar.add_task("scan", total=self.total_parts, rate="")
            self._refresh()
            self._bar.start()


def _is_tty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # replaced or closed stream
        return False
