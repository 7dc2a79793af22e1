"""Megatron-LM / NeMo indexed datasets, written the way Megatron-LM's own
``IndexedDatasetBuilder`` and ``_IndexWriter`` write them (megatron/core/datasets/
indexed_dataset.py, reimplemented here: megatron-core needs torch): sizes read from the
.idx alone, ``--unit document``, prefixes, directories and globs, and hostile indexes."""

from __future__ import annotations

import hashlib
import struct
from pathlib import Path

import numpy as np
import pytest
from conftest import jit_param

import gpu_profiler as gp
from gpu_profiler import ProfilerError
from gpu_profiler.cli import main
from gpu_profiler.readers import megatron

_INDEX_HEADER = b"MMIDIDX\x00\x00"
#: Megatron-LM's DType enum: numpy dtype name -> code.
DTYPE_CODES = {"uint8": 1, "int8": 2, "int16": 3, "int32": 4, "int64": 5, "float64": 6,
               "float32": 7, "uint16": 8}


class IndexWriter:
    """Megatron-LM's ``_IndexWriter``: the header on enter, then ``write``."""

    def __init__(self, idx_path: str, dtype: type) -> None:
        self.idx_path, self.dtype = idx_path, dtype

    def __enter__(self) -> IndexWriter:
        self.idx_writer = open(self.idx_path, "wb")  # noqa: SIM115 (closed on exit)
        self.idx_writer.write(_INDEX_HEADER)
        self.idx_writer.write(struct.pack("<Q", 1))
        self.idx_writer.write(struct.pack("<B", DTYPE_CODES[np.dtype(self.dtype).name]))
        return self

    def __exit__(self, *exc: object) -> None:
        self.idx_writer.close()

    def write(self, sequence_lengths, sequence_modes, document_indices) -> None:
        sequence_pointers = self._sequence_pointers(sequence_lengths)
        self.idx_writer.write(struct.pack("<Q", len(sequence_lengths)))
        self.idx_writer.write(struct.pack("<Q", len(document_indices)))
        self.idx_writer.write(np.array(sequence_lengths, dtype=np.int32).tobytes(order="C"))
        self.idx_writer.write(np.array(sequence_pointers, dtype=np.int64).tobytes(order="C"))
        self.idx_writer.write(np.array(document_indices, dtype=np.int64).tobytes(order="C"))
        if sequence_modes is not None:
            self.idx_writer.write(np.array(sequence_modes, dtype=np.int8).tobytes(order="C"))

    def _sequence_pointers(self, sequence_lengths) -> list[int]:
        itemsize = np.int64(np.dtype(self.dtype).itemsize)
        curr_ptr = np.int64(0)
        list_ptr = []
        for length in sequence_lengths:
            list_ptr.append(curr_ptr.item())
            curr_ptr += length * itemsize
        return list_ptr


class Builder:
    """Megatron-LM's ``IndexedDatasetBuilder``: tokens to the .bin, the index at the end."""

    def __init__(self, bin_path: str, dtype: type = np.int32, multimodal: bool = False):
        self.data_file = open(bin_path, "wb")  # noqa: SIM115 (closed by finalize)
        self.dtype, self.multimodal = dtype, multimodal
        self.sequence_lengths: list[int] = []
        self.document_indices = [0]
        self.sequence_modes: list[int] | None = [] if multimodal else None

    def add_item(self, tokens, mode: int = 0) -> None:
        np_array = np.array(tokens, dtype=self.dtype)
        self.data_file.write(np_array.tobytes(order="C"))
        self.sequence_lengths.append(np_array.size)
        if self.sequence_modes is not None:
            self.sequence_modes.append(mode)

    def add_document(self, tokens, lengths: list[int]) -> None:
        np_array = np.array(tokens, dtype=self.dtype)
        self.data_file.write(np_array.tobytes(order="C"))
        self.sequence_lengths.extend(lengths)
        self.document_indices.append(len(self.sequence_lengths))
        if self.sequence_modes is not None:
            self.sequence_modes.extend([0] * len(lengths))

    def end_document(self) -> None:
        self.document_indices.append(len(self.sequence_lengths))

    def finalize(self, idx_path: str) -> None:
        self.data_file.close()
        with IndexWriter(idx_path, self.dtype) as writer:
            writer.write(self.sequence_lengths, self.sequence_modes, self.document_indices)


