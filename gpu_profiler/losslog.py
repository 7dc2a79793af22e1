"""Training loss logs, read as hostile input: TensorBoard event files (a run directory or
one file, through tensorboard's own record loader: ``pip install 'gpu-profiler[diagnose]'``)
and CSV / JSONL / Parquet tables of step and loss (what W&B and MLflow exports give).

A log is cleaned the way TensorBoard shows it: a step logged again (a run resumed from a
checkpoint) replaces every value logged at that step or after it, and NaN / inf losses are
dropped; both are counted, and a truncated event file says how much of it was not read.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import field
from pathlib import Path
from typing import Any

import numpy as np

from gpu_profiler.errors import ProfilerError
from gpu_profiler.frozen import frozen

FORMATS = ("tensorboard", "csv", "jsonl", "parquet")
_SUFFIXES = {".csv": "csv", ".tsv": "csv", ".jsonl": "jsonl", ".ndjson": "jsonl",
             ".json": "jsonl", ".parquet": "parquet", ".pq": "parquet"}
#: Step columns tried in this order (W&B exports say ``_step`` or ``Step``).
STEP_NAMES = ("step", "_step", "global_step", "trainer/global_step", "train/global_step",
              "iteration", "iter")
#: A series with a word starting so is an evaluation, not the training loss.
_EVAL_WORDS = ("val", "eval", "test")
#: TensorBoard's record framing: 8 length bytes and 4 + 4 CRC bytes around each event.
_RECORD_OVERHEAD = 16


@frozen
class LossLog:
    """One loss series: ``steps`` strictly increasing, ``loss`` finite, both in log order.

    Attributes:
        path, format, series: where it was read, in which format, and the tag or column.
        nonfinite: NaN / inf losses dropped.
        rewritten: values dropped because their step was logged again later (a resume).
        warnings: what else the reader noticed (a truncated event file, no step column).
    """

    path: str
    format: str
    series: str
    steps: np.ndarray
    loss: np.ndarray
    nonfinite: int = 0
    rewritten: int = 0
    warnings: tuple[str, ...] = field(default=())


def loss_log(steps: Sequence[int] | np.ndarray, loss: Sequence[float] | np.ndarray, *,
             path: str = "<memory>", format: str = "arrays", series: str = "loss",
             warnings: Iterable[str] = ()) -> LossLog:
    """A `LossLog` from values in log order: later values of a step replace earlier ones
    and every value logged after them at a higher step (TensorBoard's purge on a resume),
    then NaN / inf losses are dropped."""
    s = np.asarray(steps)
    y = np.asarray(loss, dtype=np.float64)
    if s.shape != y.shape or s.ndim != 1:
        raise ProfilerError(f"{path}: steps and losses must be two 1-D series of one length")
    if s.dtype.kind == "f":
        if not np.isfinite(s).all() or (s != np.round(s)).any():
            raise ProfilerError(f"{path}: steps must be whole numbers")
    elif s.dtype.kind not in "iu":
        raise ProfilerError(f"{path}: steps must be integers, not {s.dtype}")
    s = s.astype(np.int64)
    later = np.minimum.accumulate(s[::-1])[::-1]  # the least step logged from here on
    keep = np.append(s[:-1] < later[1:], True) if s.size else s.astype(bool)
    finite = np.isfinite(y[keep])
    return LossLog(path, format, series, s[keep][finite], y[keep][finite],
                   int(finite.size - finite.sum()), int(s.size - keep.sum()), tuple(warnings))


def log_format(path: str, format: str | None = None) -> str:
    """The format of the log at ``path``: ``format`` when given, else a directory or a
    ``*tfevents*`` file is TensorBoard and a table goes by its suffix."""
    if format is not None:
        if format not in FORMATS:
            raise ProfilerError(f"--log-format {format!r}: choose from {', '.join(FORMATS)}")
        return format
    p = Path(path)
    if not p.exists():
        raise ProfilerError(f"{path}: no such file or directory")
    if p.is_dir() or "tfevents" in p.name:
        return "tensorboard"
    fmt = _SUFFIXES.get(p.suffix.lower())
    if fmt is None:
        raise ProfilerError(f"{path}: not a log format this reads (a TensorBoard run directory "
                            "or event file, .csv, .jsonl, .parquet); --log-format names one")
    return fmt


def read_loss_log(path: str | os.PathLike[str], *, series: str | None = None,
                  step_column: str | None = None, format: str | None = None) -> LossLog:
    """The training loss of the log at ``path``.

    ``series`` is the TensorBoard scalar tag or the table column of the loss (default: the
    one whose name says loss and not val/eval/test, preferring one that says train);
    ``step_column`` the table's step column (default: the first of `STEP_NAMES`, else the
    row number).
    """
    path = os.fspath(path)
    fmt = log_format(path, format)
    if fmt == "tensorboard":
        return _tensorboard(path, series)
    return _table(path, fmt, series, step_column)


def pick_loss(names: Sequence[str], where: str, option: str) -> str:
    """The training-loss series among ``names``: the one whose name holds ``loss`` and no
    evaluation word, preferring one that holds ``train``; else a one-line error that lists
    the choices."""
    losses = [n for n in names if "loss" in n.lower() and not any(
        word.startswith(_EVAL_WORDS) for word in re.split(r"[^a-z0-9]+", n.lower()))]
    trained = [n for n in losses if "train" in n.lower()]
    for group in (trained, losses):
        if len(group) == 1:
            return group[0]
        if group:
            raise ProfilerError(f"{where}: several loss series ({', '.join(group)}); "
                                f"{option} names the one to read")
    shown = ", ".join(list(names)[:12]) + (", ..." if len(names) > 12 else "")
    raise ProfilerError(f"{where}: no series named like a training loss among "
                        f"{shown or 'none'}; {option} names the one to read")


# ---------------------------------------------------------------- TensorBoard
def event_files(path: str) -> list[str]:
    """The event files of one run: ``path`` itself, or the ``*tfevents*`` files of the
    directory (else of the one directory under it that holds some), in name (= time)
    order; several runs under ``path`` are an error that names them."""
    p = Path(path)
    if p.is_file():
        return [path]
    own = sorted(f for f in p.glob("*tfevents*") if f.is_file())
    if own:
        return [str(f) for f in own]
    found = sorted(f for f in p.rglob("*tfevents*") if f.is_file())
    runs = sorted({str(f.parent) for f in found})
    if not runs:
        raise ProfilerError(f"{path}: no TensorBoard event files (*tfevents*) in it")
    if len(runs) > 1:
        raise ProfilerError(f"{path}: holds the event files of {len(runs)} runs "
                            f"({', '.join(runs[:4])}{', ...' * (len(runs) > 4)}); name one")
    return [str(f) for f in found]


def _tensorboard(path: str, tag: str | None) -> LossLog:
    """The scalars of tag ``tag`` in the event files at ``path``, their records framed, CRC
    checked and decoded by the native kernel `gpu_profiler.kernels.tfrecord.events`; the
    records it does not decode itself by tensorboard's protobuf classes."""
    event_pb2 = _event_pb2(path)
    scan = _EventScan(tag, event_pb2)
    warnings: list[str] = []
    for name in event_files(path):
        warnings += _torn(name, *scan.file(name))
    return _tensorboard_log(path, tag, scan.values(), scan.seen(), warnings)


