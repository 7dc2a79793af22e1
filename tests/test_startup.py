"""Start-up: heavy modules load only when a scan needs them. The install built the CPU
kernels into a native library, which scans load without starting numba; through the JIT
instead, every numba kernel a scan uses is loaded from numba's on-disk cache, not compiled
again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gpu_profiler import native

# Scans covering every kernel signature the CLI uses on CPU: an HF dir (IPC stream) by
# length column and by list offsets, Parquet int32 with nulls, an auto cap,
# then reports every numba dispatcher's cache statistics and cache location.
WORKLOAD = textwrap.dedent("""
    import json, sys
    import numba
    from gpu_profiler import histogram
    hf, pqt = sys.argv[1], sys.argv[2]
    histogram(hf, backend="numba", cap=8192)
    histogram(hf, backend="numba", cap=8192, offsets_of="input_ids")
    histogram(hf, backend="numba")
    histogram(pqt, backend="numba", cap=100)
    histogram(pqt, backend="numba")
    stats = {}
    for name, mod in list(sys.modules.items()):
        if not name.startswith("gpu_profiler"):
            continue
        for attr, f in list(vars(mod).items()):
            if isinstance(f, numba.core.registry.CPUDispatcher) and f.signatures:
                stats[f"{name}.{attr}"] = {
                    "hits": sum(f.stats.cache_hits.values()),
                    "misses": sum(f.stats.cache_misses.values()),
                    "path": f._cache._cache_path}
    print(json.dumps({"stats": stats}))