def build(prefix: Path, docs: list[list[int]], dtype: type = np.uint16,
          multimodal: bool = False, seed: int = 0) -> Path:
    """A dataset at ``prefix`` whose documents have these sequence sizes (the way
    preprocess_data.py adds them: each sequence an item, then end_document)."""
    rng = np.random.default_rng(seed)
    b = Builder(f"{prefix}.bin", dtype, multimodal)
    for doc in docs:
        for size in doc:
            b.add_item(rng.integers(0, 1000, size), mode=size % 3)
        b.end_document()
    b.finalize(f"{prefix}.idx")
    return prefix


def random_docs(n: int, seed: int) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(1, 3000, int(rng.integers(1, 5))).tolist() for _ in range(n)]


def flat(docs):
    return [s for d in docs for s in d]


def test_sizes_and_documents_read_from_the_index(tmp_path, backend):
    docs = random_docs(300, 1) + [[]]  # an empty document too (end_document twice)
    prefix = build(tmp_path / "c4_text_document", docs)
    got = gp.histogram(str(prefix), backend=backend.name, cap=4000)
    want = gp.histogram(np.array(flat(docs)), backend="numpy", cap=4000)
    assert got == want
    by_doc = gp.histogram(str(prefix), backend=backend.name, cap=9000, unit="document")
    assert by_doc == gp.histogram(np.array([sum(d) for d in docs]), backend="numpy", cap=9000)


def test_indexes_need_no_pyarrow_and_mix_with_columns(tmp_path):
    """Indexes are planned and read without pyarrow (their schema, one int64 ``length``, is
    never built: ~25 ms and ~27 MiB a process); named beside a file of columns, they are
    checked against it as that schema, in either order."""
    import subprocess
    import sys

    import pyarrow as pa
    import pyarrow.parquet as pq

    a = build(tmp_path / "a", random_docs(40, 3))
    b = build(tmp_path / "b", random_docs(30, 4))
    sequences = len(flat(random_docs(40, 3))) + len(flat(random_docs(30, 4)))
    code = ("import sys, gpu_profiler as gp; h = gp.histogram(sys.argv[1:]); "
            "print(h.total, 'pyarrow' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code, str(a), str(b)], capture_output=True,
                         text=True, timeout=300)
    assert out.stdout.split() == [str(sequences), "False"], out.stderr
    cli = ("import sys; from gpu_profiler.cli import main\ntry:\n    main(['profile', "
           "*sys.argv[1:], '-q', '-f', 'json', '--unit', 'document'])\nexcept SystemExit:\n"
           "    print('pyarrow' in sys.modules, file=sys.stderr)")
    out = subprocess.run([sys.executable, "-c", cli, str(a), str(b)], capture_output=True,
                         text=True, timeout=300)
    assert out.stderr.split() == ["False"] and '"total_samples": 70' in out.stdout, out.stderr
    x = np.array([5, 9000, 17])
    pq.write_table(pa.table({"length": x}), tmp_path / "l.parquet")
    pq.write_table(pa.table({"n": x}), tmp_path / "n.parquet")
    want = gp.histogram(np.array(flat(random_docs(40, 3)) + x.tolist()), cap=9000)
    for paths in ([str(a), str(tmp_path / "l.parquet")], [str(tmp_path / "l.parquet"), str(a)]):
        assert gp.histogram(paths, cap=9000) == want
    with pytest.raises(ProfilerError, match=r"n.parquet: schema differs from .*a.idx in its "
                       r"length source \(Megatron-LM index: sequence lengths\): length: "
                       r"missing vs int64; n: int64 vs missing"):
        gp.histogram([str(a), str(tmp_path / "n.parquet")])
    with pytest.raises(ProfilerError, match=r"a.idx: schema differs from .*n.parquet"):
        gp.histogram([str(tmp_path / "n.parquet"), str(a)])


@pytest.mark.parametrize("multimodal", [False, True])
@pytest.mark.parametrize("dtype", [np.uint16, np.int32])
def test_lengths_in_order_and_the_bin_never_opened(tmp_path, multimodal, dtype, monkeypatch):
    docs = random_docs(50, 2)
    prefix = build(tmp_path / "d", docs, dtype, multimodal)
    index = Path(f"{prefix}.idx")
    before = hashlib.sha256(index.read_bytes()).hexdigest()
    Path(f"{prefix}.bin").rename(tmp_path / "elsewhere")  # reading it would fail
    assert gp.lengths(str(prefix)).tolist() == flat(docs)
    assert gp.lengths(str(index), unit="document").tolist() == [sum(d) for d in docs]
    monkeypatch.setattr(megatron, "WINDOW", 7)  # windows cut documents anywhere
    assert gp.lengths(str(prefix), unit="document").tolist() == [sum(d) for d in docs]
    assert gp.lengths(str(prefix)).tolist() == flat(docs)
    assert hashlib.sha256(index.read_bytes()).hexdigest() == before


