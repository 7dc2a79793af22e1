"""Saved histograms and merge parts are hostile input: every forged field (types, ranges,
sums past int64, above-cap statistics, nesting, size, caps that would allocate gigabytes)
ends in one line and exit 2, never an internal error or a wrong number; parts of
different scans (another --unit, --eot, cap...) or with impossible slices never merge."""

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
from conftest import run_cli

import gpu_profiler as gp
from gpu_profiler.errors import ProfilerError
from gpu_profiler.histogram import MAX_SAVED_BYTES, LengthHistogram

BIG = 2**63
DELETE = "(deleted)"


def _base() -> dict:
    h = LengthHistogram(np.bincount([0, 5, 5, 9, 10], minlength=11), 2, 40, 15, 25, 1, 1)
    return h.to_dict()


def _write(path, d) -> str:
    path.write_text(json.dumps(d) + "\n")
    return str(path)


def _one_line_exit_2(capsys, *args) -> str:
    code, _, err = run_cli(list(args), capsys)
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and "internal error" not in err, err
    return err


FORGED = {  # name: (change to the saved dict, what the error says)
    "negative count": ({"counts": [[5, -1]]}, "negative count"),
    "count past the cap": ({"counts": [[11, 1]]}, "within 0..cap"),
    "count below zero": ({"counts": [[-1, 1]]}, "within 0..cap"),
    "length given twice": ({"counts": [[5, 1], [5, 2]]}, "increase"),
    "count of 2**63": ({"counts": [[5, BIG]]}, "past int64"),
    "counts summing past int64": ({"counts": [[1, 2**62], [2, 2**62]]}, "past int64"),
    "binned tokens past int64": ({"counts": [[10, 2**60]]}, "past int64"),
    "total past int64": ({"null_count": BIG - 3}, "past int64"),
    "float count": ({"counts": [[5, 2.0]]}, "not an integer"),
    "bool count": ({"counts": [[5, True]]}, "pairs of integers"),
    "string count": ({"counts": [[5, "2"]]}, "pairs of integers"),
    "a triple": ({"counts": [[5, 2, 1]]}, "pairs of integers"),
    "counts not a list": ({"counts": {"5": 2}}, "list"),
    "more pairs than bins": ({"counts": [[i, 1] for i in range(12)]}, "at most cap + 1"),
    "negative nulls": ({"null_count": -1}, "null_count"),
    "string scalar": ({"invalid_count": "1"}, "invalid_count"),
    "above_min > above_max": ({"above_min": 30}, "in order"),
    "above_min within the cap": ({"above_min": 10, "above_tokens": 30}, "past the cap"),
    "above_tokens too small": ({"above_tokens": 29}, "above_tokens"),
    "above_tokens too large": ({"above_tokens": 51}, "above_tokens"),
    "above stats without a count": ({"above_count": 0}, "above_count is 0"),
    "negative cap": ({"cap": -1}, "cap"),
    "cap 2e8": ({"cap": 200_000_000}, "cap must be an integer from 0 to 16,777,216"),
    "cap 1e12": ({"cap": 10**12}, "cap must be"),
    "float cap": ({"cap": 1e12}, "not an integer"),
    "missing field": ({"above_max": DELETE}, "above_max"),
    "unknown field": ({"extra": 1}, "unknown field"),
}


@pytest.mark.parametrize("name", FORGED)
def test_forged_saved_histograms_are_one_line(tmp_path, capsys, name):
    change, says = FORGED[name]
    d = {k: v for k, v in {**_base(), **change}.items() if v != DELETE}
    path = _write(tmp_path / "h.json", d)
    err = _one_line_exit_2(capsys, "profile", path, "-q")
    assert path in err and says in err, err
    with pytest.raises(ProfilerError, match="not a gpu-profiler histogram"):
        LengthHistogram.load(path)


@pytest.mark.parametrize("token", ["Infinity", "-Infinity", "NaN", "1e400", "5.0", "1" * 5000])
def test_numbers_that_are_not_integers_are_refused(tmp_path, capsys, token):
    text = json.dumps(_base()).replace('"null_count": 1', f'"null_count": {token}')
    assert token in text
    (tmp_path / "h.json").write_text(text)
    _one_line_exit_2(capsys, "profile", tmp_path / "h.json", "-q")


