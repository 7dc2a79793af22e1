"""Readers: turn a user's source into named splits of parts, each yielding `Chunk`s of the
length column. One module per format (``hf``, ``ipc``, ``parquet``, ``jsonl``, ``megatron``,
``tokens``, ``memory``, ``device``); a shard format is registered in :data:`FORMATS`, and
the readers that load pyarrow (Parquet, Arrow IPC, JSON Lines) are imported only for a file
of their format."""

from __future__ import annotations

import glob
import os
import stat
from collections.abc import Callable, Collection, Iterable
from pathlib import Path
from typing import Any

from gpu_profiler.errors import ProfilerError
from gpu_profiler.io import files
from gpu_profiler.readers import hf, megatron, tokens
from gpu_profiler.readers.base import (
    ARROW_MAGIC,
    COLUMN_OPTIONS,
    FLAGS,
    PARQUET_ENCRYPTED,
    PARQUET_MAGIC,
    ZSTD_MAGIC,
    LengthSpec,
    Part,
    Reading,
    ShardFormat,
    SourceOptions,
    resolve_spec,
    sized,
    spelled,
    suffix,
)

__all__ = ["FORMATS", "LengthSpec", "Part", "Reading", "ShardFormat", "SourceOptions",
           "given_options", "glob_also_matches", "named_paths", "open_source", "resolve_spec"]


# The part of each format whose reader loads pyarrow: the reader imported on first use.
def _parquet(path: str | Path) -> Part:
    from gpu_profiler.readers.parquet import ParquetPart

    return ParquetPart(path)


def _ipc(kind: str) -> Callable[[str | Path], Part]:
    def part(path: str | Path) -> Part:
        from gpu_profiler.readers.ipc import IpcPart

        return IpcPart(path, kind)
    return part


def _jsonl(path: str | Path) -> Part:
    from gpu_profiler.readers.jsonl import JsonlPart

    return JsonlPart(path)


def _is_jsonl(head: bytes, path: str) -> bool:
    """By name (text has no magic bytes); a ``.jsonl.zst`` must also be a zstd stream."""
    return path.endswith(".jsonl") or (path.endswith(".jsonl.zst")
                                       and head.startswith(ZSTD_MAGIC))


def _is_stream(head: bytes, path: str) -> bool:
    """An Arrow IPC stream opens with a continuation marker (or, before format 0.15, a
    length)."""
    return head[:4] == b"\xff\xff\xff\xff" or (
        len(head) >= 4 and head[:4] != b"\x00\x00\x00\x00"
        and suffix(path) in (".arrow", ".arrows", ".ipc"))


#: Every shard format, in the order files are sniffed: one line each.
FORMATS: dict[str, ShardFormat] = {f.name: f for f in (
    ShardFormat("parquet", "Parquet", (".parquet", ".pq"),
                lambda head, path: head.startswith(PARQUET_MAGIC), _parquet,
                takes=COLUMN_OPTIONS | {"trust_statistics"}),
    ShardFormat("ipc", "Arrow IPC", (".arrow", ".feather", ".ipc"),
                lambda head, path: head.startswith(ARROW_MAGIC), _ipc("file")),
    # by name, before ipc-stream's test of the first bytes
    ShardFormat("jsonl", "JSON Lines", (".jsonl", ".jsonl.zst"), _is_jsonl, _jsonl,
                takes=frozenset({"column"})),
    ShardFormat("ipc-stream", "Arrow IPC", (".arrows",), _is_stream, _ipc("stream")),
    megatron.FORMAT,  # claims a .bin beside its .idx before tokens sees it
    tokens.FORMAT,
)}
#: ``--format`` values: ``hf`` (a save_to_disk dir) and the shard formats.
FORMAT_NAMES = ("hf", *FORMATS)


def sniff(path: str | Path, head: bytes | None = None) -> ShardFormat:
    """A shard's format from its first bytes (extensions can lie); ``head``: those bytes,
    where the listing read them (`files.look`)."""
    if head is None:
        try:
            head = files.head(path)
        except OSError as exc:
            raise ProfilerError(f"{path}: cannot read ({exc.strerror})") from None
    name = os.fspath(path)
    for fmt in FORMATS.values():
        if fmt.sniff(head, name):
            return fmt
    if head[:4] == PARQUET_ENCRYPTED:
        from gpu_profiler.readers.parquet import encrypted

        raise encrypted(path, "its footer is encrypted")
    raise ProfilerError(f"{path}: not a {_titles()} file (unrecognized magic bytes)")


