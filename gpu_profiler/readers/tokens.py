"""Flat token streams: a corpus stored as one long run of token ids, its documents separated
by an end-of-text token (``--eot ID``):

- nanoGPT's ``.bin``: raw token ids, uint16 (``--token-dtype uint32`` for larger vocabularies);
- llm.c's ``.bin``: a 256-int32 header (magic 20240520, version 1 = uint16 or 2 = uint32,
  token count), then the ids;
- ``.npy``: a numpy array of ids (uint16, uint32, or int32), its header says which.

A document counts its tokens and its one EOT (`gpu_profiler.chunk.Documents`). The file is
read in chunks of `CHUNK_BYTES` (`PositionedFile.values`: mapped where it is in the page
cache, else positioned reads); each chunk carries the length of the document still open
where it starts (found by a search back from the previous chunk's end, which costs about
one document's tokens), so the backends find every document, on any backend, with no
chunk boundary splitting, merging or dropping one. A ``.bin`` beside a
Megatron-LM ``.idx`` of the same prefix is that dataset's (`gpu_profiler.readers.megatron`).
"""

from __future__ import annotations

import ast
import math
import os
import struct
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import BinaryIO

import numpy as np

from gpu_profiler.chunk import Chunk, Documents
from gpu_profiler.errors import ProfilerError, first_line
from gpu_profiler.frozen import frozen
from gpu_profiler.io.pread import PositionedFile
from gpu_profiler.readers import megatron
from gpu_profiler.readers.base import (
    FixedShard,
    Reading,
    ShardFormat,
    SourceOptions,
    suffix,
)

LLMC_MAGIC = 20240520
LLMC_HEADER = 256 * 4
LLMC_VERSIONS = {1: "uint16", 2: "uint32"}
NPY_MAGIC = b"\x93NUMPY"
NPY_VERSIONS = ((1, 0), (2, 0), (3, 0))
#: Longest .npy header read (numpy writes ~128 bytes and reads at most 10,000 by default).
NPY_MAX_HEADER = 1 << 16
#: Most dimensions of a .npy shape (numpy's own limit).
NPY_MAX_DIMS = 64
#: The .npy dtypes (their descr, without a little-endian mark) of token ids.
_NPY_DTYPES = {"u2": "uint16", "u4": "uint32", "i4": "int32"}
#: Token bytes per chunk (read at call time: tests shrink it).
CHUNK_BYTES = 8 << 20
#: Token dtypes the kernels take; int32 ids (``.npy``) are read as uint32, the same bits.
_KERNEL_DTYPES = {"uint16": "uint16", "uint32": "uint32", "int32": "uint32"}


@frozen
class Layout:
    """Where a token stream's ids lie in its file."""

    kind: str  # "nanoGPT .bin", "llm.c .bin", ".npy"
    dtype: str  # as stored (little-endian): uint16, uint32 or int32
    offset: int
    tokens: int