def test_deep_nesting_and_duplicate_keys_are_one_line(tmp_path, capsys):
    head = '{"schema": "gpu-profiler/histogram/v1", "cap": 10, "counts": '
    (tmp_path / "deep.json").write_text(head + "[" * 100_000 + "]" * 100_000 + "}")
    assert "nested too deeply" in _one_line_exit_2(capsys, "profile", tmp_path / "deep.json")
    (tmp_path / "deep2.json").write_text(head + '{"a": ' * 100_000 + "1" + "}" * 100_001)
    assert "nested too deeply" in _one_line_exit_2(capsys, "profile", tmp_path / "deep2.json")
    text = json.dumps(_base())[:-1] + ', "cap": 100000000}'  # the second cap wins in json
    (tmp_path / "twice.json").write_text(text)
    assert "given twice" in _one_line_exit_2(capsys, "profile", tmp_path / "twice.json")


def test_a_file_too_large_for_any_histogram_is_refused_unread(tmp_path, capsys):
    path = tmp_path / "huge.json"
    with open(path, "wb") as f:
        f.write(json.dumps(_base()).encode())
        f.truncate(MAX_SAVED_BYTES + 1)  # sparse: nothing to read, but it claims 640 MiB
    err = _one_line_exit_2(capsys, "profile", path, "-q")
    assert "more than the" in err


def test_a_saved_histogram_round_trips_and_a_cap_past_the_bound_is_folded(tmp_path):
    h = LengthHistogram(np.bincount([0, 5, 5, 9, 10], minlength=11), 2, 40, 15, 25, 1, 1)
    h.save(tmp_path / "h.json")
    assert LengthHistogram.load(tmp_path / "h.json") == h
    wide = LengthHistogram(np.bincount([3, (1 << 24) + 2], minlength=(1 << 24) + 6))
    wide.save(tmp_path / "wide.json")
    back = LengthHistogram.load(tmp_path / "wide.json")
    assert back == wide.with_cap(1 << 24)
    assert (back.valid, back.tokens, back.max) == (wide.valid, wide.tokens, wide.max)


MEMORY = textwrap.dedent("""
    import json, resource, sys, tracemalloc
    from gpu_profiler.errors import ProfilerError
    from gpu_profiler.histogram import LengthHistogram
    tracemalloc.start()
    try:
        LengthHistogram.load(sys.argv[1])
        outcome = "loaded"
    except ProfilerError as exc:
        outcome = str(exc)
    peak = tracemalloc.get_traced_memory()[1]
    print(json.dumps([outcome, peak, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss]))
""")


@pytest.mark.parametrize("cap", [200_000_000, 10**12])
def test_a_huge_cap_is_refused_before_allocating(tmp_path, cap):
    path = _write(tmp_path / "h.json", {**_base(), "cap": cap, "counts": [[cap, 1]]})
    small = _write(tmp_path / "small.json", _base())
    got = {}
    for p in (small, path):  # in a child: its peak memory is this load's alone
        run = subprocess.run([sys.executable, "-c", MEMORY, p], capture_output=True,
                             text=True, timeout=120)
        assert run.returncode == 0, run.stderr
        got[p] = json.loads(run.stdout)
    outcome, peak, rss = got[path]
    assert "cap must be an integer" in outcome
    assert peak < 1 << 20  # bytes traced (numpy's arrays included): no bins allocated
    assert rss < got[small][2] + 20 * 1024  # KiB: no more than loading a small file


