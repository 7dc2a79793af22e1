"""The native kernel library: built here, called like the JIT, errors replayed through the
JIT, and a machine that cannot build it falls back to the JIT with the reason."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from gpu_profiler import native
from gpu_profiler.kernels import ipc_format as fmt


def test_library_builds_and_loads_here():
    assert native.library() is not None, native.status()
    assert native.status().startswith("native (")
    assert isinstance(native.kernel("walk"), native._Native)


def test_errors_are_replayed_with_the_jit_arguments():
    """A kernel that raises natively raises the same Corrupt(position, reason) as the JIT."""
    b = np.frombuffer(b"\xff\xff\xff\xff\xf7\xff\xff\xff", np.uint8)  # metadata length -9
    caught = []
    for k in (native.kernel("frame"), native._Jit("frame")):
        with pytest.raises(fmt.Corrupt) as exc:
            k(b, 0)
        caught.append(exc.value.args)
    assert caught[0] == caught[1] == (4, fmt.E_FRAME)


def test_results_and_outputs_match_the_jit():
    x = np.random.default_rng(0).integers(-5, 300, 10_000).astype(np.int32)
    starts, counts = np.array([0, 5000], np.int64), np.array([4000, 5000], np.int64)
    ends = np.cumsum(counts)
    valid = np.random.default_rng(1).random(9000) > 0.1
    got = []
    for k in (native.kernel("histogram_int32"), native._Jit("histogram_int32")):
        row, st = np.zeros(202, np.int32), np.array([0, 0, -1, -1, 0, 0], np.int64)
        assert k(x, starts, counts, ends, valid, 100, 8900, 200, 0, row, st) == ()
        got.append((row, st))
    np.testing.assert_array_equal(got[0][0], got[1][0])
    np.testing.assert_array_equal(got[0][1], got[1][1])
    assert got[0][0].sum() + got[0][1][4] == 8800  # every sample binned or null


def test_arguments_are_checked():
    k = native.kernel("offset_lengths_int32")
    offsets = np.arange(13, dtype=np.int32)
    rows = np.array([[5, 0], [6, 0]], np.int64)[:, 0]  # not contiguous: copied, fine
    dst = np.zeros(11, np.int64)
    k(offsets, np.array([0, 6], np.int64), rows, dst, np.array([0, 5], np.int64))
    assert dst.tolist() == [1] * 11
    with pytest.raises(TypeError, match="argument 3 must be a C-contiguous int64"):
        k(offsets, np.array([0]), np.array([5]), np.zeros(11, np.int32), np.array([0]))
    with pytest.raises(TypeError, match="argument 3 must be a C-contiguous int64"):
        k(offsets, np.array([0]), np.array([5]), np.zeros((11, 2))[:, 0], np.array([0]))
    with pytest.raises(TypeError, match="takes 5 arguments"):
        k(offsets)


FALLBACK = textwrap.dedent("""
    import json, sys, numpy as np
    import gpu_profiler as gp
    from gpu_profiler import native
    x = np.arange(-3, 1000) % 300
    h = gp.histogram(x, backend="numba", cap=100)
    print(json.dumps({"status": native.status(build=False), "valid": h.valid,
                      "above": h.above_count,
                      "numba": "numba" in sys.modules}))
""")


def _fallback(env: dict[str, str]) -> dict:
    import json

    p = subprocess.run([sys.executable, "-c", FALLBACK], capture_output=True, text=True,
                       timeout=600, env=env)
    assert p.returncode == 0, p.stderr
    tried = "building the native CPU kernels" in p.stderr  # said on any stderr
    assert tried == ("build failed after" in p.stderr), p.stderr
    return {**json.loads(p.stdout), "tried": tried}


@pytest.mark.parametrize("cc", ["false", "no-such-compiler"])
def test_no_working_compiler_falls_back_to_the_jit(tmp_path, cc):
    env = dict(os.environ, CC=cc, NUMBA_CACHE_DIR=str(tmp_path))
    import gpu_profiler as gp

    ref = gp.histogram(np.arange(-3, 1000) % 300, backend="numpy", cap=100)
    want = {"valid": ref.valid, "above": ref.above_count, "numba": True}
    first = _fallback(env)
    assert {k: first[k] for k in want} == want
    assert native.status(build=False) != first["status"]  # this process: a library
    if cc == "false":  # a compiler that fails: said, recorded, not retried
        assert first["status"].startswith("numba JIT (the native build failed: ")
        assert first["tried"]
        assert list(tmp_path.glob("native-*.so.failed"))
        assert not list(tmp_path.glob("native-*.so"))
        again = _fallback(env)
        assert again["status"] == first["status"] and not again["tried"]
    else:
        assert "no C compiler" in first["status"] and not first["tried"]


def test_first_build_in_a_new_cache_folder_says_so_on_any_stderr(tmp_path):
    """(A library of one kernel, built as the whole one is: the suite builds that once.)"""
    cache = tmp_path / "new" / "cache"
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache))
    one = "from gpu_profiler import native; native.EXPORTS = {'frame': native.EXPORTS['frame']}; "
    name = subprocess.run([sys.executable, "-c", one + "print(native._library_path().stem)"],
                          env=env, text=True, capture_output=True, check=True).stdout.strip()
    stale = cache / f"{name}.build-killed"  # what a build killed midway leaves
    (stale / "x").mkdir(parents=True)
    code = one + "print(native.status()); print(native.kernel('frame'))"
    # Not a terminal: a cluster job's log must say why the first call takes minutes.
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, timeout=600)
    rc, out, err = p.returncode, p.stdout, p.stderr
    assert rc == 0 and out.startswith(b"native (") and b"_Native" in out, out
    assert b"building the native CPU kernels" in err
    assert re.search(rb"native CPU kernels built in \d+ s", err), err
    assert [p.stem for p in cache.glob("native-*.so")] == [name]
    assert not list(cache.glob("*.build-*"))  # the stale folder and the build's own, gone


def test_status_without_building(tmp_path):
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path))
    code = "from gpu_profiler import native; print(native.status(build=False))"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       timeout=120)
    assert p.returncode == 0 and "built by the first scan" in p.stdout
    assert not list(tmp_path.iterdir())


def test_the_key_covers_every_module_the_kernels_import(tmp_path):
    """A constant changed in a module a kernel imports (in a copy of the sources) changes
    the library's key, so a stale library is never loaded; an unrelated module does not."""
    import shutil

    roots = native._roots()
    sources = native.key_sources(roots)
    names = {p.relative_to(p.parents[1]).as_posix() for p in sources}
    assert {"kernels/stats.py", "kernels/ipc_format.py", "kernels/cpu.py"} <= names
    copy = {pkg: tmp_path / pkg for pkg in roots}
    for pkg, folder in roots.items():
        shutil.copytree(folder, copy[pkg], ignore=shutil.ignore_patterns("__pycache__"))

    def key(r):
        return [p.read_bytes() for p in native.key_sources(r)]

    assert key(copy) == key(roots)
    (copy["gpu_profiler"] / "render" / "table.py").write_text("# unrelated\n")
    assert key(copy) == key(roots)
    stats = copy["gpu_profiler.kernels"] / "stats.py"
    stats.write_text(stats.read_text().replace("range(6)", "range(1, 7)"))
    assert key(copy) != key(roots)
