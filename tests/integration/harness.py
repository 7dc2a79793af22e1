"""What the integration tests and the worker scripts they launch share: the corpus, the
sampler's parameters, the per-rank record of trained batches, and (test side) launching,
SIGKILLing and checking a job against the sampler's own plan.

Nothing here imports torch: the test processes need only numpy and gpu_profiler; every
training stack runs in a worker process (``w_*.py`` beside this file).

A worker writes one JSON line per micro-batch it trained, ``rec-<tag>-rank<r>.jsonl``:
``{"g": global step, "e": epoch, "s": step in epoch, "idx": [sample indices]}``, flushed
line by line (a SIGKILL loses nothing written). After each checkpoint it writes
``ckpt-<tag>.json`` (atomically): ``{"g": steps completed, "path": where the checkpoint
is}``. With ``--kill-after G`` it trains a few steps past the first checkpoint at or after
global step ``G``, writes ``ready-<tag>`` and waits to be killed.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
N = 3000
SEED = 17
#: Small buckets and budget so that a few thousand samples make ~160 batches an epoch.
SAMPLER_KW: dict[str, Any] = dict(bounds=[1, 128, 256, 512, 1025], max_seq_len=1024,
                                  token_budget=4096, max_batch_size=32, seed=SEED)
#: Steps trained after the marked checkpoint before a worker says it may be killed.
PAST_CHECKPOINT = 3


def corpus(n: int = N) -> np.ndarray:
    """Skewed lengths: 3/4 short (the first bucket makes ~45% of the batches), then ever
    fewer longer ones, a few clipped at max_seq_len."""
    rng = np.random.default_rng(1234)
    u = rng.random(n)
    return np.select(
        [u < 0.75, u < 0.87, u < 0.95],
        [rng.integers(4, 128, n), rng.integers(128, 256, n), rng.integers(256, 512, n)],
        rng.integers(512, 1400, n)).astype(np.int64)


def bucket_of(lengths: np.ndarray) -> np.ndarray:
    """Each sample's bucket, computed here from the bounds (not by the sampler)."""
    clipped = np.minimum(lengths, SAMPLER_KW["max_seq_len"])
    return np.searchsorted(np.asarray(SAMPLER_KW["bounds"]), clipped, side="right") - 1



# ------------------------------------------------------------------ worker scripts
class Index:
    """The dataset every worker trains on: sample i is its index (a map-style dataset for
    torch's DataLoader, which needs only ``__len__`` and ``__getitem__``)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        return i


def worker_args(*extra: tuple[str, dict[str, Any]]) -> argparse.Namespace:
    """A worker's command line: where to record, the job's tag and epochs, the loader's
    workers, the checkpoint interval, when to wait to be killed, what to resume from;
    ``extra``: ``(flag, add_argument keywords)`` of its own."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--tag", required=True)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--ckpt-every", type=int, default=10)
    ap.add_argument("--kill-after", type=int)
    ap.add_argument("--resume")
    for flag, kw in extra:
        ap.add_argument(flag, **kw)
    return ap.parse_args()

# ------------------------------------------------------------------ worker side
class Recorder:
    """One rank's record of the micro-batches it trained (see the module docstring)."""

    def __init__(self, out: str | Path, tag: str, rank: int) -> None:
        self.out, self.tag = Path(out), tag
        self.f = open(self.out / f"rec-{tag}-rank{rank}.jsonl", "a", buffering=1)

    def record(self, g: int, epoch: int, step: int, idx: Any) -> None:
        if hasattr(idx, "tolist"):
            idx = idx.tolist()
        self.f.write(json.dumps({"g": int(g), "e": int(epoch), "s": int(step),
                                 "idx": [int(i) for i in idx]}) + "\n")
        self.f.flush()

    def checkpointed(self, g: int, path: str | Path, **extra: Any) -> None:
        mark_checkpoint(self.out, self.tag, g, path, **extra)

    def note(self, name: str, obj: Any) -> None:
        """Anything else the test checks (what a call raised, a peeked batch, ...)."""
        write_json(self.out / f"{name}-{self.tag}.json", obj)


class Killer:
    """``--kill-after G``: after the first checkpoint at or after global step G, train
    PAST_CHECKPOINT more steps, say ``ready`` and sleep until SIGKILLed."""

    def __init__(self, out: str | Path, tag: str, kill_after: int | None, rank: int) -> None:
        self.ready = Path(out) / f"ready-{tag}"
        self.kill_after, self.rank, self.armed_at = kill_after, rank, None

    def checkpointed(self, g: int) -> None:
        if self.kill_after is not None and self.armed_at is None and g >= self.kill_after:
            self.armed_at = g

    def after_step(self, g: int) -> None:
        """Call with the steps completed; never returns once the job may be killed."""
        if self.armed_at is not None and g >= self.armed_at + PAST_CHECKPOINT:
            if self.rank == 0:
                self.ready.write_text(str(g))
            while True:
                time.sleep(1)


