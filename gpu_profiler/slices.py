"""Scans split without an engine (Slurm arrays, torchrun): ``--part I/N`` takes slice I of
N deterministic slices of the shard list, balanced by bytes, and saves its partial
histogram with a provenance that `merge_partials` checks before summing: the same source
listing, length column, source options (``--unit``, ``--eot``, ...), cap and slicing,
every slice once. A part is hostile input: its histogram is checked as every saved one
is (`gpu_profiler.histogram.validated`), its provenance field by field."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

from gpu_profiler.errors import ProfilerError
from gpu_profiler.histogram import (
    INT64_MAX,
    MAX_CAP,
    MAX_GROUPS,
    Grouping,
    LengthHistogram,
    Sum,
    read_groups,
    read_saved,
)
from gpu_profiler.readers import Part, SourceOptions
from gpu_profiler.readers.base import FLAGS

#: How slices are cut (a provenance field: partials cut another way never merge).
SLICING = "bytes-contiguous/v1"
#: Most slices a scan may be cut into (``--part I/N``: N at most this).
MAX_PARTS = 1 << 16
#: The source options a part records (``None``: not given), by their flags.
OPTIONS = ("unit", "eot", "eot_position", "token_dtype", "trust_statistics")


def parse_part(text: str) -> tuple[int, int]:
    """``"I/N"`` -> ``(I, N)``, with ``0 <= I < N``."""
    i, sep, n = text.partition("/")
    try:
        index, count = int(i), int(n)
    except ValueError:
        index = count = -1
    if not sep or not 1 <= count <= MAX_PARTS or not 0 <= index < count:
        raise ProfilerError(f"--part must be I/N with 0 <= I < N <= {MAX_PARTS} (e.g. 0/8), "
                            f"got {text!r}")
    return index, count


def select(items: Sequence[tuple[str, Part]], index: int, count: int
           ) -> list[tuple[str, Part]]:
    """Slice ``index`` of ``count`` of ``items`` (split name, part), in order: contiguous
    runs of shards, a shard going to the slice its middle byte falls in, so every slice
    holds ``1/count`` of the bytes give or take one shard."""
    sizes = [p.nbytes for _, p in items]
    total = sum(sizes)
    chosen, before = [], 0
    for k, (item, size) in enumerate(zip(items, sizes, strict=True)):
        where = (2 * before + size) * count // (2 * total) if total else k * count // len(items)
        if where == index:
            chosen.append(item)
        before += size
    return chosen


def provenance(items: Sequence[tuple[str, Part]], spec: str, cap: int | None,
               index: int, count: int, source: SourceOptions) -> dict[str, Any]:
    """What slice ``index`` of ``count`` of ``items`` was cut from and counted with."""
    listing = json.dumps([[name, p.label, p.nbytes] for name, p in items])
    return {"listing": hashlib.sha256(listing.encode()).hexdigest(), "shards": len(items),
            "length_source": spec, "source": {n: _given(getattr(source, n)) for n in OPTIONS},
            "cap": cap, "slicing": SLICING, "parts": count, "slices": [index]}


def load_partial(path: str) -> tuple[LengthHistogram, dict[str, Any], Grouping | None]:
    """A histogram saved by ``--part ... --save-hist``, its provenance and its groups
    (``--group-by``), checked: every field of `provenance` there with its type, ``parts``
    in ``1..MAX_PARTS``, the slices distinct and below ``parts``, the histogram's cap the
    one recorded, the groups adding up to it (`read_groups`)."""
    hist, d = read_saved(path)
    try:
        groups = read_groups(d, hist)
    except ValueError as exc:
        raise ProfilerError(f"{path}: not a gpu-profiler histogram ({exc})") from None
    prov = d.get("provenance")
    if not isinstance(prov, dict) or not isinstance(prov.get("slices"), list):
        raise ProfilerError(f"{path}: not a partial histogram (saved without --part)")
    for field, (kind, _) in _FIELDS.items():
        if field not in prov or not isinstance(prov[field], kind) or \
                isinstance(prov[field], bool):
            raise ProfilerError(f"{path}: its provenance has no valid {field!r} (written "
                                "by an older version, or edited): rescan this slice")
    source, parts, slices = prov["source"], prov["parts"], prov["slices"]
    if set(source) != set(OPTIONS) or not all(
            v is None or type(v) in (str, int, bool) for v in source.values()):
        raise ProfilerError(f"{path}: its provenance's source options are not "
                            f"{', '.join(OPTIONS)}")
    if not 1 <= parts <= MAX_PARTS or prov["shards"] < 0:
        raise ProfilerError(f"{path}: {parts} slices of {prov['shards']} shards: a scan has "
                            f"1 to {MAX_PARTS} slices")
    if not slices or len(set(slices)) != len(slices) or not all(
            type(s) is int and 0 <= s < parts for s in slices):
        raise ProfilerError(f"{path}: its slices must be distinct integers from 0 to "
                            f"{parts - 1}, got {str(slices)[:60]}")
    cap = prov["cap"]
    if cap is not None and hist.cap != min(cap, MAX_CAP):
        raise ProfilerError(f"{path}: its histogram's cap ({hist.cap}) is not the cap its "
                            f"provenance records ({str(cap)[:40]})")
    return hist, prov, groups


def _given(value: Any) -> Any:
    """An option's value as a part records it: None when not given (False: off)."""
    return None if value is None or value is False else value


