"""The child process of tests/test_fuzz.py: scans the cases of a manifest one by one under
an address-space limit and prints one JSON line per case.

``python fuzz_child.py MANIFEST FIRST`` runs cases ``FIRST..`` of MANIFEST (a JSON list of
``{"path", "kind", "column", "offsets_of", "backend", "reader", "io", "trust"}``, and
``"options"``: more arguments of `histogram`, e.g. ``eot`` or ``unit``; ``reader``
``together``: an IPC, Parquet or JSON Lines file read twice in a run of small shards, as a scan of
many reads them, its numbers halved; ``alone``: by its own reader). For each it
prints ``start I``, then ``done I {"ok": fields} | {"error": line} | {"bug": repr}``,
then ``ref I {"ok": fields} | {"fail": ...}``: a reference reading of the file, done
after the scan: pyarrow's for Arrow IPC and Parquet (pyarrow may allocate what a hostile
file claims, or abort: that is pyarrow's affair, and the parent only needs to know it did
not read the file), and for the other formats (``kind``: npy, llmc, nanogpt, megatron,
jsonl) a plain reading by their specifications, written here apart from the readers:
numpy's ``np.load`` for .npy, llm.c's and Megatron-LM's loaders' checks, Python's
``json`` line by line.
"""

from __future__ import annotations

import json
import os
import resource
import struct
import sys
import warnings

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from gpu_profiler import LengthHistogram, ProfilerError, get_backend, histogram
from gpu_profiler.engine import exact
from gpu_profiler.execute import tasks_histogram
from gpu_profiler.io import pread
from gpu_profiler.readers import LengthSpec, Reading, ipc
from gpu_profiler.readers.base import resolve_spec
from gpu_profiler.readers.jsonl import JsonlPart
from gpu_profiler.readers.parquet import ParquetPart, pages

#: Address space granted beyond what the warmed-up child maps.
HEADROOM = 1 << 30
CAP = 1 << 16
DEFAULT_MIN_ROWS = pages.MIN_ROWS


def fields(h) -> dict:
    return {"counts": np.flatnonzero(h.counts).tolist() + h.counts[h.counts > 0].tolist(),
            "above": [h.above_count, h.above_tokens, h.above_min, h.above_max],
            "null": h.null_count, "invalid": h.invalid_count}


def scan(case: dict) -> dict:
    os.environ[pread.IO_ENV] = case["io"]
    # a Parquet file's column through pyarrow (numpy's cases: as a small file is read) or
    # counted by the kernel (numba's: as a large one is), whatever its rows
    pages.MIN_ROWS = 0 if case["backend"] == "numba" else DEFAULT_MIN_ROWS
    try:
        if case["reader"] == "together":
            return {"ok": fields(_twice(case))}
        h = histogram(case["path"], column=case["column"], offsets_of=case["offsets_of"],
                      backend=case["backend"], cap=CAP,
                      trust_statistics=case.get("trust", False), **case.get("options", {}))
        return {"ok": fields(h)}
    except ProfilerError as exc:
        return {"error": str(exc)}
    except BaseException as exc:  # noqa: BLE001 - the parent reports it
        return {"bug": f"{type(exc).__name__}: {exc}"[:500]}


