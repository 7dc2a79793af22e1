"""Runs: samples whose lengths a reader knows without decoding each one (a Parquet row group
whose statistics say min == max; a Parquet dictionary's entries with the rows that index
them), counted in bulk instead of being decoded and histogrammed."""

from __future__ import annotations

from collections import Counter

import numpy as np

from gpu_profiler.frozen import frozen
from gpu_profiler.histogram import LengthHistogram

#: Lengths below this are added up in a dense array (`RunTally.dense`), the rest one by one.
DENSE = 1 << 22


@frozen
class Run:
    """``count`` samples that all have length ``value``, plus ``nulls`` null samples."""

    value: int
    count: int
    nulls: int = 0

    @property
    def samples(self) -> int:
        """Entries the run stands for (valid, invalid and null)."""
        return self.count + self.nulls


@frozen
class Runs:
    """Many runs at once: ``counts[i]`` samples of length ``values[i]`` (int64 arrays),
    plus ``nulls`` null samples."""

    values: np.ndarray
    counts: np.ndarray
    nulls: int = 0

    @property
    def samples(self) -> int:
        return int(self.counts.sum()) + self.nulls


class RunTally:
    """What a task knows without a backend's counting of its chunks: its `Run` s added up
    by value (memory grows with distinct values, not with runs), and the histograms a
    backend counted as runs of small parts were read (`Backend.count`). A backend turns it
    into one histogram (`Backend.runs`).

    Attributes:
        values: samples per length value (those of `Runs` from 0 to `DENSE` are in
            ``dense``).
        dense: samples per length ``0..dense.size - 1``, from `Runs`.
        nulls: null samples.
        counted: the counted histograms.
    """

    def __init__(self) -> None:
        self.values: Counter[int] = Counter()
        self.dense = np.zeros(0, np.int64)
        self.nulls = 0
        self.counted: list[LengthHistogram] = []

    def add(self, run: Run | Runs) -> None:
        """Count one run, or many."""
        if isinstance(run, Runs):
            values, counts = run.values, run.counts
            if values.size and not (0 <= values.min() and values.max() < DENSE):
                near = (values >= 0) & (values < DENSE)
                for v, n in zip(values[~near].tolist(), counts[~near].tolist(), strict=True):
                    self.values[v] += n
                values, counts = values[near], counts[near]
            if values.size:
                top = int(values.max()) + 1
                if top > self.dense.size:
                    self.dense = np.concatenate([self.dense, np.zeros(
                        min(max(top, 2 * self.dense.size), DENSE) - self.dense.size,
                        np.int64)])
                np.add.at(self.dense, values, counts)
        elif run.count:
            self.values[run.value] += run.count
        self.nulls += run.nulls

    def __bool__(self) -> bool:
        return bool(self.values) or bool(self.dense.any()) or self.nulls > 0 \
            or bool(self.counted)