def _titles() -> str:
    """``Parquet or Arrow IPC``: the registered formats, as errors name them."""
    names = list(dict.fromkeys(f.title for f in FORMATS.values()))
    return ", ".join(names[:-1]) + " or " + names[-1] if len(names) > 1 else names[0]


def given_options(column: str | None, offsets_of: str | None,
                  source: SourceOptions) -> list[str]:
    """The names of the options given (``open_source``'s ``given``)."""
    return [*(["column"] if column else []), *(["offsets_of"] if offsets_of else []),
            *source.given()]


def open_source(source: Any, fmt: str | None = None, split: str | None = None,
                given: Collection[str] = ()) -> dict[str, list[Part]]:
    """Resolve a source into ``{split_name: [parts]}``; unsplit sources use the name ``""``.

    Args:
        source: a path (file, directory, glob, Megatron-LM prefix or glob of prefixes;
            a path that exists, or a prefix whose ``.idx`` does, is read literally, its
            glob characters too: only one that names nothing is a glob), a list of them
            (their shards together, each file once), or an in-memory object (numpy
            array, pyarrow Array/ChunkedArray/Table/RecordBatch,
            ``datasets.Dataset``/``DatasetDict``).
        fmt: force a format (one of :data:`FORMAT_NAMES`) instead of detecting it.
        split: keep only this split of a DatasetDict.
        given: the options (names in `gpu_profiler.readers.base.FLAGS`) the user gave;
            one that a part's format does not take is a `ProfilerError` saying so.
    """
    if fmt is not None and fmt not in FORMAT_NAMES:
        raise ProfilerError(f"unknown format {fmt!r}; choose one of: {', '.join(FORMAT_NAMES)}")
    if isinstance(source, (list, tuple)) and source and all(
            isinstance(s, (str, Path)) for s in source):
        with files.collector_paused():
            splits = _paths_splits([str(s) for s in source], fmt, given)
    elif not isinstance(source, (str, Path)):
        from gpu_profiler.readers import memory

        _refuse(given, COLUMN_OPTIONS, f"{type(source).__name__} (in memory)")
        splits = memory.splits(source)
    else:
        with files.collector_paused():
            splits = _path_splits(str(source), fmt, given)
    if split is not None:
        if split not in splits:
            names = ", ".join(repr(s) for s in splits if s) or "none (not a DatasetDict)"
            raise ProfilerError(f"no split {split!r}; splits: {names}")
        splits = {split: splits[split]}
    return splits


def _paths_splits(sources: list[str], fmt: str | None, given: Collection[str]
                  ) -> dict[str, list[Part]]:
    """The splits of several PATHs together: each shard once (a file named by two PATHs,
    or found by two walks, counts once), in the order given; a split dataset and an
    unsplit source cannot be mixed."""
    listed = [(s, _path_splits(s, fmt, given)) for s in sources]
    unsplit = [s for s, splits in listed if "" in splits]
    split = [(s, splits) for s, splits in listed if "" not in splits]
    if unsplit and split:
        raise ProfilerError(f"{split[0][0]} has splits ({', '.join(split[0][1])}) and "
                            f"{unsplit[0]} has none: profile them separately, or name the "
                            "split's directory itself")
    out: dict[str, list[Part]] = {}
    seen: set[tuple[int, int] | str] = set()
    for _, splits in listed:
        for name, parts in splits.items():
            for part in parts:
                key = _part_identity(part)
                if key not in seen:
                    seen.add(key)
                    out.setdefault(name, []).append(part)
    return out


def _part_identity(part: Part) -> tuple[int, int] | str:
    """What makes two listed parts one shard: its file (device and inode), else its label."""
    at = getattr(part, "at", None)
    try:
        return _identity(os.fspath(at)) if at is not None else part.label
    except OSError:
        return part.label