#: The fields of a provenance: their types, and how an error names them.
_FIELDS: dict[str, tuple[Any, str]] = {
    "listing": (str, "the source listing"), "shards": (int, "the number of shards"),
    "length_source": (str, "the length source"), "source": (dict, "the source options"),
    "cap": ((int, type(None)), "the cap"), "slicing": (str, "the slicing"),
    "parts": (int, "the number of slices"), "slices": (list, "the slices")}


def merge_partials(paths: Sequence[str]
                   ) -> tuple[LengthHistogram, dict[str, Any], Grouping | None]:
    """The sum of the partial histograms at ``paths``, its provenance and its groups (each
    group summed by name, when the parts were saved with ``--group-by``: all by the same),
    once they are shown to be every slice of one scan, each once, their sum within int64.
    One part is held at a time: memory stays that of two histograms (and their groups)."""
    if not paths:
        raise ProfilerError("merge needs the partial histograms to sum")
    total, samples, binned_tokens = Sum(), 0, 0
    owner: dict[int, str] = {}
    by: str | None = None
    sums: dict[str, Sum] = {}
    for i, path in enumerate(paths):
        hist, prov, groups = load_partial(path)
        if i == 0:
            first_path, same = path, {k: prov[k] for k in _FIELDS if k != "slices"}
            by = groups[0] if groups else None
        if (groups[0] if groups else None) != by:
            raise ProfilerError(f"{path}: grouped by {groups[0] if groups else 'nothing'}, "
                                f"{first_path} by {by or 'nothing'} (--group-by)")
        # the source options first: the flag that differs is what the user can fix (the
        # length source names some of them too: a token stream's EOT)
        for field, value in sorted(same.items(), key=lambda kv: kv[0] != "source"):
            if field == "source":
                for n in OPTIONS:
                    if prov[field][n] != value[n]:
                        raise ProfilerError(f"{path}: {FLAGS[n]} differs from {first_path} "
                                            f"({prov[field][n]!r} vs {value[n]!r})")
            elif prov[field] != value:
                raise ProfilerError(f"{path}: {_FIELDS[field][1]} differs from "
                                    f"{first_path} ({prov[field]!r} vs {value!r})")
        for s in prov["slices"]:
            if s in owner:
                raise ProfilerError(f"slice {s}/{same['parts']} is counted twice: in "
                                    f"{owner[s]} and {path}")
            owner[s] = path
        samples += hist.total
        binned_tokens += hist.tokens - hist.above_tokens
        if samples > INT64_MAX or binned_tokens > INT64_MAX:
            raise ProfilerError(f"{path}: the parts' counts or token sums add up past int64")
        total.add(hist)
        for name, h in (groups[1].items() if groups else ()):
            sums.setdefault(name, Sum()).add(h)
        if len(sums) > MAX_GROUPS:
            raise ProfilerError(f"{path}: the parts hold more than {MAX_GROUPS:,} groups")
    missing = [str(s) for s in range(same["parts"]) if s not in owner]
    if missing:
        shown = ", ".join(missing[:10]) + (f" and {len(missing) - 10} more"
                                           if len(missing) > 10 else "")
        which = f"slices {shown} are" if len(missing) > 1 else f"slice {missing[0]} is"
        raise ProfilerError(f"{which} missing (of {same['parts']}; none of the {len(paths)} "
                            "files given has it)")
    grouped = None if by is None else (by, {name: s.histogram()
                                            for name, s in sorted(sums.items())})
    return total.histogram(), {**same, "slices": sorted(owner)}, grouped

