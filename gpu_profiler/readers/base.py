"""The reader interface: a `Part` describes one shard (or in-memory object), a `Reading`
says how one scan reads every part (decided once, by the engine), and a `ShardFormat`
registers a file format (`gpu_profiler.readers.FORMATS`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import pyarrow as pa

from gpu_profiler.chunk import Chunk
from gpu_profiler.readers.arrow import LengthSpec
from gpu_profiler.runs import Run


@dataclass(frozen=True)
class Reading:
    """How every part of one scan is read.

    Attributes:
        spec: the length source (a column, or a list column's offsets).
        light: the scan is small: take the readers that start fastest (pyarrow's, for dense
            IPC files).
        segmented: hand record batches over where they were read (`Chunk.segments`): the
            backend histograms them in place.
        gpu_parquet: decode Parquet on the GPU (the cuda backend, with cudf installed).
        ipc_reader: ``selective`` or ``pyarrow`` forces that IPC reader; None lets each file
            take its best one.
        ordered: every part yields its samples in row order, each one read (no `Run` from
            statistics): what a per-sample array (`gpu_profiler.lengths`) needs.
    """

    spec: LengthSpec
    light: bool = False
    segmented: bool = False
    gpu_parquet: bool = False
    ipc_reader: str | None = None
    ordered: bool = False


class Part(Protocol):
    """One shard (file) or in-memory object of a split.

    Attributes:
        label: names the part in errors and progress.
        nbytes: size on disk or in memory, for progress and the light-scan rule.
        on_device: the data is in GPU memory (the cuda backend reads it in place).
        read_ahead: reading it in a background thread, ahead of the backend, pays off.
    """

    @property
    def label(self) -> str: ...

    @property
    def nbytes(self) -> int: ...

    @property
    def on_device(self) -> bool: ...

    @property
    def read_ahead(self) -> bool: ...

    def schema(self) -> pa.Schema: ...

    def chunks(self, reading: Reading) -> Iterator[Chunk | Run]:
        """The length source in order; a `Run` stands for samples whose lengths the
        metadata already proves (Parquet statistics), so they are counted, not decoded."""
        ...


@dataclass(frozen=True)
class FileShard:
    """The part of a `Part` every shard on disk shares: its path names and sizes it."""

    path: Path

    @property
    def label(self) -> str:
        return str(self.path)

    @property
    def nbytes(self) -> int:
        return self.path.stat().st_size


@dataclass(frozen=True)
class ShardFormat:
    """A file format a shard may have (one entry of `gpu_profiler.readers.FORMATS`).

    Attributes:
        name: the ``--format`` value.
        title: what errors call it ("Parquet", "Arrow IPC").
        suffixes: file name endings a directory walk picks up.
        sniff: whether a file with these first 16 bytes (and this path) has the format.
        part: the `Part` of such a file.
    """

    name: str
    title: str
    suffixes: tuple[str, ...]
    sniff: Callable[[bytes, Path], bool]
    part: Callable[[Path], Part]
