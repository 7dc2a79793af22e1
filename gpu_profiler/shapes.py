"""Samples made of parts (``--sft``, ``--dpo``): an SFT sample is a prompt and a
completion (two columns, each an integer length or a list of token ids; or one list column
whose loss positions are counted: ``labels`` other than -100, a mask's non-zeros), a DPO
sample a prompt with a chosen and a rejected answer. One scan counts every sample's parts
exactly, as a sparse histogram of part tuples (`ShapeCounts`), from which the analysis
(`gpu_profiler.analysis.shapes`) derives the length that sets memory (the full sequence;
for DPO the prompt and its longer answer, two rows a sample), loss tokens per bucket and
the prompt x completion heat map."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import numpy as np
import pyarrow as pa

from gpu_profiler import engine
from gpu_profiler.analysis.shapes import memory_length
from gpu_profiler.backends import Backend
from gpu_profiler.columns import check_column, coalesced, each_part, integers
from gpu_profiler.engine import Planned
from gpu_profiler.errors import ProfilerError
from gpu_profiler.frozen import frozen
from gpu_profiler.histogram import MAX_AUTO_CAP, LengthHistogram
from gpu_profiler.request import DEFAULT, Execution, Source

#: What a list column's entries count as loss positions, by ``Shape.count``.
IGNORED = {"labels": -100, "mask": 0}


@frozen
class Shape:
    """What a sample is made of.

    Attributes:
        kind: ``sft`` (prompt, completion) or ``dpo`` (prompt, chosen, rejected).
        columns: the parts' columns, each an integer length or a list (its length); for
            ``count``, the one list column of the whole sequence.
        count: ``labels`` (loss positions: entries other than -100) or ``mask`` (non-zero
            entries) when an SFT sample is one list column.
    """

    kind: str
    columns: tuple[str, ...]
    count: str | None = None

    def __post_init__(self) -> None:
        want = 1 if self.count else 2 if self.kind == "sft" else 3
        if self.kind not in ("sft", "dpo") or len(self.columns) != want or not all(
                isinstance(c, str) and c for c in self.columns):
            raise ProfilerError(f"{self.option} needs {want} column name"
                                f"{'s' if want > 1 else ''}, got {list(self.columns)}")
        if self.count is not None and (self.kind != "sft" or self.count not in IGNORED):
            raise ProfilerError(f"unknown count {self.count!r}")

    @property
    def option(self) -> str:
        """The CLI option that asks for this shape."""
        return {None: f"--{self.kind}", "labels": "--sft-labels", "mask": "--sft-mask"}[
            self.count]

    @property
    def rows_per_sample(self) -> int:
        """Rows a sample makes in a batch: a DPO pair's prompt with each answer, 2."""
        return 2 if self.kind == "dpo" else 1

    @property
    def parts(self) -> tuple[str, ...]:
        """The names of a sample's parts."""
        return ("prompt", "completion") if self.kind == "sft" else \
            ("prompt", "chosen", "rejected")

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "columns": list(self.columns), "count": self.count}


def shape_of(sft: Any = None, dpo: Any = None, labels: str | None = None,
             loss_mask: str | None = None) -> Shape | None:
    """The one shape the options ask for (``sft``/``dpo``: column names, a list or
    ``"a,b"``), None without any; two is an error."""
    def names(v: Any) -> tuple[str, ...]:
        return tuple(str(v).split(",")) if isinstance(v, str) else tuple(v)

    given = [s for s in (
        Shape("sft", names(sft)) if sft is not None else None,
        Shape("dpo", names(dpo)) if dpo is not None else None,
        Shape("sft", (labels,), "labels") if labels is not None else None,
        Shape("sft", (loss_mask,), "mask") if loss_mask is not None else None) if s]
    if len(given) > 1:
        raise ProfilerError(f"{' and '.join(s.option for s in given)}: give one sample shape")
    return given[0] if given else None


