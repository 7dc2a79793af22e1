"""gpu-profiler: exact length histograms of LLM training corpora, and every bucket, batch,
padding, packing and schedule statistic derived from them."""

from __future__ import annotations

import importlib as _importlib
import sys as _sys
import types as _types
from typing import TYPE_CHECKING as _TYPE_CHECKING
from typing import Any as _Any

#: Public name -> defining module, imported on first use (PEP 562): `import gpu_profiler`
#: and `gpu-profiler --help` stay instant; numba, pyarrow and the readers load only when
#: something needs them.
_EXPORTS = {
    "Suggestion": "gpu_profiler.analysis.bounds",
    "suggest_bounds": "gpu_profiler.analysis.bounds",
    "BucketRow": "gpu_profiler.analysis.buckets",
    "BucketTable": "gpu_profiler.analysis.buckets",
    "bucket_table": "gpu_profiler.analysis.buckets",
    "PolicyResult": "gpu_profiler.analysis.policies",
    "evaluate_policies": "gpu_profiler.analysis.policies",
    "evaluate_policy": "gpu_profiler.analysis.policies",
    "ScheduleResult": "gpu_profiler.analysis.schedule",
    "batch_order": "gpu_profiler.analysis.schedule",
    "simulate_schedule": "gpu_profiler.analysis.schedule",
    "ProfileResult": "gpu_profiler.api",
    "histogram": "gpu_profiler.api",
    "profile": "gpu_profiler.api",
    "blend": "gpu_profiler.api",
    "Blend": "gpu_profiler.analysis.blend",
    "BlendSpec": "gpu_profiler.analysis.blend",
    "parse_blend": "gpu_profiler.analysis.blend",
    "CpuOptions": "gpu_profiler.backends.options",
    "CudaOptions": "gpu_profiler.backends.options",
    "available_backends": "gpu_profiler.backends",
    "get_backend": "gpu_profiler.backends",
    "ProfilerError": "gpu_profiler.errors",
    "LengthHistogram": "gpu_profiler.histogram",
    "merge": "gpu_profiler.histogram",
    "BucketParams": "gpu_profiler.params",
    "CostModel": "gpu_profiler.cost",
    "Source": "gpu_profiler.request",
    "Execution": "gpu_profiler.request",
    "Sharding": "gpu_profiler.request",
    "lengths": "gpu_profiler.lengths",
    "BucketBatchSampler": "gpu_profiler.sampler",
    "load_plan": "gpu_profiler.plan_file",
    "interleave": "gpu_profiler.analysis.interleave",
    "DiagnoseResult": "gpu_profiler.analysis.diagnose",
    "diagnose": "gpu_profiler.analysis.diagnose",
    "Shape": "gpu_profiler.shapes",
    "shape_of": "gpu_profiler.shapes",
}

if _TYPE_CHECKING:
    from gpu_profiler.analysis.blend import Blend, BlendSpec, parse_blend
    from gpu_profiler.analysis.bounds import Suggestion, suggest_bounds
    from gpu_profiler.analysis.buckets import BucketRow, BucketTable, bucket_table
    from gpu_profiler.analysis.diagnose import DiagnoseResult, diagnose
    from gpu_profiler.analysis.interleave import interleave
    from gpu_profiler.analysis.policies import PolicyResult, evaluate_policies, evaluate_policy
    from gpu_profiler.analysis.schedule import ScheduleResult, batch_order, simulate_schedule
    from gpu_profiler.api import ProfileResult, blend, histogram, profile
    from gpu_profiler.backends import available_backends, get_backend
    from gpu_profiler.backends.options import CpuOptions, CudaOptions
    from gpu_profiler.cost import CostModel
    from gpu_profiler.errors import ProfilerError
    from gpu_profiler.histogram import LengthHistogram, merge
    from gpu_profiler.lengths import lengths
    from gpu_profiler.params import BucketParams
    from gpu_profiler.plan_file import load_plan
    from gpu_profiler.request import Execution, Sharding, Source
    from gpu_profiler.sampler import BucketBatchSampler
    from gpu_profiler.shapes import Shape, shape_of


def __getattr__(name: str) -> _Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'gpu_profiler' has no attribute {name!r}")
    value = getattr(_importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})


class _Package(_types.ModuleType):
    """Importing the ``gpu_profiler.histogram`` submodule must not rebind the public
    ``histogram`` function (the import system sets submodules as package attributes)."""

    def __setattr__(self, name: str, value: _Any) -> None:
        if name in _EXPORTS and isinstance(value, _types.ModuleType):
            return
        super().__setattr__(name, value)


_sys.modules[__name__].__class__ = _Package


__version__ = "0.1.0"

__all__ = [
    "BucketBatchSampler",
    "load_plan",
    "BucketParams",
    "CostModel",
    "CpuOptions",
    "CudaOptions",
    "Execution",
    "Sharding",
    "Source",
    "Blend",
    "BlendSpec",
    "BucketRow",
    "BucketTable",
    "DiagnoseResult",
    "LengthHistogram",
    "PolicyResult",
    "ProfileResult",
    "ProfilerError",
    "ScheduleResult",
    "Suggestion",
    "available_backends",
    "batch_order",
    "blend",
    "parse_blend",
    "bucket_table",
    "diagnose",
    "evaluate_policies",
    "evaluate_policy",
    "get_backend",
    "histogram",
    "interleave",
    "lengths",
    "merge",
    "profile",
    "simulate_schedule",
    "Shape",
    "shape_of",
    "suggest_bounds",
    "__version__",
]
