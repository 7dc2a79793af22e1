"""TensorBoard event files read by the native kernel (`gpu_profiler.kernels.tfrecord`) give
what tensorboard's own record loader and protobuf classes give (`_tensorboard_loader`, the
reference): on logs written by tensorboardX, on tensor summaries as torch's
``SummaryWriter(new_style=True)`` and ``tf.summary`` v2 write them, on events encoded by
hand the ways protobuf allows, and on damaged files (truncated, flipped bytes, bad CRCs,
mutated events with valid CRCs); a forged length reads up to it, where the loader raises
MemoryError."""

from __future__ import annotations

import os
import struct
import tracemalloc

import numpy as np
import pytest

from gpu_profiler import losslog
from gpu_profiler.errors import ProfilerError
from gpu_profiler.kernels.tfrecord_format import DONE, FALLBACK, NONE

tensorboardX = pytest.importorskip("tensorboardX")
event_pb2 = pytest.importorskip("tensorboard.compat.proto.event_pb2")
from tensorboard.compat.proto import summary_pb2, tensor_pb2  # noqa: E402
from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c  # noqa: E402
from tensorboard.plugins.scalar import summary_v2  # noqa: E402


def frame(data: bytes) -> bytes:
    """One TFRecord around ``data`` (tensorboard's own CRC, in Python)."""
    head = struct.pack("<Q", len(data))
    return (head + struct.pack("<I", masked_crc32c(head)) + data
            + struct.pack("<I", masked_crc32c(data)))


def outcome(read, path, tag=None):
    """What reading gives: the log's numbers, or the error's line."""
    try:
        log = read(str(path), tag)
    except ProfilerError as exc:
        return ("error", str(exc))
    return ("log", log.series, log.steps.tolist(), log.loss.tobytes(), log.nonfinite,
            log.rewritten, log.warnings)


def same(path, tag=None):
    """The native reader's outcome, checked equal to the loader's."""
    got = outcome(losslog._tensorboard, path, tag)
    assert got == outcome(losslog._tensorboard_loader, path, tag)
    return got


@pytest.fixture
def handed_back(monkeypatch):
    """The records the kernel handed back to protobuf, counted."""
    count = [0]
    decode = losslog._EventScan._protobuf

    def counting(self, record):
        count[0] += 1
        return decode(self, record)

    monkeypatch.setattr(losslog._EventScan, "_protobuf", counting)
    return count


def write_x(folder, n=300, start=0, extra=True):
    """A tensorboardX log: train/loss (NaN at 7), lr, eval/loss every 10 steps, and with
    ``extra`` a histogram and a text every 100 steps."""
    folder.mkdir(exist_ok=True)
    before = set(folder.glob("*tfevents*"))
    w = tensorboardX.SummaryWriter(str(folder), filename_suffix=f".{start}")
    for i in range(start, start + n):
        w.add_scalar("train/loss", np.nan if i == 7 else 3 - i / n, i)
        w.add_scalar("lr", 1e-3 * (1 + i % 3), i)
        if i % 10 == 0:
            w.add_scalar("eval/loss", 2.5 - i / n, i)
        if extra and i % 100 == 0:
            w.add_histogram("weights", np.arange(20) * (i + 1), i)
            w.add_text("note", f"step {i}", i)
    w.close()
    (made,) = set(folder.glob("*tfevents*")) - before
    return made


def test_tensorboardX_logs(tmp_path, handed_back):
    write_x(tmp_path)
    write_x(tmp_path, start=250)  # a resume
    got = same(tmp_path)
    assert got[1] == "train/loss" and got[4:6] == (1, 50)
    for tag in ("lr", "eval/loss", "train/loss"):
        same(tmp_path, tag)
    assert handed_back[0] == 4 * 2 * 3 * 2  # 4 reads of the histograms and texts only
    handed_back[0] = 0
    write_x(tmp_path / "plain", extra=False)
    same(tmp_path / "plain")
    assert handed_back[0] == 0


