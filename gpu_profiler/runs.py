"""Runs: samples whose lengths a reader knows without reading them (a Parquet row group whose
statistics say min == max), counted in bulk instead of being decoded and histogrammed."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from gpu_profiler.histogram import LengthHistogram, Sum, auto_cap


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
    """Adds up runs by value (memory grows with distinct values, not with runs), and the
    histograms a backend counted as a run of small parts was read (`Backend.count`)."""

    def __init__(self) -> None:
        self._counts: Counter[int] = Counter()
        self._nulls = 0
        self._counted: Sum | None = None

    def add(self, run: Run) -> None:
        """Count one run."""
        if run.count:
            self._counts[run.value] += run.count
        self._nulls += run.nulls

    def counted(self, hist: LengthHistogram) -> None:
        """Add the histogram of samples counted as they were read."""
        if self._counted is None:
            self._counted = Sum()
        self._counted.add(hist)

    def __bool__(self) -> bool:
        return bool(self._counts) or self._nulls > 0 or self._counted is not None

    def histogram(self, cap: int | None) -> LengthHistogram:
        """The runs' histogram with bins ``0..cap``, exactly as a backend would count them
        (values read as int64: negative, or uint64 >= 2**63, are invalid); ``cap=None`` bins
        up to the largest value (see `auto_cap`)."""
        values = [v if v < 2**63 else v - 2**64 for v in self._counts]
        valid = [v for v in values if v >= 0]
        if cap is None:
            cap = auto_cap(max(valid, default=0))
        total = Sum(cap)
        for raw, v in zip(self._counts, values, strict=True):
            n = self._counts[raw]
            if v < 0:
                total.invalid += n
            elif v <= cap:
                total.counts[v] += n
            else:
                total.add(LengthHistogram(np.zeros(cap + 1, np.int64), n, n * v, v, v))
        total.nulls += self._nulls
        if self._counted is not None:
            total.add(self._counted.histogram())
        return total.histogram()