def _tensorboard_loader(path: str, tag: str | None) -> LossLog:
    """`_tensorboard` through tensorboard's own record loader (``RawEventFileLoader``: the
    CRCs checked in Python, ~100k events a second): the reference the native reader is
    tested and measured against."""
    event_pb2 = _event_pb2(path)
    from tensorboard.backend.event_processing.event_file_loader import RawEventFileLoader

    values: dict[str, tuple[list[int], list[float]]] = {}
    seen: set[str] = set()
    warnings: list[str] = []
    for name in event_files(path):
        read = 0
        for record in RawEventFileLoader(name).Load():
            read += len(record) + _RECORD_OVERHEAD
            try:
                event = event_pb2.Event.FromString(record)
            except Exception:  # noqa: BLE001 - a record that passed its CRC but is no Event
                continue
            for v in event.summary.value:
                seen.add(v.tag)
                if (tag is None and "loss" not in v.tag.lower()) or (tag and v.tag != tag):
                    continue
                x = _scalar(v)
                if x is not None:
                    steps, ys = values.setdefault(v.tag, ([], []))
                    steps.append(event.step)
                    ys.append(x)
        warnings += _torn(name, read, os.path.getsize(name))
    return _tensorboard_log(path, tag, values, seen, warnings)


def _event_pb2(path: str) -> Any:
    try:
        from tensorboard.compat.proto import event_pb2
    except ImportError:
        raise ProfilerError(f"{path}: reading TensorBoard event files needs tensorboard "
                            "(pip install 'gpu-profiler[diagnose]')") from None
    return event_pb2


