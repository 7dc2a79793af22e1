"""Many files at once (`gpu_profiler.io.files`): the sizes the native kernel looks up,
natively and through the JIT, in threads, are ``os.lstat`` 's answers for every kind of path
a listing meets; a Dataset dir listed that way names each bad shard as before, at any
size; names are encoded for a kernel that opens files itself; the collector is given
back."""

from __future__ import annotations

import gc
import json
import os
import shutil
import stat

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import run_cli

import gpu_profiler as gp
from gpu_profiler.io import files
from gpu_profiler.readers import open_source


def _lstat_size(path: str) -> int:
    """The reference: what a size lookup (no link followed) must say of ``path``."""
    try:
        st = os.lstat(path)
    except OSError:
        return files.MISSING
    return st.st_size if stat.S_ISREG(st.st_mode) else files.OTHER


def _stat_found(path: str) -> files.Found:
    """The reference: what a look (a link followed) must say of ``path``."""
    try:
        st = os.stat(path)
    except OSError:
        return files.Found(files.MISSING, (0, 0), None)
    if not stat.S_ISREG(st.st_mode):
        return files.Found(files.OTHER, (0, 0), None)
    with open(path, "rb") as f:
        head = f.read(16)
    return files.Found(st.st_size, (os.major(st.st_dev) << 32 | os.minor(st.st_dev),
                                    st.st_ino), head)


@pytest.fixture
def zoo(tmp_path) -> dict[str, str]:
    """One path of every kind a listing may meet."""
    d = tmp_path
    out = {}
    for name, size in (("empty", 0), ("one", 1), ("page", 4097), ("mib", 1 << 20)):
        (d / name).write_bytes(b"x" * size)
        out[name] = str(d / name)
    odd = os.path.join(os.fsencode(d), b"\xff\xfe-not-utf8")
    with open(odd, "wb") as f:
        f.write(b"abc")
    out["not utf-8"] = os.fsdecode(odd)
    out["longest name"] = str(d / ("n" * 255))
    (d / ("n" * 255)).write_bytes(b"12345")
    (d / "link").symlink_to(d / "page")
    out["link"] = str(d / "link")
    (d / "dangling").symlink_to(d / "nowhere")
    out["dangling link"] = str(d / "dangling")
    (d / "dir").mkdir()
    out["directory"] = str(d / "dir")
    os.mkfifo(d / "fifo")
    out["fifo"] = str(d / "fifo")
    out["missing"] = str(d / "missing")
    out["through a file"] = str(d / "one" / "x")
    out["relative"] = os.path.relpath(d / "page")
    out["/dev/null"] = "/dev/null"
    return out


def test_every_kind_of_path_gets_lstats_and_stats_answers(zoo, kernels, monkeypatch):
    expected = {"empty": 0, "one": 1, "page": 4097, "mib": 1 << 20, "not utf-8": 3,
                "longest name": 5, "link": files.OTHER, "dangling link": files.OTHER,
                "directory": files.OTHER, "fifo": files.OTHER, "missing": files.MISSING,
                "through a file": files.MISSING, "relative": 4097, "/dev/null": files.OTHER}
    assert {k: _lstat_size(p) for k, p in zoo.items()} == expected  # the reference agrees
    paths = list(zoo.values()) * 7  # several threads, each with a share of every kind
    want = [expected[k] for k in zoo] * 7
    found = [_stat_found(p) for p in paths]
    looked = {k: _stat_found(p) for k, p in zoo.items()}
    assert looked["link"] == looked["page"] and looked["link"].head == b"x" * 16
    assert looked["dangling link"].size == files.MISSING and looked["mib"].size == 1 << 20
    assert files.sizes(paths) == want and files.look(paths) == found  # in Python
    monkeypatch.setattr(files, "NATIVE_FROM", 1)
    asked = _asked_again(monkeypatch)
    for per_thread in (1000, 5, 1):
        monkeypatch.setattr(files, "PER_THREAD", per_thread)
        asked.clear()
        assert files.sizes(paths) == want, per_thread
        assert asked == [p for p, n in zip(paths, want, strict=True) if n == files.MISSING]
        asked.clear()
        assert files.look(paths) == found, per_thread
        assert asked == [p for p, f in zip(paths, found, strict=True)
                         if f.size == files.MISSING]
    assert files.sizes([]) == [] and files.look([]) == []


def _asked_again(monkeypatch) -> list[str]:
    """The paths `files.sizes` and `files.look` ask Python about from now on (only what
    the kernel found missing or could not read, once the kernel looks them up)."""
    asked: list[str] = []
    size, look = files._size, files._look
    monkeypatch.setattr(files, "_size", lambda p: asked.append(p) or size(p))
    monkeypatch.setattr(files, "_look", lambda p, *heads: asked.append(p) or look(p, *heads))
    return asked


