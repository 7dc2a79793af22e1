"""The Parquet kernel's snappy decoder (`kernels/parquet.py: _snappy`, through the JIT: the
native library compiles the same code) against pyarrow's (Google's C++ snappy), one thread,
in memory, on 1 MiB pages of a length column compressed by pyarrow's snappy as its writer
does: what bounds the PLAIN rows of `layouts.md`. Also counts the stream's elements (a
literal or a copy each), whose number, not the bytes, sets a decoder's speed. Every page is
checked equal. Writes bench/results/snappy.md and .json.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from numba import njit

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

from gpu_profiler.kernels import parquet as K  # noqa: E402

PAGE = 1 << 20


@njit(nogil=True)
def _decode(flat, los, sizes, out, st):
    for k in range(los.size - 1):
        K._snappy(flat, los[k], los[k + 1], out, sizes[k], st)


def _elements(block: bytes) -> tuple[int, int]:
    """(literals, copies) of one raw snappy block."""
    p = 0
    while block[p] & 0x80:
        p += 1
    p += 1
    literals = copies = 0
    while p < len(block):
        tag = block[p]
        p += 1
        if tag & 3 == 0:
            n = tag >> 2
            if n >= 60:
                n = int.from_bytes(block[p:p + n - 59], "little") + n - 59
            p += n + 1
            literals += 1
        else:
            p += (0, 1, 2, 4)[tag & 3]  # the offset's bytes
            copies += 1
    return literals, copies


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", type=Path,
                    default=common.DATA / "layouts" / "one-1e+08-plain.parquet")
    ap.add_argument("--rows", type=int, default=50_000_000)
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    if not args.corpus.is_file():
        sys.exit(f"{args.corpus}: missing (bench/bench_layouts.py --samples 1e8 --only PLAIN "
                 "--keep writes it)")
    column = pq.read_table(args.corpus, columns=["length"]).column(0)
    raw = column.to_numpy()[:args.rows].tobytes()
    codec = pa.Codec("snappy")
    sizes = [min(PAGE, len(raw) - i) for i in range(0, len(raw), PAGE)]
    pages = [codec.compress(raw[i:i + PAGE], asbytes=True) for i in range(0, len(raw), PAGE)]
    flat = np.frombuffer(b"".join(pages) + bytes(64), np.uint8)
    los = np.cumsum([0] + [len(p) for p in pages]).astype(np.int64)
    out = np.empty(len(raw) + 64, np.uint8)
    st = np.zeros(4096, np.int64)
    ends = np.cumsum([0] + sizes)
    views = [out[a:] for a in ends[:-1]]

    def ours() -> float:
        t = time.perf_counter()
        for k, view in enumerate(views):  # each page into its place, for the check
            _decode(flat, los[k:k + 2], np.array(sizes[k:k + 1]), view, st)
        return time.perf_counter() - t

    def arrow() -> float:
        t = time.perf_counter()
        for page, size in zip(pages, sizes, strict=True):
            codec.decompress(page, decompressed_size=size)
        return time.perf_counter() - t

    ours()
    if bytes(out[:len(raw)]) != raw:
        sys.exit("FAIL: the kernel's snappy disagrees with pyarrow's")
    times: dict[str, list[float]] = {"kernel": [], "pyarrow": []}
    for _ in range(args.repeat):
        times["kernel"].append(ours())
        times["pyarrow"].append(arrow())
    med = {k: statistics.median(v) for k, v in times.items()}
    literals, copies = map(sum, zip(*map(_elements, pages), strict=True))
    info = common.machine()
    md = ["# Snappy: the Parquet kernel's decoder against Google's", "",
          f"`python bench/bench_snappy.py {' '.join(sys.argv[1:])}` on {info['cpu']}, "
          f"{info['date']}, git {info['git']}, load {info['load']:.1f}. The first "
          f"{args.rows:,} values of `{args.corpus.name}`'s {column.type} `length` column, "
          f"{len(raw) / 1e6:.0f} MB in {len(pages)} pages of 1 MiB compressed by pyarrow "
          f"to {sum(map(len, pages)) / 1e6:.0f} MB: {literals + copies:,} elements "
          f"({len(raw) / (literals + copies):.1f} bytes each; {copies / (literals + copies):.0%} "
          f"copies). One thread, medians of {args.repeat}; the output checked equal. pyarrow "
          "allocates each page's output; the kernel writes into one buffer.", ""]
    md += common.table(["decoder", "time", "GB/s", "ns an element"], [
        [k, f"{med[k] * 1e3:.0f} ms", f"{len(raw) / med[k] / 1e9:.2f}",
         f"{med[k] / (literals + copies) * 1e9:.1f}"] for k in med])
    md += ["", f"pyarrow's time / the kernel's: {med['pyarrow'] / med['kernel']:.2f}."]
    common.write_results("snappy", {"machine": info, "command": sys.argv, "seconds": med,
                                    "runs": times, "elements": [literals, copies]}, md)
    print("\n".join(md))


if __name__ == "__main__":
    main()
