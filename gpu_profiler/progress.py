"""A progress bar for long scans: shown on a terminal after a short delay, silent otherwise."""

from __future__ import annotations

import sys
import time
from typing import Any

#: Scans finishing sooner than this never show a bar.
SHOW_AFTER_S = 0.5


class ScanProgress:
    """Counts shards, samples and bytes; draws a rich bar on stderr when it is a TTY."""

    def __init__(self, total_parts: int, enabled: bool) -> None:
        self.total_parts = total_parts
        self.enabled = enabled and sys.stderr.isatty()
        self.samples = 0
        self.nbytes = 0
        self._start = time.perf_counter()
        self._bar: Any = None
        self._task: Any = None

    def __enter__(self) -> ScanProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()

    def update(self, samples: int = 0, nbytes: int = 0, parts: int = 0) -> None:
        """Record ``samples`` scanned and ``parts`` (of ``nbytes`` bytes) finished."""
        self.samples += samples
        self.nbytes += nbytes
        if not self.enabled:
            return
        elapsed = time.perf_counter() - self._start
        if self._bar is None:
            if elapsed < SHOW_AFTER_S:
                return
            self._start_bar()
        rate = (f"{self.samples / elapsed / 1e6:.1f} M samples/s, "
                f"{self.nbytes / elapsed / 1e6:.0f} MB/s")
        self._bar.update(self._task, advance=parts, rate=rate)

    def _start_bar(self) -> None:
        from rich.console import Console
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                                   TimeRemainingColumn)

        self._bar = Progress(TextColumn("scanning shards"), BarColumn(), MofNCompleteColumn(),
                             TextColumn("{task.fields[rate]}"), TimeRemainingColumn(),
                             console=Console(stderr=True), transient=True)
        self._task = self._bar.add_task("scan", total=self.total_parts, rate="")
        self._bar.start()
