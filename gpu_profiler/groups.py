"""One exact histogram per group of samples, in one scan (``--group-by``): per value of a
column (a string, dictionary or integer column: ``source``, ``lang``, ``dataset``), or per
file (``@file``) or top-level subdirectory (``@dir``) of a source of many files. The
groups' histograms sum to the whole source's.

A source grouped by file or subdirectory is the planned scan with its parts regrouped as
splits (`engine.Planned.regrouped`): the fast readers, the cache, ``--part`` and Dask as
for any scan. A column is read beside the lengths by each format's ``batches`` (pyarrow,
column by column: IPC and HF shards, Parquet, JSON Lines, tables in memory), its values
encoded per batch, and each group's rows counted by the scan's backend."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gpu_profiler import driver, engine
from gpu_profiler.backends import Backend
from gpu_profiler.chunk import Chunk
from gpu_profiler.columns import check_column, coalesced, each_part, integers
from gpu_profiler.engine import Planned, Scan
from gpu_profiler.errors import ProfilerError
from gpu_profiler.frozen import frozen
from gpu_profiler.histogram import MAX_GROUPS, LengthHistogram, Sum
from gpu_profiler.readers import LengthSpec
from gpu_profiler.readers.arrow import array_to_chunk
from gpu_profiler.request import DEFAULT, LOCAL, Execution, Sharding, Source

#: ``--group-by`` values that group a source's files, not a column's values.
BY_FILE, BY_DIR = "@file", "@dir"
#: How the group of samples whose group column is null is named.
NULL = "(null)"


@frozen
class Grouped:
    """A grouped scan: ``histograms`` maps each group's name to its histogram (sorted by
    name); ``split`` is the split scanned (None: an unsplit source); ``scan`` the scan."""

    by: str
    histograms: dict[str, LengthHistogram]
    split: str | None
    scan: Scan


def scan(source: Source, by: str, execution: Execution = DEFAULT,
         sharding: Sharding = LOCAL) -> Grouped:
    """Histogram each group of ``source`` (its analysed split: `Planned.analysed_split`)
    by ``by``: a column, `BY_FILE` or `BY_DIR`."""
    if not isinstance(by, str) or not by:
        raise ProfilerError("--group-by needs a column name, @file or @dir")
    planned = engine.plan(source, execution, skip_bad=sharding.skip_bad_shards)
    split = planned.analysed_split()
    planned = planned.only(split)
    if by in (BY_FILE, BY_DIR):
        regrouped = planned.regrouped(_file_key(planned, by))
        _at_most(source.label, by, len(regrouped.splits))  # before any file is read
        s = driver.run(regrouped, sharding)
    elif by.startswith("@"):
        raise ProfilerError(f"--group-by {by}: the file groupings are {BY_FILE} and {BY_DIR}")
    else:
        if not sharding.local:
            raise ProfilerError(f"--group-by {by}: a column is grouped in this process; "
                                "--dask, --cache-dir, --part and --skip-bad-shards group by "
                                f"{BY_FILE} or {BY_DIR}")
        s = _by_column(planned, by)
    return Grouped(by, dict(sorted(s.histograms.items())), split, s)


def sample_codes(source: Source, by: str) -> tuple[np.ndarray, list[str], str | None]:
    """Every sample's group of the split an analysis plans (`Planned.analysed_split`), in
    row order, as `gpu_profiler.lengths.analysed_lengths` reads the lengths: ``(codes,
    names, split)``, ``names[codes[i]]`` the group of row i (int32; names sorted; a null
    is `NULL`). A column only: a plan's samples are rows, not files."""
    from gpu_profiler.lengths import ROW_ORDER

    if not isinstance(by, str) or not by or by.startswith("@"):
        raise ProfilerError(f"--group-by {by}: a plan groups its samples by a column (a "
                            "string, dictionary or integer column naming each row's source)")
    planned = engine.plan(source, ROW_ORDER)
    split = planned.analysed_split()
    planned = planned.only(split)
    if planned.reading is not None and by == planned.reading.spec.name:
        raise ProfilerError(f"--group-by {by}: that is the length source itself")

    def part_codes(part: Any, backend: Backend) -> tuple[tuple[np.ndarray, list[str]], int]:
        labels = _labels(part, by)
        names: dict[str, int] = {}
        out = []
        for batch in coalesced(part.batches([by], codes=(by,))):
            codes, local = _encoded(batch.column(0), labels)
            used = np.bincount(codes, minlength=len(local)) > 0  # (null) only if there is one
            to_part = np.asarray([names.setdefault(n, len(names)) if u else -1
                                  for n, u in zip(local, used, strict=True)], np.int32)
            out.append(to_part[codes])
        got = np.concatenate(out) if out else np.zeros(0, np.int32)
        return (got, list(names)), got.size

    per = list(each_part(planned, "to group by", part_codes))
    names = sorted({n for _, local in per for n in local})
    _at_most(source.label, by, len(names))
    index = {n: i for i, n in enumerate(names)}
    codes = [np.asarray([index[n] for n in local], np.int32)[got] if got.size else got
             for got, local in per]
    return (np.concatenate(codes) if codes else np.zeros(0, np.int32)), names, split


