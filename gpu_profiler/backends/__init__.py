"""A small typed registry of histogram backends.

Each backend module defines ``probe() -> str | None`` (None when usable here, else the
reason it is not) and a ``Backend`` subclass named in :data:`_MODULES`. Modules are imported
only when probed, so heavy or optional dependencies stay lazy.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from functools import cache
from typing import Any

from gpu_profiler.backends.base import Backend
from gpu_profiler.backends.options import CpuOptions, CudaOptions, Options, coerce, for_backend
from gpu_profiler.errors import ProfilerError

__all__ = ["Backend", "CpuOptions", "CudaOptions", "available_backends", "get_backend",
           "BACKEND_NAMES"]

#: name -> (module, class), in ``auto`` preference order.
_MODULES: dict[str, tuple[str, str]] = {
    "cuda": ("gpu_profiler.backends.cuda_backend", "CudaBackend"),
    "numba": ("gpu_profiler.backends.numba_backend", "NumbaBackend"),
    "numpy": ("gpu_profiler.backends.numpy_backend", "NumpyBackend"),
}
BACKEND_NAMES = ("auto", *_MODULES)


@cache
def _probe(name: str) -> str | None:
    module, _ = _MODULES[name]
    try:
        mod = importlib.import_module(module)
    except ImportError as exc:
        return f"cannot import {exc.name or module}: {exc}"
    probe = getattr(mod, "probe", None)
    return probe() if probe else None


def available_backends() -> dict[str, str | None]:
    """Every backend name mapped to None (usable here) or the reason it is not."""
    return {name: _probe(name) for name in _MODULES}


def get_backend(name: str = "auto", options: Options | Mapping[str, Any] | None = None,
                **kwargs: Any) -> Backend:
    """Instantiate a backend by name with its typed options (`CpuOptions` for numba,
    `CudaOptions` for cuda; a dict or keyword arguments naming their fields also do).
    ``auto`` takes the first usable one (cuda, numba, numpy), or the one the options are for.

    Raises:
        ProfilerError: unknown name; the named backend is unusable here (with the reason);
            options the backend cannot use (never silently dropped).
    """
    if kwargs:
        if options is not None and not isinstance(options, Mapping):
            raise ProfilerError("give backend options as one value or as keywords, not both")
        options = {**(options or {}), **kwargs}
    opts = coerce(options)
    if name == "auto":
        name = "cuda" if isinstance(opts, CudaOptions) else "numba" if isinstance(
            opts, CpuOptions) else next(n for n in _MODULES if _probe(n) is None)
    if name not in _MODULES:
        raise ProfilerError(
            f"unknown backend {name!r}; choose one of: {', '.join(BACKEND_NAMES)}")
    reason = _probe(name)
    if reason is not None:
        why = f" (asked for by {type(opts).__name__})" if opts is not None else ""
        raise ProfilerError(f"backend {name!r} is not available{why}: {reason}")
    module, cls = _MODULES[name]
    return getattr(importlib.import_module(module), cls).from_options(for_backend(name, opts))
