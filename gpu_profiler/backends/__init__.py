"""A small typed registry of histogram backends.

Each backend module defines ``probe() -> str | None`` (None when usable here, else the
reason it is not) and a ``Backend`` subclass named in :data:`_MODULES`. Modules are imported
only when probed, so heavy or optional dependencies stay lazy.
"""

from __future__ import annotations

import importlib
from functools import cache

from gpu_profiler.backends.base import Backend
from gpu_profiler.errors import ProfilerError

__all__ = ["Backend", "available_backends", "get_backend", "BACKEND_NAMES"]

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


def get_backend(name: str = "auto", **options: object) -> Backend:
    """Instantiate a backend by name; ``auto`` takes the first usable one (cuda, numba, numpy).

    Raises:
        ProfilerError: unknown name, or the named backend is unusable here (with the reason).
    """
    if name == "auto":
        name = next(n for n in _MODULES if _probe(n) is None)
        if name != "cuda":
            options = {}
    if name not in _MODULES:
        raise ProfilerError(
            f"unknown backend {name!r}; choose one of: {', '.join(BACKEND_NAMES)}")
    reason = _probe(name)
    if reason is not None:
        raise ProfilerError(f"backend {name!r} is not available: {reason}")
    module, cls = _MODULES[name]
    return getattr(importlib.import_module(module), cls)(**options)