def _torn(name: str, read: int, size: int) -> list[str]:
    """The warning of a file whose whole records end ``read`` bytes into its ``size``."""
    return [f"{name}: its last {size - read:,} bytes are not a whole event (a truncated or "
            "corrupt record): the events before them are read"] if read < size else []


def _tensorboard_log(path: str, tag: str | None, values: dict[str, Any], seen: set[str],
                     warnings: list[str]) -> LossLog:
    """The `LossLog` of ``tag`` (else the loss picked among the tags) from ``values``
    ({tag: (steps, losses)} of the candidate tags, in log order) and the tags ``seen``."""
    if not seen and warnings:
        raise ProfilerError(f"{path}: no events read: {warnings[0]}")
    if tag is None:
        tag = pick_loss(sorted(values) or sorted(seen), path, "--tag")
    if tag not in values:
        shown = ", ".join(sorted(seen)[:12]) or "none"
        raise ProfilerError(f"{path}: no scalar values of tag {tag!r} (tags: {shown})"
                            + (f"; {warnings[0]}" if warnings else ""))
    steps, ys = values[tag]
    return loss_log(steps, ys, path=path, format="tensorboard", series=tag,
                    warnings=warnings)


#: Bytes of an event file read at a time, and values decoded by one kernel call.
_CHUNK, _ROOM = 1 << 24, 1 << 18