def layout(path: Path, token_dtype: str | None) -> Layout:
    """The layout of the token file at ``path``, checked against its size; ``token_dtype``
    is the ``--token-dtype`` given (None: not given), which a header must agree with."""
    try:
        with open(path, "rb") as f:
            head = f.read(LLMC_HEADER)
            size = os.fstat(f.fileno()).st_size
            if head.startswith(NPY_MAGIC):
                f.seek(0)
                return _npy(path, f, size, token_dtype)
    except OSError as exc:
        raise ProfilerError(f"{path}: cannot read ({exc.strerror})") from None
    if head[:4] == struct.pack("<i", LLMC_MAGIC):
        return _llmc(path, head, size, token_dtype)
    dtype = token_dtype or "uint16"
    item = np.dtype(dtype).itemsize
    if size % item:
        raise ProfilerError(f"{path}: {size:,} bytes is not a whole number of {dtype} tokens "
                            f"({item} bytes each): is --token-dtype right?")
    return Layout("nanoGPT .bin", dtype, 0, size // item)


def _llmc(path: Path, head: bytes, size: int, token_dtype: str | None) -> Layout:
    if len(head) < LLMC_HEADER:
        raise ProfilerError(f"{path}: truncated llm.c token file: {size} bytes, its header "
                            f"alone has {LLMC_HEADER}")
    version, tokens = struct.unpack_from("<ii", head, 4)
    if version not in LLMC_VERSIONS:
        raise ProfilerError(f"{path}: llm.c header version {version} at offset 4 (known: 1 "
                            "for uint16 tokens, 2 for uint32)")
    dtype = LLMC_VERSIONS[version]
    _agree(path, f"its llm.c header (version {version})", dtype, token_dtype)
    need = LLMC_HEADER + tokens * np.dtype(dtype).itemsize
    if tokens < 0 or size != need:
        raise ProfilerError(f"{path}: llm.c header says {tokens:,} {dtype} tokens at offset 8 "
                            f"({need:,} bytes with the header), the file has {size:,}")
    return Layout("llm.c .bin", dtype, LLMC_HEADER, tokens)


def _npy(path: Path, f: BinaryIO, size: int, token_dtype: str | None) -> Layout:
    shape, fortran, descr, offset = _npy_header(path, f, size)
    order, code = (descr[0], descr[1:]) if descr[:1] in ("<", ">", "=", "|") else ("", descr)
    little = order == "<" or (order in ("=", "") and np.little_endian)
    name = _NPY_DTYPES.get(code) if little else None
    if name is None:
        raise ProfilerError(f"{path}: token ids must be little-endian uint16, uint32 or "
                            f"int32; the .npy holds {_said(descr)}")
    if fortran and len(shape) > 1:
        raise ProfilerError(f"{path}: a Fortran-order {_said(shape)} array is no token "
                            "stream (save it in C order)")
    _agree(path, "its .npy header", name, token_dtype)
    tokens = math.prod(shape)
    need = offset + tokens * np.dtype(name).itemsize
    if size != need:
        said = f"{need:,} bytes" if need < 1 << 63 else "over 2**63 bytes"
        raise ProfilerError(f"{path}: its .npy header says shape {_said(shape)} of {name} "
                            f"({said} with the header), the file has {size:,}")
    return Layout(".npy", name, offset, tokens)


def _npy_header(path: Path, f: BinaryIO, size: int) -> tuple[tuple[int, ...], bool, str, int]:
    """``(shape, fortran_order, descr, offset of the data)`` of the .npy file ``f`` (of
    ``size`` bytes), parsed here rather than by numpy, whose reader trusts the header
    length (reading 4 GiB for a length of 2**32 - 1) and lets its tokenizer's errors out.
    The header is read only once its length is known to fit the file and `NPY_MAX_HEADER`;
    it must be a Python literal of exactly numpy's three keys, the shape a tuple of at most
    `NPY_MAX_DIMS` non-negative integers, the descr a string."""
    def corrupt(what: str) -> ProfilerError:
        return ProfilerError(f"{path}: corrupt .npy header: {what}")

    f.seek(0)
    prefix = f.read(12)
    if len(prefix) < 10:
        raise corrupt(f"the file ends at byte {len(prefix)}, inside the header")
    version = (prefix[6], prefix[7])
    if version not in NPY_VERSIONS:
        raise corrupt(f"format version {version[0]}.{version[1]} at offset 6 (known: 1.0, "
                      "2.0, 3.0)")
    wide = version != (1, 0)
    if wide and len(prefix) < 12:
        raise corrupt(f"the file ends at byte {len(prefix)}, inside the header")
    length = struct.unpack_from("<I" if wide else "<H", prefix, 8)[0]
    offset = (12 if wide else 10) + length
    if length > NPY_MAX_HEADER or offset > size:
        raise corrupt(f"header length {length:,} at offset 8 " + (
            f"runs past the end of the {size:,}-byte file" if offset > size else
            f"(numpy writes about 128 bytes; at most {NPY_MAX_HEADER:,} are read)"))
    f.seek(offset - length)
    raw = f.read(length)
    if len(raw) != length:
        raise corrupt(f"the file ends at byte {offset - length + len(raw)}, inside the "
                      "header")
    try:
        text = raw.decode("utf-8" if version == (3, 0) else "latin-1")
        header = ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError) as exc:
        raise corrupt(f"not a Python literal ({type(exc).__name__}: {first_line(exc)})"
                      [:200]) from None
    if not isinstance(header, dict) or set(header) != {"descr", "fortran_order", "shape"}:
        raise corrupt("not a dict of exactly 'descr', 'fortran_order' and 'shape'")
    shape, fortran, descr = header["shape"], header["fortran_order"], header["descr"]
    if not (isinstance(shape, tuple) and len(shape) <= NPY_MAX_DIMS
            and all(type(n) is int and 0 <= n < 1 << 63 for n in shape)):
        raise corrupt(f"shape {_said(shape)} is not a tuple of at most {NPY_MAX_DIMS} "
                      "integers from 0 to 2**63 - 1")
    if type(fortran) is not bool:
        raise corrupt(f"fortran_order {_said(fortran)} is not True or False")
    if not isinstance(descr, str):
        raise corrupt(f"descr {_said(descr)} is not a dtype string (a structured array?)")
    return shape, fortran, descr, offset