def test_a_fifo_given_to_merge_is_refused_without_blocking(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    run = subprocess.run([sys.executable, "-c", "from gpu_profiler.cli import main; main()",
                          "merge", str(tmp_path / "fifo"), "-o", str(tmp_path / "o.json")],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and "not a regular file" in run.stderr, run.stderr


# ---------------------------------------------------------------- merge parts
@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    d = tmp_path_factory.mktemp("shards")
    rng = np.random.default_rng(5)
    for i in range(4):
        pq.write_table(pa.table({"length": rng.integers(0, 5000, 300 + 100 * i)}),
                       d / f"s{i}.parquet")
    return d


@pytest.fixture(scope="module")
def parts(shards, tmp_path_factory):
    d = tmp_path_factory.mktemp("parts")
    for i in range(3):
        r = gp.profile(shards, part=f"{i}/3")
        r.histogram.save(d / f"p{i}.json", r.report.provenance)
    return [d / f"p{i}.json" for i in range(3)]


def _forged_part(tmp_path, part, name="forged.json", **provenance):
    d = json.loads(part.read_text())
    d["provenance"] = {**d["provenance"], **provenance}
    return _write(tmp_path / name, d)


def test_parts_merge_and_record_their_source_options(parts, shards, tmp_path, capsys):
    code, _, err = run_cli(["merge", *parts, "-o", tmp_path / "all.json"], capsys)
    assert code == 0, err
    assert gp.histogram(tmp_path / "all.json") == gp.histogram(shards)
    prov = json.loads(parts[0].read_text())["provenance"]
    assert prov["source"] == {"unit": None, "eot": None, "eot_position": None,
                              "token_dtype": None, "trust_statistics": None}


@pytest.mark.parametrize("change, says", [
    ({"source": {"unit": "document", "eot": None, "eot_position": None, "token_dtype": None,
                 "trust_statistics": None}}, "--unit differs"),
    ({"source": {"unit": None, "eot": 0, "eot_position": None, "token_dtype": None,
                 "trust_statistics": None}}, "--eot differs"),
    ({"source": {"unit": None, "eot": None, "eot_position": None, "token_dtype": "uint32",
                 "trust_statistics": None}}, "--token-dtype differs"),
    ({"length_source": "offsets of input_ids"}, "the length source differs"),
    ({"cap": 4096}, "cap"),
    ({"parts": 0}, "a scan has 1 to 65536 slices"),
    ({"parts": 10**9}, "a scan has 1 to 65536 slices"),
    ({"parts": True}, "no valid 'parts'"),
    ({"slices": [7]}, "distinct integers from 0 to 2"),
    ({"slices": [-1]}, "distinct integers from 0 to 2"),
    ({"slices": [1, 1]}, "distinct integers"),
    ({"slices": [0, 1, 2, 3]}, "distinct integers"),
    ({"slices": []}, "distinct integers"),
    ({"slices": ["1"]}, "distinct integers"),
    ({"shards": -1}, "slices of -1 shards"),
    ({"source": {"unit": None}}, "source options are not"),
    ({"source": None}, "no valid 'source'"),
])
def test_merge_refuses_forged_and_foreign_parts(parts, tmp_path, capsys, change, says):
    forged = _forged_part(tmp_path, parts[1], **change)
    err = _one_line_exit_2(capsys, "merge", parts[0], forged, parts[2], "-o", tmp_path / "o")
    assert says in err, err
    assert not (tmp_path / "o").exists()


def test_merge_refuses_parts_without_source_options_and_a_part_count_of_1e9(
        parts, tmp_path, capsys):
    d = json.loads(parts[1].read_text())
    del d["provenance"]["source"]  # as written before parts recorded them
    err = _one_line_exit_2(capsys, "merge", parts[0], _write(tmp_path / "old.json", d),
                           parts[2], "-o", tmp_path / "o")
    assert "no valid 'source'" in err and "rescan" in err
    text = parts[1].read_text().replace('"parts": 3', '"parts": 1e9')
    (tmp_path / "float.json").write_text(text)
    err = _one_line_exit_2(capsys, "merge", parts[0], tmp_path / "float.json", parts[2])
    assert "'1e9' is not an integer" in err


def test_merge_refuses_edited_counts_and_sums_past_int64(parts, tmp_path, capsys):
    d = json.loads(parts[1].read_text())
    d["counts"][0][1] = -5
    err = _one_line_exit_2(capsys, "merge", parts[0], _write(tmp_path / "neg.json", d),
                           parts[2])
    assert "negative count" in err
    big = [json.loads(p.read_text()) for p in parts]
    for d in big:  # each part alone fits int64; their sum does not
        d["null_count"] = 2**62
    paths = [_write(tmp_path / f"b{i}.json", d) for i, d in enumerate(big)]
    assert "past int64" in _one_line_exit_2(capsys, "merge", *paths)


def test_merge_names_another_eot_of_a_real_scan(tmp_path, capsys):
    rng = np.random.default_rng(0)
    for i in range(2):
        rng.integers(0, 4, 5000, dtype=np.uint16).tofile(tmp_path / f"t{i}.bin")
    for i, eot in enumerate((0, 1)):
        code, _, err = run_cli(["profile", tmp_path, "--eot", eot, "--part", f"{i}/2", "-q",
                                "--save-hist", tmp_path / f"p{i}.json"], capsys)
        assert code == 0, err
    err = _one_line_exit_2(capsys, "merge", tmp_path / "p0.json", tmp_path / "p1.json")
    assert "--eot differs" in err and "(1 vs 0)" in err


def test_a_scan_cannot_be_cut_into_more_slices_than_merge_takes():
    from gpu_profiler.slices import MAX_PARTS, parse_part

    assert parse_part(f"0/{MAX_PARTS}") == (0, MAX_PARTS)
    with pytest.raises(ProfilerError, match="--part must be I/N"):
        parse_part(f"0/{MAX_PARTS + 1}")
