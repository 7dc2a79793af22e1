"""CUDA backend: the numba CUDA kernels in ``gpu_profiler.kernels.cuda``, fed by a pipeline.

Host chunks are split into pieces of at most ``chunk_bytes``, staged into pinned buffers (by a
few threads, so the host copy keeps up with PCIe) and copied to the device on one CUDA stream
per buffer slot, so the copy of one piece overlaps the kernel of the previous one. Device
memory is bounded by ``streams`` slots of ``chunk_bytes`` (plus a mask buffer per slot when a
chunk has nulls) and one int64 accumulator of ``cap + 1`` bins per GPU, whatever the corpus
size; the slots are pooled per process, so repeated scans do not pay for pinned allocation.
Data already on a GPU (cupy arrays, cudf columns, numba device arrays, anything with
``__cuda_array_interface__``) is histogrammed in place, never copied back.

Several GPUs (``devices=[0, 1, ...]``): chunks are dealt round-robin to one pipeline per GPU
and the per-GPU histograms are summed. Under numba's CUDA simulator
(``NUMBA_ENABLE_CUDASIM=1``) the same code runs on the CPU with numba-cuda alone.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import threading
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpu_profiler.backends.base import Backend
from gpu_profiler.chunk import Chunk, Documents
from gpu_profiler.errors import ProfilerError
from gpu_profiler.frozen import frozen
from gpu_profiler.histogram import LengthHistogram, auto_cap, merge, wrapped

#: Shared memory per block assumed under the simulator (it has no device attributes).
SIM_SHARED_BUDGET = 48 << 10
#: Dynamic shared memory a kernel may use without opting in.
_DEFAULT_DYNAMIC_LIMIT = 48 << 10
#: Host bytes per staging thread below which a piece is staged by one thread.
_STAGE_MIN = 8 << 20


def _cuda() -> Any:
    from numba import cuda

    return cuda


def simulated() -> bool:
    """Whether numba's CUDA simulator is active (``NUMBA_ENABLE_CUDASIM=1``)."""
    from numba.cuda.core import config

    return bool(config.ENABLE_CUDASIM)


def _driver_may_exist() -> bool:
    """False only when surely no driver: on Linux the NVIDIA driver exposes /dev/nvidiactl
    (/dev/dxg under WSL). Checked before importing numba.cuda, which alone costs ~0.5 s of
    every run's start-up on a machine without a GPU."""
    if os.environ.get("NUMBA_ENABLE_CUDASIM", "0").strip() not in ("", "0"):
        return True
    if not sys.platform.startswith("linux"):
        return True
    return any(os.path.exists(p) for p in ("/dev/nvidiactl", "/dev/dxg"))


def probe() -> str | None:
    """None when the cuda backend works here, else exactly why it does not."""
    try:
        found = importlib.util.find_spec("numba_cuda") is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        return "numba-cuda is not installed (pip install 'gpu-profiler[gpu]')"
    if not _driver_may_exist():
        return "no NVIDIA driver on this machine (no /dev/nvidiactl)"
    try:
        cuda = _cuda()
    except Exception as exc:  # a broken install: name it instead of failing later
        return f"numba.cuda cannot be imported: {exc}"
    if simulated():
        return None
    error = cuda.cuda_error()
    if error:
        lines = [ln.strip(" :") for ln in str(error).splitlines() if ln.strip(" :")]
        detail = next((ln for ln in lines if not ln.startswith("Error at driver init")),
                      lines[0] if lines else "unknown error")
        return f"no usable CUDA driver: {detail}"
    try:
        count = len(cuda.gpus)
    except Exception as exc:
        return f"CUDA driver error: {exc}"
    if count == 0:
        return "the CUDA driver reports no GPU"
    from numba.cuda.cudadrv import nvvm

    if not nvvm.is_available():
        return "NVVM (the CUDA compiler library) is missing: pip install 'numba-cuda[cu12]'"
    return None