def scalar_events(kind, n=50):
    """Events of one tag ``loss`` holding a scalar summary as writers encode it."""
    out = []
    for i in range(n):
        x = 2.0 - i / n
        if kind == "torch":  # torch.utils.tensorboard.summary.scalar(new_style=True)
            meta = summary_pb2.SummaryMetadata(
                plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars"))
            t = tensor_pb2.TensorProto(float_val=[x], dtype="DT_FLOAT")
            s = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag="loss", tensor=t,
                                                                     metadata=meta)])
        elif kind == "tf2":
            s = summary_v2.scalar_pb("loss", x)
        else:  # a tensor's content: float32, float64, float16; double_val
            dtype, kw = {"content32": (1, {"tensor_content": np.float32(x).tobytes()}),
                         "content64": (2, {"tensor_content": np.float64(x).tobytes()}),
                         "content16": (19, {"tensor_content": np.float16(x).tobytes()}),
                         "double": (2, {"double_val": [x, 9.0]})}[kind]
            t = tensor_pb2.TensorProto(dtype=dtype, **kw)
            t.tensor_shape.dim.add(size=1, name="x")
            s = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag="loss", tensor=t)])
        out.append(event_pb2.Event(wall_time=1e9 + i, step=i, summary=s).SerializeToString())
    return out


@pytest.mark.parametrize("kind", ["torch", "tf2", "content32", "content64", "content16",
                                  "double"])
def test_tensor_summaries(tmp_path, kind, handed_back):
    path = tmp_path / "events.out.tfevents.1.host"
    version = event_pb2.Event(wall_time=1.0, file_version="brain.Event:2")
    path.write_bytes(b"".join(map(frame, [version.SerializeToString(),
                                          *scalar_events(kind)])))
    got = same(path)
    assert got[2] == list(range(50)) and handed_back[0] == 0
    x = np.frombuffer(got[3])
    assert x[0] == 2.0 and x[-1] == pytest.approx(2 - 49 / 50, rel=1e-3)


def varint(n):
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def field(f, wire, payload):
    key = varint(f << 3 | wire)
    return key + (varint(len(payload)) + payload if wire == 2 else payload)


def value(tag=b"loss", *parts):
    return field(1, 2, field(1, 2, tag) + b"".join(parts))


def event(step_bytes, *values, extra=b""):
    return field(1, 1, struct.pack("<d", 5.0)) + step_bytes + field(5, 2, b"".join(values)) \
        + extra