class _EventScan:
    """The values of the candidate tags (``tag``, else those named like a loss) and every
    tag seen, over the event files given to `file` one after another.

    Tags have one id each, the kernel's (its ``tags``) for those it decodes, and the same
    id for the same name met in a record decoded here with protobuf (``uid``)."""

    def __init__(self, tag: str | None, event_pb2: Any) -> None:
        from gpu_profiler.native import kernel

        self.tag, self.event_pb2 = tag, event_pb2
        self.kernel = kernel("tfrecord_events")
        self.buf = np.empty(_CHUNK, np.uint8)
        self.table = np.zeros(1 << 10, np.int64)
        self.store = np.empty(1 << 14, np.uint8)
        self.tags = np.empty((1 << 8, 2), np.int64)
        self.state = np.zeros(3, np.int64)
        self.out = self._slots(_ROOM)
        self.names: list[str] = []  # by uid
        self.uid_of: dict[str, int] = {}
        self.kernel_uid = np.empty(0, np.int64)  # the uid of each kernel tag id
        self.kernel_tags = 0  # the kernel's tags given a uid
        self.want = np.empty(0, bool)  # by uid: a candidate tag
        self.parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []

    @staticmethod
    def _slots(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        return (np.empty(n, np.int64), np.empty(n, np.int64), np.empty(n, np.int32),
                np.empty(n, np.int8))

    def uid(self, name: str) -> int:
        got = self.uid_of.get(name)
        if got is None:
            got = self.uid_of[name] = len(self.names)
            self.names.append(name)
            self.want = _room(self.want, got + 1)
            self.want[got] = name == self.tag if self.tag else "loss" in name.lower()
        return got

    def file(self, name: str) -> tuple[int, int]:
        """Read the event file ``name``: the bytes of its whole records read before the
        first that is torn or fails a CRC, and its size."""
        from gpu_profiler.kernels.tfrecord_format import CORRUPT, DONE, ROOM

        try:
            with open(name, "rb") as f:
                base = have = 0  # the file offset of buf[0], the bytes in buf
                eof = False
                while True:
                    view = self.buf.data
                    while not eof and have < self.buf.size:
                        got = f.readinto(view[have:])
                        eof = not got
                        have += got or 0
                    del view
                    pos, m, need, status = self.kernel(self.buf, have, self.table, self.store,
                                                       self.tags, self.state, *self.out)
                    self._take(m)
                    if status == CORRUPT:
                        return base + pos, os.fstat(f.fileno()).st_size
                    if pos:
                        self.buf[:have - pos] = self.buf[pos:have]
                        base, have = base + pos, have - pos
                    if status == ROOM and m == 0:  # one event's values fill the slots
                        self.out = self._slots(2 * self.out[0].size)
                    elif status != DONE and status != ROOM:
                        self._grow_tags()
                    elif status == DONE and eof:
                        return base, max(os.fstat(f.fileno()).st_size, base + have)
                    elif status == DONE and not 0 <= need <= self.buf.size:
                        if need < 0 or need > os.fstat(f.fileno()).st_size - base:
                            return base, os.fstat(f.fileno()).st_size  # a length past its end
                        buf = np.empty(need, np.uint8)
                        buf[:have] = self.buf[:have]
                        self.buf = buf
        except OSError as exc:
            raise ProfilerError(f"{name}: cannot be read ({exc.strerror or exc})") from None

    def _grow_tags(self) -> None:
        """Double the tag list, the hash table or else the tag store: whichever had no
        room for the next tag (a longer tag than the doubled store asks again)."""
        count, used = int(self.state[0]), int(self.state[1])
        tags_full, table_full = count >= self.tags.shape[0], 2 * (count + 1) > self.table.size
        if tags_full:
            self.tags = np.concatenate([self.tags, np.empty_like(self.tags)])
        if table_full:
            self.table = np.zeros(2 * self.table.size, np.int64)
        if not (tags_full or table_full):
            store = np.empty(2 * self.store.size, np.uint8)
            store[:used] = self.store[:used]
            self.store = store
        self.state[2] = 1  # the table is rebuilt from the tags

    def _take(self, m: int) -> None:
        """Keep the candidate values of the first ``m`` slots, decoding the records handed
        back with protobuf, in log order."""
        from gpu_profiler.kernels.tfrecord_format import FALLBACK

        steps, bits, ids, kinds = (a[:m] for a in self.out)
        count = int(self.state[0])
        self.kernel_uid = _room(self.kernel_uid, count)
        for t in range(self.kernel_tags, count):  # tags new to the kernel
            s, n = self.tags[t]
            self.kernel_uid[t] = self.uid(self.store[s:s + n].tobytes().decode("ascii"))
        self.kernel_tags = count
        start = 0
        for j in np.flatnonzero(kinds == FALLBACK).tolist() + [m]:
            if j > start:
                uid = self.kernel_uid[ids[start:j]]
                keep = (kinds[start:j] >= 0) & self.want[uid]
                if keep.any():
                    self.parts.append((uid[keep], steps[start:j][keep],
                                       _floats(bits[start:j][keep], kinds[start:j][keep])))
            if j < m:
                self._protobuf(self.buf[steps[j]:steps[j] + bits[j]].tobytes())
            start = j + 1

    def _protobuf(self, record: bytes) -> None:
        try:
            event = self.event_pb2.Event.FromString(record)
        except Exception:  # noqa: BLE001 - a record that passed its CRC but is no Event
            return
        for v in event.summary.value:
            uid = self.uid(v.tag)
            x = _scalar(v) if self.want[uid] else None
            if x is not None:
                self.parts.append((np.array([uid]), np.array([event.step], np.int64),
                                   np.array([x])))

    def seen(self) -> set[str]:
        return set(self.names)

    def values(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        if not self.parts:
            return {}
        uid, steps, ys = (np.concatenate(c) for c in zip(*self.parts, strict=True))
        order = np.argsort(uid, kind="stable")  # each tag's values stay in log order
        tags, starts = np.unique(uid[order], return_index=True)
        return {self.names[u]: (steps[at], ys[at]) for u, at in zip(
            tags.tolist(), np.split(order, starts[1:]), strict=True)}


def _room(a: np.ndarray, n: int) -> np.ndarray:
    """``a``, or a copy twice as long when it is shorter than ``n``."""
    if a.size >= n:
        return a
    grown = np.zeros(max(n, 2 * a.size, 16), a.dtype)
    grown[:a.size] = a
    return grown


def _floats(bits: np.ndarray, kinds: np.ndarray) -> np.ndarray:
    """The values whose bits the kernel gave, by their kinds (float32, float64, float16)."""
    from gpu_profiler.kernels.tfrecord_format import F16, F32, F64

    y = np.empty(bits.size, np.float64)
    for kind, dtype, width in ((F32, np.float32, np.uint32), (F64, np.float64, np.uint64),
                               (F16, np.float16, np.uint16)):
        at = kinds == kind
        if at.any():
            with np.errstate(invalid="ignore"):  # a signalling NaN widened: a NaN, dropped
                y[at] = bits[at].astype(width).view(dtype)
    return y


def _scalar(value: Any) -> float | None:
    """A summary value's scalar: ``simple_value`` (torch's and tensorboardX's writers), or
    a one-element float tensor (``tf.summary`` v2)."""
    kind = value.WhichOneof("value")
    if kind == "simple_value":
        return float(value.simple_value)
    if kind != "tensor":
        return None
    t = value.tensor
    if t.float_val:
        return float(t.float_val[0])
    if t.double_val:
        return float(t.double_val[0])
    dtype = {1: np.float32, 2: np.float64, 19: np.float16}.get(t.dtype)
    if dtype is not None and len(t.tensor_content) == np.dtype(dtype).itemsize:
        return float(np.frombuffer(t.tensor_content, dtype=dtype)[0])
    return None


# ---------------------------------------------------------------- tables
def _table(path: str, fmt: str, series: str | None, step_column: str | None) -> LossLog:
    import pyarrow as pa
    import pyarrow.compute as pc

    table = _read_table(path, fmt)
    names = table.column_names
    loss = series or _default_loss(names, path)
    if loss not in names:
        raise ProfilerError(f"{path}: no column {loss!r} (columns: {', '.join(names[:12])})")
    step = step_column or next((n for n in STEP_NAMES if n in names), None) or next(
        (n for n in names if n.lower() in STEP_NAMES), None)
    if step is not None and step not in names:
        raise ProfilerError(f"{path}: no column {step!r} (columns: {', '.join(names[:12])})")
    y = table.column(loss)
    if not (pa.types.is_floating(y.type) or pa.types.is_integer(y.type)
            or pa.types.is_null(y.type)):
        raise ProfilerError(f"{path}: column {loss!r} is not numeric ({y.type}); "
                            "--tag names the loss column")
    warnings = []
    if step is None:
        s = pa.array(np.arange(len(table), dtype=np.int64))
        warnings.append(f"{path}: no step column ({', '.join(STEP_NAMES[:3])}, ...): row i is "
                        "taken as step i (--step-column names one)")
    else:
        s = table.column(step)
        if not (pa.types.is_integer(s.type) or pa.types.is_floating(s.type)
                or pa.types.is_null(s.type)):
            raise ProfilerError(f"{path}: step column {step!r} is not numeric ({s.type})")
    present = np.asarray(pc.and_(pc.is_valid(s), pc.is_valid(y)))
    steps = np.asarray(s.to_numpy(zero_copy_only=False))[present] if len(table) else []
    losses = np.asarray(y.to_numpy(zero_copy_only=False), dtype=np.float64)[present] \
        if len(table) else []
    return loss_log(steps, losses, path=path, format=fmt, series=loss, warnings=warnings)


def _default_loss(names: Sequence[str], path: str) -> str:
    """`pick_loss` over the columns, past W&B's ``__MIN`` / ``__MAX`` companions; a
    TensorBoard CSV export's ``Value`` when nothing is named loss."""
    plain = [n for n in names if not n.endswith(("__MIN", "__MAX"))]
    if "Value" in plain and not any("loss" in n.lower() for n in plain):
        return "Value"
    return pick_loss(plain, path, "--tag")


def _read_table(path: str, fmt: str) -> Any:
    import pyarrow as pa

    try:
        if fmt == "parquet":
            import pyarrow.parquet as pq

            return pq.read_table(path)
        if fmt == "jsonl":
            import pyarrow.json as pj

            return pj.read_json(path)
        import pyarrow.csv as pc

        delimiter = "\t" if path.lower().endswith(".tsv") else ","
        return pc.read_csv(path, parse_options=pc.ParseOptions(delimiter=delimiter),
                           convert_options=pc.ConvertOptions(null_values=[""],
                                                             strings_can_be_null=False))
    except (pa.ArrowException, OSError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ProfilerError(f"{path}: not a readable {fmt} log ({first})") from None
