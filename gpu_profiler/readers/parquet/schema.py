"""A Parquet file's top-level fields told without pyarrow (`Fields`), for planning: the
footer checked by the kernel (`pages.footer`), its SchemaElements read here (Thrift
compact protocol), and the ``ARROW:schema`` pyarrow and polars write beside them applied
as pyarrow applies it (the Arrow type refines a field's Parquet type: large strings and
lists). Only types named here exactly as pyarrow names them are told: a file with any
other (timestamps, decimals, structs, maps, durations, dictionaries, extension types), or
an ``ARROW:schema`` that does not fit the Parquet schema, gets None, and its schema is
then pyarrow's (`ParquetPart.schema`). Forged bytes get None too, never an exception,
and in time linear in their size. tests/test_parquet_schema.py holds the names against
pyarrow's for the files of several writers.

Loading pyarrow's Parquet module costs a process ~40 ms (bench/results/layouts.md), more
than the kernel takes to count a 1e7-row file."""

from __future__ import annotations

import base64
import binascii
import struct
from collections.abc import Iterator
from typing import NamedTuple

from gpu_profiler.readers.base import Field, Fields

# Parquet's physical types, ConvertedType values and repetitions used here.
BOOLEAN, INT32, INT64, FLOAT, DOUBLE, BYTE_ARRAY = 0, 1, 2, 4, 5, 6
UTF8, LIST = 0, 3
REQUIRED, REPEATED = 0, 2
_CONVERTED_INTS = {11: "uint8", 12: "uint16", 13: "uint32", 14: "uint64",
                   15: "int8", 16: "int16", 17: "int32", 18: "int64"}
_PLAIN = {BOOLEAN: "bool", INT32: "int32", INT64: "int64", FLOAT: "float", DOUBLE: "double",
          BYTE_ARRAY: "binary"}
# Arrow's Type union (Schema.fbs) for the types told here.
_A_INT, _A_FLOAT, _A_BINARY, _A_UTF8, _A_BOOL = 2, 3, 4, 5, 6
_A_LIST, _A_LARGE_BINARY, _A_LARGE_UTF8, _A_LARGE_LIST = 12, 19, 20, 21
_FLOATS = {0: "halffloat", 1: "float", 2: "double"}


class Malformed(ValueError):
    """Bytes that are not what they should be (the file's schema is then pyarrow's)."""


class Element(NamedTuple):
    """A SchemaElement: the fields read here (None: absent)."""

    name: str
    physical: int | None
    repetition: int | None
    children: int | None
    converted: int | None
    logical: tuple[int, int, bool] | None  # (union field, INTEGER's bit width and sign)


def told(schema: bytes, arrow: bytes) -> Fields | None:
    """The top-level fields of the Thrift SchemaElement list ``schema`` refined by the
    base64 ``ARROW:schema`` value ``arrow`` (empty: none), or None (see the module)."""
    try:
        tree = _tree(_elements(schema))
        refined = _arrow_fields(arrow) if arrow else [None] * len(tree)
        if len(refined) != len(tree):
            return None
        out = []
        for (element, kids), a in zip(tree, refined, strict=True):
            name = _named(element, kids, a)
            if name is None or (a is not None and a.name != element.name):
                return None
            out.append(Field(element.name, name))
        return Fields(tuple(out))
    except (Malformed, UnicodeDecodeError, RecursionError):
        return None


# --- Parquet's schema -------------------------------------------------------------------

Node = tuple[Element, list["Node"]]


