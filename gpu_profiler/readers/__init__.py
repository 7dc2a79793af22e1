"""Readers: turn a user's source into named splits of parts, each yielding `Chunk`s of the
length column. One module per format (``hf``, ``ipc``, ``parquet``, ``memory``,
``device``); a shard format is registered in :data:`FORMATS`."""

from __future__ import annotations

import glob
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from gpu_profiler.errors import ProfilerError
from gpu_profiler.readers import hf, ipc, parquet
from gpu_profiler.readers.arrow import LengthSpec, resolve_spec
from gpu_profiler.readers.base import Part, Reading, ShardFormat

__all__ = ["FORMATS", "LengthSpec", "Part", "Reading", "ShardFormat", "open_source",
           "resolve_spec"]

#: Every shard format, in the order files are sniffed: one line each.
FORMATS: dict[str, ShardFormat] = {f.name: f for f in (
    parquet.FORMAT,
    ipc.FILE_FORMAT,
    ipc.STREAM_FORMAT,
)}
#: ``--format`` values: ``hf`` (a save_to_disk dir) and the shard formats.
FORMAT_NAMES = ("hf", *FORMATS)


def sniff(path: Path) -> ShardFormat:
    """A shard's format from its first bytes (extensions can lie)."""
    try:
        with open(path, "rb") as f:
            head = f.read(16)
    except OSError as exc:
        raise ProfilerError(f"{path}: cannot read ({exc.strerror})") from None
    for fmt in FORMATS.values():
        if fmt.sniff(head, path):
            return fmt
    raise ProfilerError(f"{path}: not a {_titles()} file (unrecognized magic bytes)")


def _titles() -> str:
    """``Parquet or Arrow IPC``: the registered formats, as errors name them."""
    names = list(dict.fromkeys(f.title for f in FORMATS.values()))
    return ", ".join(names[:-1]) + " or " + names[-1] if len(names) > 1 else names[0]


def open_source(source: Any, fmt: str | None = None,
                split: str | None = None) -> dict[str, list[Part]]:
    """Resolve a source into ``{split_name: [parts]}``; unsplit sources use the name ``""``.

    Args:
        source: a path (file, directory, glob), or an in-memory object (numpy array, pyarrow
            Array/ChunkedArray/Table/RecordBatch, ``datasets.Dataset``/``DatasetDict``).
        fmt: force a format (one of :data:`FORMAT_NAMES`) instead of detecting it.
        split: keep only this split of a DatasetDict.
    """
    if fmt is not None and fmt not in FORMAT_NAMES:
        raise ProfilerError(f"unknown format {fmt!r}; choose one of: {', '.join(FORMAT_NAMES)}")
    if not isinstance(source, (str, Path)):
        from gpu_profiler.readers import memory

        splits = memory.splits(source)
    else:
        splits = _path_splits(str(source), fmt)
    if split is not None:
        if split not in splits:
            names = ", ".join(repr(s) for s in splits if s) or "none (not a DatasetDict)"
            raise ProfilerError(f"no split {split!r}; splits: {names}")
        splits = {split: splits[split]}
    return splits


def _path_splits(source: str, fmt: str | None) -> dict[str, list[Part]]:
    if any(ch in source for ch in "*?["):
        paths = _once(Path(p) for p in glob.glob(source, recursive=True) if Path(p).is_file())
        if not paths:
            raise ProfilerError(f"{source}: the pattern matches no file")
        return {"": [_file_part(p, fmt) for p in paths]}
    path = Path(source)
    if not path.exists():
        raise ProfilerError(f"{path}: no such file or directory")
    if path.is_file():
        return {"": [_file_part(path, fmt)]}
    if not path.is_dir():  # opening a FIFO would wait for a writer
        raise ProfilerError(f"{path}: is {_node_kind(path)}, not a file or a directory")
    if fmt in (None, "hf") and hf.is_dataset_dict_dir(path):
        return {name: _hf_parts(d) for name, d in hf.dict_splits(path).items()}
    if fmt in (None, "hf") and hf.is_dataset_dir(path):
        return {"": _hf_parts(path)}
    if fmt == "hf":
        raise ProfilerError(f"{path}: not a Hugging Face save_to_disk directory "
                            "(no state.json or dataset_dict.json)")
    suffixes = tuple(x for f in FORMATS.values() for x in f.suffixes)
    files = _once(p for p in path.rglob("*") if p.is_file() and p.name.endswith(suffixes))
    if not files:
        raise ProfilerError(f"{path}: no {_titles()} files in this directory")
    return {"": [_file_part(p, fmt) for p in files]}


def _once(paths: Iterable[Path]) -> list[Path]:
    """Sorted, each file once (by device and inode: symlinked directories, or a link loop
    that a ``**`` glob goes round, would list one shard many times)."""
    seen: dict[tuple[int, int], Path] = {}
    for p in sorted(paths):
        st = p.stat()
        seen.setdefault((st.st_dev, st.st_ino), p)
    return sorted(seen.values())


def _node_kind(path: Path) -> str:
    mode = path.stat().st_mode
    return ("a FIFO" if stat.S_ISFIFO(mode) else "a character device" if stat.S_ISCHR(mode)
            else "a block device" if stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode)
            else "no regular file")


def _hf_parts(path: Path) -> list[Part]:
    return [ipc.STREAM_FORMAT.part(p) for p in hf.dataset_shards(path)]


def _file_part(path: Path, fmt: str | None) -> Part:
    if fmt == "hf":
        raise ProfilerError(f"{path}: --format hf needs a save_to_disk directory")
    return (FORMATS[fmt] if fmt else sniff(path)).part(path)
