"""The exact length histogram: the one sufficient statistic every report is derived from."""

from __future__ import annotations

import itertools
import json
import os
import re
import stat
from collections.abc import Iterable
from dataclasses import replace
from fractions import Fraction
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from gpu_profiler.errors import ProfilerError
from gpu_profiler.frozen import frozen

#: The tag :meth:`LengthHistogram.save` writes first, by which saved histograms are known.
SCHEMA = "gpu-profiler/histogram/v1"
_SAVED = re.compile(rb'\s*\{\s*"schema"\s*:\s*"gpu-profiler/histogram/v1"'
                    rb'|\{"cap": \d+, "counts": \[')  # the second: untagged, before v1

#: Largest cap sized automatically from the data (2**24 bins: 128 MiB of int64 counts, and
#: half that in int32 rows per CPU thread while counting): a corpus with rare huge lengths
#: keeps bounded memory, its lengths above this summarized as above-cap statistics.
MAX_AUTO_CAP = 1 << 24

#: Largest cap of a histogram read from a file (saved, merge part, cache entry): bins past it
#: are folded into the above-cap statistics when saved (`LengthHistogram.to_dict`), so a
#: file never claims more than 128 MiB of counts.
MAX_CAP = MAX_AUTO_CAP
#: Largest saved histogram file: every bin of `MAX_CAP` written as ``[length, count], ``
#: (at most 33 bytes), and room for a provenance. A larger file is refused unread.
MAX_SAVED_BYTES = 40 * (MAX_CAP + 1) + (1 << 20)
INT64_MAX = (1 << 63) - 1


#: The percentiles every report shows, by their JSON key (``"p99.9"``: the 99.9th).
PERCENTILES = ("p50", "p90", "p95", "p99", "p99.9")


def auto_cap(longest: int) -> int:
    """The cap that bins every length up to ``longest`` (``cap=None``), at most
    `MAX_AUTO_CAP` (longer lengths are summarized above it: their count, sum, shortest
    and longest stay exact, and `LengthHistogram.percentile_range` bounds a percentile
    among them)."""
    return min(max(longest, 0), MAX_AUTO_CAP)


#: The fields of a `LengthHistogram` besides its counts, in order: integers.
SCALARS = ("above_count", "above_tokens", "above_min", "above_max", "null_count",
           "invalid_count")


