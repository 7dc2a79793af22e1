"""Typed, validated options per backend (frozen dataclasses, the nvmath-python way): one
name means one thing (``threads`` is CPU threads; a CUDA block's threads are
``threads_per_block``), and an option the chosen backend cannot use is an error that says
why, never silently dropped."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from gpu_profiler.errors import ProfilerError
from gpu_profiler.frozen import frozen


def _positive(name: str, value: Any, top: int | None = None, *, none: bool = True) -> None:
    if value is None and none:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1 or (
            top is not None and value > top):
        span = f"from 1 to {top}" if top else "positive"
        raise ProfilerError(f"{name} must be an integer {span}, got {value!r}")


@frozen
class CpuOptions:
    """The numba backend's options.

    Attributes:
        threads: CPU threads (blocks per chunk), 1..1024; default one per core.
    """

    threads: int | None = None

    def __post_init__(self) -> None:
        _positive("threads", self.threads, 1024)


@frozen
class CudaOptions:
    """The cuda backend's options.

    Attributes:
        devices: GPU ids; chunks are dealt across them and the histograms summed.
        threads_per_block: CUDA threads per block (default: the kernels' own; 32 under
            the simulator).
        blocks: blocks per launch at most (default: fill the GPU at full occupancy).
        streams: CUDA streams (and pinned staging buffers) per GPU, at least 2.
        chunk_bytes: bytes staged per piece, at least 64.
        shared_mem_budget: shared memory a block may use (smaller: the global-memory kernel).
        stage_threads: host threads staging pieces into pinned memory.
    """

    devices: tuple[int, ...] = (0,)
    threads_per_block: int | None = None
    blocks: int | None = None
    streams: int = 3
    chunk_bytes: int = 64 << 20
    shared_mem_budget: int | None = None
    stage_threads: int | None = None

    def __post_init__(self) -> None:
        ids = tuple(self.devices) if not isinstance(self.devices, int) else (self.devices,)
        if not ids or any(isinstance(d, bool) or not isinstance(d, int) or d < 0 for d in ids):
            raise ProfilerError(f"devices must be GPU ids >= 0, got {self.devices!r}")
        object.__setattr__(self, "devices", ids)
        _positive("threads_per_block", self.threads_per_block, 1024)
        _positive("blocks", self.blocks)
        _positive("stage_threads", self.stage_threads, 256)
        _positive("shared_mem_budget", self.shared_mem_budget)
        _positive("streams", self.streams, none=False)
        _positive("chunk_bytes", self.chunk_bytes, none=False)
        if self.streams < 2:
            raise ProfilerError(f"streams must be at least 2, got {self.streams}")
        if self.chunk_bytes < 64:
            raise ProfilerError(f"chunk_bytes must be at least 64, got {self.chunk_bytes}")


#: The options type of each backend that takes any.
OPTIONS: dict[str, type] = {"numba": CpuOptions, "cuda": CudaOptions}
Options = CpuOptions | CudaOptions


def coerce(options: Options | Mapping[str, Any] | None) -> Options | None:
    """Typed options from a typed value or a plain mapping (``backend_options=`` in the API):
    its keys name the fields of exactly one options type, or it is an error naming them."""
    if options is None or isinstance(options, (CpuOptions, CudaOptions)):
        return options
    if not isinstance(options, Mapping):
        raise ProfilerError(f"backend options must be CpuOptions, CudaOptions or a dict, got "
                            f"{type(options).__name__}")
    if not options:
        return None
    keys = set(options)
    for cls in (CpuOptions, CudaOptions):
        names = {f.name for f in fields(cls)}
        if keys <= names:
            return cls(**options)
    valid = "; ".join(f"{cls.__name__}: {', '.join(f.name for f in fields(cls))}"
                      for cls in (CpuOptions, CudaOptions))
    raise ProfilerError(f"unknown backend options {sorted(keys)} (one backend's only; {valid})")


def for_backend(name: str, options: Options | None) -> Options | None:
    """``options`` checked against backend ``name``: a backend takes only its own type."""
    if options is None:
        return None
    want = OPTIONS.get(name)
    if want is None or not isinstance(options, want):
        owner = next(n for n, cls in OPTIONS.items() if isinstance(options, cls))
        raise ProfilerError(f"{type(options).__name__} ({_describe(options)}) are options of "
                            f"the {owner} backend, not of {name!r}")
    return options


def _describe(options: Options) -> str:
    defaults = type(options)()
    changed = [f"{f.name}={getattr(options, f.name)!r}" for f in fields(options)
               if getattr(options, f.name) != getattr(defaults, f.name)]
    return ", ".join(changed) or "defaults"
