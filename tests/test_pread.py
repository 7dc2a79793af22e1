"""Positioned reads: buffered and direct (O_DIRECT, sector-granular for cold files) read
the same bytes, mapped windows (warm files) are those bytes in place, and a cold scan of a
tokenized HF dir reads little more than its length column."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import gpu_profiler as gp
from gpu_profiler import ProfilerError
from gpu_profiler.io import pread


def _evict(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)  # dirty pages cannot be dropped
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def _direct_supported(path: Path) -> bool:
    try:
        os.close(os.open(path, os.O_RDONLY | os.O_DIRECT))
    except (AttributeError, OSError):
        return False
    return True


@pytest.fixture
def blob(tmp_path):
    path = tmp_path / "blob.bin"
    path.write_bytes(np.random.default_rng(0).integers(0, 256, 3_000_017, np.uint8).tobytes())
    if not _direct_supported(path):
        pytest.skip("this filesystem has no O_DIRECT")
    return path


def _open(path: Path, mode: str, monkeypatch) -> pread.PositionedFile:
    monkeypatch.setenv(pread.IO_ENV, mode)
    return pread.PositionedFile(path)


def test_direct_and_buffered_reads_agree(blob, monkeypatch):
    raw = np.frombuffer(blob.read_bytes(), np.uint8)
    direct, buffered = _open(blob, "direct", monkeypatch), _open(blob, "buffered", monkeypatch)
    assert (direct.granule, buffered.granule) == (pread.SECTOR, pread.PAGE)
    rng = np.random.default_rng(1)
    scratch = pread.aligned((1 << 21) + 2 * pread.ALIGN)
    for i in range(200):
        k = int(rng.integers(1, 9))  # several ranges: overlapping, adjacent, up to the end
        lo = rng.integers(0, raw.size, k)
        hi = np.minimum(lo + rng.integers(0, 1 << 21 if i % 10 == 0 else 20_000, k), raw.size)
        for f in (direct, buffered):
            got = f.fetch(lo, hi, scratch if i % 2 else None)
            assert got.data.ctypes.data % pread.ALIGN == got.starts[0] % pread.ALIGN \
                if got.starts.size else True
            for a, b in zip(lo, hi, strict=True):
                if b > a:
                    at = int(got.locate(np.array([a]))[0])
                    np.testing.assert_array_equal(got.data[at:at + b - a], raw[a:b])
            # every piece sits at its file offset modulo ALIGN (aligned buffers stay aligned)
            base = got.data.ctypes.data - int(got.pos[0]) if got.pos.size else 0
            assert all((base + p) % pread.ALIGN == s % pread.ALIGN
                       for p, s in zip(got.pos, got.starts, strict=True))
    direct.close()
    buffered.close()


def test_cold_files_read_in_sectors_warm_ones_in_pages(blob, monkeypatch):
    _evict(blob)
    assert pread.cached_fraction(os.open(blob, os.O_RDONLY), blob.stat().st_size) <= pread.COLD
    with _open(blob, "auto", monkeypatch) as f:
        assert (f.granule, f.mapped) == (pread.SECTOR, False)
    blob.read_bytes()  # now in the page cache
    with _open(blob, "auto", monkeypatch) as f:
        assert (f.granule, f.mapped) == (pread.PAGE, True)


def test_unused_counts_views_and_names_but_not_the_list():
    items = [np.zeros(10), np.zeros(10)]
    assert pread.unused(items, 0) and pread.unused(items, 1)
    view, name = items[0][2:], items[1]
    assert not pread.unused(items, 0) and not pread.unused(items, 1)
    del view, name
    assert pread.unused(items, 0) and pread.unused(items, 1)


def _mappings(path: Path) -> int:
    return sum(line.endswith(str(path)) for line in
               Path("/proc/self/maps").read_text().splitlines())


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="needs Linux /proc")
def test_mapped_windows_hold_the_file_bytes_until_unused(blob, monkeypatch):
    """A mapped window is the file's bytes where they lie (any offset, clipped at the end),
    and is unmapped by the next window once nothing refers to it any more."""
    raw = np.frombuffer(blob.read_bytes(), np.uint8)
    with _open(blob, "mapped", monkeypatch) as f:
        assert f.mapped
        for lo, n in ((0, 5000), (4097, 1 << 20), (raw.size - 7, 100), (raw.size, 10)):
            w = f.window(lo, n)
            np.testing.assert_array_equal(w.data, raw[lo:lo + n])
            assert (w.starts[0], w.ends[0], w.pos[0]) == (lo, min(lo + n, raw.size), 0)
        del w
        held = f.window(100, 10_000).data[5:]  # a view keeps it
        f.window(200_000, 10_000)
        assert _mappings(blob) == 2  # the held window and the last one
        np.testing.assert_array_equal(held, raw[105:10_100])
        del held
        f.window(300_000, 10_000)
        assert _mappings(blob) == 1
    assert _mappings(blob) == 0  # closed: nothing left mapped


def _resident_kib(path: Path) -> int:
    """Resident KiB of this process's mappings of ``path`` (/proc/self/smaps)."""
    total, ours = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        if "-" in line.split(" ", 1)[0]:  # a mapping's first line
            ours = line.endswith(str(path))
        elif ours and line.startswith("Rss:"):
            total += int(line.split()[1])
    return total


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="needs Linux /proc")
@pytest.mark.parametrize("mode", ["mapped", "buffered", "direct"])
def test_values_are_the_file_items_aligned(blob, monkeypatch, mode):
    """`values`: the items at any offset, aligned for their dtype. A mapped file's aligned
    items are a view of the mapping (read-only), made resident at once; misaligned ones,
    and any of a file read, are copied into an aligned buffer (``into`` when given)."""
    raw = blob.read_bytes()
    with _open(blob, mode, monkeypatch) as f:
        for dtype in ("<u2", "<i4", "<i8"):
            item = np.dtype(dtype).itemsize
            for lo in (0, item, 2, 34, 4096 * 3 + 8, len(raw) - 40 * item):
                count = min(1 << 18, (len(raw) - lo) // item)
                got = f.values(lo, count, dtype)
                np.testing.assert_array_equal(got, np.frombuffer(raw, dtype, count, lo))
                assert got.ctypes.data % item == 0
                view = mode == "mapped" and lo % item == 0
                assert got.flags.writeable != view
        if mode == "mapped":
            f.window(0, 1 << 20)  # a window is made resident only where it is used
            assert _resident_kib(blob) < 64
            held = f.values(8, 1 << 18, "<i4")
            assert _resident_kib(blob) >= (1 << 20) // 1024
            del held
        into = np.empty(100, np.int64)  # misaligned items: read into it, even if mapped
        assert np.shares_memory(f.values(2, 50, "<i8", into), into)
        with pytest.raises(ProfilerError, match=r"ends at byte 3,000,017, before the 8 bytes"):
            f.values(len(raw) - 4, 1, "<i8")


@pytest.mark.parametrize("mode", ["mapped", "buffered"])
def test_a_file_truncated_after_it_was_opened_is_one_line(tmp_path, monkeypatch, mode):
    """A file that shrank since it was opened gives one line, not a SIGBUS on first touch:
    Python's mmap refuses to map past the end, and the read that follows names it."""
    path = tmp_path / "t.bin"
    path.write_bytes(bytes(1 << 20))
    with _open(path, mode, monkeypatch) as f:
        assert f.values(0, 1000, "<u2").size == 1000
        os.truncate(path, 4096)
        with pytest.raises(ProfilerError, match="shrank while reading"):
            f.values(8192, 1000, "<u2")
        with pytest.raises(ProfilerError, match="shrank while reading"):
            f.window(8192, 2000)


def test_unknown_io_mode_is_a_user_error(blob, monkeypatch):
    monkeypatch.setenv(pread.IO_ENV, "mmap")
    with pytest.raises(ProfilerError, match="choose one of: auto, buffered, direct, mapped"):
        pread.PositionedFile(blob)


def _read_bytes() -> int:
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("read_bytes:"):
            return int(line.split()[1])
    raise AssertionError("no read_bytes")


@pytest.mark.skipif(not Path("/proc/self/io").exists(), reason="needs Linux /proc/self/io")
@pytest.mark.parametrize("offsets", [False, True])
def test_cold_scan_reads_about_the_length_column(tmp_path, monkeypatch, offsets):
    """200 record batches of 1000 rows (as `datasets` writes them) with ~100 KB of token ids
    each: a cold scan reads <= 1.2 x the column plus 1 KiB of metadata per batch, where
    whole pages would cost ~1.5-2 x."""
    import datasets

    n, rng = 200_000, np.random.default_rng(5)
    x = rng.integers(1, 50, n)
    ids = pa.ListArray.from_arrays(pa.array(np.r_[0, np.cumsum(x)].astype(np.int32)),
                                   pa.array(rng.integers(0, 50_000, int(x.sum()), np.int32)))
    path = tmp_path / "hf"
    datasets.Dataset(pa.table({"input_ids": ids, "length": pa.array(x)})).save_to_disk(
        str(path))
    shards = sorted(path.glob("data-*.arrow"))
    if not _direct_supported(shards[0]):
        pytest.skip("this filesystem has no O_DIRECT")
    monkeypatch.setenv(pread.IO_ENV, "auto")
    kw = {"offsets_of": "input_ids"} if offsets else {"column": "length"}
    gp.histogram(str(path), backend="numba", cap=64, **kw)  # imports and kernels, warm
    for shard in shards:
        _evict(shard)
    before = _read_bytes()
    h = gp.histogram(str(path), backend="numba", cap=64, **kw)
    read = _read_bytes() - before
    assert h.total == n and np.array_equal(h.counts, np.bincount(x, minlength=65))
    column = (n + 200) * 4 if offsets else n * 8  # int32 offsets (+1 per batch) or int64
    assert read <= 1.2 * column + 200 * 1024, (read, column)
