"""Shard cache entries are hostile input: a symbolic link, FIFO, directory, 3 GiB sparse
file or deeply nested JSON planted as an entry, an entry rewritten with its checksum
recomputed (shifted counts, fewer samples, negative counts), and a shard rewritten with
its size and mtime put back all end in the right numbers (the entry rejected, the shard
rescanned) or one line and exit 2; nothing outside the cache is ever written."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import stat
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import run_cli

from gpu_profiler import cache as cache_mod


@pytest.fixture(autouse=True)
def own_key(tmp_path, monkeypatch):
    """Every test signs with a key of its own (children inherit it)."""
    monkeypatch.setenv(cache_mod.KEY_ENV, str(tmp_path / "key" / "cache.key"))


def _write_shard(path, values):
    """Uncompressed, plain, without statistics: the same row count is the same size."""
    pq.write_table(pa.table({"length": pa.array(values, pa.int64())}), path,
                   compression="none", use_dictionary=False, write_statistics=False)


@pytest.fixture
def shards(tmp_path):
    d = tmp_path / "shards"
    d.mkdir()
    rng = np.random.default_rng(3)
    for i in range(4):
        _write_shard(d / f"s{i}.parquet", rng.integers(0, 9000, 200 + 50 * i))
    return d


def _profile(capsys, *args):
    code, out, err = run_cli(["profile", *args, "-q", "-f", "json"], capsys)
    assert code == 0, err
    d = json.loads(out)
    d.pop("seconds")
    return d, d.pop("cache", None)


def _entry_of(cache, shard):
    """The entry that holds ``shard`` (its key names the shard's path)."""
    for e in cache.glob("*.entry"):
        if json.loads(e.read_bytes().split(b"\n")[1])["key"]["path"] == str(shard):
            return e
    raise AssertionError(f"no entry of {shard}")


def _sign(payload: bytes, key: bytes) -> bytes:
    mac = hmac.new(key, payload, hashlib.sha256).hexdigest()
    return json.dumps({"schema": cache_mod.SCHEMA, "mac": mac}).encode() + b"\n" + payload


def _forge(entry, key: bytes | None, line=None, counts=None):
    """Rewrite ``entry`` with its JSON line and counts changed, signed with ``key`` (None:
    the digest in its first line recomputed as a plain SHA-256, as cache/v2 kept it)."""
    header, _, payload = entry.read_bytes().partition(b"\n")
    old_line, _, old_counts = payload.partition(b"\n")
    d = json.loads(old_line)
    line = json.dumps(line(d) if line else d).encode()
    raw = old_counts if counts is None else counts(np.frombuffer(old_counts, "<i8")).astype(
        "<i8").tobytes()
    payload = line + b"\n" + raw
    if key is None:
        head = {k: v if k == "schema" else hashlib.sha256(payload).hexdigest()
                for k, v in json.loads(header).items()}
        entry.write_bytes(json.dumps(head).encode() + b"\n" + payload)
    else:
        entry.write_bytes(_sign(payload, key))


def test_a_symlink_entry_is_neither_followed_nor_written_through(shards, tmp_path, capsys):
    cache = tmp_path / "cache"
    first, _ = _profile(capsys, shards, "--cache-dir", cache)
    victim = tmp_path / "precious.txt"
    victim.write_bytes(b"not a cache entry\n")
    entry, other = (_entry_of(cache, shards / f"s{i}.parquet") for i in (1, 2))
    good = entry.read_bytes()
    entry.unlink()
    entry.symlink_to(victim)
    other.unlink()  # a link where an entry is still to be written, too
    other.symlink_to(tmp_path / "would-be-created")
    again, c = _profile(capsys, shards, "--cache-dir", cache)
    assert again == first and (c["reused"], c["scanned"]) == (2, 2)
    assert any(str(entry) in r and "symbolic link" in r for r in c["rejected"])
    assert victim.read_bytes() == b"not a cache entry\n"
    assert not (tmp_path / "would-be-created").exists()
    assert stat.S_ISREG(os.lstat(entry).st_mode) and entry.read_bytes() == good


def test_a_fifo_entry_is_rejected_without_blocking(shards, tmp_path, capsys):
    cache = tmp_path / "cache"
    first, _ = _profile(capsys, shards, "--cache-dir", cache)
    entry = _entry_of(cache, shards / "s0.parquet")
    entry.unlink()
    os.mkfifo(entry)
    run = subprocess.run([sys.executable, "-c", "from gpu_profiler.cli import main; main()",
                          "profile", str(shards), "-q", "-f", "json", "--cache-dir",
                          str(cache)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    got = json.loads(run.stdout)
    assert any("not a regular file" in r for r in got["cache"]["rejected"])
    assert got["buckets"] == first["buckets"]
    assert stat.S_ISREG(os.lstat(entry).st_mode)


def test_a_directory_entry_is_one_line(shards, tmp_path, capsys):
    cache = tmp_path / "cache"
    _profile(capsys, shards, "--cache-dir", cache)
    entry = _entry_of(cache, shards / "s3.parquet")
    entry.unlink()
    (entry / "x").mkdir(parents=True)
    code, _, err = run_cli(["profile", shards, "-q", "--cache-dir", cache], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"{entry}: cannot write the cache entry" in err


def test_a_3_gib_sparse_entry_is_rejected_unread(shards, tmp_path, capsys):
    cache = tmp_path / "cache"
    first, _ = _profile(capsys, shards, "--cache-dir", cache)
    entry = _entry_of(cache, shards / "s0.parquet")
    with open(entry, "r+b") as f:
        f.truncate(3 << 30)
    again, c = _profile(capsys, shards, "--cache-dir", cache)
    assert again == first and c["scanned"] == 1
    assert any(str(entry) in r and "more than the" in r for r in c["rejected"])
    assert entry.stat().st_size < 1 << 20  # replaced by the rescanned entry


@pytest.mark.parametrize("forgery", [
    "shifted counts", "fewer samples", "negative count", "cap of 1e12", "deep JSON",
    "above_min past above_max", "float scalar"])
@pytest.mark.parametrize("signed", [False, True])
def test_a_forged_entry_never_changes_the_totals(shards, tmp_path, capsys, forgery, signed):
    """Signed: by someone holding the user's key (trusted, so only what `validated`
    refuses is rejected: a shifted entry is then reused, as documented). Unsigned: its
    checksum recomputed as anyone can, every forgery is rejected."""
    cache = tmp_path / "cache"
    first, _ = _profile(capsys, shards, "--cache-dir", cache)
    entry = _entry_of(cache, shards / "s2.parquet")
    key = cache_mod.signing_key() if signed else None
    if forgery == "shifted counts":
        _forge(entry, key, counts=lambda c: np.roll(c, 7))
    elif forgery == "fewer samples":
        _forge(entry, key, counts=lambda c: np.where(c > 0, c - 1, 0))
    elif forgery == "negative count":
        _forge(entry, key, counts=lambda c: np.where(np.arange(c.size) == 3, -5, c))
    elif forgery == "cap of 1e12":
        _forge(entry, key, line=lambda d: {**d, "cap": 10**12})
    elif forgery == "above_min past above_max":
        _forge(entry, key, line=lambda d: {**d, "above_count": 1, "above_tokens": 9,
                                           "above_min": 10**9, "above_max": 9})
    elif forgery == "float scalar":
        _forge(entry, key, line=lambda d: {**d, "null_count": 1.5})
    else:
        payload = b'{"key": ' + b"[" * 100_000 + b"]" * 100_000 + b"}\n"
        entry.write_bytes(_sign(payload, key) if key else payload)
    again, c = _profile(capsys, shards, "--cache-dir", cache)
    if signed and forgery in ("shifted counts", "fewer samples"):
        assert c["reused"] == 4  # the key's holder is trusted: what the docs say
        return
    assert again == first, forgery
    assert (c["reused"], c["scanned"]) == (3, 1)
    why = "checksum mismatch" if not signed else "not a valid cache entry"
    assert len(c["rejected"]) == 1 and why in c["rejected"][0], c["rejected"]


def test_another_key_rejects_every_entry(shards, tmp_path, capsys, monkeypatch):
    cache = tmp_path / "cache"
    first, _ = _profile(capsys, shards, "--cache-dir", cache)
    key = tmp_path / "key" / "cache.key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600 and len(key.read_bytes()) == 32
    monkeypatch.setenv(cache_mod.KEY_ENV, str(tmp_path / "other.key"))
    again, c = _profile(capsys, shards, "--cache-dir", cache)
    assert again == first and (c["reused"], len(c["rejected"])) == (0, 4)
    assert "signed with another key" in c["rejected"][0]


def test_a_shard_rewritten_with_its_mtime_put_back_is_rescanned(shards, tmp_path, capsys):
    cache = tmp_path / "cache"
    _profile(capsys, shards, "--cache-dir", cache)
    shard = shards / "s1.parquet"
    _write_shard(tmp_path / "new.parquet", np.full(250, 7))
    new = (tmp_path / "new.parquet").read_bytes()
    assert len(new) == shard.stat().st_size  # same size: only ctime and bytes differ
    st = shard.stat()
    with open(shard, "r+b") as f:  # in place: the same inode
        f.write(new)
    os.utime(shard, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (shard.stat().st_size, shard.stat().st_mtime_ns) == (st.st_size, st.st_mtime_ns)
    fresh, _ = _profile(capsys, shards)
    again, c = _profile(capsys, shards, "--cache-dir", cache)
    assert again == fresh and (c["reused"], c["scanned"]) == (3, 1)


def test_a_key_that_cannot_be_written_is_one_error_and_leaves_nothing_open(tmp_path,
                                                                            monkeypatch):
    """A full disk while the key is first written: one error naming the key's file, no
    descriptor left open and no temporary file left behind."""
    path = tmp_path / "keys" / "cache.key"
    monkeypatch.setenv(cache_mod.KEY_ENV, str(path))

    token_bytes = cache_mod.secrets.token_bytes

    def full(n: int) -> bytes:  # the key's 32 bytes: the temporary file's name is made first
        if n == 32:
            raise OSError(28, "No space left on device")
        return token_bytes(n)

    monkeypatch.setattr(cache_mod.secrets, "token_bytes", full)
    before = sorted(os.listdir("/proc/self/fd"))
    with pytest.raises(cache_mod.ProfilerError, match=rf"{path}: cannot read or create the "
                       r"key that signs --cache-dir entries \(No space left on device\)"):
        cache_mod.signing_key()
    assert sorted(os.listdir("/proc/self/fd")) == before
    assert os.listdir(path.parent) == []
