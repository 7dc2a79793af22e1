"""The scan progress bar: drawn on a real terminal (a pty), never when stderr is a pipe or
with --quiet, and never in the way of stdout."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import run_on_a_terminal

from gpu_profiler import progress

# Runs the real CLI with the bar's delay at 0 and each shard slowed down a little (read on
# its own, not with the others: see readers.base.Together), so the bar has time to draw
# however fast the machine is.
CHILD = textwrap.dedent("""
    import sys, time
    from gpu_profiler import progress
    from gpu_profiler.readers import parquet
    progress.SHOW_AFTER_S = 0.0
    real = parquet.chunks
    def slow(path, spec, *args, **kw):
        time.sleep(0.05)
        return real(path, spec, *args, **kw)
    parquet.chunks = slow
    parquet.ParquetPart.together = None
    from gpu_profiler.cli import main
    main(sys.argv[1:])
""")


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    d = tmp_path_factory.mktemp("shards")
    rng = np.random.default_rng(0)
    for k in range(8):
        pq.write_table(pa.table({"length": rng.integers(1, 5000, 1000)}), d / f"{k}.parquet")
    return d


def run_cli(args: list[str], tty: bool) -> tuple[int, bytes, bytes]:
    """Run the CLI in a child; stderr is a pty when ``tty``, else a pipe."""
    cmd = [sys.executable, "-c", CHILD, *args]
    if not tty:
        p = subprocess.run(cmd, capture_output=True, timeout=120)
        return p.returncode, p.stdout, p.stderr
    return run_on_a_terminal(cmd)


def test_bar_on_a_terminal(shards):
    rc, out, err = run_cli(["profile", str(shards)], tty=True)
    assert rc == 0
    assert b"scanning" in err and b"/8" in err and b"samples/s" in err and b"MB/s" in err
    assert b"scanning" not in out and b"8,000" in out  # the table is on stdout, intact


def test_quiet_on_a_terminal(shards):
    rc, out, err = run_cli(["profile", str(shards), "--quiet"], tty=True)
    assert (rc, err) == (0, b"")
    assert b"8,000" in out


def test_silent_when_stderr_is_not_a_terminal(shards):
    rc, out, err = run_cli(["profile", str(shards)], tty=False)
    assert (rc, err) == (0, b"")
    assert b"8,000" in out


class FakeTTY:
    def __init__(self) -> None:
        self.written: list[str] = []

    def isatty(self) -> bool:
        return True

    def write(self, s: str) -> int:
        self.written.append(s)
        return len(s)

    def flush(self) -> None:
        pass


def test_fast_scans_show_nothing(monkeypatch):
    tty = FakeTTY()
    monkeypatch.setattr(sys, "stderr", tty)
    with progress.ScanProgress(3, enabled=True) as bar:
        bar.update(samples=10, nbytes=100, parts=1)
    assert bar.enabled and bar._bar is None and not tty.written


def test_counts_without_a_bar():
    with progress.ScanProgress(2, enabled=False) as bar:
        bar.update(samples=5)
        bar.update(samples=7, nbytes=30, parts=1)
    assert (bar.samples, bar.nbytes, bar.parts, bar._bar) == (12, 30, 1, None)
