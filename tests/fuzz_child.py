"""The child process of tests/test_fuzz.py: scans the cases of a manifest one by one under
an address-space limit and prints one JSON line per case.

``python fuzz_child.py MANIFEST FIRST`` runs cases ``FIRST..`` of MANIFEST (a JSON list of
``{"path", "kind", "column", "offsets_of", "backend", "reader", "io", "trust"}``). For each it
prints ``start I``, then ``done I {"ok": fields} | {"error": line} | {"bug": repr}``,
then ``ref I {"ok": fields} | {"fail": ...}``: pyarrow's own reading of the file, done
after the scan (pyarrow may allocate what a hostile file claims, or abort: that is
pyarrow's affair, and the parent only needs to know it did not read the file).
"""

from __future__ import annotations

import json
import os
import resource
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from gpu_profiler import ProfilerError, histogram
from gpu_profiler.readers import ipc, pread

#: Address space granted beyond what the warmed-up child maps.
HEADROOM = 1 << 30
CAP = 1 << 16


def fields(h) -> dict:
    return {"counts": np.flatnonzero(h.counts).tolist() + h.counts[h.counts > 0].tolist(),
            "above": [h.above_count, h.above_tokens, h.above_min, h.above_max],
            "null": h.null_count, "invalid": h.invalid_count}


def scan(case: dict) -> dict:
    os.environ[pread.IO_ENV] = case["io"]
    if case["reader"]:
        os.environ[ipc.READER_ENV] = case["reader"]
    else:
        os.environ.pop(ipc.READER_ENV, None)
    try:
        h = histogram(case["path"], column=case["column"], offsets_of=case["offsets_of"],
                      backend=case["backend"], cap=CAP,
                      trust_statistics=case.get("trust", False))
        return {"ok": fields(h)}
    except ProfilerError as exc:
        return {"error": str(exc)}
    except BaseException as exc:  # noqa: BLE001 - the parent reports it
        return {"bug": f"{type(exc).__name__}: {exc}"[:500]}


def reference(case: dict) -> dict:
    """pyarrow's reading of the length column, validated in full, histogrammed in numpy."""
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
    from gpu_profiler.histogram import LengthHistogram

    ok = v[v >= 0]
    above = ok[ok > CAP]
    return LengthHistogram(np.bincount(ok[ok <= CAP], minlength=CAP + 1), above.size,
                           int(sum(int(a) for a in above)),
                           int(above.min()) if above.size else -1,
                           int(above.max()) if above.size else -1, nulls, int((v < 0).sum()))


def main() -> None:
    cases = json.loads(open(sys.argv[1]).read())
    first = int(sys.argv[2])
    for case in (cases[0], next((c for c in cases if c.get("trust")), cases[0])):
        scan(case)  # warm up: kernels loaded, pools grown, the statistics worker started
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
