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

from gpu_profiler.analysis.bounds import Suggestion, suggest_bounds  # noqa: E402
from gpu_profiler.analysis.buckets import BucketRow, BucketTable, bucket_table  # noqa: E402
from gpu_profiler.analysis.policies import (  # noqa: E402
    PolicyResult,
    evaluate_policies,
    evaluate_policy,
)
from gpu_profiler.analysis.schedule import (  # noqa: E402
    ScheduleResult,
    batch_order,
    simulate_schedule,
)
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
    "PolicyResult",
    "ProfileResult",
    "ProfilerError",
    "ScheduleResult",
    "Suggestion",
    "available_backends",
    "batch_order",
    "bucket_table",
    "evaluate_policies",
    "evaluate_policy",
    "get_backend",
    "histogram",
    "merge",
    "profile",
    "simulate_schedule",
    "suggest_bounds",
    "__version__",
]