def _at_most(label: str, by: str, groups: int) -> None:
    """Refuse more than `MAX_GROUPS` groups: not a mixture's sources (an id column?)."""
    if groups > MAX_GROUPS:
        raise ProfilerError(f"{label}: --group-by {by} makes more than {MAX_GROUPS:,} groups: "
                            "group by a column naming the sources")


def _file_key(planned: Planned, by: str) -> Any:
    """The group of a part: its path relative to the directory every part is under
    (`BY_FILE`), or that path's first component (`BY_DIR`: a file directly in that
    directory is a group of its own)."""
    if not planned.parts or not all(hasattr(p, "path") for p in planned.parts):
        raise ProfilerError(f"{planned.source.label}: --group-by {by} groups the files of a "
                            "source on disk")
    root = os.path.commonpath([os.path.dirname(os.path.abspath(p.path))  # type: ignore[attr-defined]
                               for p in planned.parts])

    def key(part: Any) -> str:
        rel = os.path.relpath(os.path.abspath(part.path), root)
        return rel if by == BY_FILE else rel.split(os.sep, 1)[0]
    return key


def _by_column(planned: Planned, by: str) -> Scan:
    """Every part's rows of the length source and ``by``, counted per value of ``by``."""
    reading = planned.reading
    if reading is None:
        return planned.empty()
    spec = reading.spec
    if by == spec.name:
        raise ProfilerError(f"--group-by {by}: that is the length source itself")

    def part_groups(part: Any, backend: Backend) -> tuple[dict[str, LengthHistogram], int]:
        labels = _labels(part, by)
        sums: dict[str, Sum] = {}
        for batch in coalesced(part.batches([spec.name, by], codes=(by,))):
            for name, hist in _split(batch, spec, backend, labels):
                sums.setdefault(name, Sum()).add(hist)
        hists = {name: s.histogram() for name, s in sums.items()}
        return hists, sum(h.total for h in hists.values())

    totals: dict[str, Sum] = {}
    for hists in each_part(planned, "to group by; group its files with --group-by "
                           f"{BY_FILE} or {BY_DIR}", part_groups):
        for name, h in hists.items():
            totals.setdefault(name, Sum()).add(h)
        _at_most(planned.source.label, by, len(totals))
    hists = {name: engine.exact(s.histogram(), planned.parts, spec)
             for name, s in totals.items()}
    return Scan(hists, spec, planned.backend.name, time.perf_counter() - planned.started)


def _labels(part: Any, by: str) -> list[str] | None:
    """`class_labels` of ``by`` in ``part``, once it is shown to be one string, dictionary
    or integer column there."""
    def takes(t: pa.DataType) -> bool:
        value = t.value_type if pa.types.is_dictionary(t) else t
        return bool(pa.types.is_integer(value) or pa.types.is_string(value)
                    or pa.types.is_large_string(value))

    schema = part.schema()
    check_column(part.label, schema, by, "--group-by", takes,
                 "a string, dictionary or integer column")
    return class_labels(schema, by)


#: Bins of a batch's groups x lengths counted at once (`_counted`): 32 MiB of int64.
COUNTED_BINS = 1 << 22


