"""Runs: samples whose lengths a reader knows without reading them (a Parquet row group whose
statistics say min == max), counted in bulk instead of being decoded and histogrammed."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from gpu_profiler.histogram import LengthHistogram


@dataclass(frozen=True)
class Run:
    """``count`` samples that all have length ``value``, plus ``nulls`` null samples."""

    value: int
    count: int
    nulls: int = 0

    @property
    def samples(self) -> int:
        """Entries the run stands for (valid, invalid and null)."""
        return self.count + self.nulls


class RunTally:
    """What a task knows without a backend's counting of its chunks: its `Run` s added up
    by value (memory grows with distinct values, not with runs), and the histograms a
    backend counted as runs of small parts were read (`Backend.count`). A backend turns it
    into one histogram (`Backend.runs`).

    Attributes:
        values: samples per length value.
        nulls: null samples.
        counted: the counted histograms.
    """

    def __init__(self) -> None:
        self.values: Counter[int] = Counter()
        self.nulls = 0
        self.counted: list[LengthHistogram] = []

    def add(self, run: Run) -> None:
        """Count one run."""
        if run.count:
            self.values[run.value] += run.count
        self.nulls += run.nulls

    def __bool__(self) -> bool:
        return bool(self.values) or self.nulls > 0 or bool(self.counted)