def _path_splits(source: str, fmt: str | None, given: Collection[str]
                 ) -> dict[str, list[Part]]:
    path = Path(source)
    if not path.exists():
        named = _named(source, fmt is None)
        if named:
            return {"": _one_format(source, named, fmt, given)}
        if _magic(source):
            raise ProfilerError(f"{source}: the pattern matches no file")
        raise ProfilerError(f"{path}: no such file or directory")
    if path.is_file():
        return {"": [_file_part(path, path.stat().st_size, None, fmt, given)]}
    if not path.is_dir():  # opening a FIFO would wait for a writer
        raise ProfilerError(f"{path}: is {_node_kind(path)}, not a file or a directory")
    if fmt in (None, "hf") and (hf.is_dataset_dict_dir(path) or hf.is_dataset_dir(path)):
        _refuse(given, COLUMN_OPTIONS, f"{path} (Hugging Face dataset)")
        if hf.is_dataset_dict_dir(path):
            return {name: _hf_parts(d) for name, d in hf.dict_splits(path).items()}
        return {"": _hf_parts(path)}
    if fmt == "hf":
        raise ProfilerError(f"{path}: not a Hugging Face save_to_disk directory "
                            "(no state.json or dataset_dict.json)")
    # --format picks its own family's files out of a walk (Arrow IPC: files and streams)
    family = [f for f in FORMATS.values() if fmt is None or f.title == FORMATS[fmt].title]
    suffixes = tuple(x for f in family for x in f.suffixes)
    listed = _once((os.path.join(top, name) for top, _, names in os.walk(path)
                    for name in names if name.endswith(suffixes)), fmt is None)
    if not listed:
        raise ProfilerError(f"{path}: no {_titles()} files in this directory")
    return {"": _one_format(source, listed, fmt, given)}


def _one_format(source: str, found: list[tuple[str, int, bytes | None]], fmt: str | None,
                given: Collection[str]) -> list[Part]:
    """The parts of the files a directory or glob holds, refused when they are of more than
    one format: ``x.parquet`` beside ``x.arrow`` is most often one corpus saved twice, and
    counting both would double it silently. Files named one by one as PATHs are the
    user's choice, and are read whatever their formats."""
    if fmt is not None:
        return _unique([_file_part(*f, fmt, given) for f in found])
    sniffed = [sniff(path, head) for path, _, head in found]  # once: _file_part is told
    kinds: dict[str, list[str]] = {}
    for (path, _, _), f in zip(found, sniffed, strict=True):
        kinds.setdefault(f.title, []).append(path)
    if len(kinds) > 1:
        said = "; ".join(f"{len(paths):,} {title} (e.g. {paths[0]})"
                         for title, paths in kinds.items())
        raise ProfilerError(
            f"{source}: holds files of several formats: {said}; counting them all could "
            "count one corpus twice: pick one with --format or a glob of one suffix "
            "(e.g. 'DIR/**/*.parquet'), or name the files as PATHs")
    return _unique([_file_part(*entry, f.name, given)
                    for entry, f in zip(found, sniffed, strict=True)])


def _magic(source: str) -> bool:
    """Whether ``source`` has glob characters (it is a glob only where it names nothing)."""
    return any(ch in source for ch in "*?[")


def _named(source: str, heads: bool = True) -> list[tuple[str, int, bytes | None]]:
    """The files a PATH that names no file or directory stands for: a Megatron-LM prefix
    read literally (``x[1]`` names ``x[1].idx``); else, when it has glob characters, the
    files the glob matches, or the prefixes it matches."""
    literal = _expanded(glob.escape(source), heads)
    if literal or not _magic(source):
        return literal
    return _once(glob.glob(source, recursive=True), heads) or _expanded(source, heads)


def named_paths(source: str | Path) -> list[str]:
    """Every file or directory a PATH names, none of them read: itself when it exists
    (a name is never a glob then), else `_named` 's files; a Megatron-LM ``.idx`` or
    ``.bin`` with its companion. What no output of a command may replace."""
    s = os.fspath(source)
    found = [s] if os.path.exists(s) else [p for p, _, _ in _named(s, heads=False)]
    stems = [(stem, ext) for stem, ext in map(os.path.splitext, found) if ext in (".idx", ".bin")]
    return found + [f"{stem}{'.bin' if ext == '.idx' else '.idx'}" for stem, ext in stems]


