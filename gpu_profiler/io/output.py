"""Write outputs so that readers never see half a file and nothing is clobbered that should
not be: a regular file (or a new one) is written to a temp file beside it and renamed over
it; a symlink's target is written the same way, the link kept; a FIFO or a character device
(``/dev/stdout``, a pipe) is written in place, since a stream cannot be replaced, and never
turned into a regular file; ``-`` is stdout. New files get the umask's mode; a replaced file
keeps its own. `check_outputs` refuses, before any work, an output that would replace one of
the command's inputs or another of its outputs."""

from __future__ import annotations

import os
import stat
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping
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


def check_outputs(outputs: Mapping[str, str | Path | None],
                  inputs: Iterable[str | Path] = (),
                  expand: Callable[[str], Iterable[str]] = lambda path: [path]) -> None:
    """Fail early (before a long scan) when an output (``{option: path}``; None: not asked
    for) cannot be written, names the same file as another output (a new file: by its
    resolved path, so ``./x`` is ``x``), or is one of the files the command reads (by
    device and inode: through symlinks and hard links; every file under an input directory,
    every file an input glob matches, a Megatron-LM prefix's ``.idx`` and ``.bin``: the
    paths ``expand`` gives for an input, `gpu_profiler.readers.named_paths` from the CLI:
    the io layer imports no reader). Streams (``-``, a FIFO, a character device) replace
    nothing and never collide."""
    named = {o: os.fspath(p) for o, p in outputs.items() if p is not None and p != "-"}
    seen: dict[object, str] = {}
    existing: dict[tuple[int, int], str] = {}
    for option, p in named.items():
        try:
            st = os.stat(p)
        except (OSError, ValueError):
            st = None
        if st is not None and (stat.S_ISFIFO(st.st_mode) or stat.S_ISCHR(st.st_mode)):
            continue
        key: object = (st.st_dev, st.st_ino) if st else os.path.realpath(p)
        if key in seen:
            raise ProfilerError(f"{p}: {option} and {seen[key]} name the same file; give each "
                                "output its own")
        seen[key] = option
        if st is not None and stat.S_ISREG(st.st_mode):
            existing[(st.st_dev, st.st_ino)] = option  # (a new file replaces nothing)
    if existing:
        for given, path, identity in _input_files(inputs, expand):
            if identity in existing:
                option = existing[identity]
                of = "" if path == given else f" (of {given})"
                raise ProfilerError(f"{named[option]}: {option} would replace the input "
                                    f"{path}{of}; write it elsewhere")
    for p in named.values():
        check_writable(p)


def _input_files(inputs: Iterable[str | Path], expand: Callable[[str], Iterable[str]]
                 ) -> Iterator[tuple[str, str, tuple[int, int]]]:
    """``(input, file, (device, inode))`` for every file each input names (a directory's:
    every file under it)."""
    for source in inputs:
        given = os.fspath(source)
        for path in expand(given):
            walk = os.walk(path) if os.path.isdir(path) else [("", [], [path])]
            for top, _, names in walk:
                for name in names:
                    f = os.path.join(top, name)
                    try:
                        st = os.stat(f)
                    except (OSError, ValueError):
                        continue
                    yield given, f, (st.st_dev, st.st_ino)


def check_writable(path: str | Path) -> Path:
    """Fail early (before a long scan) when ``path`` cannot be written."""
    if path == "-":
        return Path("-")
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
    if path == "-":
        sys.stdout.flush()
        sys.stdout.buffer.write(raw)
        sys.stdout.buffer.flush()
        return
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