F = struct.pack("<f", 1.5)
HAND = {  # events encoded by hand: protobuf's rules for each, and fields it may reject
    "plain": event(field(2, 0, varint(3)), value(b"loss", field(2, 5, F))),
    "long varint step": event(b"\x10\x83\x80\x80\x00", value(b"loss", field(2, 5, F))),
    "ten-byte step": event(b"\x10" + b"\xff" * 9 + b"\x01", value(b"loss", field(2, 5, F))),
    "ten-byte step, high": event(b"\x10" + b"\xff" * 9 + b"\x7f",
                                 value(b"loss", field(2, 5, F))),
    "eleven-byte step": event(b"\x10" + b"\xff" * 10 + b"\x01",
                              value(b"loss", field(2, 5, F))),
    "step twice": event(field(2, 0, varint(9)) + field(2, 0, varint(4)),
                        value(b"loss", field(2, 5, F))),
    "step after summary": field(5, 2, value(b"loss", field(2, 5, F))) + field(2, 0, varint(8)),
    "negative step": event(field(2, 0, varint(-5)), value(b"loss", field(2, 5, F))),
    "two values": event(field(2, 0, varint(1)), value(b"loss", field(2, 5, F)),
                        value(b"lr", field(2, 5, F))),
    "tag twice": event(field(2, 0, varint(1)), value(b"lr", field(1, 2, b"loss"),
                                                     field(2, 5, F))),
    "no tag": event(field(2, 0, varint(1)), field(1, 2, field(2, 5, F))),
    "utf-8 tag": event(field(2, 0, varint(2)), value("loss_é".encode(), field(2, 5, F))),
    "bad utf-8 tag": event(field(2, 0, varint(2)), value(b"loss\xff", field(2, 5, F))),
    "node name": event(field(2, 0, varint(2)), value(b"loss", field(7, 2, b"n"),
                                                     field(2, 5, F))),
    "simple then tensor": event(field(2, 0, varint(2)), value(
        b"loss", field(2, 5, F), field(8, 2, field(5, 5, struct.pack("<f", 7.0))))),
    "tensor then simple": event(field(2, 0, varint(2)), value(
        b"loss", field(8, 2, field(5, 5, struct.pack("<f", 7.0))), field(2, 5, F))),
    "packed and unpacked": event(field(2, 0, varint(2)), value(b"loss", field(8, 2, field(
        5, 2, b"") + field(5, 5, struct.pack("<f", 4.0)) + field(5, 2, F)))),
    "packed, torn": event(field(2, 0, varint(2)), value(b"loss", field(8, 2, field(
        5, 2, F + b"\x00")))),
    "double then float": event(field(2, 0, varint(2)), value(b"loss", field(8, 2, field(
        6, 1, struct.pack("<d", 6.0)) + field(5, 5, F)))),
    "content, dtype after": event(field(2, 0, varint(2)), value(b"loss", field(8, 2, field(
        4, 2, F) + field(1, 0, varint(1))))),
    "content, dtype wide": event(field(2, 0, varint(2)), value(b"loss", field(8, 2, field(
        4, 2, F) + field(1, 0, varint(1 + (1 << 32)))))),
    "content, wrong size": event(field(2, 0, varint(2)), value(b"loss", field(8, 2, field(
        4, 2, F + F) + field(1, 0, varint(1))))),
    "half_val": event(field(2, 0, varint(2)), value(b"loss", field(8, 2, field(
        1, 0, varint(19)) + field(13, 2, varint(0x3C00))))),
    "int tensor": event(field(2, 0, varint(2)), value(b"loss", field(8, 2, field(
        1, 0, varint(3)) + field(7, 2, varint(5))))),
    "histogram": event(field(2, 0, varint(2)), value(b"loss", field(5, 2, field(
        1, 1, struct.pack("<d", 0.0))))),
    "metadata": event(field(2, 0, varint(2)), value(b"loss", field(9, 2, field(1, 2, field(
        1, 2, b"scalars") + field(2, 2, b"\xff\x00")) + field(4, 0, varint(1))),
        field(2, 5, F))),
    "shape, unknown rank": event(field(2, 0, varint(2)), value(b"loss", field(8, 2, field(
        2, 2, field(3, 0, varint(1)) + field(2, 2, field(1, 0, varint(3)))) + field(5, 5, F)))),
    "shape, bad utf-8 name": event(field(2, 0, varint(2)), value(b"loss", field(8, 2, field(
        2, 2, field(2, 2, field(2, 2, b"\xe9"))) + field(5, 5, F)))),
    "plugin name as varint": event(field(2, 0, varint(2)), value(b"loss", field(9, 2, field(
        1, 2, field(1, 0, varint(7)))), field(2, 5, F))),
    "metadata, bad utf-8": event(field(2, 0, varint(2)), value(b"loss", field(
        9, 2, field(2, 2, b"\xc3")), field(2, 5, F))),
    "unknown field": event(field(2, 0, varint(2)), value(b"loss", field(2, 5, F),
                                                         field(99, 0, varint(1)))),
    "unknown event field": event(field(2, 0, varint(2)), value(b"loss", field(2, 5, F)),
                                 extra=field(99, 2, b"xyz")),
    "file_version too": event(field(2, 0, varint(2)), value(b"loss", field(2, 5, F)),
                              extra=field(3, 2, b"brain.Event:2")),
    "summary twice": event(field(2, 0, varint(2)), value(b"loss", field(2, 5, F)),
                           extra=field(5, 2, value(b"loss", field(2, 5, F)))),
    "group": event(field(2, 0, varint(2)), value(b"loss", field(2, 5, F)), extra=b"\x5b\x5c"),
    "bad wire type": event(field(2, 0, varint(2)), value(b"loss", field(2, 5, F)),
                           extra=b"\x0e"),
    "field zero": event(field(2, 0, varint(2)), value(b"loss", field(2, 5, F)),
                        extra=b"\x00\x00"),
    "torn value": event(field(2, 0, varint(2)), value(b"loss", field(2, 5, F))[:-2]),
    "step as fixed64": event(field(2, 1, struct.pack("<q", 3)), value(b"loss", field(2, 5, F))),
    "simple as fixed64": event(field(2, 0, varint(2)), value(b"loss", field(2, 1, F + F))),
    "empty": b"",
}