""")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    import datasets

    d = tmp_path_factory.mktemp("startup")
    rng = np.random.default_rng(0)
    lens = rng.integers(1, 300, 500)
    ids = [rng.integers(0, 1000, n).tolist() for n in lens]
    datasets.Dataset.from_dict({"input_ids": ids, "length": lens.tolist()}).save_to_disk(
        str(d / "hf"))
    x = pa.array(rng.integers(0, 200, 5000).astype(np.int32), mask=rng.random(5000) < 0.1)
    pq.write_table(pa.table({"length": x}), d / "l.parquet")
    return d / "hf", d / "l.parquet"


def run(code: str, *args: str, env: dict[str, str] | None = None) -> str:
    p = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                       timeout=600, env=env)
    assert p.returncode == 0, p.stderr
    return p.stdout


def test_second_process_starts_no_numba(corpus):
    hf, pqt = map(str, corpus)
    code = WORKLOAD.replace("import numba\n", "").split("stats = {}")[0] + textwrap.dedent("""
        from gpu_profiler import native
        print(json.dumps({"numba": "numba" in sys.modules, "status": native.status()}))
    """)
    report = json.loads(run(code, hf, pqt).splitlines()[-1])
    assert report == {"numba": False, "status": f"native ({native.folder() / native.LIBRARY})"}


def test_second_process_compiles_nothing_through_the_jit(corpus):
    hf, pqt = map(str, corpus)
    env = dict(os.environ, GPU_PROFILER_NATIVE="0")
    run(WORKLOAD, hf, pqt, env=env)  # fills the cache for any signature not cached yet
    report = json.loads(run(WORKLOAD, hf, pqt, env=env).splitlines()[-1])
    if any(v["misses"] for v in report["stats"].values()):
        # numba rewrites a kernel's cache index unlocked: another pytest worker saving a
        # signature of the same kernel at that moment can drop this one's entry. Filled
        # again, a working cache then hits; a broken one misses every time.
        report = json.loads(run(WORKLOAD, hf, pqt, env=env).splitlines()[-1])
    stats = report["stats"]
    assert "gpu_profiler.kernels.cpu.histogram_block" in stats
    assert "gpu_profiler.kernels.ipc.walk" in stats
    compiled = {k: v for k, v in stats.items() if v["misses"]}
    assert not compiled, f"compiled again instead of loaded from the cache: {compiled}"
    assert all(v["hits"] for v in stats.values())


def test_import_and_help_stay_light():
    """... and leave the environment alone (numba's settings are the user's)."""
    code = ("import os, sys; env = dict(os.environ); import gpu_profiler, gpu_profiler.cli.app; "
            "print(sorted(m for m in ('numba', 'numba.cuda', 'pyarrow', 'numpy') "
            "if m in sys.modules), env == os.environ)")
    assert run(code).strip() == "[] True"


def test_a_profile_loads_what_it_runs(corpus):
    """A plain ``profile`` builds only its own command's options and loads no module of the
    commands, analyses, options and strategies it does not use (each one costs a small
    scan's process a few milliseconds); asking for one loads it."""
    code = textwrap.dedent("""
        import json, sys
        import typer.main
        from gpu_profiler.cli import main
        built = []
        get = typer.main.get_command
        typer.main.get_command = lambda app: built.append(len(app.registered_commands)) or get(app)
        try:
            main(sys.argv[1:])
        except SystemExit:
            pass
        print(json.dumps([built, sorted(m for m in sys.modules if m.startswith("gpu_profiler"))]))
    """)
    lazy = {"gpu_profiler.analysis.blend", "gpu_profiler.analysis.schedule",
            "gpu_profiler.analysis.compare", "gpu_profiler.analysis.mixture",
            "gpu_profiler.shapes", "gpu_profiler.gates", "gpu_profiler.tasks",
            "gpu_profiler.groups", "gpu_profiler.cli.report", "gpu_profiler.cli.diagnose",
            "gpu_profiler.cli.blend"}
    hf = str(corpus[0])
    built, loaded = json.loads(run(code, "profile", hf, "-q", "-f", "json").splitlines()[-1])
    assert built == [1] and "gpu_profiler.api" in loaded and not lazy & set(loaded)
    assert "gpu_profiler.analysis.bounds" in loaded  # (one bucket has every batch: advised)
    built, loaded = json.loads(run(code, "profile", hf, "-q", "-f", "json", "--bounds",
                                   "0,100,200,301").splitlines()[-1])
    assert "gpu_profiler.analysis.bounds" not in loaded  # (no bucket dominates: no proposal)
    built, loaded = json.loads(run(code, "profile", hf, "-q", "-f", "json", "--fail-if",
                                   "p99>1e9", "--group-by", "@file").splitlines()[-1])
    assert {"gpu_profiler.gates", "gpu_profiler.groups"} <= set(loaded)
    from gpu_profiler.cli.app import ELSEWHERE, app

    built, loaded = json.loads(run(code, "--help").splitlines()[-1])
    assert built == [len(app.registered_commands) + len(ELSEWHERE)]
    assert {f"gpu_profiler.cli.{name}" for name in ELSEWHERE} <= set(loaded)
    built, loaded = json.loads(run(code, "blend", "--help").splitlines()[-1])
    assert built == [1] and "gpu_profiler.cli.blend" in loaded
    assert "gpu_profiler.cli.report" not in loaded


def test_public_names_resolve_lazily():
    code = ("import gpu_profiler as gp, gpu_profiler.histogram, sys; "
            "from gpu_profiler.api import histogram; "
            "assert gp.histogram is histogram, gp.histogram; "
            "assert all(getattr(gp, n) is not None for n in gp.__all__); print('ok')")
    assert run(code).strip() == "ok"


@pytest.mark.skipif(os.path.exists("/dev/nvidiactl") or os.path.exists("/dev/dxg"),
                    reason="a GPU driver is present")
def test_auto_backend_skips_numba_cuda_without_a_driver():
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    code = ("import sys; from gpu_profiler import get_backend; b = get_backend('auto'); "
            "print(b.name, 'numba.cuda' in sys.modules)")
    assert run(code, env=env).split() == ["numba", "False"]


# A scan on auto of an input below engine.SMALL_SCAN_BYTES (or, "large", taken as above
# it); the first line says whether numba was ever imported, and the backend.
SCAN = textwrap.dedent("""
    import sys
    from gpu_profiler import engine, profile
    if sys.argv[2] == "large":
        engine.SMALL_SCAN_BYTES = 0
    r = profile(sys.argv[1], column="length")
    print("numba" in sys.modules, r.backend)
    print(r.to_dict()["buckets"])
""")


@pytest.fixture(scope="module")
def lengths_dir(tmp_path_factory):
    import datasets

    d = tmp_path_factory.mktemp("scan") / "hf"
    lens = np.random.default_rng(1).integers(0, 9000, 20_000)
    datasets.Dataset.from_dict({"length": lens}).save_to_disk(str(d), num_shards=3)
    return d


def test_scans_run_the_native_kernels_else_the_jit(lengths_dir):
    small = run(SCAN, str(lengths_dir), "small").splitlines()
    large = run(SCAN, str(lengths_dir), "large").splitlines()
    jit = run(SCAN, str(lengths_dir), "small", env=dict(os.environ, GPU_PROFILER_NATIVE="0"))
    jit = jit.splitlines()
    assert small[0] == "False numba"  # the native kernels: numba never imported
    assert large[0] == "False numba"
    assert jit[0] == "True numba"  # no library: the same kernels through numba's JIT
    assert small[1] == large[1] == jit[1]  # same table every way