def _named(e: Element, kids: list[Node], a: _Arrow | None) -> str | None:
    """pyarrow's name of the type of the Parquet field ``e`` (children ``kids``) refined by
    the Arrow field ``a`` (None: no ``ARROW:schema``), or None where not told here."""
    if a is not None and a.extension:
        return None
    if not kids:
        if e.repetition == REPEATED or e.children is not None:
            return None
        return _refined(_leaf(e), a)
    # A list as Parquet's LIST rules write it: group (LIST) > repeated group > one element.
    listed = e.logical[0] == 3 if e.logical else e.converted == LIST
    if e.logical and e.converted is not None and e.converted != LIST:
        return None
    if not listed or e.repetition == REPEATED or len(kids) != 1:
        return None
    middle, inner = kids[0]
    if middle.repetition != REPEATED or len(inner) != 1 or middle.logical or \
            middle.converted is not None or middle.name in ("array", f"{e.name}_tuple"):
        return None
    leaf, below = inner[0]
    if below:  # (a list of lists, or of structs: pyarrow's)
        return None
    kind = "list"
    if a is not None:
        if a.type not in (_A_LIST, _A_LARGE_LIST) or len(a.children) != 1 or a.dictionary:
            return None
        kind = "large_list" if a.type == _A_LARGE_LIST else "list"
    item = _named(leaf, [], a.children[0] if a is not None else None)
    if item is None:
        return None
    return f"{kind}<{leaf.name}: {item}{' not null' if leaf.repetition == REQUIRED else ''}>"


def _leaf(e: Element) -> str | None:
    """The Arrow type pyarrow reads the leaf ``e`` as, by its Parquet types alone (a
    logical and a converted type that disagree: not told)."""
    by_logical = by_converted = None
    if e.logical is not None:
        kind, bits, signed = e.logical
        by_logical = "string" if kind == 1 else \
            f"{'' if signed else 'u'}int{bits}" if kind == 10 and bits in (8, 16, 32, 64) else ""
    if e.converted is not None:
        by_converted = "string" if e.converted == UTF8 else _CONVERTED_INTS.get(e.converted, "")
    if by_logical is None and by_converted is None:
        return _PLAIN.get(e.physical if e.physical is not None else -1)
    name = by_logical if by_logical is not None else by_converted
    if not name or by_converted not in (None, name):
        return None
    if name == "string":
        return name if e.physical == BYTE_ARRAY else None
    bits = int(name.removeprefix("u").removeprefix("int"))
    fits = (e.physical == INT32 and bits <= 32) or (e.physical == INT64 and bits == 64)
    return name if fits else None


def _tree(elements: list[Element]) -> list[Node]:
    """The root's children, each with its subtree (depth-first order, as written)."""
    at = 1

    def node(depth: int) -> Node:
        nonlocal at
        if at >= len(elements) or depth > 64:
            raise Malformed("schema tree")
        e = elements[at]
        at += 1
        return e, [node(depth + 1) for _ in range(e.children or 0)]

    if not elements or elements[0].children is None:
        raise Malformed("schema root")
    top = [node(0) for _ in range(elements[0].children)]
    if at != len(elements):
        raise Malformed("schema tree")
    return top


class _Thrift:
    """A Thrift compact-protocol reader over ``b``; `Malformed` past its end."""

    def __init__(self, b: bytes) -> None:
        self.b, self.p = b, 0

    def byte(self) -> int:
        if self.p >= len(self.b):
            raise Malformed("thrift")
        self.p += 1
        return self.b[self.p - 1]

    def varint(self) -> int:
        v = shift = 0
        while True:
            c = self.byte()
            v |= (c & 0x7F) << shift
            if c < 0x80:
                return v
            shift += 7
            if shift > 63:
                raise Malformed("varint")

    def zigzag(self) -> int:
        v = self.varint()
        return (v >> 1) ^ -(v & 1)

    def binary(self) -> bytes:
        n = self.varint()
        if n > len(self.b) - self.p:
            raise Malformed("thrift")
        self.p += n
        return self.b[self.p - n:self.p]

    def collection(self) -> tuple[int, int]:
        """A list's ``(size, element type)``."""
        h = self.byte()
        n = h >> 4 if h >> 4 != 15 else self.varint()
        if n > len(self.b) - self.p:  # (every element takes a byte or more)
            raise Malformed("thrift")
        return n, h & 0x0F

    def skip(self, t: int, depth: int = 0) -> None:
        if depth > 32:
            raise Malformed("thrift depth")
        if t in (1, 2):  # a bool in a struct: its value is its type
            return
        if t == 3:
            self.byte()
        elif t in (4, 5, 6):
            self.varint()
        elif t == 7:
            self.p += 8
        elif t == 8:
            self.binary()
        elif t in (9, 10):
            n, e = self.collection()
            for _ in range(n):
                if e in (1, 2):  # (a bool in a list takes a byte)
                    self.byte()
                else:
                    self.skip(e, depth + 1)
        elif t == 12:
            for _, ft in _fields(self):
                self.skip(ft, depth + 1)
        else:  # (maps: none in a SchemaElement)
            raise Malformed("thrift type")
        if self.p > len(self.b):
            raise Malformed("thrift")