def glob_also_matches(source: str | Path) -> list[str]:
    """The files a PATH would also stand for as a glob when it names files itself (it
    exists, or is a Megatron-LM prefix) and is read literally: empty unless both readings
    could apply and differ (the caller then says which was used)."""
    s = os.fspath(source)
    if not _magic(s):
        return []
    mine = [s] if os.path.exists(s) else [p for p, _, _ in _expanded(glob.escape(s), False)]
    if not mine:
        return []
    own = {_identity(p) for p in mine}
    other = _once(glob.glob(s, recursive=True), False) or _expanded(s, False)
    return [p for p, _, _ in other if _identity(p) not in own]


def _identity(path: str) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_dev, st.st_ino


def _expanded(source: str, heads: bool = True) -> list[tuple[str, int, bytes | None]]:
    """The files a path or glob that names none stands for (Megatron-LM prefixes)."""
    return _once((p for f in FORMATS.values() if f.expand for p in f.expand(source)), heads)


def _unique(parts: list[Part]) -> list[Part]:
    """Each part once: two files may stand for one (a Megatron-LM .bin and its .idx)."""
    seen: dict[str, Part] = {}
    for p in parts:
        seen.setdefault(p.label, p)
    return list(seen.values())


def _refuse(given: Collection[str], takes: Collection[str], what: str) -> None:
    """A `ProfilerError` for the first option given that a source (``what``) does not
    take, naming the sources that do."""
    for name in given:
        if name not in takes:
            takers = list(dict.fromkeys(f.title for f in FORMATS.values() if name in f.takes))
            if name in COLUMN_OPTIONS:
                takers += ["Hugging Face dataset", "in-memory"]
            listed = ", ".join(takers[:-1]) + " and " + takers[-1] if len(takers) > 1 \
                else takers[0]
            raise ProfilerError(f"{FLAGS[name]} does not apply to {what}: it is for "
                                f"{listed} sources")


def _once(paths: Iterable[str | Path], heads: bool = True
          ) -> list[tuple[str, int, bytes | None]]:
    """The regular files among ``paths``, in path order, each once (by device and inode:
    symlinked directories, or a link loop that a ``**`` glob goes round, would list one
    shard many times; the shallowest of its names is kept), with their sizes and (with
    ``heads``) first bytes (`files.look`: thousands are looked up without the GIL, and
    listing them makes no `Path`), spelled as `Path` spells them (`base.spelled`)."""
    named = [spelled(os.fspath(p)) for p in paths]
    best: dict[tuple[int, int], tuple[list[str], str, int, bytes | None]] = {}
    for p, found in zip(named, files.look(named, heads), strict=True):
        if found.size < 0:
            continue
        key = p.split(os.sep)
        have = best.get(found.identity)
        if have is None or (len(key), key) < (len(have[0]), have[0]):
            best[found.identity] = (key, p, found.size, found.head)
    return [(p, n, head) for _, p, n, head in sorted(best.values(), key=lambda e: e[0])]


def _node_kind(path: Path) -> str:
    mode = path.stat().st_mode
    return ("a FIFO" if stat.S_ISFIFO(mode) else "a character device" if stat.S_ISCHR(mode)
            else "a block device" if stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode)
            else "no regular file")


def _hf_parts(path: Path) -> list[Part]:
    from gpu_profiler.readers.ipc import IpcPart

    return [sized(IpcPart(p, "stream"), n) for p, n in hf.dataset_shards(path)]


def _file_part(path: str | Path, size: int, head: bytes | None, fmt: str | None,
               given: Collection[str]) -> Part:
    """The part of a file listed with ``size`` (and ``head``, its first bytes, if read)."""
    if fmt == "hf":
        raise ProfilerError(f"{path}: --format hf needs a save_to_disk directory")
    f = FORMATS[fmt] if fmt else sniff(path, head)
    if not f.takes.issuperset(given):  # (the message is made only when it is needed)
        _refuse(given, f.takes, f"{path} ({f.title})")
    part = f.part(path)  # (a Megatron-LM .bin's part is its .idx: not this size)
    return sized(part, size) if getattr(part, "at", None) == path else part