def mark_checkpoint(out: str | Path, tag: str, g: int, path: str | Path, **extra: Any) -> None:
    """Say that the checkpoint at ``path`` is written, after ``g`` steps."""
    write_json(Path(out) / f"ckpt-{tag}.json", {"g": int(g), "path": str(path), **extra})


def write_json(path: str | Path, obj: Any) -> None:
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj))
    os.replace(tmp, path)


def finish() -> None:
    """End a rank that trained to its end: wait for the others, then leave without
    torch's teardown. Freeing DDP's reducer frees the gloo process group, whose destructor
    joins a worker thread (holding the GIL) while that thread waits for the GIL to drop
    the tensors of its last work: a rank hung at exit (gdb, torch 2.13), or, at
    interpreter finalization, aborted ("terminate called without an active exception").
    Records are flushed line by line, so nothing is lost."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def quiet_env() -> None:
    """One thread per process, no hub, no telemetry (set before torch is imported); SIGUSR1
    prints every thread's stack (a job that hangs says where, `run_job`)."""
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    for k, v in {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
                 "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
                 "TOKENIZERS_PARALLELISM": "false", "WANDB_DISABLED": "true",
                 "DISABLE_MLFLOW_INTEGRATION": "TRUE"}.items():
        os.environ.setdefault(k, v)


# ------------------------------------------------------------------ test side
def plans(world_size: int, epochs: int) -> list[Any]:
    """The sampler's plan of each epoch, made in the test process."""
    import gpu_profiler as gp

    s = gp.BucketBatchSampler(corpus(), world_size=world_size, **SAMPLER_KW)
    out = []
    for e in range(epochs):
        s.set_epoch(e)
        out.append(s.plan())
    return out


def expected(world_size: int, epochs: int) -> list[list[list[int]]]:
    """Per rank, every batch it should train, in order, all epochs together."""
    want: list[list[list[int]]] = [[] for _ in range(world_size)]
    for p in plans(world_size, epochs):
        assert p.world_size == world_size
        for j in range(p.batches):
            want[j % world_size].append(p.batch(j).tolist())
    return want


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def child_env(tmp: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTEST_", "LOCAL_RANK", "RANK", "WORLD_SIZE", "MASTER_",
                                "ACCELERATE_", "PL_"))}
    env.update({"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
                "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                "HF_HOME": str(tmp / "hf-home"), "TOKENIZERS_PARALLELISM": "false",
                "WANDB_DISABLED": "true", "PYTHONUNBUFFERED": "1",
                "PYTHONPATH": os.pathsep.join(p for p in (str(HERE), env.get("PYTHONPATH"))
                                              if p)})
    env.update(extra)
    return env


def python_cmd(script: str, *args: Any) -> list[str]:
    return [sys.executable, str(HERE / script), *map(str, args)]


def torchrun_cmd(script: str, nproc: int, *args: Any) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc),
            "--nnodes", "1", "--master_addr", "127.0.0.1", "--master_port", str(free_port()),
            str(HERE / script), *map(str, args)]


def _log_tail(log: Path, n: int = 12000) -> str:
    try:
        return log.read_text(errors="replace")[-n:]
    except OSError:
        return ""


def run_job(cmd: list[str], tmp: Path, name: str, timeout: float = 240,
            env: dict[str, str] | None = None) -> float:
    """Run a job to its end; fails the test with the log's tail if it does not exit 0.
    Returns its wall time."""
    log = tmp / f"{name}.log"
    t0 = time.monotonic()
    with open(log, "wb") as f:
        p = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             env=env or child_env(tmp), cwd=tmp, start_new_session=True)
        try:
            rc = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_tree(p.pid, signal.SIGUSR1)  # each process's stacks to the log
            time.sleep(3)
            kill_tree(p.pid)
            p.wait()
            raise AssertionError(f"{name}: timed out after {timeout} s\n{_log_tail(log)}"
                                 ) from None
    assert rc == 0, f"{name}: exit {rc}: {' '.join(cmd)}\n{_log_tail(log)}"
    return time.monotonic() - t0