def _fields(r: _Thrift) -> Iterator[tuple[int, int]]:
    """A struct's ``(field id, type)`` in order, up to its stop byte: each field's value
    is read (or skipped) before the next is asked for."""
    last = 0
    while (h := r.byte()) != 0:
        last = last + (h >> 4) if h >> 4 else r.zigzag()
        yield last, h & 0x0F


def _elements(b: bytes) -> list[Element]:
    r = _Thrift(b)
    n, t = r.collection()
    if t != 12:
        raise Malformed("schema list")
    out = []
    for _ in range(n):
        v: dict[int, object] = {}
        for fid, t in _fields(r):
            if fid in v:  # (Thrift's C++ reader merges a repeated union: pyarrow's)
                raise Malformed("a field twice in a schema element")
            if fid in (1, 3, 5, 6) and t == 5:
                v[fid] = r.zigzag()
            elif fid == 4 and t == 8:
                v[4] = r.binary().decode()
            elif fid == 10 and t == 12:
                v[10] = _logical(r)
            else:
                r.skip(t)
        if 4 not in v:
            raise Malformed("schema element without a name")
        out.append(Element(v[4], v.get(1), v.get(3), v.get(5), v.get(6),  # type: ignore[arg-type]
                           v.get(10)))  # type: ignore[arg-type]
    return out


def _logical(r: _Thrift) -> tuple[int, int, bool]:
    """A LogicalType union: ``(its field, bit width, signed)`` (the last two INTEGER's)."""
    kind, bits, signed = -1, 0, False
    for fid, t in _fields(r):
        if kind != -1 or t != 12:  # (one member, a struct: else pyarrow's reading)
            raise Malformed("logical type")
        kind = fid
        if fid == 10 and t == 12:
            for f2, t2 in _fields(r):
                if f2 == 1 and t2 == 3:
                    bits = r.byte()
                elif f2 == 2 and t2 in (1, 2):
                    signed = t2 == 1
                else:
                    r.skip(t2)
        else:
            r.skip(t)
    return kind, bits, signed


# --- the ARROW:schema -------------------------------------------------------------------

class _Arrow(NamedTuple):
    """An Arrow Field: its name, Type union tag and the type's told name (an integer's or
    a float's), its children, and whether it is dictionary-encoded (which pyarrow reads
    as its own dictionary type, not always the one written: not told here) or an extension
    type."""

    name: str
    type: int
    scalar: str
    children: list[_Arrow]
    dictionary: bool
    extension: bool


def _refined(parquet: str | None, a: _Arrow | None) -> str | None:
    """The leaf type ``parquet`` as the Arrow field ``a`` refines it (None: not told)."""
    if parquet is None or a is None:
        return parquet
    if a.children:
        return None
    if a.type in (_A_INT, _A_FLOAT, _A_BOOL):
        value = a.scalar if a.type != _A_BOOL else "bool"
        fits = value == parquet
    elif a.type in (_A_UTF8, _A_LARGE_UTF8):
        value, fits = "large_string" if a.type == _A_LARGE_UTF8 else "string", \
            parquet == "string"
    elif a.type in (_A_BINARY, _A_LARGE_BINARY):
        value, fits = "large_binary" if a.type == _A_LARGE_BINARY else "binary", \
            parquet == "binary"
    else:
        return None
    return value if fits and not a.dictionary else None


