"""Write outputs atomically: a temp file beside the target, then rename."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from gpu_profiler.errors import ProfilerError


def check_writable(path: str | Path) -> Path:
    """Fail early (before a long scan) when ``path`` cannot be written."""
    p = Path(path)
    parent = p.parent if str(p.parent) else Path(".")
    if p.is_dir():
        raise ProfilerError(f"{p}: is a directory, not an output file")
    if not parent.is_dir():
        raise ProfilerError(f"{p}: output directory {parent} does not exist or is not a "
                            "directory")
    if not os.access(parent, os.W_OK) or (p.exists() and not os.access(p, os.W_OK)):
        raise ProfilerError(f"{p}: not writable")
    return p


def write_atomic(path: str | Path, data: str | bytes) -> None:
    """Write ``data`` to ``path`` so that readers never see a partial file."""
    p = check_writable(path)
    mode = "wb" if isinstance(data, bytes) else "w"
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    try:
        with os.fdopen(fd, mode) as f:
            f.write(data)
        os.replace(tmp, p)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise ProfilerError(f"{p}: cannot write ({exc.strerror or exc})") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