def class_labels(schema: pa.Schema, by: str) -> list[str] | None:
    """The names of an integer column that ``datasets`` wrote as a ``ClassLabel`` (the
    features in the schema's ``huggingface`` metadata), else None."""
    meta = (schema.metadata or {}).get(b"huggingface")
    if not meta:
        return None
    try:
        feature = json.loads(meta)["info"]["features"][by]
        names = feature["names"] if feature.get("_type") == "ClassLabel" else None
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        return None
    return names


def _split(batch: pa.RecordBatch, spec: LengthSpec, backend: Backend,
           labels: list[str] | None = None) -> Iterator[tuple[str, LengthHistogram]]:
    """The histogram of each group's lengths in the batch (the group column's values, or
    their ``labels``: a ClassLabel's names, -1 its null): counted at once where every
    group's bins fit in `COUNTED_BINS`, else each group's rows gathered (a stable radix
    order) and counted by ``backend``."""
    if not batch.num_rows:
        return
    chunk = array_to_chunk(batch.column(0), spec)
    data = np.diff(chunk.data.astype(np.int64)) if chunk.offsets else chunk.data
    codes, names = _encoded(batch.column(1), labels)
    counts = np.bincount(codes, minlength=len(names))
    present = np.flatnonzero(counts)
    if present.size == 1:
        yield names[int(present[0])], backend.histogram([Chunk(data, chunk.valid)], None)
        return
    counted = _counted(data, chunk.valid, codes, len(names))
    if counted is not None:
        for code in present.tolist():
            yield names[code], counted[code]
        return
    # a stable counting order: numpy sorts 16-bit keys by radix, in one pass
    order = np.argsort(codes.astype(np.uint16) if len(names) <= 1 << 16 else codes,
                       kind="stable")
    edges = np.concatenate([[0], np.cumsum(counts)])
    for code in present.tolist():
        rows = order[edges[code]:edges[code + 1]]
        part = Chunk(data[rows], None if chunk.valid is None else chunk.valid[rows])
        yield names[code], backend.histogram([part], None)


def _encoded(column: pa.Array, labels: list[str] | None) -> tuple[np.ndarray, list[str]]:
    """A batch's group column as codes into its names (its values, or their ClassLabel
    ``labels``), the last name `NULL`, the code of a null."""
    encoded = column if pa.types.is_dictionary(column.type) else pc.dictionary_encode(column)
    names = [_name(v, labels) for v in encoded.dictionary.to_pylist()] + [NULL]
    codes, valid = integers(encoded.indices)
    if valid is not None:
        codes[~valid] = len(names) - 1
    return codes, names


def _name(value: Any, labels: list[str] | None) -> str:
    """How a group is named: its value, or its ClassLabel name (-1: null)."""
    if value is None or (labels is not None and value == -1):
        return NULL
    if labels is not None and isinstance(value, int) and 0 <= value < len(labels):
        return labels[value]
    return str(value)


def _counted(data: np.ndarray, valid: np.ndarray | None, codes: np.ndarray, groups: int
             ) -> list[LengthHistogram] | None:
    """Every group's histogram of ``data`` (lengths read as int64: negative, or uint64 of
    2**63 and more, are invalid) by one ``bincount`` of (group, length) pairs; None when
    its bins would pass `COUNTED_BINS`."""
    lengths = data.astype(np.int64, copy=False)
    ok = lengths >= 0 if valid is None else valid & (lengths >= 0)
    longest = int(lengths[ok].max(initial=0))
    if groups * (longest + 1) > COUNTED_BINS:
        return None
    pairs = np.bincount(codes[ok] * (longest + 1) + lengths[ok],
                        minlength=groups * (longest + 1)).reshape(groups, longest + 1)
    nulls = np.zeros(groups, np.int64) if valid is None else \
        np.bincount(codes[~valid], minlength=groups)
    bad = ~ok if valid is None else valid & ~ok
    invalid = np.bincount(codes[bad], minlength=groups)
    return [LengthHistogram(pairs[g], null_count=int(nulls[g]), invalid_count=int(invalid[g]))
            for g in range(groups)]
