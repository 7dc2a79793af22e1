"""Flat token streams on disk: nanoGPT's raw .bin, llm.c's .bin (written as llm.c's
``write_datafile`` does) and .npy; documents found on every backend whatever the chunk
size, in order for `gp.lengths` and the sampler, and hostile files one line each."""

from __future__ import annotations

import hashlib
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from test_documents import python_documents

import gpu_profiler as gp
from gpu_profiler.cli import main
from gpu_profiler.readers import tokens

EOT = 50256


def write_nanogpt(path, ids, dtype=np.uint16):
    """nanoGPT's prepare.py: ``np.array(ids, dtype=np.uint16).tofile(path)``."""
    np.array(ids, dtype=dtype).tofile(path)
    return path


def write_llmc(path, ids, version=1):
    """llm.c's dev/data/data_common.py ``write_datafile``: a 256-int32 header (magic,
    version, token count), then the ids as uint16 (version 1) or uint32 (version 2)."""
    header = np.zeros(256, dtype=np.int32)
    header[0], header[1], header[2] = 20240520, version, len(ids)
    toks = np.array(ids, dtype=np.uint16 if version == 1 else np.uint32)
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(toks.tobytes())
    return path


def corpus(n=200_000, seed=0, mean=700):
    rng = np.random.default_rng(seed)
    x = rng.integers(0, EOT, n)
    x[rng.random(n) < 1 / mean] = EOT
    return x


@settings(max_examples=40, deadline=None)
@given(ids=hnp.arrays(np.uint32, st.integers(0, 400), elements=st.sampled_from([1, 7, EOT])),
       kind=st.sampled_from(["nanogpt", "nanogpt32", "llmc1", "llmc2", "npy"]),
       chunk=st.integers(1, 300), start=st.booleans())
def test_any_chunk_size_finds_the_documents_a_loop_finds(tmp_path_factory, ids, kind,
                                                         chunk, start):
    path = tmp_path_factory.mktemp("t") / ("x.npy" if kind == "npy" else "x.bin")
    dtype = np.uint32 if kind in ("nanogpt32", "llmc2") else np.uint16
    extra = {"token_dtype": "uint32"} if kind == "nanogpt32" else {}
    if kind.startswith("nanogpt"):
        write_nanogpt(path, ids, dtype)
    elif kind.startswith("llmc"):
        write_llmc(path, ids, version=2 if kind == "llmc2" else 1)
    else:
        np.save(path, ids.astype(np.uint16))
    want = python_documents(ids.tolist(), EOT, start)
    position = "start" if start else "end"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(tokens, "CHUNK_BYTES", chunk)  # chunks of 1..300 bytes
        got = gp.lengths(str(path), eot=EOT, eot_position=position, **extra)
        assert got.tolist() == want
        for backend in ("numpy", "numba"):
            h = gp.histogram(str(path), eot=EOT, eot_position=position, backend=backend,
                             cap=50, **extra)
            assert h == gp.histogram(np.array(want, np.int64), backend="numpy", cap=50)


def test_every_backend_and_format_gives_one_histogram(tmp_path, backend):
    ids = corpus()
    files = [write_nanogpt(tmp_path / "a.bin", ids), write_llmc(tmp_path / "b.bin", ids, 2),
             tmp_path / "c.npy"]
    np.save(files[2], ids.astype(np.int32))  # int32 ids too: the same bits as uint32
    want = gp.histogram(np.array(python_documents(ids.tolist(), EOT, False)), cap=8192,
                        backend="numpy")
    for path in files:
        assert gp.histogram(str(path), eot=EOT, backend=backend.name, cap=8192) == want
    both = gp.histogram(str(tmp_path), eot=EOT, backend=backend.name, cap=8192)
    assert both.valid == 3 * want.valid  # a directory: every stream on its own


def test_sampler_and_plan_read_documents_in_order(tmp_path, capsys):
    ids = corpus(50_000, seed=3)
    path = write_llmc(tmp_path / "shard_000.bin", ids)
    docs = python_documents(ids.tolist(), EOT, True)
    s = gp.BucketBatchSampler(str(path), eot=EOT, eot_position="start")
    assert s.lengths.tolist() == docs
    assert sorted(i for b in s for i in b) == list(range(len(docs)))
    out = tmp_path / "plan.npz"
    with pytest.raises(SystemExit) as exc:
        main(["plan", str(path), "--eot", str(EOT), "--eot-position", "start", "-o",
              str(out), "-q"])
    assert exc.value.code == 0, capsys.readouterr().err
    assert sorted(np.load(out)["indices"].tolist()) == list(range(len(docs)))


def test_cli_profile_of_a_token_stream_is_the_documents_table(tmp_path, capsys):
    import json

    ids = corpus(100_000, seed=4)
    path = write_nanogpt(tmp_path / "train.bin", ids)
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    with pytest.raises(SystemExit) as exc:
        main(["profile", str(path), "--eot", str(EOT), "-f", "json", "-q"])
    out = json.loads(capsys.readouterr().out)
    assert exc.value.code == 0
    docs = python_documents(ids.tolist(), EOT, False)
    assert out["total_samples"] == len(docs)
    assert sum(b["tokens"] for b in out["buckets"]) + out["truncated_tokens"] == sum(docs)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before  # never modified


def test_chunks_stay_bounded(tmp_path, monkeypatch):
    """A stream is read a chunk at a time: no chunk holds more than CHUNK_BYTES."""
    path = write_nanogpt(tmp_path / "x.bin", corpus(10_000))
    monkeypatch.setattr(tokens, "CHUNK_BYTES", 1000)
    sizes = [c.data.nbytes for c in tokens.TokenPart(path).chunks(
        gp.readers.Reading(gp.readers.LengthSpec("length"),
                           source=gp.readers.SourceOptions(eot=EOT)))]
    assert max(sizes) == 1000 and sum(sizes) == 20_000