def test_what_the_kernel_cannot_look_up_is_asked_again(zoo, monkeypatch):
    """A sandbox that refuses ``statx`` (EPERM), or a file the kernel cannot open, leaves
    the answer to Python; so does a name that cannot be encoded, and a C library without
    ``statx``."""
    paths = list(zoo.values())
    want = [_lstat_size(p) for p in paths]
    found = [_stat_found(p) for p in paths]
    monkeypatch.setattr(files, "NATIVE_FROM", 1)

    def refused(names, starts, lo, hi, follow, flags, buf, heads, width, out):
        out[lo:hi] = (files.MISSING, 0, 0, 0)
        return ()

    def unreadable(names, starts, lo, hi, follow, flags, buf, heads, width, out):
        out[lo:hi] = (7, 1, 2, -1)
        return ()

    def unidentified(names, starts, lo, hi, follow, flags, buf, heads, width, out):
        out[lo:hi] = (7, 1, -1, 0)  # a filesystem that did not say the inode
        return ()

    asked = _asked_again(monkeypatch)
    for kernel in (refused, unreadable, unidentified):
        with monkeypatch.context() as mp:
            mp.setattr(files.native, "kernel", lambda name, k=kernel: k)
            asked.clear()
            assert files.look(paths) == found and len(asked) == len(paths)
    with monkeypatch.context() as mp:
        mp.setattr(files.native, "kernel", lambda name: refused)
        assert files.sizes(paths) == want
    asked.clear()
    assert files.sizes([*paths, "lone-\ud800"]) == [*want, files.MISSING]
    assert len(asked) == len(paths) + 1
    with monkeypatch.context() as mp:  # a C library without statx (glibc before 2.28)
        mp.delitem(files.native.EXPORTS, "look")
        asked.clear()
        assert files.sizes(paths) == want and files.look(paths) == found
        assert len(asked) == 2 * len(paths)


