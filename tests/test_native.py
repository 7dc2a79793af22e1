"""The native kernel library: built by the install, called like the JIT, errors replayed
through the JIT; a library this machine cannot run (a CPU flag missing, a source changed
since an in-place build, missing, unloadable, its build failed) leaves the kernels to the
JIT, with the reason; the wheel holds the library."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import numpy as np
import pytest

from gpu_profiler import native
from gpu_profiler.kernels import ipc_format as fmt

ROOT = Path(__file__).resolve().parents[1]


def test_library_installed_and_loads_here():
    assert native.library() is not None, native.status()
    assert native.status() == f"native ({native.folder() / native.LIBRARY})"
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


def _copy(tmp_path: Path) -> Path:
    """The installed library, copied into ``tmp_path/kernels`` with its sidecar as a
    wheel's (no sources recorded)."""
    where = tmp_path / "kernels"
    where.mkdir()
    shutil.copy(native.folder() / native.LIBRARY, where / native.LIBRARY)
    said = native.sidecar(native.folder())
    said.pop("sources", None)
    (where / native.SIDECAR).write_text(json.dumps(said))
    assert native.why_not(where) == native.why_not(native.folder()) == ""
    return where


def _edit(where: Path, **changes) -> None:
    said = json.loads((where / native.SIDECAR).read_text())
    (where / native.SIDECAR).write_text(json.dumps({**said, **changes}))


def test_a_cpu_without_a_flag_the_library_needs(tmp_path):
    where = _copy(tmp_path)
    _edit(where, flags=["sse2", "gp_no_such_flag"], target="host")
    why = native.why_not(where)
    assert why.startswith("this CPU lacks gp_no_such_flag, which the native library was built "
                          "for (host): reinstall on this machine")
    fits = [level for level in native.LEVELS if native.level_flags(level) <= native.cpu_flags()]
    assert why.endswith(f", or build it with GPU_PROFILER_CPU={fits[-1]}")


def test_a_source_changed_since_an_in_place_build(tmp_path):
    where = _copy(tmp_path)
    source = tmp_path / "kernels" / "ipc.py"
    source.write_text("x = 1\n")
    st = source.stat()
    _edit(where, sources=[["kernels/ipc.py", st.st_size, st.st_mtime_ns]])
    assert native.why_not(where) == ""
    source.write_text("x = 2\n")
    assert native.why_not(where) == ("kernels/ipc.py changed since the native build: run "
                                     "`make` or `pip install -e .`")
    source.unlink()
    assert native.why_not(where).startswith("kernels/ipc.py is gone since the native build")


def test_missing_failed_or_incomplete_libraries(tmp_path):
    where = _copy(tmp_path)
    _edit(where, exports=sorted(set(native.EXPORTS) - {"walk"}))
    assert native.why_not(where) == ("the native library lacks the kernels walk: reinstall "
                                     "(`pip install .`)")
    (where / native.LIBRARY).unlink()
    assert native.why_not(where) == f"{where / native.LIBRARY} is missing: reinstall " \
                                    "(`pip install .`)"
    _edit(where, error="no C compiler (cc) to link the native kernels: install gcc")
    assert native.why_not(where) == ("the native build failed: no C compiler (cc) to link the "
                                     "native kernels: install gcc; fix that, then reinstall "
                                     "(`pip install .`)")
    (where / native.SIDECAR).unlink()
    assert native.why_not(where).startswith(f"no native kernel library in {where}: the "
                                            "install did not build one")


def test_the_in_place_build_records_every_source_it_was_built_from():
    said = native.sidecar(native.folder())
    if "sources" not in said:
        pytest.skip("not an in-place (editable) build")
    root = native.folder().parent
    stamped = {name for name, _, _ in said["sources"]}
    assert stamped == {os.path.relpath(p, root)
                       for p in native.key_sources(native.source_roots())}
    assert {"kernels/ipc.py", "gpu_profiler/native.py", "gpu_profiler/native_build.py"} <= stamped
    p = subprocess.run([sys.executable, "-m", "gpu_profiler.native_build"], capture_output=True,
                       text=True, timeout=120)  # current: not built again
    assert p.returncode == 0 and p.stdout.endswith("are up to date\n"), p.stdout + p.stderr


@pytest.mark.parametrize("env", [{"CC": "false"}, {"GPU_PROFILER_CPU": "pentium"}])
def test_a_failed_build_leaves_its_reason(tmp_path, env):
    """A build that fails (here in milliseconds, before compiling anything) leaves no library
    and a sidecar whose error the loader gives as its reason."""
    (tmp_path / native.LIBRARY).write_bytes(b"an older library")
    p = subprocess.run([sys.executable, "-m", "gpu_profiler.native_build", "--into",
                        str(tmp_path)], capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, **env))
    assert p.returncode == 1 and "the native CPU kernels were not built: " in p.stderr
    assert not (tmp_path / native.LIBRARY).exists()
    error = native.sidecar(tmp_path)["error"]
    assert error == ("false failed (exit 1)" if "CC" in env else
                     "GPU_PROFILER_CPU='pentium': choose one of host, x86-64, x86-64-v2, "
                     "x86-64-v3, x86-64-v4")
    assert native.why_not(tmp_path) == f"the native build failed: {error}; fix that, then " \
                                       "reinstall (`pip install .`)"


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="x86-64 levels")
def test_targets():
    from gpu_profiler import native_build

    cpu, features, flags = native_build.target("host")
    assert {"sse2", "cmov"} <= set(flags) <= native.cpu_flags()
    assert "+sse2" in features.split(",")
    assert native_build.target("x86-64-v3") == ("x86-64-v3", "",
                                       sorted(native.level_flags("x86-64-v3")))
    assert native.level_flags("x86-64-v2") < native.level_flags("x86-64-v3")