@frozen
class ShapeCounts:
    """Every sample's parts, counted: ``keys`` (one row per distinct tuple of part lengths,
    in `Shape.parts` order) and ``counts``; samples with a null part are ``nulls``, with a
    negative one ``invalid``."""

    shape: Shape
    keys: np.ndarray
    counts: np.ndarray
    nulls: int = 0
    invalid: int = 0

    @property
    def memory(self) -> np.ndarray:
        """Each key's length that sets memory (`memory_length`): the sequence (SFT), or the
        prompt and its longer answer (DPO: each of its two rows is padded to it)."""
        return memory_length(self.keys)

    def histogram(self) -> LengthHistogram:
        """The exact histogram of `memory` (nulls and invalid samples as such)."""
        lengths = self.memory
        inside = lengths <= MAX_AUTO_CAP
        counts = np.bincount(lengths[inside], weights=self.counts[inside],
                             minlength=1).astype(np.int64)
        above, n = lengths[~inside], self.counts[~inside]
        return LengthHistogram(counts, int(n.sum()), int((above * n).sum()),
                               int(above.min()) if above.size else -1,
                               int(above.max()) if above.size else -1, self.nulls, self.invalid)


#: Largest part length the keys hold, by the number of parts (they share one int64 key).
LIMIT = {2: (1 << 31) - 1, 3: (1 << 21) - 1}


def scan(source: Source, shape: Shape, execution: Execution = DEFAULT
         ) -> tuple[ShapeCounts, str | None, Any]:
    """Count the parts of every sample of ``source``'s analysed split: ``(counts, split,
    planned)``."""
    planned = _plan(source, shape, execution)
    split = planned.analysed_split()
    planned = planned.only(split)
    dims = len(shape.parts)

    def part_counts(part: Any, backend: Backend) -> tuple[tuple[Any, ...], int]:
        keys, counts, nulls, invalid, rows = [], [], 0, 0, 0
        for lengths, valid, ok in _batches(part, shape):
            rows += valid.size
            nulls += int((~valid).sum())
            invalid += int((valid & ~ok).sum())
            big = lengths[ok].max(initial=0)
            if big > LIMIT[dims]:
                raise ProfilerError(f"{part.label}: a sample part of {int(big):,} tokens: past "
                                    f"the {LIMIT[dims]:,} that {shape.option} counts")
            k, c = _unique([_pack(lengths[ok], dims)], [np.ones(int(ok.sum()), np.int64)])
            keys.append(k)
            counts.append(c)
        return (*_unique(keys, counts), nulls, invalid), rows

    took = list(each_part(planned, f"for {shape.option}", part_counts))
    keys, counts = _unique([t[0] for t in took], [t[1] for t in took])
    return (ShapeCounts(shape, _unpack(keys, dims), counts, sum(t[2] for t in took),
                        sum(t[3] for t in took)), split, planned)


def sample_lengths(source: Source, shape: Shape, execution: Execution = DEFAULT,
                   analysed: bool = False) -> tuple[np.ndarray, str | None]:
    """Every sample's memory length (see `ShapeCounts.memory`) in row order, int64 (a
    sample with a null or negative part: -1, `gpu_profiler.lengths.NULL`), and its split:
    the analysed one (`Planned.analysed_split`) when ``analysed``, else the only one."""
    planned = _plan(source, shape, execution)
    split = next(iter(planned.splits), None) or None
    if analysed:
        split = planned.analysed_split()
        planned = planned.only(split)
    elif len(planned.splits) > 1:
        names = ", ".join(repr(s) for s in planned.splits)
        raise ProfilerError(f"the source has splits {names}: pass split= (row indices are "
                            "per split)")

    def part_lengths(part: Any, backend: Backend) -> tuple[np.ndarray, int]:
        out = [np.where(ok, memory_length(lengths), -1)
               for lengths, _, ok in _batches(part, shape)]
        got = np.concatenate(out) if out else np.zeros(0, np.int64)
        return got, got.size

    got = list(each_part(planned, f"for {shape.option}", part_lengths))
    return (np.concatenate(got) if got else np.zeros(0, np.int64)), split