class _Flat:
    """Flatbuffer tables in ``b``: `Malformed` for an offset out of it or a scalar out of
    its alignment (as the flatbuffers verifier pyarrow runs), and past ``work`` vector
    entries and string bytes read in all: tables may share their children and metadata,
    so a small forged buffer can hold a tree of any size (a schema pyarrow writes reads
    each of its bytes about once)."""

    def __init__(self, b: bytes) -> None:
        self.b = b
        self.work = 4 * len(b) + 4096

    def _charge(self, n: int) -> None:
        self.work -= n
        if self.work < 0:
            raise Malformed("flatbuffer: shared tables")

    def _unpack(self, fmt: str, p: int) -> int:
        size = struct.calcsize(fmt)
        if p < 0 or p + size > len(self.b) or p % size:
            raise Malformed("flatbuffer")
        return int(struct.unpack_from(fmt, self.b, p)[0])

    def slot(self, table: int, i: int) -> int:
        """Where field ``i`` of the table at ``table`` lies (0: absent)."""
        vtable = table - self._unpack("<i", table)
        size = self._unpack("<H", vtable)
        if 4 + 2 * i + 2 > size:
            return 0
        off = self._unpack("<H", vtable + 4 + 2 * i)
        return table + off if off else 0

    def scalar(self, table: int, i: int, fmt: str, default: int) -> int:
        p = self.slot(table, i)
        return self._unpack(fmt, p) if p else default

    def ref(self, table: int, i: int) -> int:
        """The table, vector or string field ``i`` points at (0: absent)."""
        p = self.slot(table, i)
        return p + self._unpack("<I", p) if p else 0

    def vector(self, table: int, i: int) -> list[int]:
        """The tables of the vector field ``i``."""
        v = self.ref(table, i)
        if not v:
            return []
        n = self._unpack("<I", v)
        if n > len(self.b) // 4:
            raise Malformed("flatbuffer vector")
        self._charge(n)
        return [v + 4 + 4 * k + self._unpack("<I", v + 4 + 4 * k) for k in range(n)]

    def string(self, table: int, i: int) -> str:
        s = self.ref(table, i)
        if not s:
            return ""
        n = self._unpack("<I", s)
        if s + 4 + n > len(self.b):
            raise Malformed("flatbuffer string")
        self._charge(n)
        return self.b[s + 4:s + 4 + n].decode()


def _arrow_fields(value: bytes) -> list[_Arrow | None]:
    """The top-level fields of an ``ARROW:schema`` value: the base64 of an IPC Schema
    message (with or without its continuation marker)."""
    try:
        b = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise Malformed("ARROW:schema base64") from None
    if b[:4] == b"\xff\xff\xff\xff":
        b = b[4:]
    if len(b) < 8:
        raise Malformed("ARROW:schema")
    size = struct.unpack_from("<i", b)[0]
    if not 0 < size <= len(b) - 4:
        raise Malformed("ARROW:schema")
    f = _Flat(b[4:4 + size])
    message = f._unpack("<I", 0)
    if f.scalar(message, 1, "<B", 0) != 1 or f.scalar(message, 0, "<h", 0) < 3:
        raise Malformed("ARROW:schema: no Schema message of version V4 or later")
    schema = f.ref(message, 2)
    if not schema:
        raise Malformed("ARROW:schema")
    return [_arrow(f, t, 0) for t in f.vector(schema, 1)]


def _arrow(f: _Flat, t: int, depth: int) -> _Arrow:
    """The Arrow Field table at ``t``."""
    f._charge(1)
    if depth > 8:
        raise Malformed("ARROW:schema depth")
    tag = f.scalar(t, 2, "<B", 0)
    typ = f.ref(t, 3)
    scalar = ""
    if tag == _A_INT and typ:
        bits, signed = f.scalar(typ, 0, "<i", 0), f.scalar(typ, 1, "<B", 0)
        scalar = f"{'' if signed else 'u'}int{bits}"
    elif tag == _A_FLOAT and typ:
        scalar = _FLOATS.get(f.scalar(typ, 0, "<h", 0), "")
    extension = any(f.string(kv, 0).startswith("ARROW:extension:")
                    for kv in f.vector(t, 6))
    return _Arrow(f.string(t, 0), tag, scalar,
                  [_arrow(f, c, depth + 1) for c in f.vector(t, 5)], bool(f.slot(t, 4)),
                  extension)