def test_a_prefix_a_directory_a_glob_and_the_bin_name_the_same_dataset(tmp_path,
                                                                       monkeypatch):
    a = build(tmp_path / "a_text_document", random_docs(20, 3))
    b = build(tmp_path / "b_text_document", random_docs(30, 4), seed=1)
    want = len(flat(random_docs(20, 3))) + len(flat(random_docs(30, 4)))
    for source in (tmp_path, tmp_path / "*_text_document", str(tmp_path) + "/*",
                   str(tmp_path) + "/*.bin", f"{tmp_path}/./*", f"{tmp_path}//*.bin"):
        assert gp.histogram(str(source)).valid == want, source
    monkeypatch.chdir(tmp_path)  # the .bin's index and the index itself, spelled alike
    for source in (".", "./*", "*", "./*.bin", ".//*"):
        assert gp.histogram(source).valid == want, source
    assert gp.histogram(f"{a}.bin").valid == gp.histogram(str(a)).valid == len(
        flat(random_docs(20, 3)))
    assert gp.histogram(str(b)).valid == len(flat(random_docs(30, 4)))
    assert gp.histogram(str(tmp_path / "*_document"), unit="document").valid == 50
    from gpu_profiler.readers import open_source

    for source in (tmp_path, str(tmp_path) + "/*.bin"):  # sized as the index, not the .bin
        parts = open_source(str(source))[""]
        assert [p.nbytes for p in parts] == [p.path.stat().st_size for p in parts]
        assert all(p.path.suffix == ".idx" for p in parts)


def test_sampler_and_plan_on_an_indexed_dataset(tmp_path, capsys):
    docs = random_docs(200, 5)
    prefix = build(tmp_path / "p", docs)
    s = gp.BucketBatchSampler(str(prefix), unit="document", max_seq_len=20000,
                              bounds=[0, 2000, 5000, 20001], token_budget=40000)
    assert s.lengths.tolist() == [sum(d) for d in docs]
    assert sorted(i for batch in s for i in batch) == list(range(len(docs)))
    out = tmp_path / "plan.npz"
    with pytest.raises(SystemExit) as exc:
        main(["plan", str(prefix), "-o", str(out), "-q"])
    assert exc.value.code == 0, capsys.readouterr().err
    assert sorted(np.load(out)["indices"].tolist()) == list(range(len(flat(docs))))


def _index(tmp_path: Path, sizes=(3, 5, 7), docs=(0, 2, 3), **patch) -> Path:
    """An index written by `IndexWriter` (no .bin), then bytes patched: ``o<offset>=``."""
    path = tmp_path / "x.idx"
    with IndexWriter(str(path), np.uint16) as writer:
        writer.write(list(sizes), None, list(docs))
    raw = bytearray(path.read_bytes())
    for offset, value in patch.items():
        at = int(offset[1:])
        raw[at:at + len(value)] = value
    path.write_bytes(bytes(raw))
    return path


HOSTILE = [
    ({"o9": struct.pack("<Q", 2)}, "at offset 9: version 2"),
    ({"o17": b"\x09"}, "at offset 17: unknown token dtype code 9"),
    ({"o18": struct.pack("<Q", 1 << 62)}, "at offset 18: 4,611,686,018,427,387,904 sequences"),
    ({"o26": struct.pack("<Q", 1 << 61)}, "at offset 18: 3 sequences and 2,305,843"),
    ({"o18": struct.pack("<Q", 2)}, "at offset 18: 2 sequences"),
]


@pytest.mark.parametrize(("patch", "message"), HOSTILE)
def test_hostile_headers_are_one_line_before_any_allocation(tmp_path, patch, message):
    path = _index(tmp_path, **patch)
    for unit in ("sequence", "document"):
        with pytest.raises(ProfilerError, match="corrupt Megatron-LM index") as exc:
            gp.histogram(str(path), unit=unit)
        assert message in str(exc.value) and str(path) in str(exc.value)


