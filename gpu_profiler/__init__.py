"""gpu-profiler: exact length histograms of LLM training corpora, and every bucket, batch,
padding, packing and schedule statistic derived from them."""

from __future__ import annotations

import os as _os

# Kernels are cached on disk; a per-user cache works for read-only installs too. Must be
# set before numba is first imported (numba itself is imported lazily).
_os.environ.setdefault(
    "NUMBA_CACHE_DIR",
    _os.path.join(_os.environ.get("XDG_CACHE_HOME") or _os.path.expanduser("~/.cache"),
                  "gpu-profiler", "numba"))

from gpu_profiler.analysis.buckets import BucketRow, BucketTable, bucket_table  # noqa: E402
from gpu_profiler.api import ProfileResult, histogram, profile  # noqa: E402
from gpu_profiler.backends import available_backends, get_backend  # noqa: E402
from gpu_profiler.errors import ProfilerError  # noqa: E402
from gpu_profiler.histogram import LengthHistogram, merge  # noqa: E402
from gpu_profiler.params import BucketParams  # noqa: E402

__version__ = "0.1.0"

__all__ = [
    "BucketParams",
    "BucketRow",
    "BucketTable",
    "LengthHistogram",
    "ProfileResult",
    "ProfilerError",
    "available_backends",
    "bucket_table",
    "get_backend",
    "histogram",
    "merge",
    "profile",
    "__version__",
]
