"""The CLI as a user runs it: outputs, the demo, and the bad-input contract (one line on
stderr, exit code 2, no traceback, no partial output file, inputs untouched)."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import assert_matches_reference, reference_table

from gpu_profiler.cli import main

BOUNDS = [0, 770, 1216, 1728, 2432, 3296, 8193]


def run(args, capsys):
    """Run the CLI in-process; returns (exit code, stdout, stderr)."""
    with pytest.raises(SystemExit) as exc:
        main([str(a) for a in args])
    out, err = capsys.readouterr()
    return exc.value.code, out, err


def test_json_output_matches_reference(hf_dir, capsys):
    path, lengths = hf_dir
    rc, out, err = run(["profile", path, "-f", "json", "-q"], capsys)
    assert rc == 0, err
    got = json.loads(out)
    assert got["schema"] == "gpu-profiler/profile/v1"
    for key in ("total_samples", "null_samples", "invalid_samples", "unbucketed_samples",
                "truncated_samples", "truncated_tokens", "params", "buckets",
                "total_est_batches", "steps_per_epoch", "warnings"):
        assert key in got
    assert got["params"] == {"bounds": BOUNDS, "max_seq_len": 8192, "token_budget": 49152,
                             "max_batch_size": 64, "grad_accum": 4, "world_size": 1}
    assert_matches_reference(got, reference_table(lengths.tolist(), BOUNDS))


def test_options_reach_the_table(hf_dir, capsys):
    path, lengths = hf_dir
    args = ["profile", path, "--offsets-of", "input_ids", "--bounds", "0,1000,4000,9000",
            "--max-seq-len", "6000", "--token-budget", "30000", "--max-batch-size", "16",
            "--grad-accum", "2", "--world-size", "8", "-f", "json", "--backend", "numpy"]
    rc, out, _ = run(args, capsys)
    ref = reference_table(lengths.tolist(), [0, 1000, 4000, 9000], max_seq_len=6000,
                          token_budget=30000, max_batch_size=16, grad_accum=2, world_size=8)
    assert rc == 0
    assert_matches_reference(json.loads(out), ref)


def test_csv_markdown_and_table(hf_dir, capsys):
    path, lengths = hf_dir
    ref = reference_table(lengths.tolist(), BOUNDS)
    rc, out, _ = run(["profile", path, "-f", "csv"], capsys)
    *rows, total = list(csv.DictReader(io.StringIO(out)))
    assert rc == 0 and [int(r["samples"]) for r in rows] == [b["samples"] for b in ref["buckets"]]
    assert total["bucket"] == "all" and int(total["samples"]) == ref["total_samples"]
    assert float(total["steps_per_epoch"]) == pytest.approx(ref["steps_per_epoch"])
    assert int(total["total_tokens"]) == lengths.sum() > int(total["tokens"])  # unclipped
    assert int(total["p99"]) == np.percentile(lengths, 99, method="inverted_cdf")
    rc, out, _ = run(["profile", path, "-f", "markdown"], capsys)
    assert rc == 0 and f"| [3296, 8193) | {ref['buckets'][-1]['samples']:,} |" in out
    rc, out, _ = run(["profile", path], capsys)
    assert rc == 0 and "5 [3296,8193)" in out and f"{ref['total_samples']:,} samples" in out


def test_output_file_and_saved_histogram(hf_dir, tmp_path, capsys):
    path, lengths = hf_dir
    rc, out, _ = run(["profile", path, "-f", "json", "-o", tmp_path / "p.json",
                      "--save-hist", tmp_path / "h.json"], capsys)
    assert rc == 0 and out == ""
    assert json.loads((tmp_path / "p.json").read_text())["total_samples"] == len(lengths)
    assert sorted(os.listdir(tmp_path)) == ["h.json", "p.json"]  # no temp files left
    from gpu_profiler import LengthHistogram, histogram

    d = json.loads((tmp_path / "p.json").read_text())
    ranks = [-(-Fraction(q) * len(lengths) // 100) for q in ("50", "90", "95", "99", "99.9")]
    exact = np.sort(lengths)[[int(r) - 1 for r in ranks]].tolist()  # the nearest ranks
    assert list(d["percentiles"].values()) == exact and exact[-1] > 8192  # past max_seq_len
    assert d["total_tokens"] == lengths.sum() == d["clipped_tokens"] + d["truncated_tokens"]
    saved = LengthHistogram.load(tmp_path / "h.json")
    assert saved == histogram(lengths) and saved.cap == lengths.max() > 8192  # whole range
    rc, out, _ = run(["profile", tmp_path / "h.json", "-f", "json", "--max-seq-len",
                      str(lengths.max() + 100)], capsys)  # a longer context, no rescan
    assert rc == 0 and json.loads(out)["truncated_samples"] == 0


def test_demo_builds_a_real_hf_dir(tmp_path, capsys):
    import datasets

    report = tmp_path / "demo.html"
    rc, out, err = run(["demo", "--dir", tmp_path / "demo", "-f", "json", "--report", report],
                       capsys)
    assert rc == 0, err
    got = json.loads(out)
    assert err == f"demo report: {report}\n"  # and the page says which command made it
    html = report.read_text()
    assert (f"<pre id=\"command\">gpu-profiler demo --backend auto --output-format json "
            f"--dir {tmp_path / 'demo'} --report {report}</pre>") in html
    assert f'<td data-field="value">{got["total_samples"]:,}</td>' in html
    ds = datasets.load_from_disk(str(tmp_path / "demo"))  # really loadable by `datasets`
    lengths = ds["length"]
    assert_matches_reference(got, reference_table(list(lengths), BOUNDS))
    assert [len(x) for x in ds.select(range(50))["input_ids"]] == list(lengths[:50])
    assert 45 < got["buckets"][-1]["batch_pct"] < 58  # longest bucket ~ half the batches


def test_backends_and_version(capsys):
    rc, out, _ = run(["backends"], capsys)
    assert rc == 0 and "numpy  available" in out and "numba  available" in out
    assert "cuda" in out
    from gpu_profiler import native

    assert f"kernels: {native.status()}" in out
    rc, out, _ = run(["--version"], capsys)
    assert rc == 0 and out.startswith("gpu-profiler ")


def _corrupt_files(tmp_path, hf_dir):
    path, _ = hf_dir
    shard = sorted(Path(path).glob("data-*.arrow"))[0].read_bytes()
    (tmp_path / "trunc.arrow").write_bytes(shard[: len(shard) // 2])
    pq.write_table(pa.table({"length": np.arange(1000)}), tmp_path / "ok.parquet")
    good = (tmp_path / "ok.parquet").read_bytes()
    (tmp_path / "trunc.parquet").write_bytes(good[: len(good) - 20])
    (tmp_path / "garbage.parquet").write_bytes(b"PAR1" + os.urandom(300) + b"PAR1")
    (tmp_path / "junk.bin").write_bytes(b"hello world, not arrow")
    (tmp_path / "empty").mkdir()
    pq.write_table(pa.table({"length": [1.5, 2.5]}), tmp_path / "float.parquet")
    (tmp_path / "mixed").mkdir()
    pq.write_table(pa.table({"length": [1, 2]}), tmp_path / "mixed" / "a.parquet")
    pq.write_table(pa.table({"length": ["1", "2"]}), tmp_path / "mixed" / "b.parquet")


BAD = [
    (["profile", "{tmp}/missing"], "no such file or directory"),
    (["profile", "{tmp}/empty"],
     "no Parquet, Arrow IPC, .*Megatron-LM indexed dataset or token stream files"),
    (["profile", "{hf}", "--column", "nope"], "no column 'nope'; columns: input_ids"),
    (["profile", "{hf}", "--column", "input_ids"], "lengths must be integers"),
    (["profile", "{tmp}/float.parquet"], "no 'length' column|type double"),
    (["profile", "{tmp}/float.parquet", "-c", "length"], "has type double"),
    (["profile", "{tmp}/trunc.arrow"], "trunc.arrow"),
    (["profile", "{tmp}/trunc.parquet"], "trunc.parquet"),
    (["profile", "{tmp}/garbage.parquet"], "garbage.parquet"),
    (["profile", "{tmp}/junk.bin"], "junk.bin"),
    (["profile", "{tmp}/mixed"], "schema differs"),
    (["profile", "{hf}", "--bounds", "0,100,100"], "strictly increasing"),
    (["profile", "{hf}", "--bounds", "0"], "at least two"),
    (["profile", "{hf}", "--bounds", "0,a"], "comma-separated integers"),
    (["profile", "{hf}", "--token-budget", "0"], "token-budget must be a positive"),
    (["profile", "{hf}", "--max-batch-size", "-1"], "max-batch-size must be a positive"),
    (["profile", "{hf}", "--backend", "tpu"], "unknown backend 'tpu'"),
    (["profile", "{hf}", "--format", "csv"], "unknown format 'csv'"),
    (["profile", "{hf}", "-o", "{tmp}/no/such/dir/out.json"], "does not exist"),
    (["profile", "{hf}", "-o", "{tmp}"], "is a directory"),
    (["profile", "{hf}", "-o", "{tmp}/ok.parquet/out.json"], "not a directory"),
    (["profile", "{tmp}/trunc.arrow", "-o", "{tmp}/out.json"], "trunc.arrow"),
]


@pytest.mark.parametrize("args, message", BAD, ids=[" ".join(a[2:]) or a[1] for a, _ in BAD])
def test_bad_input_is_one_line_and_exit_2(args, message, tmp_path, hf_dir, capsys):
    import re

    _corrupt_files(tmp_path, hf_dir)
    before = {p: hashlib.sha256(p.read_bytes()).hexdigest()
              for p in [*tmp_path.rglob("*"), *Path(hf_dir[0]).rglob("*")] if p.is_file()}
    args = [a.format(tmp=tmp_path, hf=hf_dir[0]) for a in args]
    rc, out, err = run(args, capsys)
    assert rc == 2
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpu-profiler: error: "), err
    assert re.search(message, lines[0]), lines[0]
    assert "Traceback" not in err
    after = {p: hashlib.sha256(p.read_bytes()).hexdigest()
             for p in [*tmp_path.rglob("*"), *Path(hf_dir[0]).rglob("*")] if p.is_file()}
    assert after == before  # nothing written, nothing modified


def test_console_script_end_to_end(hf_dir, tmp_path):
    """The installed entry point, as a separate process: no traceback, exit 2, and -o
    leaves no partial file when the run fails."""
    exe = Path(sys.executable).with_name("gpu-profiler")
    bad = subprocess.run([exe, "profile", tmp_path / "nope", "-o", tmp_path / "o.json"],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1
    assert not (tmp_path / "o.json").exists()
    ok = subprocess.run([exe, "profile", hf_dir[0], "-f", "json"], capture_output=True,
                        text=True)
    assert ok.returncode == 0 and json.loads(ok.stdout)["total_samples"] == len(hf_dir[1])
    assert ok.stderr == ""  # not a terminal: no progress bar


def test_profile_reads_a_saved_histogram_back(hf_dir, tmp_path, capsys):
    path, lengths = hf_dir
    rc, _, _ = run(["profile", path, "--save-hist", tmp_path / "h.json", "-q"], capsys)
    assert rc == 0
    args = ["--bounds", "0,1000,9000", "--token-budget", "20000", "-f", "json"]
    rc, out, _ = run(["profile", tmp_path / "h.json", *args], capsys)
    assert rc == 0
    got = json.loads(out)
    assert got["length_source"] == "saved histogram"
    assert_matches_reference(got, reference_table(lengths.tolist(), [0, 1000, 9000],
                                                  token_budget=20000))


def test_cli_needs_no_separate_click(hf_dir):
    """typer >= 0.20 vendors click, so a plain install has no `click` package: the entry
    point must not import it (this once broke `make demo` on a fresh machine)."""
    code = ("import sys; sys.modules['click'] = None\n"
            "from gpu_profiler.cli import main\n"
            "try:\n    main(sys.argv[1:])\nexcept SystemExit as e:\n    print('rc', e.code)\n")
    for args, rc in (([], "2"), (["--version"], "0"), (["profile"], "2"),
                     (["profile", str(hf_dir[0]), "-f", "json"], "0"),
                     (["profile", "/nonexistent"], "2")):
        p = subprocess.run([sys.executable, "-c", code, *args], capture_output=True,
                           text=True)
        assert p.stdout.strip().splitlines()[-1] == f"rc {rc}", (args, p.stdout, p.stderr)
        assert "Traceback" not in p.stderr


def test_table_names_each_split(tmp_path, capsys):
    import datasets

    dd = datasets.DatasetDict({"train": datasets.Dataset.from_dict({"length": [5, 900, -1]}),
                               "test": datasets.Dataset.from_dict({"length": [10, -1]})})
    dd.save_to_disk(str(tmp_path / "dd"))
    rc, out, _ = run(["profile", tmp_path / "dd"], capsys)
    headers = [line for line in out.splitlines() if line.split()[:2] == ["split", "bucket"]]
    assert rc == 0 and len(headers) == 1  # one table: a split column, a section each
    rows = [line.split()[:2] for line in out.splitlines() if "[3296,8193)" in line]
    assert rows == [["train", "5"], ["test", "5"], ["all", "5"]]
    assert all(f"{s}: " in out for s in ("train", "test", "all"))  # each split's summary
    assert out.count("1 negative lengths") == 1  # one warning, naming both splits
    assert "warning (train, test): 0 null and 1 negative" in out


def test_ctrl_c_says_interrupted_and_leaves_nothing(tmp_path):
    """SIGINT mid-run: one line, exit 130, no output file and no temporary file."""
    import signal
    import subprocess
    import sys
    import time

    # a shell without job control starts background jobs with SIGINT ignored, and Python
    # then installs no KeyboardInterrupt for it: the CLI is tested as a terminal runs it
    script = ("import signal, time, gpu_profiler.api as api\n"
              "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
              "api.profile = lambda *a, **k: (open('started', 'w').close(), time.sleep(60))\n"
              "from gpu_profiler.cli import main\n"
              f"main(['profile', {str(tmp_path)!r}, '-q', '-o', 'out.json'])\n")
    p = subprocess.Popen([sys.executable, "-c", script], cwd=tmp_path, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    for _ in range(2400):  # a loaded machine may take many seconds to start it
        if (tmp_path / "started").exists():
            break
        time.sleep(0.05)
    assert (tmp_path / "started").exists(), p.stderr
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 130 and out == "" and err == "gpu-profiler: error: interrupted\n"
    assert sorted(x.name for x in tmp_path.iterdir()) == ["started"]


def test_token_sums_never_wrap(tmp_path, capsys):
    """Four lengths of 2**62 and one of 1 used to report 1 token in all: token sums are
    exact past int64 (recovered from the wrapped sum, which the lengths' range pins down),
    and lengths too spread out for that stop the scan with one line naming the column."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    import gpu_profiler as gp
    from gpu_profiler import ProfilerError

    x = np.array([2**62] * 4 + [1, 2**61 + 7], np.int64)
    for backend in ("numpy", "numba"):
        h = gp.histogram(x, cap=10, backend=backend)
        assert h.tokens == 4 * 2**62 + 1 + 2**61 + 7 and h.above_tokens > 2**63
    path = tmp_path / "big.parquet"
    pq.write_table(pa.table({"n": x}), path)
    rc, out, err = run(["profile", path, "-q", "--column", "n", "-f", "json"], capsys)
    assert rc == 0 and json.loads(out)["total_tokens"] == int(x.astype(object).sum())
    spread = np.array([2**62 - 1] * 8 + [11], np.int64)  # count x (max - min) >= 2**64
    for backend in ("numpy", "numba"):
        with pytest.raises(ProfilerError, match="sum past what can be counted exactly"):
            gp.histogram(np.concatenate([spread, [20]]), cap=10, backend=backend)


def test_an_empty_corpus_warns(tmp_path, capsys):
    datasets = pytest.importorskip("datasets")
    datasets.Dataset.from_dict({"length": []}).save_to_disk(str(tmp_path / "e"))
    rc, out, err = run(["profile", tmp_path / "e", "-f", "json"], capsys)
    assert rc == 0 and any("holds no samples" in w for w in json.loads(out)["warnings"])
