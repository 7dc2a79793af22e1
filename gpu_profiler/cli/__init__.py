"""Command-line entry point: runs the typer app and turns user errors into one line + exit 2."""

from __future__ import annotations

import gc
import os
import sys

__all__ = ["console", "main", "printable"]


def main(argv: list[str] | None = None) -> None:
    """``gpu-profiler`` console script."""
    import typer

    from gpu_profiler.cli.app import command
    from gpu_profiler.errors import ProfilerError, first_line

    args = sys.argv[1:] if argv is None else argv
    try:
        rc = command(args).main(args=args, prog_name="gpu-profiler", standalone_mode=False)
    except ProfilerError as exc:
        _fail(str(exc), 2)
    except (typer.Abort, KeyboardInterrupt):
        _fail("interrupted", 130)
    except BrokenPipeError:
        sys.stderr.close()
        sys.exit(1)
    except Exception as exc:  # a bug, not bad input: still no wall of text unless asked
        code = getattr(exc, "exit_code", None)
        if hasattr(exc, "show") and isinstance(code, int):
            exc.show()  # a usage error (click's, which typer >= 0.20 vendors)
            sys.exit(code)
        if os.environ.get("GPU_PROFILER_DEBUG"):
            raise
        if type(exc).__module__.startswith("pyarrow") or isinstance(exc, OSError):
            _fail(first_line(exc), 2)
        _fail(f"internal error: {type(exc).__name__}: {exc} (set GPU_PROFILER_DEBUG=1 for "
              "the traceback, and please report it)", 1)
    if rc == 130:  # typer turns Ctrl-C into a quiet Exit(130), returned here
        _fail("interrupted", 130)
    sys.exit(rc if isinstance(rc, int) else 0)


def console() -> None:
    """The installed ``gpu-profiler`` script: :func:`main`, then an immediate exit once
    stdout and stderr are flushed. Interpreter teardown does nothing useful here and costs
    ~0.13 s (mostly numba's), a sixth of a small run. OpenBLAS's threads, unless the
    user sized them, are one: the CLI calls no threaded BLAS, and each idle thread spins
    ~0.1 s of CPU after numpy loads it, a core's share of a small scan. Python's collector
    runs a young collection every 700 new objects, ~70 of them while the modules load,
    though nearly all of those objects live as long as the process: here every 50,000
    (and a full one every ~5M; a scan makes a few objects a chunk or shard, and the cycles
    among them hold no buffers: a 300-shard Parquet scan peaks at the same RSS), which
    makes a small profile ~6-15 ms faster (bench/results/startup.md)."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    gc.set_threshold(50_000, 10, 10)
    try:
        main()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (BrokenPipeError, ValueError):  # reader went away / stream already closed
        code = code or 1
    os._exit(code)


def _fail(message: str, code: int) -> None:
    """One line on stderr, `printable`."""
    print(f"gpu-profiler: error: {printable(message)}", file=sys.stderr)
    sys.exit(code)


def printable(text: str) -> str:
    """``text`` with its control characters (from file names and metadata) escaped, so an
    input cannot drive the terminal."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