@frozen(eq=False)
class LengthHistogram:
    """Exact histogram of sample lengths.

    Attributes:
        counts: int64 counts for every length ``0..cap`` (``len(counts) == cap + 1``).
        above_count: number of valid lengths ``> cap``.
        above_tokens: sum of those lengths (int64, wraps only beyond 9.2e18 tokens).
        above_min: the smallest of them (``-1`` when none).
        above_max: the largest of them (``-1`` when none).
        null_count: null entries (missing lengths).
        invalid_count: negative lengths (the column read as int64; uint64 values of 2**63
            and more are therefore invalid too).
    """

    counts: np.ndarray
    above_count: int = 0
    above_tokens: int = 0
    above_min: int = -1
    above_max: int = -1
    null_count: int = 0
    invalid_count: int = 0

    def __post_init__(self) -> None:
        counts = np.ascontiguousarray(self.counts, dtype=np.int64)
        if counts.ndim != 1 or counts.size == 0:
            raise ValueError("counts must be a non-empty 1-D array")
        counts.setflags(write=False)
        object.__setattr__(self, "counts", counts)
        for name in SCALARS:
            object.__setattr__(self, name, int(getattr(self, name)))

    # ---------------------------------------------------------------- construction
    @classmethod
    def empty(cls, cap: int) -> LengthHistogram:
        """An all-zero histogram with bins ``0..cap``."""
        return cls(np.zeros(cap + 1, dtype=np.int64))

    # ---------------------------------------------------------------- derived numbers
    @property
    def cap(self) -> int:
        """Largest length with its own bin."""
        return self.counts.size - 1

    @cached_property
    def present(self) -> tuple[np.ndarray, np.ndarray]:
        """The lengths ``0..cap`` that occur (ascending) and their counts, read-only: what
        `tokens`, `min`, `max`, the percentiles, a lowered cap and the saved form read,
        found once (a histogram binned to millions of lengths is mostly empty bins: each
        pass over them took 3-8 ms; numpy finds the non-zero bytes of a mask 4x faster
        than the non-zero int64s). `valid` sums the bins themselves: one pass, no copy, for
        the per-task histograms a scan counts its progress by."""
        nz = np.flatnonzero(self.counts != 0)
        counts = self.counts[nz]
        nz.setflags(write=False)
        counts.setflags(write=False)
        return nz, counts

    def __getstate__(self) -> dict[str, Any]:
        """The fields alone: `present` is found again where it is read (a histogram sent
        to or from a Dask worker is not made larger by it)."""
        return {k: v for k, v in self.__dict__.items() if k != "present"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Unpickled or deep-copied: the bins read-only again, as every histogram's are."""
        self.__dict__.update(state)
        self.counts.setflags(write=False)

    @property
    def valid(self) -> int:
        """Number of valid (non-null, non-negative) samples."""
        return int(self.counts.sum()) + self.above_count

    @property
    def total(self) -> int:
        """Every entry scanned: valid + null + invalid."""
        return self.valid + self.null_count + self.invalid_count

    @property
    def tokens(self) -> int:
        """Sum of all valid lengths."""
        lengths, counts = self.present
        return int(counts @ lengths) + self.above_tokens

    @property
    def min(self) -> int | None:
        """Smallest valid length, or None when there is none."""
        lengths = self.present[0]
        if lengths.size:
            return int(lengths[0])
        return self.above_min if self.above_count else None

    @property
    def max(self) -> int | None:
        """Largest valid length, or None when there is none."""
        if self.above_count:
            return self.above_max
        lengths = self.present[0]
        return int(lengths[-1]) if lengths.size else None

    @property
    def mean(self) -> float | None:
        """Mean valid length, or None when there is none."""
        return self.tokens / self.valid if self.valid else None

    def percentile_range(self, q: float | str) -> tuple[int, int] | None:
        """Nearest-rank ``q``-th percentile (``q`` in 0..100): the smallest length L with at
        least q% of the valid samples <= L, as ``(lo, hi)``; ``lo == hi`` when it is exact,
        which it is whenever its rank falls in the bins ``0..cap``, or on the shortest or
        longest length above cap. A rank among the other above-cap lengths (only their
        count, sum, shortest and longest are kept) gives the bounds it lies in. None when
        there are no valid samples. ``q`` is read as a decimal (``"99.9"`` exactly)."""
        return self.percentile_ranges([q])[0]

    def percentile_ranges(self, qs: Iterable[float | str]) -> list[tuple[int, int] | None]:
        """`percentile_range` of each of ``qs``, with one cumulative sum of the `present`
        bins."""
        fs = [Fraction(str(q)) for q in qs]
        if any(not 0 <= q <= 100 for q in fs):
            raise ValueError(f"percentiles lie in 0..100, got {[float(q) for q in fs]}")
        n = self.valid
        if not n:
            return [None for _ in fs]
        lengths, counts = self.present
        cum = np.cumsum(counts)
        binned = int(cum[-1]) if cum.size else 0
        out: list[tuple[int, int] | None] = []
        for q in fs:
            rank = max(1, -(-q.numerator * n // (q.denominator * 100)))  # ceil(q% of n)
            if rank <= binned:
                length = int(lengths[np.searchsorted(cum, rank)])
                out.append((length, length))
            elif rank == binned + 1:
                out.append((self.above_min, self.above_min))
            elif rank == n:
                out.append((self.above_max, self.above_max))
            else:
                out.append((self.above_min, self.above_max))
        return out

    def percentile(self, q: float | str) -> int | None:
        """The exact `percentile_range` value, or None when there is no valid sample or the
        rank falls among above-cap lengths that were not binned."""
        return _exact_value(self.percentile_range(q))

    def percentiles(self) -> dict[str, int | None]:
        """`PERCENTILES` by name, e.g. ``{"p50": 812, ..., "p99.9": 8190}`` (see
        `percentile`; `percentile_range` gives the bounds of a None)."""
        ranges = self.percentile_ranges(k[1:] for k in PERCENTILES)
        return {k: _exact_value(r) for k, r in zip(PERCENTILES, ranges, strict=True)}

    # ---------------------------------------------------------------- algebra
    def __add__(self, other: LengthHistogram) -> LengthHistogram:
        return merge([self, other])

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, LengthHistogram):
            return NotImplemented
        return self.cap == other.cap and _same(self, other)

    __hash__ = None  # type: ignore[assignment]

    def _scalars(self) -> tuple[int, ...]:
        return tuple(getattr(self, name) for name in SCALARS)

    def with_cap(self, cap: int) -> LengthHistogram:
        """Re-bin to a different cap without rescanning.

        Lowering the cap folds bins above it into the above-cap statistics. Raising it is
        exact only when nothing lies above the current cap.
        """
        if cap == self.cap:
            return self
        if cap > self.cap:
            if self.above_count:
                raise ProfilerError(
                    f"cannot raise the histogram cap from {self.cap} to {cap}: "
                    f"{self.above_count} lengths above {self.cap} were not binned; rescan with "
                    f"a larger cap")
            return LengthHistogram(np.pad(self.counts, (0, cap - self.cap)),
                                   null_count=self.null_count, invalid_count=self.invalid_count)
        return merge([LengthHistogram(self.counts[: cap + 1], *self._scalars()),
                      self._above(cap)])

    def _above(self, cap: int) -> LengthHistogram:
        """The bins above ``cap`` as the above-cap statistics of an empty histogram of
        ``cap``."""
        lengths, counts = self.present
        k = int(np.searchsorted(lengths, cap, side="right"))
        if k == lengths.size:
            return LengthHistogram.empty(cap)
        tail, n = lengths[k:], counts[k:]
        return LengthHistogram(np.zeros(cap + 1, dtype=np.int64), int(n.sum()), int(n @ tail),
                               int(tail[0]), int(tail[-1]))

    # ---------------------------------------------------------------- persistence
    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict; counts are stored sparsely as ``[[length, count], ...]``.
        Bins past `MAX_CAP` (a cap given above it) are folded into the above-cap
        statistics first (their count, sum, shortest and longest stay exact): what
        `from_dict` reads back."""
        if self.cap > MAX_CAP:
            return self.with_cap(MAX_CAP).to_dict()
        return {
            "schema": SCHEMA,
            "cap": self.cap,
            "counts": np.column_stack(self.present).tolist(),
            **dict(zip(SCALARS, self._scalars(), strict=True)),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LengthHistogram:
        """Inverse of :meth:`to_dict`, checked as hostile input (`validated`)."""
        return validated(d)

    def to_json(self, provenance: dict[str, Any] | None = None,
                groups: Grouping | None = None) -> str:
        """The saved form: :meth:`to_dict` as one JSON line. ``provenance`` says which
        slice of which scan it counts (`gpu_profiler.slices`); loaders that do not ask
        ignore it. ``groups``: ``(group_by, {name: histogram})``, the groups this one is
        the sum of (``--group-by``), saved beside it (`read_groups`)."""
        d = self.to_dict()
        if provenance is not None:
            d["provenance"] = provenance
        if groups is not None:
            d["group_by"] = groups[0]
            d["groups"] = {name: h.to_dict() for name, h in groups[1].items()}
        return json.dumps(d) + "\n"

    def save(self, path: str | Path, provenance: dict[str, Any] | None = None,
             groups: Grouping | None = None) -> None:
        """Write :meth:`to_json` to ``path`` (atomically)."""
        from gpu_profiler.io.output import write_atomic

        write_atomic(path, self.to_json(provenance, groups))

    @staticmethod
    def is_saved(path: Any) -> bool:
        """True when ``path`` names a regular file written by :meth:`save`: recognized by its
        schema tag (or the exact opening of the untagged files of earlier versions), so no
        corpus (a JSONL file starts with ``{`` too) is taken for one, and a FIFO is never
        opened."""
        if not isinstance(path, (str, Path)):
            return False
        try:
            if not stat.S_ISREG(os.stat(path).st_mode):
                return False
            with open(path, "rb") as f:
                return bool(_SAVED.match(f.read(256)))
        except OSError:
            return False

    @classmethod
    def load(cls, path: str | Path) -> LengthHistogram:
        """Read a histogram written by :meth:`save` (`read_saved`)."""
        return read_saved(path)[0]


def _exact_value(r: tuple[int, int] | None) -> int | None:
    """A percentile's value when its range is exact, else None."""
    return r[0] if r and r[0] == r[1] else None


#: ``(group_by, {group name: histogram})``: a histogram's groups (``--group-by``).
Grouping = tuple[str, dict[str, "LengthHistogram"]]
#: Most groups a saved histogram may hold (and a grouped scan make).
MAX_GROUPS = 1000


def read_groups(d: dict[str, Any], total: LengthHistogram) -> Grouping | None:
    """The groups saved beside ``total`` in the object ``d`` (None: it has none), checked
    as hostile input: ``group_by`` a short string, at most `MAX_GROUPS` groups named by
    strings, each a valid histogram, and their sum ``total`` exactly (a `ValueError`
    otherwise)."""
    if "groups" not in d and "group_by" not in d:
        return None
    by, groups = d.get("group_by"), d.get("groups")
    if not isinstance(by, str) or not 0 < len(by) <= 200:
        raise ValueError("'group_by' is not a column name, @file or @dir")
    if not isinstance(groups, dict) or len(groups) > MAX_GROUPS:
        raise ValueError(f"'groups' is not an object of at most {MAX_GROUPS:,} groups")
    out: dict[str, LengthHistogram] = {}
    for name, g in groups.items():
        if not 0 < len(name) <= 1000:
            raise ValueError("a group's name is empty or longer than 1,000 characters")
        try:
            out[name] = validated(g)
        except ValueError as exc:
            raise ValueError(f"group {name[:40]!r}: {exc}") from None
    if not out or not _same(merge(out.values()), total):
        raise ValueError("its groups do not add up to its histogram")
    return by, out


def _same(a: LengthHistogram, b: LengthHistogram) -> bool:
    """Whether ``a`` and ``b`` count the same lengths, whatever bins past their longest
    each holds."""
    n = max(a.cap, b.cap) + 1
    return a._scalars() == b._scalars() and bool(np.array_equal(
        np.pad(a.counts, (0, n - a.counts.size)), np.pad(b.counts, (0, n - b.counts.size))))


def read_saved(path: str | Path) -> tuple[LengthHistogram, dict[str, Any]]:
    """The histogram saved at ``path`` and the JSON object it was read from (its
    ``provenance`` is there). The file is hostile input: larger than `MAX_SAVED_BYTES`,
    not a regular file (a FIFO is not waited on), not strict JSON (`strict_json`), or
    fields that `validated` refuses are one `ProfilerError`."""
    try:
        d = strict_json(read_regular(path, MAX_SAVED_BYTES))
        return validated(d), d
    except (OSError, ValueError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise ProfilerError(f"{path}: not a gpu-profiler histogram ({why})") from None


def read_regular(path: str | Path, limit: int, follow: bool = True) -> bytes:
    """The bytes of the regular file at ``path``, opened without blocking (a FIFO or a
    device is refused, never waited on) and, unless ``follow``, without following a
    symbolic link (`OSError` ELOOP); a file of more than ``limit`` bytes is refused unread
    (`ValueError`)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    fd = os.open(path, flags)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError("not a regular file")
        if st.st_size > limit:
            raise ValueError(f"{st.st_size:,} bytes, more than the {limit:,} it could take")
        with open(fd, "rb", closefd=False) as f:
            data = f.read(st.st_size + 1)  # +1: a file grown since it was measured
        if len(data) > limit:
            raise ValueError(f"more than the {limit:,} bytes it could take")
        return data
    finally:
        os.close(fd)


def strict_json(text: bytes | str) -> Any:
    """``json.loads`` for files this project wrote: numbers other than integers (``1.0``,
    ``1e400``, ``Infinity``, ``NaN``), a key given twice and nesting deeper than the
    interpreter's recursion limit are a `ValueError` (the integer fields stay exact)."""
    def refuse(token: str) -> Any:
        raise ValueError(f"{token[:20]!r} is not an integer")

    def unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        d = dict(pairs)
        if len(d) != len(pairs):
            raise ValueError("a key given twice")
        return d

    try:
        return json.loads(text, parse_float=refuse, parse_constant=refuse,
                          object_pairs_hook=unique)
    except RecursionError:
        raise ValueError("nested too deeply") from None


def _integer(d: dict[str, Any], name: str, lo: int, hi: int | None) -> int:
    """The integer ``d[name]``, in ``lo..hi`` (no bool, float or string)."""
    if name not in d:
        raise ValueError(f"no {name!r}")
    v = d[name]
    if type(v) is not int or v < lo or (hi is not None and v > hi):
        raise ValueError(f"{name} must be an integer from {lo:,}" +
                         (f" to {hi:,}" if hi is not None else "") + f", got {str(v)[:40]}")
    return v


def validated(d: Any, counts: np.ndarray | None = None, max_cap: int = MAX_CAP
              ) -> LengthHistogram:
    """The histogram of the fields ``d`` (`LengthHistogram.to_dict`'s; ``counts``, when
    given, are its dense bins instead of ``d["counts"]``: a cache entry's), checked as
    hostile input, its cap before anything is allocated: a cap in ``0..max_cap``, bins
    at lengths ``0..cap`` given once each, integer counts from 0 whose total (with nulls
    and invalid) and binned token sum fit int64; above-cap statistics all -1/0 when
    ``above_count`` is 0, else ``cap < above_min <= above_max`` and ``above_tokens``
    within ``above_count`` times those (it may pass int64: `gpu_profiler.engine.exact`).
    Anything else is a `ValueError` that says what."""
    if not isinstance(d, dict):
        raise ValueError("not a JSON object")
    unknown = set(d) - {"schema", "cap", "counts", "provenance", "group_by", "groups",
                        *SCALARS}
    if unknown:
        raise ValueError(f"unknown field {sorted(unknown)[0]!r}")
    if d.get("schema", SCHEMA) != SCHEMA:
        raise ValueError(f"schema {str(d['schema'])[:40]!r}, not {SCHEMA!r}")
    cap = _integer(d, "cap", 0, max_cap)
    s = {n: _integer(d, n, -1 if n in ("above_min", "above_max") else 0,
                     None if n == "above_tokens" else INT64_MAX) for n in SCALARS}
    n, lo, hi = s["above_count"], s["above_min"], s["above_max"]
    if not n and (lo, hi, s["above_tokens"]) != (-1, -1, 0):
        raise ValueError("above_min, above_max and above_tokens must be -1, -1 and 0 when "
                         "above_count is 0")
    if n and not cap < lo <= hi:
        raise ValueError(f"above_min ({lo:,}) and above_max ({hi:,}) must lie past the cap "
                         f"({cap:,}), in order")
    if n and not n * lo <= s["above_tokens"] <= n * hi:
        raise ValueError(f"above_tokens ({s['above_tokens']:,}) must lie between "
                         "above_count x above_min and above_count x above_max")
    if counts is None:
        counts = _sparse(d.get("counts"), cap)
    elif counts.dtype != np.int64 or counts.shape != (cap + 1,):
        raise ValueError(f"{counts.size:,} counts for the cap {cap:,}")
    if counts.size and int(counts.min()) < 0:
        raise ValueError(f"a negative count ({int(counts.min()):,})")
    total = _exact(counts) + n + s["null_count"] + s["invalid_count"]
    if total > INT64_MAX or _exact(counts, np.arange(cap + 1, dtype=np.int64)) > INT64_MAX:
        raise ValueError("counts or their token sum past int64")
    return LengthHistogram(counts, **s)


def _sparse(pairs: Any, cap: int) -> np.ndarray:
    """The dense bins ``0..cap`` of ``[[length, count], ...]`` (lengths increasing)."""
    if not isinstance(pairs, list) or len(pairs) > cap + 1:
        raise ValueError(f"counts must be a list of at most cap + 1 ({cap + 1:,}) pairs")
    if not all(type(p) is list and len(p) == 2 and type(p[0]) is int and type(p[1]) is int
               for p in pairs):
        raise ValueError("counts must be [length, count] pairs of integers")
    try:
        arr = np.array(pairs, dtype=np.int64).reshape(-1, 2)
    except OverflowError:
        raise ValueError("a length or count past int64") from None
    at = arr[:, 0]
    if at.size and (at[0] < 0 or at[-1] > cap or bool((np.diff(at) <= 0).any())):
        raise ValueError(f"counts' lengths must increase within 0..cap ({cap:,})")
    counts = np.zeros(cap + 1, dtype=np.int64)
    counts[at] = arr[:, 1]
    return counts


def _exact(counts: np.ndarray, weights: np.ndarray | None = None) -> int:
    """``counts.sum()`` (or ``counts @ weights``) as an exact int: in int64 when a float
    estimate shows it cannot wrap, else in Python ints."""
    c = counts if weights is None else counts.astype(np.float64) * weights
    if float(np.sum(c, dtype=np.float64)) < 2.0 ** 62:
        return int(counts.sum()) if weights is None else int(counts @ weights)
    nz = np.flatnonzero(counts)
    big = counts[nz].astype(object)
    return int(big.sum()) if weights is None else int(big @ weights[nz].astype(object))


def merge(hists: Iterable[LengthHistogram]) -> LengthHistogram:
    """Sum histograms (of shards, chunks, devices), exactly (token sums are Python ints).
    Caps may differ when the smaller-cap histograms have nothing above their cap (then
    they are padded). One histogram is its own sum, returned as it is (immutable)."""
    it = iter(hists)
    first, second = next(it, None), next(it, None)
    if first is None:
        raise ValueError("merge() needs at least one histogram")
    if second is None:
        return first
    total = Sum()
    for h in itertools.chain((first, second), it):
        total.add(h)
    return total.histogram()


class Sum:
    """A running sum of histograms, added in place as `merge` adds them: its memory stays
    O(cap) however many are added, and an addition allocates nothing unless the cap
    grows (a scan sums one histogram per task, a backend one per chunk). The first
    histogram's bins are taken as they are (read-only), and copied only when another is
    added to them: a scan of one task copied its 2 Mi bins twice, 36 ms of fresh pages."""

    def __init__(self, cap: int = 0) -> None:
        self.counts = np.zeros(cap + 1, dtype=np.int64)
        self.above_count = self.above_tokens = self.nulls = self.invalid = 0
        self.above_min = self.above_max = -1
        self.added = 0

    @property
    def cap(self) -> int:
        return self.counts.size - 1

    def add(self, h: LengthHistogram) -> None:
        """Add ``h``; the sum's bins grow to its cap (`LengthHistogram.with_cap` raises
        when lengths above the smaller cap were not binned)."""
        if not self.added and h.cap >= self.cap:
            self.counts = h.counts
        else:
            if h.cap > self.cap:
                if self.above_count:
                    self.histogram().with_cap(h.cap)  # raises: say which lengths
                self.counts = np.pad(self.counts, (0, h.cap - self.cap))
            elif h.cap < self.cap and h.above_count:
                h.with_cap(self.cap)  # raises
            if not self.counts.flags.writeable:  # the first histogram's own bins
                self.counts = self.counts.copy()
            self.counts[:h.counts.size] += h.counts
        if h.above_count:
            self.above_min = h.above_min if not self.above_count else min(self.above_min,
                                                                          h.above_min)
            self.above_max = max(self.above_max, h.above_max)
            self.above_count += h.above_count
            self.above_tokens += h.above_tokens
        self.nulls += h.null_count
        self.invalid += h.invalid_count
        self.added += 1

    def histogram(self) -> LengthHistogram:
        """The sum so far."""
        counts = self.counts.copy() if self.counts.flags.writeable else self.counts
        return LengthHistogram(counts, self.above_count, self.above_tokens,
                               self.above_min, self.above_max, self.nulls, self.invalid)


def wrapped(hist: LengthHistogram) -> LengthHistogram:
    """``hist`` with its above-cap token sum wrapped to int64, as the kernels' accumulators
    keep it: every backend's raw result is the same this way (the engine then recovers
    the exact sum, `gpu_profiler.engine`)."""
    t = (hist.above_tokens + 2**63) % 2**64 - 2**63
    return hist if t == hist.above_tokens else replace(hist, above_tokens=t)