@pytest.mark.parametrize("name", HAND)
def test_events_encoded_by_hand(tmp_path, name):
    path = tmp_path / "events.out.tfevents.1.host"
    body = HAND[name]
    path.write_bytes(frame(HAND["plain"]) + frame(body) + frame(event(
        field(2, 0, varint(100)), value(b"loss", field(2, 5, F)))))
    for tag in (None, "loss", "lr", "loss_é"):
        got = same(path, tag)
    assert got[0] == "error" or got[1] == "loss_é"


def test_damaged_files_stop_where_the_loader_stops(tmp_path):
    made = write_x(tmp_path / "x", n=40)
    data = made.read_bytes()
    path = tmp_path / "cut" / "events.out.tfevents.1.host"
    path.parent.mkdir()
    rng = np.random.default_rng(0)
    cuts = sorted({*range(len(data) - 200, len(data)), *rng.integers(0, len(data), 40)})
    for cut in cuts:  # truncated anywhere: up to the last whole record
        path.write_bytes(data[:cut])
        same(path)
    for at in rng.integers(0, len(data), 150):  # a byte flipped: a CRC fails there
        flipped = bytearray(data)
        flipped[at] ^= 1 << int(rng.integers(8))
        path.write_bytes(bytes(flipped))
        got = same(path)
        assert got[0] == "error" or len(got[-1]) == 1
    path.write_bytes(data + os.urandom(3000))
    assert "3,000 bytes are not a whole event" in same(path)[-1][0]


@pytest.mark.parametrize("length", [10**9, 1 << 40, 1 << 63, (1 << 64) - 1])
def test_a_forged_length_reads_up_to_it(tmp_path, length):
    """A header that says the record is longer than the file (its CRC valid): the events
    before it are read, nothing the size of the length is allocated (tensorboard's loader
    allocates it: MemoryError, or OverflowError past 2**63)."""
    made = write_x(tmp_path / "x", n=20, extra=False)
    head = struct.pack("<Q", length)
    made.write_bytes(made.read_bytes() + head + struct.pack("<I", masked_crc32c(head))
                     + b"\x00" * 100)
    tracemalloc.start()
    try:
        log = losslog._tensorboard(str(made), None)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert log.steps.size + log.nonfinite == 20
    assert "112 bytes are not a whole event" in log.warnings[0]
    assert peak < 64 << 20
    if length == 10**9:
        same(made)


def mutants(rng, records, n):
    """``n`` events mutated from ``records``: bytes flipped, set, inserted, cut out."""
    for _ in range(n):
        b = bytearray(records[rng.integers(len(records))])
        for _ in range(int(rng.integers(1, 3))):
            at = int(rng.integers(len(b) + 1))
            op = rng.integers(5)
            if op == 0 and at < len(b):
                b[at] ^= 1 << int(rng.integers(8))
            elif op == 1 and at < len(b):
                b[at] = int(rng.choice([0, 1, 0x7F, 0x80, 0xFF, int(rng.integers(256))]))
            elif op == 2:
                b[at:at] = bytes(rng.integers(0, 256, int(rng.integers(1, 4)), np.uint8))
            elif op == 3:
                del b[at:at + int(rng.integers(1, 4))]
            else:
                del b[at:]
        yield bytes(b)


