"""Parquet reader: only the length column's pages are read (column projection); the row
groups of a large file are decoded in parallel by a few worker threads that hand batches
over a bounded queue, so memory stays bounded whatever the file size; a file of one batch,
or any file of a scan that runs many shards at once (`Reading.inline`), is decoded in the
calling thread, with no thread started. With ``--trust-statistics`` a row group whose
statistics say every value is equal (min == max, null count known) is counted from the
footer without reading it (`parquet_stats`, in a helper process); by default every value is
read, since nothing but reading proves a footer right, and the default path never asks
pyarrow for a column chunk's metadata (its accessor aborts the process on some malformed
footers instead of raising). Where the kernel counts the column (`pages`: a signed integer
column, PLAIN, DELTA or dictionary-encoded, of `pages.MIN_ROWS` rows or more), the schema is
told and the row groups found without pyarrow (`schema`, `pages.footer`), which is then
loaded only for what the kernel leaves: a process that counts such files never loads it.

Files are read with positioned reads through a bounded buffer, never memory-mapped (mapped
pages would count toward the resident set). A footer is kept with the version of the file
it was read from (`Version`): every later open of the file checks it, so a shard replaced
or rewritten while the scan runs is named, never read as old footer over new pages."""

from __future__ import annotations

import itertools
import os
import queue
import sys
import threading
from collections.abc import Generator, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpu_profiler.chunk import Chunk
from gpu_profiler.errors import ProfilerError, first_line
from gpu_profiler.frozen import frozen
from gpu_profiler.kernels import parquet_format as fmt
from gpu_profiler.prefetch import put_unless_stopped
from gpu_profiler.readers.arrow import array_to_chunk, arrays_to_chunks
from gpu_profiler.readers.base import (
    Fields,
    FileShard,
    Joined,
    LengthSpec,
    Reading,
)
from gpu_profiler.readers.parquet import pages, schema
from gpu_profiler.runs import Run, Runs

if TYPE_CHECKING:  # pyarrow is imported when a file is opened by it (~40 ms of start-up)
    import pyarrow as pa
    import pyarrow.parquet as pq

#: Worker threads decoding row groups (None: one per CPU).
THREADS: int | None = None
#: Rows a worker decodes at once for a length column: a row group as pyarrow writes them (1
#: Mi rows; smaller ones are joined up to it). Each decoding worker and each batch queued
#: holds one: 4 Mi rows held 108 MiB of Arrow memory on a 1e8-row file, 1 Mi 29 MiB, in
#: the same time.
BATCH_ROWS = 1 << 20
#: Encoded bytes of the column per batch a worker decodes (bounds memory for list columns,
#: whose values must be decoded to get their lengths).
BATCH_BYTES = 16 << 20
#: Read buffer of a column chunk stream: a huge row group is never read whole into memory.
#: Small, since pyarrow allocates one per column chunk read: 4 MiB cost a 1.5 MiB shard
#: ~70 us more (bench/results/parquet_decoder.md), and a large file no less time.
READ_BUFFER = 64 << 10
#: Files of more bytes have their column chunks pre-buffered (read ahead by pyarrow's I/O
#: threads, concurrently): 400 shards of 2.2 MiB read 1.5x faster so from a cold page
#: cache; below, that costs ~120 us a file whose reads are few and small (4,000 shards of
#: 50 KiB: 1.35x slower warm, no faster cold; bench/results/parquet_decoder.md).
PRE_BUFFER_BYTES = 1 << 20
#: Decoded batches waiting for the consumer, per worker.
QUEUE_PER_WORKER = 1
#: Most rows a file's footer may claim in all (2**53: no file holds near that many; a
#: larger count is a corrupt footer, refused before anything is read).
MAX_ROWS = 1 << 53

_DONE = object()


def _errors() -> tuple[type[BaseException], ...]:
    """What reading a file may raise: pyarrow's errors too, once it is loaded (none can
    arise before)."""
    pa = sys.modules.get("pyarrow")
    return (OSError, ValueError, EOFError) + ((pa.ArrowException,) if pa else ())


def _strings(schema: pa.Schema, names: tuple[str, ...]) -> list[str]:
    """Those of ``names`` that are string columns (pyarrow reads them as dictionaries)."""
    import pyarrow as pa

    return [n for n in names if pa.types.is_string(schema.field(n).type)
            or pa.types.is_large_string(schema.field(n).type)]


