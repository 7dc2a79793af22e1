"""Hugging Face ``save_to_disk`` directories: a Dataset (``state.json`` + ``data-*.arrow``
IPC stream shards) or a DatasetDict (``dataset_dict.json`` + one Dataset dir per split)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import TypeGuard

from gpu_profiler.errors import ProfilerError
from gpu_profiler.io import files
from gpu_profiler.kernels.stats import MISSING, OTHER


def is_dataset_dir(path: Path) -> bool:
    """True for a ``Dataset.save_to_disk`` directory."""
    return (path / "state.json").is_file()


def is_dataset_dict_dir(path: Path) -> bool:
    """True for a ``DatasetDict.save_to_disk`` directory."""
    return (path / "dataset_dict.json").is_file()


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except RecursionError:
        raise ProfilerError(f"{path}: unreadable Hugging Face metadata (nested too deeply)"
                            ) from None
    except (OSError, ValueError) as exc:
        raise ProfilerError(f"{path}: unreadable Hugging Face metadata ({exc})") from None
    if not isinstance(data, dict):
        raise ProfilerError(f"{path}: unexpected Hugging Face metadata (not a JSON object)")
    return data


def _inside(folder: Path, name: object, meta: Path, what: str) -> Path:
    """``folder / name`` for a name from the metadata, which must be a relative path that
    stays inside ``folder`` (names are printed escaped: they come from the file). A plain
    file name (no separator, no link: what ``datasets`` writes) is inside without
    resolving the path, which costs a system call per component."""
    if not isinstance(name, str) or not name:
        raise ProfilerError(f"{meta}: {what} must be named by a non-empty string, got "
                            f"{type(name).__name__} {_escaped(name)}")
    full = folder / name
    try:
        inside = (_plain(name) and not full.is_symlink()) or \
            full.resolve().is_relative_to(folder.resolve())
    except (OSError, ValueError, RuntimeError):  # e.g. a NUL byte, a symlink loop
        inside = False
    if not inside or Path(name).is_absolute():
        raise ProfilerError(f"{meta}: {what} {_escaped(name)} lies outside {folder}")
    return full


def _escaped(value: object) -> str:
    """``value`` as one printable line (control characters escaped, long values cut)."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def dataset_shards(path: Path) -> list[tuple[str | Path, int]]:
    """The IPC stream shards of a Dataset dir, in ``state.json`` order, with their sizes
    (looked up at once: `files.sizes`); a plain file name's path is a string (see
    `FileShard`)."""
    meta = path / "state.json"
    listed = _read_json(meta).get("_data_files")
    if not isinstance(listed, list) or not all(isinstance(f, dict) and "filename" in f
                                               for f in listed):
        raise ProfilerError(f"{meta}: no valid '_data_files' list")
    names = [f["filename"] for f in listed]
    where = os.path.join(path, "") if path != Path() else ""  # as `path / name` would be
    at = [where + name if _plain(name) else None for name in names]
    for name, joined in zip(names, at, strict=True):  # all checked before any is looked up
        if joined is None:
            _inside(path, name, meta, "a shard")
    found = iter(files.sizes([a for a in at if a is not None]))
    return [_shard(path, name, joined, OTHER if joined is None else next(found), meta)
            for name, joined in zip(names, at, strict=True)]


def _plain(name: object) -> TypeGuard[str]:
    """Whether ``name`` is a plain file name (no separator, not . or ..): inside its
    folder unless it is a link."""
    return isinstance(name, str) and bool(name) and os.sep not in name \
        and name not in (".", "..") and "\0" not in name


def _shard(folder: Path, name: str, joined: str | None, size: int, meta: Path
           ) -> tuple[str | Path, int]:
    """A shard listed in ``meta`` and its size: a plain file name (``joined`` to
    ``folder``) that `files.sizes` found a regular file, no link, is inside ``folder``
    without resolving it; anything else is checked by `_inside`, a link followed."""
    if joined is not None and size >= 0:
        return joined, size
    if joined is not None and size == MISSING:
        raise ProfilerError(f"{joined}: shard listed in state.json is missing")
    full = _inside(folder, name, meta, "a shard")
    try:
        st = os.stat(full)
        mode, size = st.st_mode, st.st_size
    except OSError:
        mode, size = 0, 0
    if not stat.S_ISREG(mode):
        raise ProfilerError(f"{full}: shard listed in state.json is missing")
    return full, size


def dict_splits(path: Path) -> dict[str, Path]:
    """Split name -> Dataset dir of a DatasetDict dir."""
    meta = path / "dataset_dict.json"
    splits = _read_json(meta).get("splits")
    if not isinstance(splits, list) or not splits:
        raise ProfilerError(f"{meta}: no 'splits' list")
    out = {s: _inside(path, s, meta, "a split") for s in splits}
    for name, d in out.items():
        if not is_dataset_dir(d):
            raise ProfilerError(f"{d}: split {name!r} has no state.json")
    return out