def natively(record):
    """What the kernel decodes of the event ``record``: [(tag, step, scalar or None)], or
    None when it hands the record back to protobuf."""
    scan = losslog._EventScan(None, event_pb2)
    buf = np.frombuffer(frame(record), np.uint8).copy()
    pos, m, need, status = scan.kernel(buf, buf.size, scan.table, scan.store, scan.tags,
                                       scan.state, *scan.out)
    assert (pos, need, status) == (buf.size, 0, DONE)
    steps, bits, ids, kinds = (a[:m] for a in scan.out)
    if m == 1 and kinds[0] == FALLBACK:
        return None
    names = [scan.store[s:s + n].tobytes().decode() for s, n in scan.tags[:scan.state[0]]]
    ys = losslog._floats(bits, kinds)
    return [(names[i], int(s), None if k == NONE else _nan(float(y)))
            for i, s, k, y in zip(ids, steps, kinds, ys, strict=True)]


def by_protobuf(record):
    try:
        e = event_pb2.Event.FromString(record)
    except Exception:  # noqa: BLE001
        return "rejected"
    return [(v.tag, e.step, _nan(losslog._scalar(v))) for v in e.summary.value]


def _nan(x):
    return "nan" if x is not None and x != x else x


@pytest.mark.filterwarnings("error::RuntimeWarning")
def test_mutated_events_decode_as_protobuf_decodes_them(tmp_path):
    """Events mutated, then framed with valid CRCs: every event the kernel decodes is one
    protobuf accepts, with the same tags, step and scalars; the files read as the loader
    reads them, with no warning (signalling NaNs among the values)."""
    rng = np.random.default_rng(1)
    records = [*(e for kind in ("torch", "tf2", "content32", "content16", "double")
                 for e in scalar_events(kind, 20)), *HAND.values()]
    x = tensorboardX.proto.event_pb2.Event(step=1, summary=tensorboardX.summary.scalar(
        "loss", 2.5))
    records.append(x.SerializeToString())
    accepted = native = 0
    for m in mutants(rng, records, 3000):
        ours, theirs = natively(m), by_protobuf(m)
        accepted += theirs != "rejected"
        if ours is not None:
            native += 1
            assert ours == theirs, m
    assert native > 0.7 * accepted > 300
    for k in range(4):
        path = tmp_path / f"m{k}" / "events.out.tfevents.1.host"
        path.parent.mkdir()
        path.write_bytes(b"".join(map(frame, mutants(rng, records, 400))))
        for tag in (None, "loss"):
            same(path, tag)


def test_every_growth_path(tmp_path, monkeypatch):
    """Buffers, slots and tag tables as small as they go: records longer than the buffer,
    events with more values than slots, 750 tags (the tables regrown), long ones (the
    store regrown)."""
    monkeypatch.setattr(losslog, "_CHUNK", 64)
    monkeypatch.setattr(losslog, "_ROOM", 1)
    path = tmp_path / "events.out.tfevents.1.host"
    body = [frame(event(field(2, 0, varint(i)), value(f"m{i}".encode(), field(2, 5, F)),
                        value(b"loss", field(2, 5, struct.pack("<f", i))),
                        *(value(b"x", field(2, 5, F)),) * (i % 5)))
            for i in range(700)]
    body += [frame(event(field(2, 0, varint(700 + i)), value(b"%d" % i * (500 + 40_000 * (
        i == 30)), field(2, 5, F)))) for i in range(50)]  # the tag store regrown
    path.write_bytes(b"".join(body))
    assert same(path)[2] == list(range(700))
    assert same(path, "m699")[2] == [699]
    assert same(path, "30" * 40_500)[2] == [730]


@pytest.mark.slow  # the JIT compiles the TFRecord kernels first (~10 s on a fresh clone)
def test_the_jit_reads_as_the_library_does(tmp_path, monkeypatch):
    from gpu_profiler import native

    write_x(tmp_path, n=50)
    native_said = same(tmp_path)
    monkeypatch.setattr(native, "kernel", native._Jit)
    assert outcome(losslog._tensorboard, tmp_path) == native_said


def test_an_unreadable_file_is_one_line(tmp_path, monkeypatch):
    made = write_x(tmp_path, n=5, extra=False)

    def refused(*a, **k):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(losslog, "open", refused, raising=False)
    with pytest.raises(ProfilerError, match="cannot be read .Permission denied"):
        losslog._tensorboard(str(made), None)