def run_and_kill(cmd: list[str], tmp: Path, name: str, ready: Path, timeout: float = 240,
                 env: dict[str, str] | None = None) -> float:
    """Start a job, wait for ``ready`` (the job trained past a checkpoint mid-epoch), then
    SIGKILL the job and every process under it."""
    log = tmp / f"{name}.log"
    t0 = time.monotonic()
    with open(log, "wb") as f:
        p = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             env=env or child_env(tmp), cwd=tmp, start_new_session=True)
        try:
            while not ready.exists():
                if p.poll() is not None:
                    raise AssertionError(f"{name}: exited {p.returncode} before it could be "
                                         f"killed\n{_log_tail(log)}")
                if time.monotonic() - t0 > timeout:
                    raise AssertionError(f"{name}: not ready after {timeout} s\n"
                                         f"{_log_tail(log)}")
                time.sleep(0.1)
        finally:
            kill_tree(p.pid)
            p.wait()
    assert p.returncode == -signal.SIGKILL, p.returncode
    return time.monotonic() - t0


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = Path(f"/proc/{d}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        kids.setdefault(ppid, []).append(int(d))
    return kids


def kill_tree(pid: int, sig: int = signal.SIGKILL) -> None:
    """Send ``sig`` to ``pid`` and all its descendants (found before any is signalled: a
    launcher's workers may live in sessions of their own)."""
    kids, tree, todo = _children(), [], [pid]
    while todo:
        p = todo.pop()
        tree.append(p)
        todo.extend(kids.get(p, []))
    for p in tree:
        try:
            os.kill(p, sig)
        except ProcessLookupError:
            pass


def read_records(out: Path, tag: str, world_size: int) -> list[list[dict[str, Any]]]:
    per_rank = []
    for r in range(world_size):
        path = out / f"rec-{tag}-rank{r}.jsonl"
        lines = path.read_text().splitlines() if path.exists() else []
        per_rank.append([json.loads(x) for x in lines if x.strip()])
    return per_rank


def read_json(path: Path) -> Any:
    return json.loads(path.read_text())


def committed(records: list[list[dict[str, Any]]], g: int) -> list[list[dict[str, Any]]]:
    """The killed run's batches whose step completed before its last checkpoint (global
    steps ``0 .. g - 1``); checks the run trained each of them once, in order."""
    out = []
    for r, recs in enumerate(records):
        kept = [x for x in recs if x["g"] < g]
        assert [x["g"] for x in kept] == list(range(g)), (
            f"killed run, rank {r}: global steps before the checkpoint at {g} are "
            f"{[x['g'] for x in kept][:20]}...")
        out.append(kept)
    return out


def check_run(trained: list[list[dict[str, Any]]], world_size: int, epochs: int,
              what: str) -> None:
    """What every rank trained (its batches in order, all epochs, runs joined) against
    the plan: (3) steps per epoch, (1) every sample once an epoch, (2) one bucket per
    step and it is ``plan.bucket``'s, (4) another order each epoch, and last, batch for
    batch, the plan itself (nothing skipped, nothing trained twice)."""
    ps = plans(world_size, epochs)
    lengths = corpus()
    buckets = bucket_of(lengths)
    assert len(trained) == world_size
    total = sum(p.steps for p in ps)
    for r, recs in enumerate(trained):
        assert len(recs) == total, (
            f"{what}: rank {r} trained {len(recs)} batches; the plan has "
            f"{[p.steps for p in ps]} steps in epochs 0..{epochs - 1} (sum {total})")
    first = 0
    orders = []
    for e, p in enumerate(ps):
        steps = [[recs[first + s]["idx"] for recs in trained] for s in range(p.steps)]
        first += p.steps
        # (1) every sample exactly once this epoch, across ranks
        seen = np.concatenate([np.asarray(b, np.int64) for step in steps for b in step])
        counts = np.bincount(seen, minlength=N)
        assert seen.size == N and (counts == 1).all(), (
            f"{what}: epoch {e}: {int((counts == 0).sum())} samples never trained, "
            f"{int((counts > 1).sum())} trained more than once ({seen.size} rows, {N} "
            "samples)")
        # (2) each step's micro-batches (all ranks) from one bucket, the plan's: only the
        # few leftover steps at the epoch's end (fewer than world_size batches of a bucket
        # left) may mix buckets
        planned = p.bucket.reshape(p.steps, world_size)
        mixed = np.flatnonzero((planned != planned[:, :1]).any(axis=1))
        n_buckets = len(SAMPLER_KW["bounds"]) - 1
        assert mixed.size == 0 or mixed[0] >= p.steps - n_buckets, (
            f"plan of epoch {e}: steps {mixed.tolist()} of {p.steps} mix buckets")
        for s, step in enumerate(steps):
            for r, batch in enumerate(step):
                got = {int(b) for b in np.unique(buckets[batch])}
                assert got == {int(planned[s, r])}, (
                    f"{what}: epoch {e} step {s} rank {r}: a micro-batch from buckets "
                    f"{sorted(got)}, the plan's bucket {int(planned[s, r])}; this step's "
                    f"buckets on all ranks: {planned[s].tolist()}")
        orders.append([b for step in steps for b in step])
    # (4) a different order each epoch
    for e in range(1, len(orders)):
        assert orders[e] != orders[e - 1], f"{what}: epoch {e} repeats epoch {e - 1}'s order"
    # the plan, batch for batch, on every rank
    want = expected(world_size, epochs)
    for r in range(world_size):
        got = [x["idx"] for x in trained[r]]
        if got != want[r]:
            k = next(i for i, (a, b) in enumerate(zip(got, want[r], strict=False)) if a != b)
            raise AssertionError(f"{what}: rank {r}: batch {k} (of {len(want[r])}) is "
                                 f"{got[k][:8]}..., the plan's is {want[r][k][:8]}...")

