"""The reader interface: a `Part` describes one shard (or in-memory object), a `LengthSpec`
says where its lengths are (`resolve_spec`), a `Reading` says how one scan reads every part
(decided once, by the engine, with the user's `SourceOptions`), and a `ShardFormat`
registers a file format (`gpu_profiler.readers.FORMATS`). Nothing here loads pyarrow: a
Megatron-LM index or a token stream is planned and read without it."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from gpu_profiler.chunk import Chunk, Counting
from gpu_profiler.errors import ProfilerError
from gpu_profiler.frozen import frozen
from gpu_profiler.runs import Run, Runs

if TYPE_CHECKING:  # (loaded by the readers that need it: never for a Megatron-LM index)
    import pyarrow as pa

#: The first bytes of a Parquet file (``PARE``: one whose footer is encrypted, by Parquet
#: Modular Encryption), of an Arrow IPC file and of a zstd frame (a ``.jsonl.zst``): what
#: the registry (`gpu_profiler.readers.FORMATS`) sniffs without loading those readers.
PARQUET_MAGIC = b"PAR1"
PARQUET_ENCRYPTED = b"PARE"
ARROW_MAGIC = b"ARROW1"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"

#: How each option that only some sources take is named in messages (the CLI's flags).
FLAGS = {"column": "--column", "offsets_of": "--offsets-of", "unit": "--unit",
         "eot": "--eot", "eot_position": "--eot-position", "token_dtype": "--token-dtype",
         "trust_statistics": "--trust-statistics"}
#: The options a column-oriented source takes (Parquet, Arrow IPC, HF dirs, in memory).
COLUMN_OPTIONS = frozenset({"column", "offsets_of"})
UNITS = ("sequence", "document")
EOT_POSITIONS = ("end", "start")
TOKEN_DTYPES = ("uint16", "uint32")


@frozen
class LengthSpec:
    """Where lengths come from: an integer column, or the offsets of a list column; for a
    format whose lengths are no column of the user's (a Megatron-LM index, a flat token
    stream: the ``length`` field of its schema is the reader's), ``about`` says what they
    are (`described_by`)."""

    name: str
    offsets: bool = False
    about: str | None = None

    def describe(self) -> str:
        """What the lengths are, as ``length_source`` says it: ``column 'length'``,
        ``offsets of 'input_ids'``, ``Megatron-LM index: sequence lengths``, ``token
        stream: documents split at EOT 50256``."""
        if self.about:
            return self.about
        return f"offsets of {self.name!r}" if self.offsets else f"column {self.name!r}"

    def described_by(self, part: Any, options: Any) -> LengthSpec:
        """This spec, saying what ``part``'s format makes its lengths of under the source
        ``options`` (a `SourceOptions`), when the part's class has a ``length_source``
        (`gpu_profiler.readers.megatron.MegatronPart`,
        `gpu_profiler.readers.tokens.TokenPart`); itself otherwise."""
        about = getattr(part, "length_source", None)
        return replace(self, about=about(options)) if about is not None else self


@frozen
class Field:
    """A field of `Fields`: its name, and its type as pyarrow names it (``int64``,
    ``list<item: null>``)."""

    name: str
    type: str


@frozen
class Fields:
    """A schema told without pyarrow, for planning (a part's ``fields()``: see
    `planning_schema`): what `resolve_spec` and `same_schema` ask of a ``pa.Schema``
    (``names``, the fields in order, ``field``, ``equals``), its types named as pyarrow
    names them, so that messages read the same: plain types (integers, lists and others
    told by name), never a dictionary."""

    fields: tuple[Field, ...]

    @property
    def names(self) -> list[str]:
        return [f.name for f in self.fields]

    def __iter__(self) -> Iterator[Field]:
        return iter(self.fields)

    def field(self, name: str) -> Field:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(name)  # as pyarrow's

    def equals(self, other: Any, check_metadata: bool = False) -> bool:
        return other == self


def planning_schema(part: Any) -> Any:
    """The schema ``part``'s length source is checked in (`resolve_spec`, `same_schema`):
    the `Fields` of a part whose format tells them without pyarrow (``fields()``: JSON
    Lines, whose scan then never loads it, and Parquet where its types allow), else its
    ``schema()``."""
    light = getattr(part, "fields", None)
    told = light() if light is not None else None
    return told if told is not None else part.schema()


def _is_int(t: Any) -> bool:
    """Whether ``t`` (a pyarrow type, or a `Field`'s name of one) is an integer type, or a
    dictionary of one."""
    if isinstance(t, str):
        return t.removeprefix("u") in ("int8", "int16", "int32", "int64")
    import pyarrow as pa  # (loaded: ``t`` is one of its types)

    if pa.types.is_dictionary(t):
        t = t.value_type
    return pa.types.is_integer(t)


def _is_list(t: Any) -> bool:
    """Whether ``t`` (as in `_is_int`) is a list or large list type."""
    if isinstance(t, str):
        return t.startswith(("list<", "large_list<"))
    import pyarrow as pa  # (loaded: ``t`` is one of its types)

    return bool(pa.types.is_list(t) or pa.types.is_large_list(t))


def _columns_listing(schema: Any) -> str:
    return ", ".join(f"{f.name} ({f.type})" for f in schema) or "none"


def _only_one(names: list[str], name: str, where: str) -> None:
    """A name that several fields carry does not say which one holds the lengths."""
    if names.count(name) > 1:
        raise ProfilerError(f"{where}: {names.count(name)} fields are named {name!r}; which "
                            "one holds the lengths is ambiguous")


def resolve_spec(schema: Any, column: str | None, offsets_of: str | None,
                 where: str, list_offsets: bool = True) -> LengthSpec:
    """Pick and check the length source in ``schema`` (a ``pa.Schema`` or `Fields`);
    ``where`` names the input in errors; ``list_offsets``: whether its format can give
    lengths as a list column's offsets (the fix an error offers)."""
    if column and offsets_of:
        raise ProfilerError("give either --column or --offsets-of, not both")
    names = schema.names
    name = offsets_of or column
    if name is None:
        ints = [f.name for f in schema if _is_int(f.type)]
        if "length" in names:
            name = "length"
        elif len(ints) == 1:
            name = ints[0]
        else:
            what = "several integer columns" if ints else "no integer column"
            fix = "--column or --offsets-of" if list_offsets else "--column"
            raise ProfilerError(f"{where}: no 'length' column and {what}; pick one with "
                                f"{fix}; columns: {_columns_listing(schema)}")
    if name not in names:
        raise ProfilerError(f"{where}: no column {name!r}; columns: "
                            f"{_columns_listing(schema)}")
    _only_one(names, name, where)
    t = schema.field(name).type
    a_list = _is_list(t)
    if offsets_of:
        if not a_list:
            raise ProfilerError(f"{where}: --offsets-of needs a list column, {offsets_of!r} "
                                f"has type {t}")
        return LengthSpec(offsets_of, offsets=True)
    if not _is_int(t):
        hint = " (use --offsets-of for a list column)" if list_offsets and a_list else ""
        raise ProfilerError(f"{where}: column {name!r} has type {t}; lengths must be "
                            f"integers{hint}")
    return LengthSpec(name)


@frozen
class SourceOptions:
    """The options of the formats that take them (None: not given, the format's default).

    Attributes:
        unit: ``sequence`` (default) or ``document``: what a Megatron-LM dataset's samples
            are (a document sums its sequences).
        eot: the end-of-text token id that splits a flat token stream into documents
            (required for those).
        eot_position: ``end`` (default; nanoGPT: each EOT closes the document before it)
            or ``start`` (llm.c: each EOT opens the document after it).
        token_dtype: ``uint16`` (default) or ``uint32``: the ids of a raw ``.bin`` token
            stream (llm.c headers and ``.npy`` headers say it themselves).
        trust_statistics: count a Parquet row group whose footer statistics say every
            value is equal (min == max) from those statistics, without reading it. Off by
            default: a footer can lie, and only reading the column proves it.
    """

    unit: str | None = None
    eot: int | None = None
    eot_position: str | None = None
    token_dtype: str | None = None
    trust_statistics: bool | None = None

    def __post_init__(self) -> None:
        for name, allowed in (("unit", UNITS), ("eot_position", EOT_POSITIONS),
                              ("token_dtype", TOKEN_DTYPES)):
            value = getattr(self, name)
            if value is not None and value not in allowed:
                raise ProfilerError(f"{FLAGS[name]} must be {' or '.join(allowed)}, got "
                                    f"{value!r}")
        eot = self.eot
        if eot is not None and (isinstance(eot, bool) or not isinstance(eot, int)
                                or not 0 <= eot < 1 << 32):
            raise ProfilerError(f"--eot must be a token id from 0 to {(1 << 32) - 1}, got "
                                f"{eot!r}")

    def given(self) -> list[str]:
        """The names of the options given."""
        return [n for n in ("unit", "eot", "eot_position", "token_dtype", "trust_statistics")
                if getattr(self, n) is not None and getattr(self, n) is not False]  # eot 0


@frozen
class Reading:
    """How every part of one scan is read.

    Attributes:
        spec: the length source (a column, or a list column's offsets).
        segmented: hand record batches over where they were read (`Chunk.segments`): the
            backend histograms them in place.
        gpu_parquet: decode Parquet on the GPU (the cuda backend, with cudf installed).
        ordered: every part yields its samples in row order, each one read (no `Run` from
            statistics, no `Runs` of counts): what a per-sample array
            (`gpu_profiler.lengths`) needs.
        inline: each part is read in the thread that asks for its chunks, with no thread
            of its own (no decoding workers, no read-ahead): the scan runs many parts at
            once, one per worker thread (`gpu_profiler.execute`).
        source: the options of the formats that take them (checked against each part's
            format when the source is opened: `gpu_profiler.readers.open_source`).
    """

    spec: LengthSpec
    segmented: bool = False
    gpu_parquet: bool = False
    ordered: bool = False
    inline: bool = False
    source: SourceOptions = SourceOptions()

    def __post_init__(self) -> None:
        if not isinstance(self.source, SourceOptions):
            raise TypeError(f"Reading.source must be SourceOptions, got {self.source!r}")


#: A shard of at most this many bytes may be read together with its neighbours (`Together`).
SMALL_BYTES = 4 << 20


class Together(Protocol):
    """Reads many small shards of one format at once: their bytes into one buffer, their
    metadata parsed and their columns gathered by one kernel call each, instead of a reader
    set up per shard (whose cost is most of a small shard's). A `Part` class that has one
    names it ``together``; `gpu_profiler.execute` hands it runs of consecutive small parts
    (`SMALL_BYTES`) of that class, when the scan is not ordered."""

    def __call__(self, parts: list[Part], reading: Reading,
                 like: tuple[str, Any] | None) -> Joined:
        """The run, described (`Joined`). Every part read here has the schema of ``like``
        (a label and a schema; None: of ``parts[0]``)."""
        ...


class Joined(Protocol):
    """A run of small parts read together (what a `Together` returns): either counted by a
    backend that counts as it reads (`counting`, run by `Backend.count`) or gathered into
    chunks (`chunks`), whichever the backend takes; then `left` says which parts the run
    did not read. A part is left when it holds anything the run does not read itself
    (another schema, compression, damage): its own reader then reads it or raises its
    error, so both ways give the same numbers or the same error."""

    def counting(self) -> Counting | None:
        """The kernel call that reads and counts the parts as they are decoded, or None
        when the run has none for this column (it is then gathered)."""
        ...

    def chunks(self) -> Iterator[Chunk]:
        """The parts' length columns, gathered."""
        ...

    def left(self) -> list[int]:
        """Indices of the parts left to their own readers (once counted or gathered)."""
        ...


@frozen
class Leave:
    """A `Joined` that reads none of its ``parts`` parts: each goes to its own reader."""

    parts: int

    def counting(self) -> None:
        return None

    def chunks(self) -> Iterator[Chunk]:
        return iter(())

    def left(self) -> list[int]:
        return list(range(self.parts))


def together_of(part: Part, reading: Reading) -> Together | None:
    """The `Together` that would read ``part`` with its neighbours in this scan: its
    class's ``together``, when the part's ``joins(reading)`` says that reader takes it
    (else the part is read alone, and its schema checked before the scan)."""
    read = getattr(part, "together", None)
    joins = getattr(part, "joins", None)
    return read if read is not None and joins is not None and joins(reading) else None


class Part(Protocol):
    """One shard (file) or in-memory object of a split. A class may also have
    ``together``, a `Together` that reads many of its small parts at once, and then
    ``joins(reading)``: whether that reader takes the part in such a scan; and
    ``batches(columns, codes=())``: pyarrow record batches of those columns (``codes``: read
    as dictionaries where the format stores them so), for a scan that needs a column besides
    the lengths (`gpu_profiler.columns`; formats without columns lack it); and
    ``length_source(options)``: what its lengths are, for a format whose lengths are its
    own, no column of the user's (its schema is then `fixed_schema`: see `fixed`); and
    ``fields()``: its schema as `Fields` (or None where it cannot tell), which planning
    then checks (`planning_schema`).

    Attributes:
        label: names the part in errors and progress.
        nbytes: size on disk or in memory, for progress and the small-scan rule.
        on_device: the data is in GPU memory (the cuda backend reads it in place).
        read_ahead: reading it in a background thread, ahead of the backend, pays off.
    """

    @property
    def label(self) -> str: ...

    @property
    def nbytes(self) -> int: ...

    @property
    def on_device(self) -> bool: ...

    @property
    def read_ahead(self) -> bool: ...

    def schema(self) -> pa.Schema: ...

    def chunks(self, reading: Reading) -> Iterator[Chunk | Run | Runs]:
        """The length source in order; a `Run` stands for samples whose lengths the
        metadata already proves (Parquet statistics), `Runs` for those a kernel counted
        by length without decoding them (a Parquet dictionary's entries): counted, not
        histogrammed."""
        ...


@frozen
class FileShard:
    """The part of a `Part` every shard on disk shares: its path names and sizes it.
    ``at`` is the path as listed, a `Path` or a string: a listing of thousands of shards
    makes no `Path` for them (each costs more than looking up the file's size), and a
    shard read by a kernel that opens it itself (`gpu_profiler.io.files.names`)
    never needs one."""

    at: str | Path

    @cached_property
    def path(self) -> Path:
        return self.at if isinstance(self.at, Path) else Path(self.at)

    @property
    def label(self) -> str:
        return os.fspath(self.at)

    @cached_property
    def nbytes(self) -> int:
        """The size when first asked (planning asks: the scan, its tasks and its progress
        then agree, and a shard costs one ``stat``)."""
        return self.path.stat().st_size

    @property
    def span(self) -> tuple[str, int, int] | None:
        """The part of the file it is, as a cache key holds it (a range of row groups or
        record batches, first and stop): None for the whole file."""
        return None


def suffix(path: str) -> str:
    """The file name's suffix, as `Path.suffix` says it (without making a `Path`)."""
    name = path.rstrip(os.sep).rpartition(os.sep)[2]
    i = name.rfind(".")
    return name[i:] if 0 < i < len(name) - 1 else ""


def spelled(path: str) -> str:
    """``path`` spelled as `Path` spells it (no ``.`` component, no doubled separator:
    labels, and the listing that `--part` slices, name a file one way), made into a
    `Path` only when it is spelled otherwise."""
    if f"{os.sep}{os.sep}" in path or f"{os.sep}.{os.sep}" in path \
            or path.startswith(f".{os.sep}") or path.endswith((f"{os.sep}.", os.sep)):
        return str(Path(path))
    return path


def fixed(part: Any) -> bool:
    """Whether ``part``'s lengths are its format's own (a Megatron-LM index, a token stream:
    ``length_source``): its schema is `fixed_schema`, with nothing to resolve or compare
    against another such part's, so a scan of them never builds it (nor loads pyarrow)."""
    return getattr(part, "length_source", None) is not None


#: The length source of a part whose lengths are its format's own (`fixed`).
FIXED = LengthSpec("length")


def fixed_schema() -> pa.Schema:
    """The schema of a part whose lengths are its format's own (`fixed`): one non-null
    int64 field, `FIXED` 's."""
    import pyarrow as pa

    return pa.schema([pa.field(FIXED.name, pa.int64(), nullable=False)])


@frozen
class FixedShard(FileShard):
    """A shard whose lengths are its format's own (`fixed`: a subclass says what they are
    in ``length_source``), read with positioned reads in the scan's thread: reading ahead
    overlaps them."""

    on_device = False
    read_ahead = True

    def schema(self) -> pa.Schema:
        return fixed_schema()


def unlike(part: Any, like: tuple[str, Any]) -> bool:
    """Whether ``part``'s schema is to be checked against ``like`` (the scan's first part's
    label and schema: None for a `fixed` part): any other part, but a fixed one after a
    fixed one."""
    return part.label != like[0] and not (like[1] is None and fixed(part))


def same_schema(label: str, schema: Any, like: tuple[str, Any], spec: LengthSpec) -> None:
    """A `ProfilerError` unless ``schema`` (of the part ``label``) holds the scan's length
    source as ``like`` 's does (a label and the schema of the scan's first part, None for
    `fixed_schema`): the same column, of any integer type (read as int64) or, for
    ``spec.offsets``, a list. The other columns are never read, and may differ."""
    like = like if like[1] is not None else (like[0], fixed_schema())
    if isinstance(schema, type(like[1])) and schema.equals(like[1], check_metadata=False):
        return  # (a `Fields` beside a pyarrow schema: paths of two formats named together)
    try:
        resolve_spec(schema, None if spec.offsets else spec.name,
                     spec.name if spec.offsets else None, label)
    except ProfilerError:
        raise ProfilerError(f"{label}: schema differs from {like[0]} in its length source "
                            f"({spec.describe()}): {_schema_diff(schema, like[1])}") from None


def _schema_diff(a: Any, b: Any) -> str:
    fa = {f.name: str(f.type) for f in a}
    fb = {f.name: str(f.type) for f in b}
    diffs = [f"{n}: {fa.get(n, 'missing')} vs {fb.get(n, 'missing')}"
             for n in dict.fromkeys([*fb, *fa]) if fa.get(n) != fb.get(n)]
    return "; ".join(diffs) or "field order or nullability"


def sized(part: Part, size: int) -> Part:
    """``part``, its size known already (from the ``stat`` that listed it: planning then
    costs no second one)."""
    if isinstance(part, FileShard):
        part.__dict__["nbytes"] = size  # FileShard.nbytes caches itself there
    return part


@frozen
class ShardFormat:
    """A file format a shard may have (one entry of `gpu_profiler.readers.FORMATS`).

    Attributes:
        name: the ``--format`` value.
        title: what errors call it ("Parquet", "Arrow IPC").
        suffixes: file name endings a directory walk picks up.
        sniff: whether a file with these first 16 bytes (and this path) has the format.
        part: the `Part` of such a file (named as listed: see `FileShard`).
        takes: the options (names in `FLAGS`) its parts read; any other one given is a
            usage error that says which formats take it.
        expand: the files of this format that a path or glob naming no file stands for
            (a Megatron-LM prefix stands for ``PREFIX.idx``), or None.
    """

    name: str
    title: str
    suffixes: tuple[str, ...]
    sniff: Callable[[bytes, str], bool]
    part: Callable[[str | Path], Part]
    takes: frozenset[str] = COLUMN_OPTIONS
    expand: Callable[[str], list[Path]] | None = None
