"""One scan request, in three typed, frozen parts that every entry point takes (the Python
API, the CLI, the sampler, `gpu_profiler.lengths`): `Source` (what to read), `Execution`
(how to count it) and `Sharding` (where, and how a long scan survives). Each option is
declared once, here; a function that also takes them as flat keywords routes those by
name (`gather`)."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import Any

from gpu_profiler.errors import ProfilerError
from gpu_profiler.frozen import frozen
from gpu_profiler.readers.base import SourceOptions


@frozen
class Source:
    """What to read, and which of its numbers are the lengths.

    Attributes:
        data: a path (HF save_to_disk dir, Parquet/IPC/JSONL file, Megatron-LM ``.idx``
            or prefix, token stream ``.bin``/``.npy``, directory or glob of shards, a
            histogram saved with ``--save-hist``), a list of paths (read together, each
            file once), or an in-memory numpy array, pyarrow
            Array/Table, ``datasets.Dataset`` or `LengthHistogram`.
        column: the integer length column (default: ``length``, else the only integer
            column).
        offsets_of: derive lengths from this list column's offsets instead.
        format: force a format (``hf``, ``parquet``, ``ipc``, ``ipc-stream``, ``jsonl``,
            ``megatron``, ``tokens``) instead of detecting it.
        split: one split of a DatasetDict.
        unit, eot, eot_position, token_dtype, trust_statistics: the options of the
            formats that take them (see `SourceOptions`); one a format does not take is
            an error that says which formats take it.
    """

    data: Any
    column: str | None = None
    offsets_of: str | None = None
    format: str | None = None
    split: str | None = None
    unit: str | None = None
    eot: int | None = None
    eot_position: str | None = None
    token_dtype: str | None = None
    trust_statistics: bool = False

    def __post_init__(self) -> None:
        self.options  # noqa: B018  (checks the format options before anything is read)

    @property
    def options(self) -> SourceOptions:
        """The options of the formats that take them, as the readers receive them."""
        return SourceOptions(self.unit, self.eot, self.eot_position, self.token_dtype,
                             self.trust_statistics)

    def given(self) -> list[str]:
        """The names of the options given (a saved histogram takes none of them)."""
        return [*(n for n in ("column", "offsets_of", "format", "split")
                  if getattr(self, n) is not None), *self.options.given()]

    @property
    def label(self) -> str:
        """How the source is named in results and errors."""
        data = self.data
        if isinstance(data, (list, tuple)) and data and all(
                isinstance(d, str) or hasattr(d, "__fspath__") for d in data):
            return ", ".join(map(str, data))
        return str(data) if isinstance(data, (str, bytes)) or hasattr(data, "__fspath__") \
            else f"<{type(data).__name__}>"


@frozen
class Execution:
    """How the lengths are counted.

    Attributes:
        backend: ``auto`` (a small scan on the CPU's native kernels, else the first usable
            of cuda, numba, numpy), ``numpy``, ``numba`` or ``cuda``.
        backend_options: the backend's typed options, `CpuOptions` (numba) or
            `CudaOptions` (cuda), or a dict of their fields (see
            `gpu_profiler.backends.options`).
        cap: bins ``0..cap``; lengths above it are summarized (count, tokens, min, max).
            None bins up to the longest length seen, at most
            `gpu_profiler.histogram.MAX_AUTO_CAP`.
        progress: draw a progress bar on a terminal (never elsewhere).
    """

    backend: str = "auto"
    backend_options: Any = None
    cap: int | None = None
    progress: bool = False

    def __post_init__(self) -> None:
        cap = self.cap
        if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 0):
            raise ProfilerError(f"cap must be a non-negative integer, got {cap!r}")


@frozen
class Sharding:
    """Where the scan runs, shard by shard; all unset: in this process, at once.

    Attributes:
        client: a ``distributed.Client``: tasks (groups of shards) run on its cluster.
        cache_dir: keep each finished shard's histogram here, and reuse the ones kept, so
            that a scan killed and rerun rescans only what it had not finished.
        part: ``"I/N"``: only slice I of N of the shard list (`gpu_profiler.slices`).
        skip_bad_shards: a shard that cannot be read is left out and named
            (``report.skipped``) rather than stopping the scan.
    """

    client: Any = None
    cache_dir: str | Path | None = None
    part: str | None = None
    skip_bad_shards: bool = False

    def __post_init__(self) -> None:
        if self.part is not None:  # a bad --part fails before the source is opened
            from gpu_profiler import slices

            slices.parse_part(self.part)

    @property
    def local(self) -> bool:
        """Whether none is set: the scan runs in this process, every shard at once."""
        return self == LOCAL

    def given(self) -> list[str]:
        """The names of the options given (a saved histogram takes none but ``client``)."""
        return [f.name for f in fields(self)
                if f.name != "client" and getattr(self, f.name) not in (None, False)]


def gather(source: Any, options: dict[str, Any], execution: Execution | None = None,
           sharding: Sharding | None = None, takes: tuple[type, ...] = (Execution, Sharding)
           ) -> tuple[Source, Execution, Sharding]:
    """The request of a call that takes ``source`` (a `Source`, or its ``data``) and its
    options as flat keywords (``options``: each a field of `Source` or of a class of
    ``takes``) or as the typed objects. An option given both ways, or not taken, is a
    `TypeError`."""
    names = {cls: {f.name for f in fields(cls)} - {"data"} for cls in (Source, *takes)}
    unknown = set(options) - set().union(*names.values())
    if unknown:
        valid = ", ".join(sorted(set().union(*names.values())))
        raise TypeError(f"unexpected keyword argument(s) {', '.join(sorted(unknown))}; "
                        f"the options are: {valid}")

    def made(cls: type, given: Any) -> Any:
        mine = {k: v for k, v in options.items() if k in names.get(cls, ())}
        if given is None:
            return cls(**mine)
        if mine:
            raise TypeError(f"{', '.join(sorted(mine))}: given as a keyword and in the "
                            f"{cls.__name__} object too")
        return given

    src = made(Source, source) if isinstance(source, Source) else Source(
        source, **{k: v for k, v in options.items() if k in names[Source]})
    return src, made(Execution, execution), made(Sharding, sharding)


#: The defaults: count with ``auto``, no cap, quietly; in this process, every shard at once.
DEFAULT = Execution()
LOCAL = Sharding()