def test_a_bad_document_index_names_its_offset(tmp_path):
    docs_at = 34 + 12 * 3  # three sequences
    cases = [(0, 1, "starts at 1, not 0"), (1, 9, "document boundary 9 lies outside"),
             (1, -1, "document boundary -1 lies outside"), (2, 2, "ends at 2, not at the")]
    for entry, value, message in cases:
        path = _index(tmp_path, docs=(0, 2, 3), **{f"o{docs_at + 8 * entry}":
                                                  struct.pack("<q", value)})
        with pytest.raises(ProfilerError, match=message) as exc:
            gp.histogram(str(path), unit="document")
        assert f"offset {docs_at + 8 * entry}" in str(exc.value)
        assert gp.histogram(str(path)).valid == 3  # sequences need no document index
    path = _index(tmp_path, sizes=(3, 5, 7, 9), docs=(0, 3, 1, 4))
    with pytest.raises(ProfilerError, match=f"offset {34 + 48 + 16}: document boundary 1 "
                       "comes after 3"):
        gp.histogram(str(path), unit="document")
    path = _index(tmp_path, docs=())  # no document index at all
    with pytest.raises(ProfilerError, match="at offset 26: no document index"):
        gp.histogram(str(path), unit="document")


def test_truncated_and_foreign_files(tmp_path):
    path = _index(tmp_path)
    whole = path.read_bytes()
    for size in (0, 5, 20, 33, 40, len(whole) - 1):
        path.write_bytes(whole[:size])
        with pytest.raises(ProfilerError) as exc:
            gp.histogram(str(path), format="megatron")
        assert str(path) in str(exc.value)
    path.write_bytes(whole + b"\0\0")  # neither with nor without modes
    with pytest.raises(ProfilerError, match="the file has"):
        gp.histogram(str(path))
    negative = _index(tmp_path, sizes=(3, -5, 7))  # int32 sizes: counted as invalid
    assert (gp.histogram(str(negative), cap=10).invalid_count,
            gp.histogram(str(negative)).valid) == (1, 2)


def test_options_that_do_not_apply(tmp_path, hf_dir, capsys):
    prefix = build(tmp_path / "m", random_docs(5, 6))
    for args, message in (
            (["--eot", "3"], "--eot does not apply to"),
            (["--column", "x"], "--column does not apply to"),
            (["--unit", "page"], "--unit must be sequence or document, got 'page'")):
        with pytest.raises(SystemExit) as exc:
            main(["profile", str(prefix), "-q", *args])
        err = capsys.readouterr().err
        assert exc.value.code == 2 and err.count("\n") == 1 and message in err, err
    with pytest.raises(SystemExit) as exc:
        main(["profile", str(hf_dir[0]), "-q", "--unit", "document"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "--unit does not apply to" in err, err
    assert "Megatron-LM indexed dataset sources" in err
    with pytest.raises(ProfilerError, match="--unit does not apply to ndarray"):
        gp.histogram(np.arange(5), unit="sequence")
    with pytest.raises(ProfilerError, match="no such file"):
        gp.histogram(str(tmp_path / "nope"))


@pytest.mark.parametrize("how", ["native", jit_param("jit")])
def test_document_kernels_equal_numpy(how):
    """`running_sums` and `document_bounds` (kernels/documents.py), natively and through
    the JIT, against numpy on random windows: sums at every boundary, the window's total,
    the first boundary outside the sequences and the first that decreases."""
    from gpu_profiler import native
    from gpu_profiler.kernels import documents

    if how == "native" and native.library() is None:
        pytest.skip(native.status())
    sums = native.kernel("running_sums") if how == "native" else documents.running_sums
    check = native.kernel("document_bounds") if how == "native" else documents.document_bounds
    rng = np.random.default_rng(26)
    for i in range(200):
        n = int(rng.integers(1, 50 if i % 4 else 3000))  # a window of one span, or many
        sizes = rng.integers(-5, 9000, n, dtype=np.int32)
        pos, total = int(rng.integers(0, 1000)), int(rng.integers(-10, 10**12))
        bounds = np.sort(rng.integers(pos + 1, pos + n + 1, int(rng.integers(0, 2 * n + 10))))
        out = np.zeros(bounds.size, np.int64)
        spans = np.empty(int(rng.choice([2, 17, 1025])), np.int64)  # 1, 16 or 1024 a span
        cum = total + np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)])
        assert sums(sizes, bounds, pos, total, out, spans) == (cum[-1],)
        assert out.tolist() == cum[bounds - pos].tolist()
        seq = int(rng.integers(0, 60))
        index = rng.integers(-3, 70, int(rng.integers(0, 12)))
        if i % 3 == 0:  # mostly valid: one entry outside, or one step back, at most
            index = np.sort(rng.integers(0, seq + 1, int(rng.integers(0, 300))))
            if index.size and i % 2:
                index[int(rng.integers(0, index.size))] = rng.choice([-1, seq + 1, 0])
        outside = np.flatnonzero((index < 0) | (index > seq))
        down = np.flatnonzero(np.diff(index) < 0) + 1
        want = (int(outside[0]) if outside.size else -1, int(down[0]) if down.size else -1)
        assert tuple(check(index, seq)) == want
