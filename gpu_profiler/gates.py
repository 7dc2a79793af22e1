"""CI gates (``--fail-if EXPR``): conditions on a result's JSON numbers that fail the run.

An expression is ``NAME OP NUMBER`` (``p99>8192``, ``padding_pct >= 25``), ``OP`` one of
``> >= < <= == !=``. ``NAME`` is a key of the command's ``-f json`` output: a top-level
number, or a percentile (``p50``... under ``percentiles``). Each command declares the names
it offers, so a typo is a usage error before anything is scanned.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from gpu_profiler.analysis.compare import SHIFTS
from gpu_profiler.errors import ProfilerError
from gpu_profiler.frozen import frozen
from gpu_profiler.histogram import PERCENTILES

OPERATORS: dict[str, Callable[[float, float], bool]] = {
    ">=": operator.ge, "<=": operator.le, "==": operator.eq, "!=": operator.ne,
    ">": operator.gt, "<": operator.lt}
_EXPR = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_.]*)\s*(>=|<=|==|!=|>|<)\s*"
                   r"([-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)\s*")


@frozen
class Gate:
    """One condition: the run fails when ``metric op value`` holds."""

    metric: str
    op: str
    value: float

    def __str__(self) -> str:
        return f"{self.metric}{self.op}{self.value:g}"


def parse_gates(exprs: Iterable[str], names: Sequence[str]) -> list[Gate]:
    """The gates of ``exprs``; a malformed one, or one naming a metric not in ``names``, is
    a `ProfilerError` that lists the valid names."""
    gates = []
    for expr in exprs:
        m = _EXPR.fullmatch(expr)
        if m is None or m.group(1) not in names:
            what = "malformed" if m is None else f"unknown metric {m.group(1)!r} in"
            raise ProfilerError(
                f"--fail-if {expr!r}: {what} condition; write NAME OP NUMBER with OP one of "
                f"{' '.join(OPERATORS)} and NAME one of {', '.join(names)}")
        gates.append(Gate(m.group(1), m.group(2), float(m.group(3))))
    return gates


def metrics(d: Mapping[str, Any]) -> dict[str, float]:
    """The gateable numbers of a result's JSON dict: its top-level numbers (a verdict,
    true or false, as 1 or 0) and its percentiles (None where a value is unknown)."""
    out = {k: int(v) if isinstance(v, bool) else v for k, v in d.items()
           if isinstance(v, (int, float))}
    out.update(d.get("percentiles") or {})
    return out


def failures(gates: Iterable[Gate], values: Mapping[str, Any]) -> list[str]:
    """A line for each gate that holds (the run fails), with the metric's value. A
    metric without a value (an inexact percentile, no samples) fails its gate too: a
    gate must not pass on a number nobody measured."""
    out = []
    for g in gates:
        v = values.get(g.metric)
        if v is None:
            out.append(f"failed: {g} ({g.metric} has no value)")
        elif OPERATORS[g.op](v, g.value):
            out.append(f"failed: {g} ({g.metric} = {v:,.6g})")
    return out


#: The names each command's ``--fail-if`` takes: keys of its ``-f json`` output (README,
#: "CI gates"; tests check that each is there).
METRICS: dict[str, tuple[str, ...]] = {
    "profile": ("max_batch_pct", "padding_pct", "truncated_pct", *PERCENTILES,
                "min_len", "mean_len", "max_len", "total_samples", "total_tokens",
                "clipped_tokens", "truncated_samples", "truncated_tokens", "null_samples",
                "invalid_samples", "unbucketed_samples", "total_est_batches",
                "steps_per_epoch"),
    "schedule": ("longest_run", "max_batch_pct", "window_spread", "min_run",
                 "total_batches", "longest_group_run", "max_group_window_spread"),
    "blend": ("max_epochs", "min_share_ratio", "max_share_ratio", "train_samples", "size",
              "tokens_drawn"),
    "compare": ("ks", "tv", "w1", *(f"{k}_shift" for k in SHIFTS), "max_group_ks",
                "max_group_token_pct_shift"),
    "diagnose": ("banded", "band_r2", "persistence", "band_count", "period", "period_share",
                 "longest_ladder", "ladders", "window_std", "points", "nonfinite",
                 "bucket_r2", "bucket_r2_adjusted", "bucket_length_r2",
                 "bucket_length_r2_adjusted", "length_slope", "debanded_window_std",
                 "predicted_window_std", "longest_run", "max_batch_pct"),
}