# The kernels of a scan, run where the library cannot serve (``where``): through the JIT.
FALLBACK = textwrap.dedent("""
    import json, sys, numpy as np
    from pathlib import Path
    import gpu_profiler as gp
    from gpu_profiler import native
    native.folder = lambda: Path(sys.argv[1])
    x = np.arange(-3, 1000) % 300
    h = gp.histogram(x, backend="numba", cap=100)
    print(json.dumps({"status": native.status(), "valid": h.valid, "above": h.above_count,
                      "numba": "numba" in sys.modules}))
""")


@pytest.mark.parametrize("case", ["flag", "unloadable", "native"])
def test_the_jit_serves_where_the_library_cannot(tmp_path, case):
    where = _copy(tmp_path)
    if case == "flag":
        _edit(where, flags=["gp_no_such_flag"])
    elif case == "unloadable":
        (where / native.LIBRARY).write_bytes(b"not a shared library")
    p = subprocess.run([sys.executable, "-c", FALLBACK, str(where)], capture_output=True,
                       text=True, timeout=600)
    assert p.returncode == 0 and not p.stderr, p.stderr
    got = json.loads(p.stdout)
    import gpu_profiler as gp

    ref = gp.histogram(np.arange(-3, 1000) % 300, backend="numpy", cap=100)
    assert (got["valid"], got["above"]) == (ref.valid, ref.above_count)
    assert got["numba"] == (case != "native")
    assert got["status"].startswith({
        "flag": f"numba JIT ({native.why_not(where)})",
        "unloadable": f"numba JIT (the native library cannot be loaded: {where}",
        "native": f"native ({where / native.LIBRARY})"}[case])


def test_native_0_forces_the_jit():
    env = dict(os.environ, GPU_PROFILER_NATIVE="0")
    p = subprocess.run([sys.executable, "-c", FALLBACK, str(native.folder())],
                       capture_output=True, text=True, timeout=600, env=env)
    assert json.loads(p.stdout)["status"] == "numba JIT (GPU_PROFILER_NATIVE=0)", p.stderr


def test_sources_cover_every_module_the_kernels_import(tmp_path):
    """A constant changed in a module a kernel imports (in a copy of the sources) is a
    source the library is built from; an unrelated module is not."""
    roots = native.source_roots()
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


@pytest.mark.slow
def test_a_portable_wheel_holds_the_library(tmp_path):
    """``pip wheel`` (in an isolated build environment: the declared build requirements)
    with ``GPU_PROFILER_CPU=x86-64-v2``: a platform wheel holding the library and its
    sidecar, code without AVX, which loads and gives the JIT's results."""
    if os.uname().machine != "x86_64":
        pytest.skip("x86-64 levels")
    src = tmp_path / "src"
    src.mkdir()
    for name in ("setup.py", "pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for name in ("gpu_profiler", "kernels"):
        shutil.copytree(ROOT / name, src / name,
                        ignore=shutil.ignore_patterns("__pycache__", "libkernels.*"))
    env = dict(os.environ, GPU_PROFILER_CPU="x86-64-v2")
    p = subprocess.run([sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "-q",
                        "-w", str(tmp_path / "dist")], capture_output=True, text=True,
                       timeout=1800, env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    wheel, = (tmp_path / "dist").glob("*.whl")
    assert wheel.name.startswith("gpu_profiler-0.1.0-py3-none-linux_x86_64"), wheel.name
    with zipfile.ZipFile(wheel) as z:
        z.extractall(tmp_path / "wheel")
        names = z.namelist()
    assert not [n for n in names if "__pycache__" in n or n.startswith("kernels/")], names
    where = tmp_path / "wheel" / "gpu_profiler" / "kernels"
    said = native.sidecar(where)
    assert said["target"] == "x86-64-v2" and "sources" not in said
    assert set(said["flags"]) == native.level_flags("x86-64-v2")
    assert said["exports"] == sorted(native.EXPORTS)
    assert native.why_not(where) == ""
    dis = subprocess.run(["objdump", "-d", str(where / native.LIBRARY)], capture_output=True,
                         text=True, check=True).stdout
    assert "%xmm" in dis and "%ymm" not in dis and "%zmm" not in dis
    p = subprocess.run([sys.executable, "-c", FALLBACK, str(where)], capture_output=True,
                       text=True, timeout=600)
    got = json.loads(p.stdout)
    assert got["status"] == f"native ({where / native.LIBRARY})" and not got["numba"]
    import gpu_profiler as gp

    ref = gp.histogram(np.arange(-3, 1000) % 300, backend="numpy", cap=100)
    assert (got["valid"], got["above"]) == (ref.valid, ref.above_count)
