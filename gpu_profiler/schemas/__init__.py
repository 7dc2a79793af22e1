"""JSON Schemas of every ``-f json`` output and of saved histograms, shipped as package
data (``<command>.v1.json``, for the ``gpu-profiler/<command>/v1`` tag each output
carries in its ``schema`` key)."""

from __future__ import annotations

import json
from importlib.resources import files
from typing import Any

#: The outputs with a schema.
NAMES = ("profile", "suggest", "schedule", "plan", "compare", "histogram", "diagnose",
         "blend")


def load(name: str) -> dict[str, Any]:
    """The JSON Schema of ``name`` (one of `NAMES`)."""
    if name not in NAMES:
        raise ValueError(f"no schema {name!r}; choose from {', '.join(NAMES)}")
    return json.loads(files(__name__).joinpath(f"{name}.v1.json").read_text())
