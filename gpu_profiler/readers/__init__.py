"""Readers: turn a user's source into named splits of parts, each yielding `Chunk`s of the
length column. One module per format (``hf``, ``ipc``, ``parquet``, ``memory``)."""

from __future__ import annotations

import glob
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import pyarrow as pa

from gpu_profiler.chunk import Chunk
from gpu_profiler.errors import ProfilerError
from gpu_profiler.readers import hf, ipc, parquet
from gpu_profiler.readers.arrow import LengthSpec, resolve_spec
from gpu_profiler.runs import Run

__all__ = ["FORMATS", "LengthSpec", "Part", "FilePart", "open_source", "resolve_spec"]

#: ``--format`` values. ``hf`` is a save_to_disk dir; the rest name a shard format.
FORMATS = ("hf", "parquet", "ipc", "ipc-stream")
_SHARD_SUFFIXES = (".parquet", ".pq", ".arrow", ".feather", ".ipc", ".arrows")


class Part(Protocol):
    """One shard (file) or in-memory object of a split. Optional flags: ``on_device`` (the
    data is in GPU memory: cuda backend only) and ``read_ahead`` (reading it in a
    background thread, ahead of the backend, pays off)."""

    @property
    def label(self) -> str:
        """Names the part in errors and progress."""
        ...

    @property
    def nbytes(self) -> int:
        """Size on disk or in memory, for progress."""
        ...

    def schema(self) -> pa.Schema: ...

    def chunks(self, spec: LengthSpec, light: bool = False,
               segmented: bool = False) -> Iterator[Chunk | Run]:
        """The length source in order; a `Run` stands for samples whose lengths the
        metadata already proves (Parquet statistics), so they are counted, not decoded.
        ``light``: the whole scan is small, so prefer the reader that starts fastest.
        ``segmented``: the backend takes segmented chunks (`Chunk.segments`)."""
        ...


@dataclass(frozen=True)
class FilePart:
    """A shard on disk in one of the shard formats (``parquet``, ``ipc``, ``ipc-stream``)."""

    path: Path
    format: str

    @property
    def label(self) -> str:
        return str(self.path)

    @property
    def nbytes(self) -> int:
        return self.path.stat().st_size

    @property
    def read_ahead(self) -> bool:
        """IPC readers do their work in the scan's thread; Parquet decodes ahead itself."""
        return self.format != "parquet"

    def schema(self) -> pa.Schema:
        if self.format == "parquet":
            return parquet.schema(self.path)
        return ipc.schema(self.path, "file" if self.format == "ipc" else "stream")

    def chunks(self, spec: LengthSpec, light: bool = False,
               segmented: bool = False) -> Iterator[Chunk | Run]:
        if self.format == "parquet":
            return parquet.chunks(self.path, spec)
        return ipc.chunks(self.path, "file" if self.format == "ipc" else "stream", spec,
                          light=light, segmented=segmented)


def sniff(path: Path) -> str:
    """Shard format from the file's magic bytes (extensions can lie)."""
    try:
        with open(path, "rb") as f:
            head = f.read(8)
    except OSError as exc:
        raise ProfilerError(f"{path}: cannot read ({exc.strerror})") from None
    if head.startswith(parquet.MAGIC):
        return "parquet"
    if head.startswith(ipc.FILE_MAGIC):
        return "ipc"
    if head[:4] == b"\xff\xff\xff\xff" or (len(head) >= 4 and head[:4] != b"\x00\x00\x00\x00"
                                           and path.suffix in (".arrow", ".arrows", ".ipc")):
        return "ipc-stream"
    raise ProfilerError(f"{path}: not a Parquet or Arrow IPC file (unrecognized magic bytes)")


def open_source(source: Any, fmt: str | None = None,
                split: str | None = None) -> dict[str, list[Part]]:
    """Resolve a source into ``{split_name: [parts]}``; unsplit sources use the name ``""``.

    Args:
        source: a path (file, directory, glob), or an in-memory object (numpy array, pyarrow
            Array/ChunkedArray/Table/RecordBatch, ``datasets.Dataset``/``DatasetDict``).
        fmt: force a format (one of :data:`FORMATS`) instead of detecting it.
        split: keep only this split of a DatasetDict.
    """
    if fmt is not None and fmt not in FORMATS:
        raise ProfilerError(f"unknown format {fmt!r}; choose one of: {', '.join(FORMATS)}")
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
        paths = sorted(Path(p) for p in glob.glob(source, recursive=True) if Path(p).is_file())
        if not paths:
            raise ProfilerError(f"{source}: the pattern matches no file")
        return {"": [_file_part(p, fmt) for p in paths]}
    path = Path(source)
    if not path.exists():
        raise ProfilerError(f"{path}: no such file or directory")
    if path.is_file():
        return {"": [_file_part(path, fmt)]}
    if fmt in (None, "hf") and hf.is_dataset_dict_dir(path):
        return {name: _hf_parts(d) for name, d in hf.dict_splits(path).items()}
    if fmt in (None, "hf") and hf.is_dataset_dir(path):
        return {"": _hf_parts(path)}
    if fmt == "hf":
        raise ProfilerError(f"{path}: not a Hugging Face save_to_disk directory "
                            "(no state.json or dataset_dict.json)")
    files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in _SHARD_SUFFIXES)
    if not files:
        raise ProfilerError(f"{path}: no Parquet or Arrow files in this directory")
    return {"": [_file_part(p, fmt) for p in files]}


def _hf_parts(path: Path) -> list[Part]:
    return [FilePart(p, "ipc-stream") for p in hf.dataset_shards(path)]


def _file_part(path: Path, fmt: str | None) -> FilePart:
    if fmt == "hf":
        raise ProfilerError(f"{path}: --format hf needs a save_to_disk directory")
    return FilePart(path, fmt or sniff(path))
