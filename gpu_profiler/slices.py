"""Scans split without an engine (Slurm arrays, torchrun): ``--part I/N`` takes slice I of
N deterministic slices of the shard list, balanced by bytes, and saves its partial
histogram with a provenance that `merge_partials` checks before summing: the same source
listing, length column, cap and slicing, every slice once."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gpu_profiler.errors import ProfilerError
from gpu_profiler.histogram import LengthHistogram, merge
from gpu_profiler.readers import Part

#: How slices are cut (a provenance field: partials cut another way never merge).
SLICING = "bytes-contiguous/v1"


def parse_part(text: str) -> tuple[int, int]:
    """``"I/N"`` -> ``(I, N)``, with ``0 <= I < N``."""
    i, sep, n = text.partition("/")
    try:
        index, count = int(i), int(n)
    except ValueError:
        index = count = -1
    if not sep or count < 1 or not 0 <= index < count:
        raise ProfilerError(f"--part must be I/N with 0 <= I < N (e.g. 0/8), got {text!r}")
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
               index: int, count: int) -> dict[str, Any]:
    """What slice ``index`` of ``count`` of ``items`` was cut from and counted with."""
    listing = json.dumps([[name, p.label, p.nbytes] for name, p in items])
    return {"listing": hashlib.sha256(listing.encode()).hexdigest(), "shards": len(items),
            "length_source": spec, "cap": cap, "slicing": SLICING, "parts": count,
            "slices": [index]}


def load_partial(path: str) -> tuple[LengthHistogram, dict[str, Any]]:
    """A histogram saved by ``--part ... --save-hist`` and its provenance."""
    hist = LengthHistogram.load(path)
    d = json.loads(Path(path).read_text())
    prov = d.get("provenance")
    if not isinstance(prov, dict) or not isinstance(prov.get("slices"), list):
        raise ProfilerError(f"{path}: not a partial histogram (saved without --part)")
    return hist, prov


def merge_partials(paths: Sequence[str]) -> tuple[LengthHistogram, dict[str, Any]]:
    """The sum of the partial histograms at ``paths`` and its provenance, once they are
    shown to be every slice of one scan, each once."""
    if not paths:
        raise ProfilerError("merge needs the partial histograms to sum")
    loaded = [(p, *load_partial(p)) for p in paths]
    first_path, _, first = loaded[0]
    same = {k: v for k, v in first.items() if k != "slices"}
    owner: dict[int, str] = {}
    for path, _, prov in loaded:
        for field, value in same.items():
            if prov.get(field) != value:
                raise ProfilerError(f"{path}: {_FIELDS.get(field, field)} differs from "
                                    f"{first_path} ({prov.get(field)!r} vs {value!r})")
        for s in prov["slices"]:
            if s in owner:
                raise ProfilerError(f"slice {s}/{same['parts']} is counted twice: in "
                                    f"{owner[s]} and {path}")
            owner[s] = path
    missing = [str(s) for s in range(same["parts"]) if s not in owner]
    if missing:
        which = f"slices {', '.join(missing)} are" if len(missing) > 1 else \
            f"slice {missing[0]} is"
        raise ProfilerError(f"{which} missing (of {same['parts']}; none of the {len(paths)} "
                            "files given has it)")
    return merge(h for _, h, _ in loaded), {**same, "slices": sorted(owner)}


_FIELDS = {"listing": "the source listing", "shards": "the number of shards",
           "length_source": "the length column", "cap": "the cap",
           "slicing": "the slicing", "parts": "the number of slices"}
