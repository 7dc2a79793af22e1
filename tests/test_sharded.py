"""Scans shard by shard without an engine: ``--part I/N`` slices merged back equal the
whole and merge refuses duplicates and gaps; a scan SIGKILLed partway and rerun with
``--cache-dir`` gives the identical result, rescanning only the unfinished shards; corrupt
cache entries are rejected; ``--skip-bad-shards``; and the single-process path imports no
dask."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import run_cli

import gpu_profiler as gp
from gpu_profiler.errors import ProfilerError
from gpu_profiler.readers import open_source
from gpu_profiler.slices import parse_part, select


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    """Nine Parquet shards of uneven sizes, with nulls and negative lengths."""
    d = tmp_path_factory.mktemp("shards")
    rng = np.random.default_rng(4)
    for i in range(9):
        n = 200 + 150 * (i % 4)
        x = pa.array(rng.integers(-2, 10000, n), mask=rng.random(n) < 0.05)
        pq.write_table(pa.table({"length": x}), d / f"s{i}.parquet")
    return d


def _profile(args, capsys, code=0):
    got, out, err = run_cli(["profile", *args, "-q", "-f", "json"], capsys)
    assert got == code, err
    return json.loads(out), err


def test_slices_are_a_balanced_partition_of_the_shards(shards):
    items = [("", p) for p in open_source(str(shards))[""]]
    cut = [select(items, i, 4) for i in range(4)]
    assert [it for c in cut for it in c] == items  # every shard once, in order
    sizes = [sum(p.nbytes for _, p in c) for c in cut]
    assert max(sizes) - min(sizes) <= 2 * max(p.nbytes for _, p in items)


@pytest.mark.parametrize("text", ["4/4", "-1/4", "1", "a/b", "0/0"])
def test_bad_part_is_one_line(text):
    with pytest.raises(ProfilerError, match="--part must be I/N"):
        parse_part(text)


def test_merged_parts_equal_the_whole(shards, tmp_path, capsys):
    whole, _ = _profile([shards, "--save-hist", tmp_path / "whole.json"], capsys)
    for i in range(3):
        part, _ = _profile([shards, "--part", f"{i}/3", "--save-hist", tmp_path / f"p{i}.json"],
                           capsys)
        assert (part["part"], part["parts"]) == (i, 3)
        assert 0 < part["total_samples"] < whole["total_samples"]
    code, _, err = run_cli(["merge", *(tmp_path / f"p{i}.json" for i in (2, 0, 1)),
                            "-o", tmp_path / "total.json"], capsys)
    assert code == 0, err
    assert gp.histogram(tmp_path / "total.json") == gp.histogram(tmp_path / "whole.json")
    merged, _ = _profile([tmp_path / "total.json"], capsys)  # every command takes it
    assert merged["buckets"] == whole["buckets"]


def test_merge_refuses_duplicates_gaps_and_other_scans(shards, tmp_path, capsys):
    for i in range(3):
        _profile([shards, "--part", f"{i}/3", "--save-hist", tmp_path / f"p{i}.json"], capsys)
    _profile([shards, "--part", "0/2", "--save-hist", tmp_path / "half.json"], capsys)
    hist = gp.histogram(shards, part="0/3", cap=4096)  # profile bins the whole range
    hist.save(tmp_path / "cap.json", {**json.loads((tmp_path / "p0.json").read_text())[
        "provenance"], "cap": 4096})
    p = [str(tmp_path / f"p{i}.json") for i in range(3)]
    for args, message in [([p[0], p[1], p[1], p[2]], f"slice 1/3 is counted twice: in {p[1]}"),
                          ([p[0], p[2]], "slice 1 is missing"),
                          ([*p, str(tmp_path / "half.json")], "the number of slices differs"),
                          ([str(tmp_path / "cap.json"), *p[1:]], "the cap differs")]:
        code, _, err = run_cli(["merge", *args, "-o", tmp_path / "out.json"], capsys)
        assert code == 2 and message in err, err
        assert not (tmp_path / "out.json").exists()


KILLED = textwrap.dedent("""
    import os, signal, sys
    from gpu_profiler import cache
    from gpu_profiler.cli import main
    put, stored = cache.ShardCache.put, []
    def put_then_die(self, key, hist):
        put(self, key, hist)
        stored.append(key)
        if len(stored) == int(sys.argv[1]):
            os.kill(os.getpid(), signal.SIGKILL)
    cache.ShardCache.put = put_then_die
    main(sys.argv[2:])