def _error(capsys, *args) -> str:
    with pytest.raises(SystemExit) as exc:
        main(["profile", *map(str, args), "-q"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    return err


def test_usage_errors(tmp_path, capsys, hf_dir):
    path = write_nanogpt(tmp_path / "x.bin", corpus(1000))
    assert "needs --eot ID" in _error(capsys, path)
    assert "--eot 70000 cannot occur in uint16" in _error(capsys, path, "--eot", 70000)
    assert "--eot must be a token id" in _error(capsys, path, "--eot", -1)
    assert "--eot-position must be end or start" in _error(capsys, path, "--eot", 1,
                                                           "--eot-position", "middle")
    assert "--token-dtype must be uint16 or uint32" in _error(capsys, path, "--eot", 1,
                                                              "--token-dtype", "int8")
    err = _error(capsys, path, "--eot", 1, "--unit", "document")
    assert "--unit does not apply to" in err and "(token stream)" in err
    assert "--column does not apply to" in _error(capsys, path, "--eot", 1, "-c", "x")
    err = _error(capsys, hf_dir[0], "--eot", 1)
    assert "--eot does not apply to" in err and "(Hugging Face dataset)" in err
    assert "it is for token stream sources" in err
    parquet = tmp_path / "l.parquet"
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"length": [1, 2]}), parquet)
    assert "--token-dtype does not apply to" in _error(capsys, parquet, "--token-dtype",
                                                       "uint32")


HOSTILE = [
    ("odd.bin", b"\x01\x02\x03", [], "3 bytes is not a whole number of uint16 tokens"),
    ("odd32.bin", b"\x01" * 6, ["--token-dtype", "uint32"], "not a whole number of uint32"),
    ("v3.bin", struct.pack("<3i", 20240520, 3, 0) + bytes(1012), [],
     "llm.c header version 3 at offset 4"),
    ("short.bin", struct.pack("<3i", 20240520, 1, 5) + bytes(1012) + bytes(8), [],
     "llm.c header says 5 uint16 tokens at offset 8"),
    ("neg.bin", struct.pack("<3i", 20240520, 1, -5) + bytes(1012), [],
     "llm.c header says -5 uint16 tokens"),
    ("cut.bin", struct.pack("<3i", 20240520, 1, 5)[:12] + bytes(100), [],
     "truncated llm.c token file"),
    ("v1.bin", struct.pack("<3i", 20240520, 1, 0) + bytes(1012), ["--token-dtype", "uint32"],
     "--token-dtype uint32 does not apply: its llm.c header (version 1) says uint16"),
]


@pytest.mark.parametrize(("name", "raw", "args", "message"), HOSTILE)
def test_hostile_bin_files(tmp_path, capsys, name, raw, args, message):
    path = tmp_path / name
    path.write_bytes(raw)
    err = _error(capsys, path, "--eot", 1, *args)
    assert message in err and str(path) in err, err


def test_hostile_npy_files(tmp_path, capsys):
    good = tmp_path / "good.npy"
    np.save(good, np.arange(10, dtype=np.uint16))
    raw = good.read_bytes()
    cases = {
        "cut.npy": (raw[:-3], "its .npy header says shape (10,) of uint16"),
        "long.npy": (raw + b"\0\0", "the file has"),
        "header.npy": (raw[:10] + b"{'descr': '<u2', 'fortran_order': False, 'shape': (1e99,), }",
                       "corrupt .npy header"),
        "magic.npy": (raw[:6] + b"\x07\x00" + raw[8:], "corrupt .npy header"),
    }
    for name, (data, message) in cases.items():
        (tmp_path / name).write_bytes(data)
        err = _error(capsys, tmp_path / name, "--eot", 1)
        assert message in err, (name, err)
    for array, message in ((np.zeros(3, np.float32), "holds <f4"),
                           (np.zeros(3, np.int64), "holds <i8"),
                           (np.zeros(3, ">u2"), "holds >u2"),
                           (np.zeros((2, 2), np.uint16, order="F"), "Fortran-order")):
        np.save(tmp_path / "bad.npy", array)
        assert message in _error(capsys, tmp_path / "bad.npy", "--eot", 1)
    np.save(tmp_path / "u2.npy", np.zeros(3, np.uint16))
    assert "its .npy header says uint16" in _error(capsys, tmp_path / "u2.npy", "--eot", 1,
                                                   "--token-dtype", "uint32")


def test_a_megatron_data_file_is_never_a_token_stream(tmp_path, capsys):
    from test_megatron import build

    prefix = build(tmp_path / "m_text_document", [[5, 6], [7]])
    write_nanogpt(tmp_path / "stream.bin", [1, EOT, 2, EOT])
    # the directory walk: the dataset once (its .bin is not a stream) and the stream
    assert gp.lengths(f"{prefix}.bin").tolist() == [5, 6, 7]
    assert gp.lengths(str(tmp_path / "stream.bin"), eot=EOT).tolist() == [2, 2]
    err = _error(capsys, f"{prefix}.bin", "--format", "tokens", "--eot", 1)
    assert "the data file of the Megatron-LM indexed dataset" in err
    from gpu_profiler.readers import open_source

    with pytest.raises(gp.ProfilerError, match="2 Megatron-LM indexed dataset.*1 token stream"):
        open_source(str(tmp_path))  # a walk of the two formats: one of them, or name them
    parts = open_source([f"{prefix}.bin", f"{prefix}.idx", str(tmp_path / "stream.bin")])[""]
    assert sorted(p.label for p in parts) == [f"{prefix}.idx", str(tmp_path / "stream.bin")]