def _said(value: object) -> str:
    """A header value as a message shows it: its repr, cut short."""
    text = repr(value) if not isinstance(value, str) else value
    return text if len(text) <= 60 else text[:57] + "..."


def _agree(path: Path, where: str, dtype: str, token_dtype: str | None) -> None:
    if token_dtype is not None and token_dtype != _KERNEL_DTYPES[dtype]:
        raise ProfilerError(f"{path}: --token-dtype {token_dtype} does not apply: {where} "
                            f"says {dtype}")


@frozen
class TokenPart(FixedShard):
    """A flat token stream file; its samples are its documents."""

    def length_source(self, options: SourceOptions) -> str:
        opens = " (each EOT opens one)" if options.eot_position == "start" else ""
        return f"token stream: documents split at EOT {options.eot}{opens}"

    def chunks(self, reading: Reading) -> Iterator[Chunk]:
        return _chunks(self.path, reading.source)


def _chunks(path: Path, options: SourceOptions) -> Iterator[Chunk]:
    """The stream in chunks of token ids, each with its `Documents`."""
    if options.eot is None:
        raise ProfilerError(f"{path}: a flat token stream needs --eot ID (eot= in Python), "
                            "the end-of-text token id that separates its documents (50256 "
                            "for GPT-2's tokenizer)")
    lay = layout(path, options.token_dtype)
    top = int(np.iinfo(lay.dtype).max)
    if options.eot > top:
        raise ProfilerError(f"{path}: --eot {options.eot} cannot occur in {lay.dtype} token "
                            f"ids (at most {top})")
    item = np.dtype(lay.dtype).itemsize
    step = max(1, CHUNK_BYTES // item)
    docs = Documents(options.eot, start=options.eot_position == "start", last=False)
    with PositionedFile(path) as f:
        for lo in range(0, lay.tokens, step):
            hi = min(lay.tokens, lo + step)
            x = f.values(lay.offset + lo * item, hi - lo, _KERNEL_DTYPES[lay.dtype])
            here = replace(docs, last=hi == lay.tokens)
            yield Chunk(x, docs=here)
            docs = here.following(x)


def _sniff(head: bytes, path: str) -> bool:
    """llm.c's and numpy's headers by their magic bytes; a raw ``.bin`` (no magic) by its
    name (a Megatron-LM data file is claimed before this is asked)."""
    return (head.startswith(NPY_MAGIC) or head[:4] == struct.pack("<i", LLMC_MAGIC)
            or suffix(path) == ".bin")


def _part(path: str | Path) -> TokenPart:
    idx = megatron.companion(Path(path))
    if idx is not None:
        raise ProfilerError(f"{path}: the data file of the Megatron-LM indexed dataset "
                            f"{idx}, not a token stream: profile {idx.with_suffix('')} "
                            "(its lengths are in the index)")
    return TokenPart(path)


FORMAT = ShardFormat("tokens", "token stream", (".bin", ".npy"), _sniff, _part,
                     takes=frozenset({"eot", "eot_position", "token_dtype"}))