def _batches(path: Path, pf: pq.ParquetFile, groups: range, columns: list[str]
             ) -> Iterator[pa.RecordBatch]:
    """Row groups ``groups`` of ``columns``, `BATCH_ROWS` rows at a time, fewer where
    those columns are wide (a list of token ids: a batch stays near `BATCH_BYTES`)."""
    try:
        md, rows, nbytes = pf.metadata, 0, 0
        for g in groups:
            rg = md.row_group(g)
            rows += rg.num_rows
            nbytes += sum(rg.column(j).total_uncompressed_size for j in range(rg.num_columns)
                          if rg.column(j).path_in_schema.split(".")[0] in columns)
        size = int(min(BATCH_ROWS, max(1024, BATCH_BYTES * max(rows, 1) // max(nbytes, 1))))
        yield from pf.iter_batches(size, list(groups), columns, use_threads=False)
    except _errors() as exc:
        raise _corrupt(path, exc) from None
    finally:
        pf.close(force=True)


def encrypted(path: Path | str, why: str) -> ProfilerError:
    """The error of an encrypted Parquet file (``why``: how it was told)."""
    return ProfilerError(f"{path}: an encrypted Parquet file ({why}): gpu-profiler reads "
                         "plaintext Parquet only; decrypt it first")


def _corrupt(path: Path, exc: BaseException, groups: list[int] | None = None) -> ProfilerError:
    if "encrypted" in str(exc) or "decrypt" in str(exc).lower():
        return encrypted(path, first_line(exc))
    where = ""
    if groups:
        where = f" in row group {groups[0]}" if len(groups) == 1 else \
            f" in row groups {groups[0]}..{groups[-1]}"
    return ProfilerError(f"{path}: corrupt or truncated Parquet file{where}: "
                         f"{first_line(exc)}")


#: Which version of a file a footer came from: its inode, size and mtime (no device
#: number, which differs between the machines of a cluster sharing one file system).
Version = tuple[int, int, int]
#: A file's footer and the version it was read from.
Footer = tuple["pq.FileMetaData", Version]


def _open(path: Path, footer: Footer | None = None, version: Version | None = None,
          codes: list[str] | None = None) -> tuple[pq.ParquetFile, Version]:
    """The file opened once (its footer, where not given, and its pages are read through
    this one descriptor) and its version, which must be ``footer``'s or ``version``;
    ``codes``: columns read as dictionaries (the codes of dictionary-encoded pages)."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq

        f = pa.OSFile(str(path))
        st = os.fstat(f.fileno())
        now = _expected(path, st, footer, version)
        md = footer[0] if footer is not None else None
        return pq.ParquetFile(f, metadata=md, buffer_size=READ_BUFFER,
                              pre_buffer=st.st_size > PRE_BUFFER_BYTES,
                              read_dictionary=codes), now
    except _errors() as exc:
        raise _corrupt(path, exc) from None


def _version(st: os.stat_result) -> Version:
    return st.st_ino, st.st_size, st.st_mtime_ns


def _expected(path: Path, st: os.stat_result, footer: Footer | None,
              version: Version | None) -> Version:
    """The version of the file open with status ``st``, which must be ``footer``'s (or
    ``version``, where given): else the scan stops, naming the file."""
    now = _version(st)
    if now != (footer[1] if footer is not None else version or now):
        raise _changed(path)
    return now


def _changed(path: Path) -> ProfilerError:
    return ProfilerError(f"{path}: changed while the scan ran (replaced or rewritten after "
                         "its footer was read); rerun once it is complete")


@frozen
class Told:
    """What planning learnt of a file without pyarrow: its schema (`schema.told`; None
    where not told there), the version it was read from, and its rows (-1: unknown)."""

    fields: Fields | None
    version: Version | None
    rows: int

    def width(self, spec: LengthSpec) -> int | None:
        """Bits of the length column where the kernel may count it (a signed integer
        column, not offsets, in a file of `pages.MIN_ROWS` rows or more), else None."""
        if self.fields is None or self.rows < pages.MIN_ROWS:
            return None
        return pages.width(self.fields, spec)


def _told(part: ParquetPart) -> Told:
    """The part's `Told`, read once (kept where a cached_property keeps its value) until
    the part is read: the footer checked by the kernel, its schema read by `schema`."""
    told = part.__dict__.get("_told")
    if told is None:
        told = part.__dict__["_told"] = _tell(part.path)
    return told


def _tell(path: Path) -> Told:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return Told(None, None, -1)  # (pyarrow says why)
    try:
        st = os.fstat(fd)
        found = pages.footer(fd, st.st_size)
    finally:
        os.close(fd)
    version = _version(st)
    if found is None:
        return Told(None, version, -1)
    tail, info = found
    fields = schema.told(tail[info[fmt.I_SCHEMA]:info[fmt.I_SCHEMA_END]].tobytes(),
                         tail[info[fmt.I_ARROW]:info[fmt.I_ARROW_END]].tobytes())
    return Told(fields, version, int(info[fmt.I_ROWS]))


def _footer(part: ParquetPart) -> Footer:
    """The part's footer and version, read once per part (kept where a cached_property
    keeps its value) until the part is read: of the version its schema was told from, if
    it was (`Told`)."""
    footer = part.__dict__.get("_footer")
    if footer is None:
        told = part.__dict__.get("_told")
        pf, version = _open(part.path, version=None if told is None else told.version)
        footer = part.__dict__["_footer"] = (pf.metadata, version)
        pf.close(force=True)
    return footer


@frozen
class ParquetPart(FileShard):
    """A Parquet shard. The footer its schema was read from is kept until the part is
    read, so that a scan (which checks every schema first) parses each footer once."""

    on_device = False
    read_ahead = False  # its row groups decode ahead in worker threads already

    @staticmethod
    def together(parts: list[ParquetPart], reading: Reading,
                 like: tuple[str, Any] | None) -> Joined:
        """Small shards read many at once (`many`)."""
        from gpu_profiler.readers.parquet import many

        return many.together(parts, reading, like)

    def joins(self, reading: Reading) -> bool:
        """Whether `together` takes this part in such a scan (it leaves list offsets,
        statistics and the GPU decoder to pyarrow)."""
        return not (reading.gpu_parquet or reading.source.trust_statistics
                    or reading.spec.offsets)

    def schema(self) -> pa.Schema:
        try:
            return _footer(self)[0].schema.to_arrow_schema()
        except _errors() as exc:
            raise _corrupt(self.path, exc) from None

    def fields(self) -> Fields | None:
        """The schema told without pyarrow (`Told`, kept until the part is read), or None
        where it cannot be (then `schema`)."""
        return _told(self).fields

    def chunks(self, reading: Reading) -> Iterator[Chunk | Run | Runs]:
        if reading.gpu_parquet:
            from gpu_profiler.readers import device

            return device.parquet_chunks(self.path, reading.spec)
        footer = self.__dict__.pop("_footer", None)
        told = self.__dict__.pop("_told", None)
        if reading.ordered:
            return ordered_chunks(self.path, reading.spec)
        if footer is None and told is None:  # (a part not planned: left by `together`)
            told = _tell(self.path)
        return chunks(self.path, reading.spec, bool(reading.source.trust_statistics),
                      inline=reading.inline, footer=footer,
                      version=None if told is None else told.version,
                      width=None if told is None else told.width(reading.spec))

    def batches(self, columns: list[str], codes: tuple[str, ...] = ()
                ) -> Iterator[pa.RecordBatch]:
        """The rows of ``columns``, decoded by pyarrow (the string columns of ``codes`` as
        dictionaries: the codes of dictionary-encoded pages): for a scan that needs a
        column besides the lengths (`gpu_profiler.columns`)."""
        pf, _ = _open(self.path, codes=_strings(self.schema(), codes))
        return _batches(self.path, pf, range(pf.num_row_groups), columns)


@frozen
class RowGroups(ParquetPart):
    """Row groups ``first`` to ``stop - 1`` of a Parquet shard (``size``: their bytes): a
    task's share of a shard too large for one (`row_group_ranges`)."""

    first: int = 0
    stop: int = 0
    size: int = 0
    version: Version | None = None  # of the file the ranges were cut from

    together = None  # type: ignore[assignment]  # a share of a large shard: read alone

    @property
    def label(self) -> str:
        return f"{self.path} (row groups {self.first}..{self.stop - 1})"

    def batches(self, columns: list[str], codes: tuple[str, ...] = ()
                ) -> Iterator[pa.RecordBatch]:
        pf, _ = _open(self.path, version=self.version, codes=_strings(self.schema(), codes))
        return _batches(self.path, pf, range(self.first, self.stop), columns)

    @property
    def nbytes(self) -> int:
        return self.size

    @property
    def span(self) -> tuple[str, int, int]:
        return "row groups", self.first, self.stop

    def chunks(self, reading: Reading) -> Iterator[Chunk | Run | Runs]:
        if reading.gpu_parquet or reading.ordered:
            raise ProfilerError(f"{self.label}: a row-group range is read on the CPU, in "
                                "any order")
        return chunks(self.path, reading.spec, bool(reading.source.trust_statistics),
                      inline=reading.inline, footer=self.__dict__.pop("_footer", None),
                      version=self.version, groups=range(self.first, self.stop))


def row_group_ranges(part: ParquetPart, target: int) -> list[ParquetPart]:
    """``part`` cut into runs of whole row groups of about ``target`` bytes each (itself
    when it has one such run, or when its footer cannot be read: its task then says why).
    A row group's share of the file's bytes is judged by its ``total_byte_size``, never
    asking for a column chunk's metadata (see the module)."""
    try:
        md, version = _footer(part)
        whole = [md.row_group(i).total_byte_size for i in range(md.num_row_groups)]
    except ProfilerError:
        return [part]
    except _errors():
        return [part]
    scale = part.nbytes / max(sum(whole), 1)
    sizes = [round(n * scale) for n in whole]
    cuts, size = [0], 0
    for i, n in enumerate(sizes):
        if size >= target:
            cuts.append(i)
            size = 0
        size += n
    if len(cuts) == 1:
        return [part]
    cuts.append(len(sizes))
    return [RowGroups(part.path, first=a, stop=b, size=sum(sizes[a:b]), version=version)
            for a, b in itertools.pairwise(cuts)]


def chunks(path: Path, spec: LengthSpec, trust_statistics: bool = False,
           inline: bool = False, footer: Footer | None = None,
           version: Version | None = None, groups: range | None = None,
           width: int | None = None) -> Iterator[Chunk | Run | Runs]:
    """Chunks of the length column (`Runs` where the kernel counts its pages: `pages`;
    and, trusting statistics, `Run` s for row groups counted from them), of every row group
    or of ``groups``, decoded in the calling thread
    if ``inline`` or there is one batch to decode; ``footer``: the file's metadata and
    version, if already read; ``version``: the version the caller expects; ``width``: the
    length column's bits where the kernel may count it (`Told.width`).

    The file is opened on the first ``next()`` and closed once the chunks are read (before
    the next part's reader opens its file); order follows completion, not row groups.
    """
    f = _File(path, footer, version)
    try:
        yield from _read(f, spec, trust_statistics, inline, groups, width)
    finally:
        f.close()


class _File:
    """A Parquet file read by one thread: pyarrow's reader of it opened on first need
    (``pf``), of the version given (its ``footer``'s, or ``version``)."""

    def __init__(self, path: Path, footer: Footer | None, version: Version | None) -> None:
        self.path, self.footer, self.version = path, footer, version
        self._pf: pq.ParquetFile | None = None

    @property
    def pf(self) -> pq.ParquetFile:
        if self._pf is None:
            self._pf, self.version = _open(self.path, self.footer, self.version)
        return self._pf

    def close(self) -> None:
        if self._pf is not None:
            self._pf.close(force=True)


def _pages(f: _File, spec: LengthSpec, width: int) -> pages.Pages | None:
    """The kernel's reading of the file (`pages`), or None where pyarrow reads its column
    (no row group's chunk lists only encodings the kernel decodes: BYTE_STREAM_SPLIT
    values, never read here twice)."""
    try:
        fd = os.open(f.path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None  # (pyarrow says why)
    st = os.fstat(fd)
    try:
        f.version = _expected(f.path, st, f.footer, f.version)
    except ProfilerError:
        os.close(fd)
        raise
    known = pages.open_pages(fd, st.st_size, spec.name, width)
    if known is not None and not known.table[:, 4].any():
        known.close()
        return None
    return known


def _read(f: _File, spec: LengthSpec, trust_statistics: bool, inline: bool,
          groups: range | None, width: int | None) -> Iterator[Chunk | Run | Runs]:
    """`chunks` of the file ``f``: its row groups found by the kernel where it counts
    them (``width``), else by pyarrow."""
    known = _pages(f, spec, width) if width and not trust_statistics else None
    try:
        try:
            todo, total = yield from _todo(f, spec, trust_statistics, groups, known)
            if width is None and not (trust_statistics or spec.offsets) and \
                    pages.ENABLED and total >= pages.MIN_ROWS:  # (planned by pyarrow)
                width = pages.width(f.pf.schema_arrow, spec)
                known = _pages(f, spec, width) if width else None
        except _errors() as exc:
            raise _corrupt(f.path, exc) from None
        if len(todo) > 1 and not inline:
            yield from _decode_parallel(f, spec, todo, known)
            return
        try:
            for job in todo:
                yield from _decoded(f, spec, job, known)
        except _errors() as exc:
            raise _corrupt(f.path, exc, job[0]) from None
    finally:
        if known is not None:
            known.close()


#: A batch of row groups to decode: ``(row groups, rows per batch pyarrow decodes, rows)``.
Job = tuple[list[int], int, int]


def _todo(f: _File, spec: LengthSpec, trust_statistics: bool, groups: range | None,
          known: pages.Pages | None) -> Generator[Run, None, tuple[list[Job], int]]:
    """The row groups to decode, small ones joined into one batch (`Run` s yielded for
    those counted from statistics), and their rows in all."""
    runs: list[Run | None]
    if known is not None:
        counts = row_counts(f.path, known.table[:, 0].tolist())
        runs, sizes = [None] * len(counts), [BATCH_ROWS] * len(counts)
    else:
        md = f.pf.metadata
        counts = _footer_rows(f.path, md)
        runs = [None] * len(counts)
        if trust_statistics and not spec.offsets:
            from gpu_profiler.readers.parquet import stats as parquet_stats

            runs = parquet_stats.runs(f.path, _leaf_index(md, spec))
        sizes = [_batch_rows(md.row_group(i), spec) if n else 0 for i, n in enumerate(counts)]
    todo: list[Job] = []
    rows = total = 0
    for i in groups if groups is not None else range(len(counts)):
        n = counts[i]
        if not n:
            continue
        run = runs[i]
        if run is not None:
            yield run
            continue
        total += n
        joint = min(sizes[i], todo[-1][1]) if todo else 0
        if rows + n <= joint:  # small row groups decode as one batch
            todo[-1] = (todo[-1][0] + [i], joint, todo[-1][2] + n)
            rows += n
        else:
            todo.append(([i], sizes[i], n))
            rows = n
    return todo, total


def ordered_chunks(path: Path, spec: LengthSpec) -> Iterator[Chunk]:
    """Chunks in row order, row group by row group, every one decoded (statistics give
    counts, not the order of the rows)."""
    pf, _ = _open(path)
    try:
        try:
            counts = _footer_rows(path, pf.metadata)
        except _errors() as exc:
            raise _corrupt(path, exc) from None
        for i, want in enumerate(counts):
            try:
                table = pf.read_row_group(i, columns=[spec.name])
                _check_rows(table.num_rows, want)
            except _errors() as exc:
                raise _corrupt(path, exc, [i]) from None
            yield from arrays_to_chunks(table.column(0).chunks, spec)
    finally:
        pf.close(force=True)


def row_counts(path: Path, counts: list[int]) -> list[int]:
    """Every row group's row count, as the footer says, checked: none negative, and at
    most `MAX_ROWS` in all (a footer may claim any count; pyarrow indexes past its lists
    on a negative one)."""
    bad = next((i for i, n in enumerate(counts) if n < 0), None)
    if bad is not None:
        raise ProfilerError(f"{path}: corrupt Parquet footer: row group {bad} claims "
                            f"{counts[bad]:,} rows")
    if sum(counts) > MAX_ROWS:
        raise ProfilerError(f"{path}: corrupt Parquet footer: its row groups claim "
                            f"{sum(counts):,} rows in all (at most {MAX_ROWS:,} are taken "
                            "for real)")
    return counts


def _footer_rows(path: Path, md: pq.FileMetaData) -> list[int]:
    """`row_counts` of pyarrow's reading of the footer."""
    return row_counts(path, [md.row_group(i).num_rows for i in range(md.num_row_groups)])


def _check_rows(got: int, want: int) -> None:
    """Raise unless the rows decoded are as many as the footer says (pyarrow decodes none
    of a column chunk whose value count is negative, and says nothing); the caller names
    the row groups."""
    if got != want:
        raise ValueError(f"{'over ' if got > want else ''}{got:,} rows decoded, the footer "
                         f"says {want:,}")


def _leaf_index(md: pq.FileMetaData, spec: LengthSpec) -> int:
    """Index of the Parquet leaf column holding the lengths (or the list's elements)."""
    for j in range(md.num_columns):
        path = md.schema.column(j).path
        if path == spec.name or (spec.offsets and path.split(".", 1)[0] == spec.name):
            return j
    raise ValueError(f"no leaf column for {spec.name!r}")


def _batch_rows(rg: pq.RowGroupMetaData, spec: LengthSpec) -> int:
    """Rows per decoded batch: `BATCH_ROWS` for a length column, fewer for wide list
    columns so a batch stays near ``BATCH_BYTES`` (judged by the whole row group's bytes,
    an upper bound on the column's, read without asking for the column chunk's metadata)."""
    if not spec.offsets:
        return BATCH_ROWS
    per_row = max(rg.total_byte_size, 1) / rg.num_rows
    return int(min(BATCH_ROWS, max(1024, BATCH_BYTES // per_row)))


def _threads(jobs: int) -> int:
    return max(1, min(THREADS or os.cpu_count() or 1, jobs))


def _decode_parallel(f: _File, spec: LengthSpec, todo: list[Job], known: pages.Pages | None
                     ) -> Iterator[Chunk | Runs]:
    """Decode runs of row groups on worker threads; at most ``QUEUE_PER_WORKER`` finished
    batches per worker wait for the consumer (plus one being decoded by each worker)."""
    nworkers = _threads(len(todo))
    jobs: queue.SimpleQueue[Job] = queue.SimpleQueue()
    for job in todo:
        jobs.put(job)
    out: queue.Queue = queue.Queue(maxsize=QUEUE_PER_WORKER * nworkers)
    stop = threading.Event()
    workers = [threading.Thread(target=_worker,
                                args=(_File(f.path, f.footer, f.version), spec, known, jobs,
                                      out, stop),
                                name=f"gpu-profiler-parquet-{k}", daemon=True)
               for k in range(nworkers)]
    for w in workers:
        w.start()
    try:
        done = 0
        while done < nworkers:
            item = out.get()
            if item is _DONE:
                done += 1
            elif isinstance(item, tuple):  # (row group, exception) from a worker
                group, exc = item
                if isinstance(exc, _errors()):
                    raise _corrupt(f.path, exc, group)
                raise exc
            else:
                yield item
    finally:  # a worker sees ``stop`` before its next put: joining never polls
        stop.set()
        for w in workers:
            w.join()


def _decoded(f: _File, spec: LengthSpec, job: Job, known: pages.Pages | None
             ) -> Iterator[Chunk | Runs]:
    """The chunks of some row groups, decoded in this thread: by the kernel where it reads
    them (``known``), else by pyarrow a batch of rows at a time (read whole when they fit:
    a batch reader costs more to set up than a small file to read)."""
    group, rows, want = job
    counted = None if known is None else pages.decode(known, group)
    if counted is not None:
        yield from counted
        return
    pf = f.pf
    if want <= rows:
        columns = pf.read_row_groups(group, columns=[spec.name], use_threads=False).column(0)
        arrays: Iterable[pa.Array] = columns.chunks
    else:
        arrays = (rb.column(0) for rb in pf.iter_batches(
            batch_size=rows, row_groups=group, columns=[spec.name], use_threads=False))
    got = 0
    for column in arrays:
        got += len(column)
        if got > want:
            break
        if len(column):
            yield array_to_chunk(column, spec)
    _check_rows(got, want)


def _worker(f: _File, spec: LengthSpec, known: pages.Pages | None, jobs: queue.SimpleQueue,
            out: queue.Queue, stop: threading.Event) -> None:
    group = None
    try:
        try:
            while not stop.is_set():
                try:
                    job = jobs.get_nowait()
                except queue.Empty:
                    break
                group = job[0]
                for chunk in _decoded(f, spec, job, known):
                    if not put_unless_stopped(out, chunk, stop):
                        return
        finally:
            f.close()
    except BaseException as exc:  # handed to the consumer, which raises it
        put_unless_stopped(out, (group, exc), stop)
        return
    put_unless_stopped(out, _DONE, stop)