def _twice(case: dict) -> LengthHistogram:
    """The histogram of a run of two parts of the file (read together: `ipc.many`, or
    each by its own reader where the run leaves it), halved."""
    spec = LengthSpec(case["offsets_of"] or case["column"], offsets=bool(case["offsets_of"]))
    like = None
    if case["kind"] == "parquet":
        parts = [ParquetPart(case["path"]) for _ in range(2)]
    elif case["kind"] == "jsonl":  # its schema read and its column resolved, as a plan does
        parts = [JsonlPart(case["path"]) for _ in range(2)]
        like = (parts[0].label, parts[0].schema())
        resolve_spec(like[1], case["column"], None, parts[0].label)
    else:
        parts = [ipc.IpcPart(case["path"], case["kind"]) for _ in range(2)]
    h = tasks_histogram(parts, Reading(spec, inline=True), get_backend(case["backend"]), CAP,
                        like=like)
    h = exact(h, parts, spec)  # as a scan makes its above-cap sum exact
    if (h.counts % 2).any():
        raise AssertionError("the two copies were counted apart")
    return LengthHistogram(h.counts // 2, h.above_count // 2, h.above_tokens // 2,
                           h.above_min, h.above_max, h.null_count // 2, h.invalid_count // 2)


def reference(case: dict) -> dict:
    """pyarrow's reading of the length column, validated in full, histogrammed in numpy
    (or for the other formats, `OTHERS`' reading)."""
    if case["kind"] in OTHERS:
        try:
            values, nulls = OTHERS[case["kind"]](case["path"], case.get("options", {}))
            return {"ok": fields(_hist(np.asarray(values, np.int64), nulls))}
        except BaseException as exc:  # noqa: BLE001
            return {"fail": f"{type(exc).__name__}"}
    name = case["offsets_of"] or case["column"]
    try:
        if case["kind"] == "parquet":
            col = pq.read_table(case["path"], columns=[name]).column(0)
        else:
            opened = pa.ipc.open_file if case["kind"] == "file" else pa.ipc.open_stream
            col = opened(case["path"]).read_all().column(name)
        col.validate(full=True)
        arr = col.combine_chunks() if col.num_chunks else pa.array([], col.type)
        if case["offsets_of"]:
            values = np.asarray(pa.compute.list_value_length(arr).fill_null(0), np.int64)
        else:
            values = np.asarray(arr.fill_null(0).cast(pa.int64()), np.int64)
        valid = np.asarray(arr.is_valid(), bool)
        return {"ok": fields(_hist(values[valid], int((~valid).sum())))}
    except BaseException as exc:  # noqa: BLE001
        return {"fail": f"{type(exc).__name__}"}


def _hist(v: np.ndarray, nulls: int):
    ok = v[v >= 0]
    above = ok[ok > CAP]
    return LengthHistogram(np.bincount(ok[ok <= CAP], minlength=CAP + 1), above.size,
                           int(sum(int(a) for a in above)),
                           int(above.min()) if above.size else -1,
                           int(above.max()) if above.size else -1, nulls, int((v < 0).sum()))


# ------------------------------------------------------------ the other formats' references
class Refused(Exception):
    """The reference does not read the file."""


def _documents(x: np.ndarray, eot: int, start: bool) -> list[int]:
    """Document lengths of a token stream: its tokens and its one EOT, which ends it
    (``start`` false) or opens it; a run without one at an end is a document too."""
    cuts = np.flatnonzero(x == eot) + (0 if start else 1)
    edges = np.unique(np.concatenate([[0], cuts, [x.size]]))
    return np.diff(edges).tolist()


def _stream(x: np.ndarray, options: dict) -> tuple[list[int], int]:
    return _documents(x, options["eot"], options.get("eot_position") == "start"), 0


def npy(path: str, options: dict) -> tuple[list[int], int]:
    """numpy's own reading (mapped: a header's shape is checked against the file's size
    before anything is read), the ids in file order."""
    with warnings.catch_warnings():  # (a header of Python 2's: numpy parses it again)
        warnings.simplefilter("ignore")
        x = np.load(path, mmap_mode="r", allow_pickle=False)
    if x.dtype.str not in ("<u2", "<u4", "<i4") or (x.ndim > 1 and np.isfortran(x)):
        raise Refused(x.dtype.str)
    ids = np.array(x).reshape(-1)
    return _stream(ids.view(np.uint32) if ids.dtype == np.int32 else ids, options)


def llmc(path: str, options: dict) -> tuple[list[int], int]:
    """llm.c's ``_load_data_shard``: magic 20240520, version 1 (uint16) or 2 (uint32),
    then exactly the token count the header says. A file without the magic is nanoGPT's
    raw ids (as the readers tell them)."""
    data = open(path, "rb").read()
    if data[:4] != struct.pack("<i", 20240520):
        return nanogpt(path, options)
    header = np.frombuffer(data[:1024], "<i4")
    if header.size != 256 or header[0] != 20240520 or header[1] not in (1, 2):
        raise Refused("header")
    ids = np.frombuffer(data[1024:], "<u2" if header[1] == 1 else "<u4")
    if ids.size != header[2] or len(data) != 1024 + ids.nbytes:
        raise Refused("count")
    return _stream(ids, options)


def nanogpt(path: str, options: dict) -> tuple[list[int], int]:
    data = open(path, "rb").read()
    if len(data) % 2:
        raise Refused("odd size")
    return _stream(np.frombuffer(data, "<u2"), options)


def megatron(path: str, options: dict) -> tuple[list[int], int]:
    """Megatron-LM's ``_IndexReader``, with the asserts its dataset makes on opening: the
    sizes (int32), or with ``unit="document"`` each document's sizes summed."""
    data = open(path, "rb").read()
    if data[:9] != b"MMIDIDX\x00\x00" or len(data) < 34:
        raise Refused("magic")
    version, code, sequences, documents = struct.unpack_from("<QBQQ", data, 9)
    need = 34 + 12 * sequences + 8 * documents
    if version != 1 or not 1 <= code <= 8 or len(data) not in (need, need + sequences):
        raise Refused("header")
    sizes = np.frombuffer(data, "<i4", sequences, 34)
    if options.get("unit") != "document":
        return sizes.tolist(), 0
    bounds = np.frombuffer(data, "<i8", documents, 34 + 12 * sequences)
    if (not documents or bounds[0] != 0 or bounds[-1] != sequences
            or (np.diff(bounds) < 0).any() or (bounds < 0).any()):
        raise Refused("document index")
    sums = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)])
    return (sums[bounds[1:]] - sums[bounds[:-1]]).tolist(), 0