def _batches(part: Any, shape: Shape) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """``(lengths, valid, ok)`` of each batch of ``part`` (`_lengths`; ``ok``: valid and no
    part negative), once every column of ``shape`` is shown to be in ``part``, of a type
    it takes."""
    def takes(t: pa.DataType) -> bool:
        return bool(_is_list(t) or (not shape.count and pa.types.is_integer(t)))

    schema = part.schema()
    for name in shape.columns:
        check_column(part.label, schema, name, shape.option, takes,
                     "a list column" if shape.count else "an integer or list column")
    for batch in coalesced(part.batches(list(dict.fromkeys(shape.columns)))):
        lengths, valid = _lengths(batch, shape)
        yield lengths, valid, valid & (lengths >= 0).all(axis=1)


def _plan(source: Source, shape: Shape, execution: Execution) -> Planned:
    """The plan of ``source`` with its first part column as the length source: a list's
    offsets, else an integer column (every part's columns are checked as it is read)."""
    first = shape.columns[0]
    try:
        return engine.plan(replace(source, column=None, offsets_of=first), execution)
    except ProfilerError:
        return engine.plan(replace(source, column=first, offsets_of=None), execution)


def _is_list(t: pa.DataType) -> bool:
    return bool(pa.types.is_list(t) or pa.types.is_large_list(t))


def _lengths(batch: pa.RecordBatch, shape: Shape) -> tuple[np.ndarray, np.ndarray]:
    """``(lengths, valid)``: each row's part lengths (int64, one column a part) and
    whether none is null."""
    import pyarrow.compute as pc

    n = batch.num_rows
    valid = np.ones(n, bool)
    out = []
    if shape.count:
        arr = batch.column(shape.columns[0])
        if arr.null_count:
            valid &= arr.is_valid().to_numpy(zero_copy_only=False)
        offsets = arr.offsets.to_numpy().astype(np.int64)
        values = arr.values.to_numpy(zero_copy_only=False)
        loss = np.concatenate([[0], np.cumsum(values != IGNORED[shape.count])])
        total = np.diff(offsets)
        completion = loss[offsets[1:]] - loss[offsets[:-1]]
        return np.stack([total - completion, completion], axis=1), valid
    for name in shape.columns:
        arr = batch.column(name)
        if _is_list(arr.type):
            arr = pc.list_value_length(arr)
        values, ok = integers(arr)
        if ok is not None:
            valid &= ok
        out.append(values)
    return np.stack(out, axis=1), valid


def _pack(lengths: np.ndarray, dims: int) -> np.ndarray:
    """Each row of part lengths as one int64 key (`LIMIT` bits a part)."""
    bits = LIMIT[dims].bit_length()
    key = np.zeros(lengths.shape[0], np.int64)
    for j in range(dims):
        key = (key << bits) | lengths[:, j]
    return key


def _unpack(keys: np.ndarray, dims: int) -> np.ndarray:
    bits = LIMIT[dims].bit_length()
    out = np.empty((keys.size, dims), np.int64)
    for j in reversed(range(dims)):
        out[:, j] = keys & LIMIT[dims]
        keys = keys >> bits
    return out


def _unique(keys: list[np.ndarray], counts: list[np.ndarray]
            ) -> tuple[np.ndarray, np.ndarray]:
    """The distinct keys of ``keys`` and their summed ``counts`` (exact: integer sums)."""
    k, c = (np.concatenate(a or [np.zeros(0, np.int64)]) for a in (keys, counts))
    if not k.size:
        return k, c
    order = np.argsort(k, kind="stable")
    k, c = k[order], c[order]
    starts = np.flatnonzero(np.concatenate([[True], k[1:] != k[:-1]]))
    return k[starts], np.add.reduceat(c, starts)
