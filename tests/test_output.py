"""Output files: atomic for regular files, in place for FIFOs and character devices (never
replaced by a regular file), through symlinks to their targets, with the umask's mode for
new files and the old mode for replaced ones."""

from __future__ import annotations

import os
import stat
import threading

import pytest

from gpu_profiler import ProfilerError
from gpu_profiler.cli import main
from gpu_profiler.io.output import write_atomic


@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    yield
    os.umask(old)


def test_new_files_take_the_umask_and_replaced_ones_keep_their_mode(tmp_path, umask_022):
    new = tmp_path / "new.json"
    write_atomic(new, "x")
    assert stat.S_IMODE(new.stat().st_mode) == 0o644
    old = tmp_path / "old.json"
    old.write_text("before")
    old.chmod(0o640)
    write_atomic(old, "after")
    assert old.read_text() == "after" and stat.S_IMODE(old.stat().st_mode) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new.json", "old.json"]  # no temp


def test_a_symlink_is_kept_and_its_target_written(tmp_path):
    target = tmp_path / "real.json"
    target.write_text("before")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    write_atomic(link, "after")
    assert link.is_symlink() and target.read_text() == "after"


def test_a_fifo_is_written_in_place(tmp_path):
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    write_atomic(fifo, "through the pipe")
    reader.join(10)
    assert got == [b"through the pipe"] and stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_a_character_device_is_written_in_place(tmp_path, hf_dir, capsys):
    node = tmp_path / "null"
    try:
        os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # a /dev/null of our own
    except (PermissionError, OSError) as exc:
        pytest.skip(f"cannot make a device node here: {exc}")
    with pytest.raises(SystemExit) as exc:
        main(["profile", str(hf_dir[0]), "-q", "-f", "json", "-o", str(node)])
    assert exc.value.code == 0 and stat.S_ISCHR(os.stat(node).st_mode)
    full = tmp_path / "full"
    os.mknod(full, stat.S_IFCHR | 0o666, os.makedev(1, 7))  # a /dev/full: writes fail
    with pytest.raises(SystemExit) as exc:
        main(["profile", str(hf_dir[0]), "-q", "-f", "json", "-o", str(full)])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "cannot write" in err and stat.S_ISCHR(os.stat(full).st_mode)


def test_other_nodes_are_refused(tmp_path):
    import socket

    sock = tmp_path / "s.sock"
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(sock))
    try:
        with pytest.raises(ProfilerError, match="not a regular file"):
            write_atomic(sock, "x")
    finally:
        s.close()
    with pytest.raises(ProfilerError, match="is a directory"):
        write_atomic(tmp_path, "x")
