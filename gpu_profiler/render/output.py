"""Write outputs so that readers never see half a file and nothing is clobbered that should
not be: a regular file (or a new one) is written to a temp file beside it and renamed over
it; a symlink's target is written the same way, the link kept; a FIFO or a character device
(``/dev/stdout``, a pipe) is written in place, since a stream cannot be replaced, and never
turned into a regular file. New files get the umask's mode; a replaced file keeps its own."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from gpu_profiler.errors import ProfilerError


def _target(path: str | Path) -> Path:
    """Where the bytes go: a symlink's final target (the link itself stays)."""
    p = Path(path)
    return Path(os.path.realpath(p)) if p.is_symlink() else p


def _stream(p: Path) -> bool:
    """A FIFO or a character device: written in place, never replaced."""
    try:
        mode = os.stat(p).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISCHR(mode)


def check_writable(path: str | Path) -> Path:
    """Fail early (before a long scan) when ``path`` cannot be written."""
    p = _target(path)
    if p.is_dir():
        raise ProfilerError(f"{path}: is a directory, not an output file")
    if _stream(p):
        if not os.access(p, os.W_OK):
            raise ProfilerError(f"{path}: not writable")
        return p
    if p.exists() and not p.is_file():
        raise ProfilerError(f"{path}: not a regular file, a FIFO or a character device")
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise ProfilerError(f"{path}: output directory {parent} does not exist or is not a "
                            "directory")
    if not os.access(parent, os.W_OK) or (p.exists() and not os.access(p, os.W_OK)):
        raise ProfilerError(f"{path}: not writable")
    return p


def write_atomic(path: str | Path, data: str | bytes) -> None:
    """Write ``data`` to ``path`` (see the module docstring)."""
    p = check_writable(path)
    raw = data.encode() if isinstance(data, str) else data
    if _stream(p):
        try:
            with open(p, "wb") as f:
                f.write(raw)
        except OSError as exc:
            raise ProfilerError(f"{path}: cannot write ({exc.strerror or exc})") from None
        return
    mode = stat.S_IMODE(os.stat(p).st_mode) if p.exists() else 0o666 & ~_umask()
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
        os.chmod(tmp, mode)
        os.replace(tmp, p)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise ProfilerError(f"{path}: cannot write ({exc.strerror or exc})") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