def jsonl(path: str, options: dict) -> tuple[list[int], int]:
    """Python's ``json``, line by line: every non-blank line one object, the field an
    int64 or null or absent (nulls counted apart). Compressed text (zstd) is read through
    pyarrow's decompressor, at most 64 MiB of it."""
    name = options.get("column", "length")
    with open(path, "rb") as f:
        zstd = f.read(4) == b"\x28\xb5\x2f\xfd"
    pieces, size = [], 0
    with pa.input_stream(path, compression="zstd" if zstd else None) as f:
        while piece := f.read(1 << 16):  # (a failed read of n bytes leaks n: kept small)
            pieces.append(piece)
            size += len(piece)
            if size > 64 << 20:
                raise Refused("over 64 MiB")
    data = b"".join(pieces)
    values, nulls = [], 0
    for k, line in enumerate(data.split(b"\n")):
        text = (line.removeprefix(b"\xef\xbb\xbf") if k == 0 else line).strip(b" \t\r")
        if not text:
            continue
        obj = json.loads(text.decode(), object_pairs_hook=_unique)
        if not isinstance(obj, dict):
            raise Refused("not an object")
        value = obj.get(name)
        if value is None:
            nulls += 1
        elif type(value) is int and -(1 << 63) <= value < 1 << 63:
            values.append(value)
        else:
            raise Refused("not an int64")
    return values, nulls


def _unique(pairs: list) -> dict:
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        raise Refused("a key twice")
    return dict(pairs)


OTHERS = {"npy": npy, "llmc": llmc, "nanogpt": nanogpt, "megatron": megatron,
          "jsonl": jsonl}


def main() -> None:
    cases = json.loads(open(sys.argv[1]).read())
    first = int(sys.argv[2])
    # warm up: kernels loaded, pools grown, the statistics worker started, every reader's
    # modules imported (one case of each kind)
    kinds: dict[str, dict] = {}
    for c in cases:  # the first of each (the last ones may be bombs)
        kinds.setdefault(c["kind"], c)
    for case in (cases[0], next((c for c in cases if c.get("trust")), cases[0]),
                 *kinds.values()):
        scan(case)
        reference(case)
    with open("/proc/self/status") as f:
        vm = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize"))
    resource.setrlimit(resource.RLIMIT_AS, (vm + HEADROOM, resource.RLIM_INFINITY))
    for i in range(first, len(cases)):
        print(f"start {i}", flush=True)
        print(f"done {i} {json.dumps(scan(cases[i]))}", flush=True)
        print(f"ref {i} {json.dumps(reference(cases[i]))}", flush=True)


if __name__ == "__main__":
    main()