""")


def test_scan_killed_partway_resumes_from_the_cache(shards, tmp_path, capsys):
    whole, _ = _profile([shards], capsys)
    cache = tmp_path / "cache"
    killed = subprocess.run([sys.executable, "-c", KILLED, "4", "profile", str(shards), "-q",
                             "--cache-dir", str(cache)], capture_output=True)
    assert killed.returncode == -9
    resumed, _ = _profile([shards, "--cache-dir", cache], capsys)
    assert resumed["cache"] == {"reused": 4, "scanned": 5, "rejected": []}
    again, _ = _profile([shards, "--cache-dir", cache], capsys)
    assert again["cache"] == {"reused": 9, "scanned": 0, "rejected": []}
    for d in (whole, resumed, again):
        d.pop("seconds"), d.pop("cache", None)
    assert resumed == whole and again == whole


def test_corrupt_and_foreign_entries_are_rejected_and_rescanned(shards, tmp_path, capsys):
    cache = tmp_path / "cache"
    first, _ = _profile([shards, "--cache-dir", cache], capsys)
    entries = sorted(cache.glob("*.entry"))
    assert len(entries) == 9
    raw = bytearray(entries[0].read_bytes())
    raw[-8 * 100] ^= 1  # one bit of a count
    entries[0].write_bytes(bytes(raw))
    entries[1].write_bytes(entries[2].read_bytes())  # another shard's entry
    second, _ = _profile([shards, "--cache-dir", cache], capsys)
    assert (second["cache"]["reused"], second["cache"]["scanned"]) == (7, 2)
    rejected = second["cache"]["rejected"]
    assert any(str(entries[0]) in r and "corrupt" in r for r in rejected)
    assert any(str(entries[1]) in r and "foreign" in r for r in rejected)
    assert second["buckets"] == first["buckets"]
    third, _ = _profile([shards, "--cache-dir", cache], capsys)
    assert third["cache"]["reused"] == 9  # the rescanned entries were written again


def test_cache_key_follows_cap_and_column(shards, tmp_path, capsys):
    cache = tmp_path / "cache"
    _profile([shards, "--cache-dir", cache], capsys)
    # profile bins the whole length range: another --max-seq-len reads the same entries
    other, _ = _profile([shards, "--cache-dir", cache, "--max-seq-len", "4096"], capsys)
    assert other["cache"] == {"reused": 9, "scanned": 0, "rejected": []}
    assert gp.histogram(shards, cache_dir=cache, cap=4096) == gp.histogram(shards, cap=4096)
    assert len(list(cache.glob("*.entry"))) == 18  # a cap is part of the key
    trusting, _ = _profile([shards, "--cache-dir", cache, "--trust-statistics"], capsys)
    assert trusting["cache"]["reused"] == 0  # so are the source options


def test_bad_shard_stops_the_scan_or_is_skipped(shards, tmp_path, capsys):
    bad = tmp_path / "bad"
    bad.mkdir()
    for p in sorted(shards.glob("*.parquet")):
        (bad / p.name).write_bytes(p.read_bytes())
    broken, first = bad / "s5.parquet", bad / "s0.parquet"
    broken.write_bytes(broken.read_bytes()[:300])
    code, _, err = run_cli(["profile", bad, "-q", "-f", "json"], capsys)
    assert code == 2 and str(broken) in err and len(err.splitlines()) == 1
    got, err = _profile([bad, "--skip-bad-shards"], capsys, code=3)
    assert [s["shard"] for s in got["skipped_shards"]] == [str(broken)]
    assert f"skipped {broken}" in err
    broken.unlink()
    rest = gp.histogram(bad, cap=8192)
    assert got["total_samples"] == rest.valid
    first.write_bytes(b"PAR1 but nothing more")  # the plan follows the first good shard
    got, _ = _profile([bad, "--skip-bad-shards"], capsys, code=3)
    assert [s["shard"] for s in got["skipped_shards"]] == [str(first)]
    assert got["total_samples"] == rest.valid - gp.histogram(shards / "s0.parquet").valid


def test_single_process_path_imports_no_dask(shards, tmp_path):
    code = textwrap.dedent(f"""
        import sys
        import gpu_profiler as gp
        gp.profile({str(shards)!r}, cache_dir={str(tmp_path / "c")!r}, part="0/2",
                   skip_bad_shards=True)
        gp.histogram({str(shards)!r})
        assert not {{"dask", "distributed"}} & set(sys.modules), "dask imported"
    """)
    subprocess.run([sys.executable, "-c", code], check=True)


def test_workers_without_dask_cuda_says_what_to_install(shards, capsys):
    pytest.importorskip("distributed")
    try:
        import dask_cuda  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("dask-cuda is installed")
    code, _, err = run_cli(["profile", shards, "-q", "--workers", "2", "--backend", "cuda"],
                           capsys)
    assert code == 2 and "gpu-profiler[dask-cuda]" in err


def test_workers_refuse_one_process_gpu_choices(shards, capsys):
    code, _, err = run_cli(["profile", shards, "-q", "--workers", "2", "--devices", "0,1"],
                           capsys)
    assert code == 2 and "--device/--devices pick GPUs for one process" in err


def test_sharded_outputs_validate_against_the_schemas(shards, tmp_path, capsys):
    jsonschema = pytest.importorskip("jsonschema")
    from gpu_profiler.schemas import load

    bad = tmp_path / "bad"
    bad.mkdir()
    for p in sorted(shards.glob("*.parquet")):
        (bad / p.name).write_bytes(p.read_bytes())
    (bad / "s3.parquet").write_bytes(b"PAR1 truncated")
    got, _ = _profile([bad, "--skip-bad-shards", "--cache-dir", tmp_path / "c", "--part", "0/2",
                       "--save-hist", tmp_path / "p0.json"], capsys, code=3)
    assert {"cache", "skipped_shards", "part", "parts"} <= set(got)
    profile, histogram = load("profile"), load("histogram")
    jsonschema.validate(got, profile, cls=jsonschema.Draft202012Validator)
    _profile([bad, "--skip-bad-shards", "--part", "1/2", "--save-hist", tmp_path / "p1.json"],
             capsys)  # s3 lies in slice 0
    code, _, err = run_cli(["merge", tmp_path / "p0.json", tmp_path / "p1.json",
                            "-o", tmp_path / "all.json"], capsys)
    assert code == 0, err
    for name in ("p0.json", "all.json"):
        saved = json.loads((tmp_path / name).read_text())
        assert "provenance" in saved
        jsonschema.validate(saved, histogram, cls=jsonschema.Draft202012Validator)
    got["cache"]["reused"] = "all"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(got, profile, cls=jsonschema.Draft202012Validator)


def test_fail_if_and_plot_work_with_the_sharded_options(shards, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    png = tmp_path / "p.png"
    code, _, err = run_cli(["profile", shards, "-q", "--cache-dir", tmp_path / "c",
                            "--plot", png, "--fail-if", "p50>0"], capsys)
    assert code == 1 and "p50>0" in err and png.stat().st_size > 0
    code, _, err = run_cli(["profile", shards, "-q", "--cache-dir", tmp_path / "c",
                            "--fail-if", "p50<0"], capsys)
    assert code == 0, err


@pytest.mark.parametrize("inline", [True, False])
def test_execute_skips_and_checks_schemas_shard_by_shard(shards, tmp_path, inline):
    """The sharded path's seam: ``execute.histograms`` with ``like`` (each shard's schema
    checked as it is read) and ``on_error`` (a failing shard reported, the rest counted),
    at once on worker threads and one after another."""
    from gpu_profiler import execute
    from gpu_profiler.backends import get_backend
    from gpu_profiler.progress import ScanProgress
    from gpu_profiler.readers import LengthSpec, Reading

    for p in sorted(shards.glob("*.parquet")):
        (tmp_path / p.name).write_bytes(p.read_bytes())
    (tmp_path / "s2.parquet").write_bytes(b"PAR1 truncated")
    pq.write_table(pa.table({"length": pa.array([1, 2], pa.float32())}), tmp_path / "s7.parquet")
    parts = open_source(str(tmp_path))[""]
    like = (parts[0].label, parts[0].schema())
    failed = []
    with ScanProgress(len(parts), False) as bar:
        got = {tuple(task): h for task, h in execute.histograms(
            parts, Reading(LengthSpec("length"), inline=inline), get_backend("numpy"), 10000,
            bar, task_bytes=0, like=like,
            on_error=lambda task, exc: failed.append((parts[task[0]].path.name, str(exc))))}
    assert sorted(name for name, _ in failed) == ["s2.parquet", "s7.parquet"]
    assert any("schema differs" in e and "float" in e for _, e in failed)
    kept = [i for i, p in enumerate(parts) if p.path.name not in ("s2.parquet", "s7.parquet")]
    assert sorted(i for (i,) in got) == kept
    want = gp.histogram(shards / "s0.parquet", cap=10000)
    assert got[(0,)] == want