@frozen
class DeviceInfo:
    """What the backend uses of one GPU."""

    id: int
    name: str
    compute_capability: tuple[int, int]
    multiprocessors: int
    shared_per_block: int  # opt-in maximum, bytes
    shared_per_sm: int
    threads_per_sm: int
    registers_per_sm: int
    simulated: bool = False

    def describe(self) -> str:
        cc = f"sm_{self.compute_capability[0]}{self.compute_capability[1]}"
        if self.simulated:
            return (f"gpu {self.id}: CUDA simulator (NUMBA_ENABLE_CUDASIM=1, kernels run in "
                    f"Python), {self.shared_per_block >> 10} KiB shared memory per block assumed")
        return (f"gpu {self.id}: {self.name}, {cc}, {self.multiprocessors} SMs, "
                f"{self.shared_per_block >> 10} KiB shared memory per block")


def device_info(device: int) -> DeviceInfo:
    """Query GPU ``device`` (never hard-coded: shared memory comes from the driver)."""
    cuda = _cuda()
    if simulated():
        return DeviceInfo(device, "CUDA simulator", (0, 0), 1, SIM_SHARED_BUDGET,
                          SIM_SHARED_BUDGET, 2048, 65536, simulated=True)
    with cuda.gpus[device]:
        d = cuda.get_current_device()
        name = d.name.decode() if isinstance(d.name, bytes) else str(d.name)
        return DeviceInfo(device, name, tuple(d.compute_capability), d.MULTIPROCESSOR_COUNT,
                          d.MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                          d.MAX_SHARED_MEMORY_PER_MULTIPROCESSOR,
                          d.MAX_THREADS_PER_MULTIPROCESSOR, d.MAX_REGISTERS_PER_MULTIPROCESSOR)


def describe() -> str:
    """One line per GPU, for ``gpu-profiler backends``."""
    cuda = _cuda()
    count = 1 if simulated() else len(cuda.gpus)
    return "; ".join(device_info(i).describe() for i in range(count))


def on_device(data: Any) -> bool:
    """Whether ``data`` is a GPU array (numba device array or ``__cuda_array_interface__``)."""
    return bool(getattr(data, "__cuda_ndarray__", False)) or hasattr(
        data, "__cuda_array_interface__")


def _as_device_array(data: Any) -> Any:
    """A numba device array viewing ``data`` (no copy)."""
    if getattr(data, "__cuda_ndarray__", False):
        return data
    if simulated():
        raise ProfilerError(f"{type(data).__name__} arrays cannot be used under the CUDA "
                            "simulator; pass a numba device array (numba.cuda.to_device)")
    return _cuda().as_cuda_array(data)


def _check_int(dtype: Any) -> np.dtype:
    dtype = np.dtype(dtype)
    if dtype == np.bool_ or dtype.kind not in "iu":
        raise TypeError(f"integer lengths expected, got {dtype}")
    return dtype


@dataclass
class _Slot:
    """One staging slot: a stream, pinned + device buffers, and an event that says when
    the pinned buffers may be refilled."""

    stream: Any
    event: Any
    host: Any
    dev: Any
    host_mask: Any = None
    dev_mask: Any = None


@dataclass
class _Acc:
    """A device accumulator: int64 bins ``0..cap`` and the 6 statistics."""

    cap: int
    counts: Any
    stats: Any


