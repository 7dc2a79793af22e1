"""Hugging Face ``save_to_disk`` directories: a Dataset (``state.json`` + ``data-*.arrow``
IPC stream shards) or a DatasetDict (``dataset_dict.json`` + one Dataset dir per split)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import TypeGuard

from gpu_profiler.errors import ProfilerError


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


def dataset_shards(path: Path) -> list[tuple[Path, int]]:
    """The IPC stream shards of a Dataset dir, in ``state.json`` order, with their sizes
    (one system call a shard: thousands of them are listed in milliseconds)."""
    state = _read_json(path / "state.json")
    files = state.get("_data_files")
    if not isinstance(files, list) or not all(isinstance(f, dict) and "filename" in f
                                              for f in files):
        raise ProfilerError(f"{path / 'state.json'}: no valid '_data_files' list")
    where, meta = str(path), path / "state.json"
    for f in files:  # every name is checked before any shard is looked for
        if not _plain(f["filename"]):
            _inside(path, f["filename"], meta, "a shard")
    return [_shard(path, where, f["filename"], meta) for f in files]


def _plain(name: object) -> TypeGuard[str]:
    """Whether ``name`` is a plain file name (no separator, not . or ..): inside its
    folder unless it is a link."""
    return isinstance(name, str) and bool(name) and os.sep not in name \
        and name not in (".", "..") and "\0" not in name


def _shard(folder: Path, where: str, name: object, meta: Path) -> tuple[Path, int]:
    """A shard listed in ``meta`` and its size: a plain file name that is a regular file
    (not a link) is inside ``folder`` (``where``, as a string) without resolving it;
    anything else is checked by `_inside`."""
    if _plain(name):
        at = os.path.join(where, name)
        try:
            st = os.lstat(at)
        except OSError:
            raise ProfilerError(f"{at}: shard listed in state.json is missing") from None
        if stat.S_ISREG(st.st_mode):
            return folder / name, st.st_size  # (cheaper than parsing ``at`` again)
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
    splits = _read_json(path / "dataset_dict.json").get("splits")
    if not isinstance(splits, list) or not splits:
        raise ProfilerError(f"{path / 'dataset_dict.json'}: no 'splits' list")
    meta = path / "dataset_dict.json"
    out = {s: _inside(path, s, meta, "a split") for s in splits}
    for name, d in out.items():
        if not is_dataset_dir(d):
            raise ProfilerError(f"{d}: split {name!r} has no state.json")
    return out
