"""Resumable scans (``--cache-dir``): each finished shard's histogram, kept in a directory
under a key that changes whenever the shard or what is counted of it could (path, size,
mtime_ns, ctime_ns and inode, a hash of its first and last 64 KiB, the row groups or
record batches of a range, the length column or offsets, the source options, the cap,
the reader version). An entry's first line holds an HMAC-SHA256 of the rest, keyed with a
secret of the user's (`signing_key`): a JSON line of the key, cap and the histogram's
scalars, then its counts as raw little-endian int64 (a JSON list of 8,193 counts took
~5 ms to read back, more than rescanning a small shard).

An entry is hostile input. It is opened without following a symbolic link and without
blocking (a link, FIFO or directory planted as an entry is rejected), refused unread
past the size its cap allows, and its histogram checked as a saved one is
(`gpu_profiler.histogram.validated`); one that fails, whose HMAC does not match (corrupt,
edited, or written with another key) or whose key is another's is rejected (reported,
then rescanned), never trusted. Entries are written to a new file in the directory and
renamed over the old name, never through what is there.

What the HMAC protects: nobody who cannot read the signing key can make an entry the
scan reuses, so a forged entry (its checksum recomputed) never changes the totals; a
shard rewritten with its size and mtime put back changes its ctime. What it does not:
whoever can read the key (the user, root, or everyone given a shared key) is trusted, as
the user's own files are; and a shard changed in place by someone able to restore its
ctime (root) in bytes outside its first and last 64 KiB is served stale."""

from __future__ import annotations

import errno
import hashlib
import hmac
import json
import os
import secrets
import stat
from pathlib import Path
from typing import Any

import numpy as np

from gpu_profiler.errors import ProfilerError
from gpu_profiler.histogram import (
    MAX_AUTO_CAP,
    SCALARS,
    LengthHistogram,
    read_regular,
    strict_json,
    validated,
)
from gpu_profiler.readers import Part, Reading

#: Bump when a reader's counting changes: every entry written before is then foreign.
READER_VERSION = 1
SCHEMA = "gpu-profiler/cache/v3"
#: Names a file holding the key that signs cache entries (shared: every user or machine
#: that reads it trusts entries the others wrote); default `default_key_path`.
KEY_ENV = "GPU_PROFILER_CACHE_KEY"
_SAMPLE = 64 << 10  # the bytes hashed at each end of a shard


def default_key_path() -> str:
    """``$XDG_CACHE_HOME/gpu-profiler/cache.key`` (``~/.cache`` without it)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return os.path.join(base, "gpu-profiler", "cache.key")


def signing_key() -> bytes:
    """The secret that signs cache entries: the file `KEY_ENV` names, else
    `default_key_path`; 32 random bytes written there (mode 0600) when it does not
    exist (by a link, so processes starting at once agree on one)."""
    path = os.environ.get(KEY_ENV) or default_key_path()
    try:
        try:
            key = read_regular(path, 4096)
        except FileNotFoundError:
            os.makedirs(os.path.dirname(path) or ".", mode=0o700, exist_ok=True)
            tmp = f"{path}.{secrets.token_hex(8)}.tmp"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            try:
                with open(fd, "wb") as f:  # closed if the write fails (a full disk)
                    f.write(secrets.token_bytes(32))
                try:
                    os.link(tmp, path)
                except FileExistsError:
                    pass
            finally:
                os.unlink(tmp)
            key = read_regular(path, 4096)
        if len(key) < 16:
            raise ValueError("shorter than 16 bytes")
        return key
    except (OSError, ValueError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise ProfilerError(f"{path}: cannot read or create the key that signs --cache-dir "
                            f"entries ({why}); {KEY_ENV} may name another file") from None


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
                        "source": {n: v for n, v in vars(reading.source).items()
                                   if v is not None and v is not False},
                        "cap": cap, "reader": READER_VERSION}
        self._cap = cap
        self._max_cap = MAX_AUTO_CAP if cap is None else cap
        self._secret = signing_key()

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
                "mtime_ns": st.st_mtime_ns, "ctime_ns": st.st_ctime_ns, "inode": st.st_ino,
                "sample": _sample(path), "span": span and list(span), **self._common}

    def get(self, key: dict[str, Any]) -> tuple[LengthHistogram | None, str | None]:
        """The histogram of the shard with this `key` when a valid entry has it; else
        None, and why the entry found (if any) was rejected."""
        entry = self._entry(key)
        try:
            raw = read_regular(entry, 8 * (self._max_cap + 1) + (1 << 20), follow=False)
        except FileNotFoundError:
            return None, None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                return None, f"{entry}: a symbolic link (not followed)"
            return None, f"{entry}: unreadable ({exc.strerror or exc})"
        except ValueError as exc:
            return None, f"{entry}: not a cache entry ({exc})"
        header, _, payload = raw.partition(b"\n")
        if not hmac.compare_digest(header, self._header(payload)):
            return None, f"{entry}: checksum mismatch (corrupt, edited, or signed with " \
                         "another key)"
        line, _, counts = payload.partition(b"\n")
        try:
            d = strict_json(line)
            if not isinstance(d, dict) or d.pop("key", None) != key:
                return None, f"{entry}: an entry of another shard or scan (foreign)"
            if len(counts) % 8:
                raise ValueError("its counts are not whole int64s")
            hist = validated(d, np.frombuffer(counts, "<i8"), self._max_cap)
            if self._cap is not None and hist.cap != self._cap:
                raise ValueError(f"cap {hist.cap}, not {self._cap}")
            return hist, None
        except ValueError as exc:
            return None, f"{entry}: not a valid cache entry ({exc})"

    def put(self, key: dict[str, Any], hist: LengthHistogram) -> None:
        """Keep ``hist`` under ``key`` (taken before the shard was read, so a shard changed
        while read is never stored under its new size and time): written to a new file in
        the directory, then renamed over whatever the entry's name held."""
        scalars = {n: getattr(hist, n) for n in SCALARS}
        payload = (json.dumps({"key": key, "cap": hist.cap, **scalars}).encode() + b"\n"
                   + hist.counts.astype("<i8").tobytes())
        entry = self._entry(key)
        tmp = self.directory / f".{entry.name}.{secrets.token_hex(8)}.tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                         | os.O_CLOEXEC, 0o666)
            with open(fd, "wb") as f:
                f.write(self._header(payload) + b"\n" + payload)
            os.replace(tmp, entry)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise ProfilerError(f"{entry}: cannot write the cache entry "
                                f"({exc.strerror or exc})") from None

    def _header(self, payload: bytes) -> bytes:
        mac = hmac.new(self._secret, payload, hashlib.sha256).hexdigest()
        return json.dumps({"schema": SCHEMA, "mac": mac}).encode()

    def _entry(self, key: dict[str, Any]) -> Path:
        name = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:32]
        return self.directory / f"{name}.entry"


def _sample(path: str | Path) -> str | None:
    """A hash of the first and last 64 KiB of the file at ``path`` (None when it is not a
    regular file or cannot be read: its scan then says why)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        size = st.st_size
        head = os.pread(fd, _SAMPLE, 0)
        tail = os.pread(fd, _SAMPLE, max(size - _SAMPLE, _SAMPLE)) if size > _SAMPLE else b""
        return hashlib.sha256(head + b"\0" + tail).hexdigest()[:32]
    except OSError:
        return None
    finally:
        os.close(fd)