def test_thousands_of_paths_are_looked_up_by_the_kernel(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    want = rng.integers(0, 3000, files.NATIVE_FROM * 3).tolist()
    paths = []
    for i, n in enumerate(want):
        p = tmp_path / f"s{i:05d}"
        p.write_bytes(b"\0" * n)
        paths.append(str(p))
    asked = _asked_again(monkeypatch)
    assert files.sizes(paths) == want and asked == []
    assert files.look(paths) == [_stat_found(p) for p in paths] and asked == []


@pytest.mark.parametrize("lookup", ["python", "kernel"])
def test_a_walk_or_glob_lists_each_file_once_in_path_order(tmp_path, monkeypatch, lookup):
    """Links to a file or a folder, and a link loop that a ``**`` glob goes round (until
    its names pass the kernel's 40 links), name each shard once (its shallowest name);
    FIFOs and dangling links are no shards; each file's format is told from its first
    bytes, whatever its name."""
    if lookup == "kernel":
        monkeypatch.setattr(files, "NATIVE_FROM", 1)
    asked = _asked_again(monkeypatch)
    d = tmp_path / "d"
    (d / "sub").mkdir(parents=True)
    for name, n in (("b.parquet", 3), ("sub/a.parquet", 2), ("z.parquet", 4)):
        pq.write_table(pa.table({"length": list(range(n))}), d / name)
    pq.write_table(pa.table({"length": [5]}), d / "c.arrow")  # Parquet, whatever its name
    (d / "sub" / "a.parquet").rename(d / "sub" / "real")
    (d / "sub" / "a.parquet").symlink_to("real")  # named .parquet, found, is "real"
    (d / "loop").symlink_to(d, target_is_directory=True)
    (d / "alias.parquet").symlink_to(d / "z.parquet")
    (d / "gone.parquet").symlink_to(d / "nowhere")
    os.mkfifo(d / "fifo.parquet")
    names = ["alias.parquet", "b.parquet", "c.arrow", "sub/a.parquet"]
    want = [str(d / n) for n in names]
    for source in (str(d), str(d / "**" / "*.*"), f"{d}/./**/*.*", f"{d}//"):
        parts = open_source(source)[""]
        assert [p.label for p in parts] == want, source
        assert [type(p).__name__ for p in parts] == ["ParquetPart"] * 4
        assert [p.nbytes for p in parts] == [os.stat(w).st_size for w in want]
    with monkeypatch.context() as mp:  # named as `Path` names them: no "./"
        mp.chdir(d)
        for source in (".", "./**/*.*", "**/*.*", ".//"):
            assert [p.label for p in open_source(source)[""]] == names, source
    if lookup == "kernel":  # Python is asked only what is missing: the dangling link,
        # and the names that go round the loop more times than a path may follow links
        assert asked and {_stat_found(p).size for p in asked} == {files.MISSING}


@pytest.mark.parametrize("lookup", ["python", "kernel"])
def test_a_given_format_reads_no_heads(tmp_path, monkeypatch, lookup):
    if lookup == "kernel":
        monkeypatch.setattr(files, "NATIVE_FROM", 1)
    for i in range(3):
        pq.write_table(pa.table({"length": [i]}), tmp_path / f"{i}.parquet")
    monkeypatch.setattr(files, "head", None)  # reading one raises
    called = []
    look = files._native
    monkeypatch.setattr(files, "_native",
                        lambda *a, **k: called.append(k["width"]) or look(*a, **k))
    assert gp.histogram(tmp_path, format="parquet", cap=9).total == 3
    assert called == [0]  # no head asked of the kernel either


def test_suffixes_are_paths_suffixes():
    from pathlib import Path

    from gpu_profiler.readers.base import spelled, suffix

    for p in ("a.bin", "..arrow", ".arrow", "a.", "x/y.tar.gz", "dir.arrow/file", "a..b",
              "/", "", "a/b/.c.d", "...", "a.b/", "x/..bin"):
        assert suffix(p) == Path(p).suffix, p
        assert spelled(p) == (str(Path(p)) if p else p), p
    for p in ("./a", "a//b", "a/./b", "a/.", "//a", "/a/b/", "../a", "a/../b", "./"):
        assert spelled(p) == str(Path(p)), p


def test_names_are_encoded_back_to_back_and_refuse_a_nul():
    paths = ["/a/b", "c", os.fsdecode(b"/x/\xff\xc3\xa9y"), ""]
    blob, starts = files.names(paths)
    for p, at in zip(paths, starts, strict=True):
        assert bytes(blob[at:]).split(b"\0")[0] == os.fsencode(p)
    assert blob[-1] == 0 and blob.size == sum(len(os.fsencode(p)) + 1 for p in paths)
    assert files.names([])[1].size == 0
    with pytest.raises(ValueError, match="NUL"):
        files.names(["a\0b", "c"])


def test_the_collector_is_paused_and_given_back():
    assert gc.isenabled()
    with pytest.raises(KeyError), files.collector_paused():
        assert not gc.isenabled()
        raise KeyError
    assert gc.isenabled()
    gc.disable()
    try:
        with files.collector_paused():
            pass
        assert not gc.isenabled()  # a caller's choice is kept
    finally:
        gc.enable()


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """A Dataset dir of 8 shards written by `datasets`, and its lengths."""
    lengths = np.random.default_rng(3).integers(1, 500, 4_000)
    path = tmp_path_factory.mktemp("hf") / "ds"
    datasets.Dataset.from_dict({"length": lengths}).save_to_disk(str(path), num_shards=8)
    return path, lengths


@pytest.mark.parametrize("lookup", ["python", "kernel"])
def test_a_dataset_listed_either_way_names_its_bad_shard(dataset, tmp_path, capsys,
                                                         monkeypatch, lookup):
    if lookup == "kernel":
        monkeypatch.setattr(files, "NATIVE_FROM", 1)
    asked = _asked_again(monkeypatch)
    src, lengths = dataset
    want = np.bincount(lengths, minlength=501)
    ds = tmp_path / "ds"
    shutil.copytree(src, ds)
    shards = [f["filename"] for f in json.loads((ds / "state.json").read_text())["_data_files"]]
    assert gp.histogram(ds, cap=500).counts.tolist() == want.tolist()
    assert len(asked) == (0 if lookup == "kernel" else len(shards))
    with monkeypatch.context() as mp:  # named as `Path(".") / name` names them
        mp.chdir(ds)
        assert [p.label for p in open_source(".")[""]] == shards
        assert [p.label for p in open_source(str(ds))[""]] == [str(ds / s) for s in shards]
    # A shard that is a link to a file inside the dataset is followed.
    (ds / shards[2]).rename(ds / "moved.arrow")
    (ds / shards[2]).symlink_to("moved.arrow")
    assert gp.histogram(ds, cap=500).counts.tolist() == want.tolist()
    # A link that leads outside it is refused; so is a shard that is missing, a folder or
    # a FIFO (whose opening would wait for a writer).
    (ds / shards[2]).unlink()
    (ds / shards[2]).symlink_to(tmp_path / "outside.arrow")
    (tmp_path / "outside.arrow").write_bytes((ds / "moved.arrow").read_bytes())
    _one_line(ds, capsys, f"a shard '{shards[2]}' lies outside")
    (ds / shards[2]).unlink()
    _one_line(ds, capsys, f"{ds / shards[2]}: shard listed in state.json is missing")
    (ds / shards[2]).mkdir()
    _one_line(ds, capsys, f"{ds / shards[2]}: shard listed in state.json is missing")
    (ds / shards[2]).rmdir()
    os.mkfifo(ds / shards[2])
    _one_line(ds, capsys, f"{ds / shards[2]}: shard listed in state.json is missing")


def _one_line(path, capsys, says: str) -> None:
    rc, out, err = run_cli(["profile", path, "-q"], capsys)
    assert rc == 2 and out == "" and err.strip().splitlines() == [err.strip()], err
    assert says in err, err
