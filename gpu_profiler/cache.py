"""Resumable scans (``--cache-dir``): each finished shard's histogram, kept in a directory
under a key that changes whenever the shard or what is counted of it could (path, size,
mtime_ns, the row groups or record batches of a range, the length column or offsets, the
source options, the cap, the reader version). Entries are written atomically; their first
line holds a SHA-256 of the rest: a JSON line of the key and the histogram's scalars,
then its counts as raw little-endian int64 (a JSON list of 8,193 counts took ~5 ms to
read back, more than rescanning a small shard). One that is corrupt, or whose key is
another's, is rejected (reported, then rescanned), never trusted."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from gpu_profiler.errors import ProfilerError
from gpu_profiler.histogram import SCALARS, LengthHistogram
from gpu_profiler.readers import Part, Reading

#: Bump when a reader's counting changes: every entry written before is then foreign.
READER_VERSION = 1
SCHEMA = "gpu-profiler/cache/v2"


class ShardCache:
    """The entries of one cache directory, for one reading plan and cap."""

    def __init__(self, directory: str | Path, reading: Reading, cap: int | None) -> None:
        self.directory = Path(directory)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ProfilerError(f"{directory}: cannot create the cache directory "
                                f"({exc.strerror or exc})") from None
        self._common = {"spec": reading.spec.describe(),
                        "source": {n: getattr(reading.source, n)
                                   for n in reading.source.given()},
                        "cap": cap, "reader": READER_VERSION}

    def key(self, part: Part) -> dict[str, Any]:
        """What an entry of ``part`` must have been computed from (as JSON reads it back:
        lists, not tuples)."""
        path = getattr(part, "path", None)
        if path is None:
            raise ProfilerError(f"{part.label}: --cache-dir needs shards on disk, not an "
                                "in-memory source")
        st = os.stat(path)
        span = getattr(part, "span", None)
        return {"path": os.path.abspath(path), "size": st.st_size,
                "mtime_ns": st.st_mtime_ns, "span": span and list(span), **self._common}

    def get(self, key: dict[str, Any]) -> tuple[LengthHistogram | None, str | None]:
        """The histogram of the shard with this `key` when a valid entry has it; else
        None, and why the entry found (if any) was rejected."""
        entry = self._entry(key)
        try:
            raw = entry.read_bytes()
        except FileNotFoundError:
            return None, None
        except OSError as exc:
            return None, f"{entry}: unreadable ({exc.strerror or exc})"
        header, _, payload = raw.partition(b"\n")
        try:
            if json.loads(header) != {"schema": SCHEMA,
                                      "checksum": hashlib.sha256(payload).hexdigest()}:
                return None, f"{entry}: checksum mismatch (corrupt)"
            line, _, counts = payload.partition(b"\n")
            d = json.loads(line)
            if d["key"] != key:
                return None, f"{entry}: an entry of another shard or scan (foreign)"
            return LengthHistogram(np.frombuffer(counts, "<i8"),
                                   *(d[n] for n in SCALARS)), None
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            return None, f"{entry}: not a cache entry ({type(exc).__name__})"

    def put(self, key: dict[str, Any], hist: LengthHistogram) -> None:
        """Keep ``hist`` under ``key`` (taken before the shard was read, so a shard changed
        while read is never stored under its new size and time)."""
        from gpu_profiler.render.output import write_atomic

        scalars = {n: getattr(hist, n) for n in SCALARS}
        payload = (json.dumps({"key": key, **scalars}).encode() + b"\n"
                   + hist.counts.astype("<i8").tobytes())
        header = json.dumps({"schema": SCHEMA, "checksum": hashlib.sha256(payload).hexdigest()})
        write_atomic(self._entry(key), header.encode() + b"\n" + payload)

    def _entry(self, key: dict[str, Any]) -> Path:
        name = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:32]
        return self.directory / f"{name}.entry"