class _Staging:
    """Process-wide pools of staging slots (pinned allocation is slow: tens of ms per
    buffer) and of copy threads, reused by every backend instance. A lane takes its slots
    on first use and gives them back when its results are read, so concurrent scans never
    share a slot; idle slots stay allocated for the process lifetime."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.free: dict[tuple[int, int], list[_Slot]] = {}
        self.pools: dict[int, ThreadPoolExecutor] = {}

    def take(self, device: int, nbytes: int, count: int) -> list[_Slot]:
        with self.lock:
            free = self.free.setdefault((device, nbytes), [])
            slots = [free.pop() for _ in range(min(count, len(free)))]
        cuda = _cuda()
        slots += [_Slot(cuda.stream(), cuda.event(), cuda.pinned_array(nbytes, np.uint8),
                        cuda.device_array(nbytes, np.uint8)) for _ in range(count - len(slots))]
        return slots

    def give(self, device: int, nbytes: int, slots: list[_Slot]) -> None:
        with self.lock:
            self.free.setdefault((device, nbytes), []).extend(slots)

    def threads(self, workers: int) -> ThreadPoolExecutor:
        with self.lock:
            if workers not in self.pools:
                self.pools[workers] = ThreadPoolExecutor(workers, "gpu-profiler-stage")
            return self.pools[workers]


_STAGING = _Staging()


class _Lane:
    """The pipeline of one GPU."""

    def __init__(self, backend: CudaBackend, device: int) -> None:
        self.b = backend
        self.device = device
        self.info = device_info(device)
        self.cuda = _cuda()
        from gpu_profiler.kernels import cuda as kernels

        self.k = kernels
        self.slots: list[_Slot] = []
        self.turn = 0
        self.accs: list[_Acc] = []
        self._no_mask: Any = None
        self._configured: set[int] = set()

    def context(self) -> Any:
        return self.cuda.gpus[self.device]

    # ------------------------------------------------------------------ buffers
    def _slot(self) -> _Slot:
        if not self.slots:
            self.slots = _STAGING.take(self.device, self.b.chunk_bytes, self.b.streams)
            if self._no_mask is None:
                self._no_mask = self.cuda.to_device(np.ones(1, dtype=np.bool_))
        slot = self.slots[self.turn % len(self.slots)]
        self.turn += 1
        return slot

    def _stage(self, slot: _Slot, x: np.ndarray, valid: np.ndarray | None) -> tuple[Any, Any]:
        """Copy a host piece into the slot's pinned buffers and enqueue the H2D copies."""
        slot.event.synchronize()  # the previous H2D out of these pinned buffers is done
        nbytes = x.nbytes
        hx = slot.host[:nbytes].view(x.dtype)
        self.b.copy(hx, x)
        dx = slot.dev[:nbytes].view(x.dtype)
        dx.copy_to_device(hx, stream=slot.stream)
        dv = None
        if valid is not None:
            if slot.host_mask is None:
                slot.host_mask = self.cuda.pinned_array(self.b.chunk_bytes, np.bool_)
                slot.dev_mask = self.cuda.device_array(self.b.chunk_bytes, np.bool_)
            hv = slot.host_mask[:valid.size]
            self.b.copy(hv, valid)
            dv = slot.dev_mask[:valid.size]
            dv.copy_to_device(hv, stream=slot.stream)
        slot.event.record(slot.stream)
        return dx, dv

    def pieces(self, chunk: Chunk) -> Iterator[tuple[Any, Any, int, Any]]:
        """``(device data, device mask or None, samples, stream)`` for each piece."""
        chunk = chunk.gathered()
        extra = 1 if chunk.offsets else 0
        n = chunk.samples
        if on_device(chunk.data):
            x = _as_device_array(chunk.data)
            _check_int(x.dtype)
            valid = chunk.valid
            if valid is not None:
                valid = _as_device_array(valid) if on_device(valid) else \
                    self.cuda.to_device(np.ascontiguousarray(valid, dtype=np.bool_))
            step = self.b.max_launch
            for lo in range(0, n, step):
                hi = min(n, lo + step)
                stream = self._slot().stream
                yield (x[lo:hi + extra], None if valid is None else valid[lo:hi], hi - lo,
                       stream)
            return
        x = np.ascontiguousarray(chunk.data)
        _check_int(x.dtype)
        valid = None if chunk.valid is None else np.ascontiguousarray(chunk.valid, np.bool_)
        step = max(1, min(self.b.chunk_bytes // x.itemsize - extra, self.b.max_launch))
        for lo in range(0, n, step):
            hi = min(n, lo + step)
            slot = self._slot()
            dx, dv = self._stage(slot, x[lo:hi + extra], None if valid is None else valid[lo:hi])
            yield dx, dv, hi - lo, slot.stream

    # ------------------------------------------------------------------ kernels
    def _grid(self, compiled: Any, n: int, dynamic: int, threads: int, per_thread: int
              ) -> int:
        """Blocks for a launch: enough to fill every SM at the occupancy that registers,
        threads and shared memory allow, and no more than the work needs."""
        b, info = self.b, self.info
        work = -(-n // (threads * per_thread))
        if compiled is None:  # simulator
            return max(1, min(b.blocks or 4, work))
        per_sm = self.k.blocks_per_sm(compiled.regs_per_thread, compiled.shared_mem_per_block,
                                      dynamic, threads, info.threads_per_sm,
                                      info.registers_per_sm, info.shared_per_sm)
        grid = b.blocks or info.multiprocessors * max(1, per_sm)
        return max(1, min(grid, work))

    def _allow_dynamic_shared(self, compiled: Any) -> None:
        """Opt the compiled kernel in to more than 48 KiB of dynamic shared memory."""
        if id(compiled) in self._configured:
            return
        from numba.cuda.cudadrv.driver import binding, driver

        cufunc = compiled._codelibrary.get_cufunc()
        attr = binding.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        limit = self.info.shared_per_block - compiled.shared_mem_per_block
        driver.cuKernelSetAttribute(attr, limit, cufunc.handle, self.info.id)
        self._configured.add(id(compiled))

    def _launch(self, name: str, args: tuple, n: int, dynamic: int, stream: Any) -> None:
        """Launch kernel ``name``: compiled (or loaded from numba's disk cache) for these
        argument types, sized by its real register and shared memory use. The document
        kernels take at most ``THREADS`` threads a block, each scanning ``DOC_TOKENS`` ids."""
        kernel = getattr(self.k, name)
        threads, per_thread = self.b.threads, self.b.unroll
        if name.startswith("docs_"):
            threads, per_thread = min(threads, self.k.THREADS), self.k.DOC_TOKENS
        self.b.launches[name] += 1
        compiled = None
        if not self.info.simulated:
            compiled = kernel.compile(tuple(kernel.typeof_pyval(a) for a in args))
            if dynamic > _DEFAULT_DYNAMIC_LIMIT:
                self._allow_dynamic_shared(compiled)
        grid = self._grid(compiled, n, dynamic, threads, per_thread)
        kernel[grid, threads, stream, dynamic](*args)

    def _acc(self, cap: int) -> _Acc:
        if not self.accs or self.accs[-1].cap != cap:
            self.accs.append(_Acc(cap, self.cuda.to_device(np.zeros(cap + 1, np.int64)),
                                  self.cuda.to_device(self.k.new_stats())))
        return self.accs[-1]

    def max_length(self, x: Any, valid: Any, offsets: bool, n: int, stream: Any) -> int:
        """Largest valid length of one piece (synchronizes its stream)."""
        out = self.cuda.to_device(np.full(1, -1, np.int64), stream=stream)
        args = (x, self._no_mask if valid is None else valid, valid is not None, offsets, n,
                out)
        self._launch("max_length", args, n, 0, stream)
        host = out.copy_to_host(stream=stream)
        stream.synchronize()
        return int(host[0])

    def add(self, chunk: Chunk, cap: int | None) -> None:
        """Histogram ``chunk`` into this GPU's accumulator (asynchronously)."""
        if chunk.docs is not None:
            self.add_documents(chunk, cap)
            return
        with self.context():
            for x, valid, n, stream in self.pieces(chunk):
                if cap is None:
                    m = auto_cap(self.max_length(x, valid, chunk.offsets, n, stream))
                    top = self.accs[-1].cap if self.accs else -1
                    acc = self._acc(max(m, top))
                else:
                    acc = self._acc(cap)
                kernel, dynamic = self.k.plan(acc.cap, self.b.shared_limit(self.info))
                args = (x, self._no_mask if valid is None else valid, valid is not None,
                        chunk.offsets, n, acc.cap, acc.counts, acc.stats)
                self._launch(kernel, args, n, dynamic, stream)

    def document_pieces(self, chunk: Chunk) -> Iterator[tuple[Any, int, Any, Documents]]:
        """``(device ids, count, stream, their documents)`` for each piece of a chunk of
        token ids; each piece's ``carry`` is found on the host, by a search back from its
        start (about a document's ids), so that pieces are histogrammed independently."""
        x = chunk.data
        if not isinstance(x, np.ndarray):
            raise TypeError("token ids must be a host (numpy) array")
        x = np.ascontiguousarray(x)
        if x.dtype == np.int32:
            x = x.view(np.uint32)  # the same ids, as an .npy of int32 holds them
        if x.dtype not in (np.uint16, np.uint32):
            raise TypeError(f"uint16 or uint32 token ids expected, got {x.dtype}")
        docs = chunk.docs
        assert docs is not None
        step = max(1, min(self.b.chunk_bytes // x.itemsize, self.b.max_launch))
        for lo in range(0, x.size, step):
            hi = min(x.size, lo + step)
            here = docs
            if hi < x.size:
                here, docs = docs.split(x[lo:], hi - lo)
            slot = self._slot()
            dx, _ = self._stage(slot, x[lo:hi], None)
            yield dx, hi - lo, slot.stream, here

    def add_documents(self, chunk: Chunk, cap: int | None) -> None:
        """Histogram the documents of a chunk of token ids (asynchronously, unless
        ``cap=None``: the longest document is found first, as `max_length` does)."""
        docs = chunk.docs
        assert docs is not None
        if chunk.data.size == 0:  # no ids: at most the document its stream ends with
            if docs.last and docs.carry > 0:
                self.add(Chunk(np.array([docs.carry], np.int64)), cap)
            return
        with self.context():
            for x, n, stream, d in self.document_pieces(chunk):
                if cap is None:
                    m = auto_cap(self.longest_document(x, n, d, stream))
                    top = self.accs[-1].cap if self.accs else -1
                    acc = self._acc(max(m, top))
                else:
                    acc = self._acc(cap)
                kernel, dynamic = self.k.plan(acc.cap, self.b.shared_limit(self.info),
                                              documents=True)
                args = (x, d.eot, d.start, d.carry, d.last, n, acc.cap, acc.counts, acc.stats)
                self._launch(kernel, args, n, dynamic, stream)

    def longest_document(self, x: Any, n: int, docs: Documents, stream: Any) -> int:
        """Length of the longest document that ends in one piece (-1: none does;
        synchronizes its stream): the global kernel with ``cap=-1`` counts every one in
        its statistics."""
        stats = self.cuda.to_device(self.k.new_stats(), stream=stream)
        counts = self.cuda.to_device(np.zeros(1, np.int64), stream=stream)
        args = (x, docs.eot, docs.start, docs.carry, docs.last, n, -1, counts, stats)
        self._launch("docs_global", args, n, 0, stream)
        host = stats.copy_to_host(stream=stream)
        stream.synchronize()
        return int(host[3])

    def result(self) -> list[LengthHistogram]:
        """Wait for the GPU and read every accumulator back."""
        with self.context():
            self.cuda.synchronize()
            hists = []
            for acc in self.accs:
                counts = acc.counts.copy_to_host()
                s = [int(v) for v in acc.stats.copy_to_host()]
                if s[0] == 0:
                    s[2] = s[3] = -1
                hists.append(LengthHistogram(counts, *s))
            self.accs = []
            _STAGING.give(self.device, self.b.chunk_bytes, self.slots)
            self.slots = []
            return hists


class CudaBackend(Backend):
    """Exact histograms on one or more NVIDIA GPUs.

    Args:
        device: the GPU to use (also where data already on a GPU is processed, unless it
            says which GPU holds it).
        devices: several GPUs; chunks are dealt round-robin and the histograms summed.
        chunk_bytes: bytes of one staging buffer (a host chunk is split into pieces of at
            most this size).
        streams: staging slots, one CUDA stream each (at least 2, so copies overlap
            kernels).
        shared_mem_budget: cap the shared memory per block used for the privatized
            histogram (default: the device's opt-in maximum); caps whose bins do not fit
            use the global-memory kernel.
        threads: threads per block (default ``kernels.cuda.THREADS``; 32 under the
            simulator).
        blocks: blocks per launch at most (default: fill the GPU at full occupancy).
        stage_threads: host threads staging pieces into pinned memory.
    """

    name = "cuda"

    def __init__(self, device: int = 0, devices: Sequence[int] | None = None, *,
                 chunk_bytes: int = 64 << 20, streams: int = 3,
                 shared_mem_budget: int | None = None, threads: int | None = None,
                 blocks: int | None = None, stage_threads: int | None = None) -> None:
        from gpu_profiler.kernels import cuda as k

        ids = [int(d) for d in (devices if devices else [device])]
        count = 1 if simulated() else len(_cuda().gpus)
        for d in ids:
            if not 0 <= d < count:
                raise ProfilerError(f"no GPU {d}: this machine has {count} "
                                    f"(device ids 0..{count - 1})")
        if streams < 2:
            raise ProfilerError(f"streams must be at least 2, got {streams}")
        if chunk_bytes < 64:
            raise ProfilerError(f"chunk_bytes must be at least 64, got {chunk_bytes}")
        self.devices = ids
        self.chunk_bytes = int(chunk_bytes)
        self.streams = int(streams)
        self.shared_mem_budget = shared_mem_budget
        self.threads = threads or (32 if simulated() else k.THREADS)
        self.blocks = blocks
        self.unroll = k.UNROLL
        self.max_launch = k.MAX_LAUNCH
        workers = stage_threads or min(8, os.cpu_count() or 1)
        self._pool = _STAGING.threads(workers) if workers > 1 else None
        self._workers = workers
        self._lanes = [_Lane(self, d) for d in ids]
        self._turn = -1
        #: Kernel launches by kernel name (diagnostics; tests check which path ran).
        self.launches: Counter[str] = Counter()

    @classmethod
    def from_options(cls, options: Any) -> CudaBackend:
        """From `CudaOptions` (None: GPU 0 and the defaults)."""
        from gpu_profiler.backends.options import CudaOptions

        o = options or CudaOptions()
        return cls(devices=list(o.devices), chunk_bytes=o.chunk_bytes, streams=o.streams,
                   shared_mem_budget=o.shared_mem_budget, threads=o.threads_per_block,
                   blocks=o.blocks, stage_threads=o.stage_threads)

    def shared_limit(self, info: DeviceInfo) -> int:
        """Shared memory per block (static + dynamic) the histogram may use on this GPU."""
        if self.shared_mem_budget is not None:
            return min(info.shared_per_block, self.shared_mem_budget)
        return info.shared_per_block

    def copy(self, dst: np.ndarray, src: np.ndarray) -> None:
        """``dst[...] = src`` on several threads for large copies (numpy drops the GIL)."""
        parts = min(self._workers, src.nbytes // _STAGE_MIN)
        if parts <= 1 or self._pool is None:
            np.copyto(dst, src)
            return
        edges = np.linspace(0, src.size, parts + 1).astype(np.int64)
        list(self._pool.map(lambda a, b: np.copyto(dst[a:b], src[a:b]), edges[:-1], edges[1:]))

    def _lane_for(self, chunk: Chunk) -> _Lane:
        if on_device(chunk.data):
            owner = getattr(getattr(chunk.data, "device", None), "id", None)
            return next((ln for ln in self._lanes if ln.device == owner), self._lanes[0])
        self._turn += 1
        return self._lanes[self._turn % len(self._lanes)]

    def accumulate(self, chunk: Chunk, cap: int | None) -> None:
        """Queue ``chunk`` for histogramming and return without waiting for the GPU (the
        streaming form of :meth:`histogram`; :meth:`collect` gives the result). Data already
        on a GPU must stay alive and unchanged until then; host data may be reused at once."""
        self._lane_for(chunk).add(chunk, cap)

    def collect(self, cap: int | None) -> LengthHistogram:
        """Wait for the GPUs and return the histogram of everything accumulated since the
        last call (bins ``0..cap``; ``cap=None``: up to the largest length seen)."""
        hists = [h for lane in self._lanes for h in lane.result()]
        return wrapped(merge(hists)) if hists else LengthHistogram.empty(cap or 0)

    def histogram(self, chunks: Iterable[Chunk], cap: int | None) -> LengthHistogram:
        """Histogram of every chunk, pipelined over the GPUs."""
        try:
            for chunk in chunks:
                self.accumulate(chunk, cap)
        except BaseException:
            self.collect(cap)  # drain, so a failed scan leaves nothing behind
            raise
        return self.collect(cap)

    def histogram_chunk(self, chunk: Chunk, cap: int) -> LengthHistogram:
        return self.histogram([chunk], cap)

    def max_length(self, chunk: Chunk) -> int:
        lane = self._lane_for(chunk)
        with lane.context():
            return max((lane.max_length(x, v, chunk.offsets, n, s)
                        for x, v, n, s in lane.pieces(chunk)), default=-1)
