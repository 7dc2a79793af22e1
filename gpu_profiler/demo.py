"""The embedded demo corpus: a deterministic, long-tailed SFT-like length distribution
written as a real Hugging Face ``save_to_disk`` directory (``length`` + ``input_ids``),
where the longest bucket produces about half of the batches."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa

SAMPLES = 20_000
SHARDS = 2
BATCH_ROWS = 1000  # what `datasets` writes per record batch
SEED = 20261130
VERSION = "demo-v1"

_FEATURES = {
    "input_ids": {"feature": {"dtype": "int32", "_type": "Value"}, "_type": "List"},
    "length": {"dtype": "int64", "_type": "Value"},
}


def demo_lengths(n: int = SAMPLES, seed: int = SEED) -> np.ndarray:
    """Mostly short chat turns (log-normal around 450 tokens) plus 11% long documents
    (3.3k-12k tokens, some above an 8k context)."""
    rng = np.random.default_rng(seed)
    short = np.clip(rng.lognormal(np.log(450), 0.8, n), 16, None)
    long_docs = rng.uniform(3300, 12000, n)
    return np.where(rng.random(n) < 0.11, long_docs, short).astype(np.int64)


def default_dir() -> Path:
    """The per-user cache folder holding the demo corpus."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return Path(cache) / "gpu-profiler" / VERSION


def build_demo(directory: str | Path | None = None) -> Path:
    """Build the demo corpus into ``directory`` (once; reused when complete) and return it."""
    target = Path(directory) if directory else default_dir()
    if (target / "state.json").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".demo-", dir=target.parent))
    try:
        _write_hf_dir(tmp, demo_lengths())
        if target.exists():
            shutil.rmtree(target)
        os.replace(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def _write_hf_dir(path: Path, lengths: np.ndarray) -> None:
    rng = np.random.default_rng(SEED + 1)
    meta = {b"huggingface": json.dumps({"info": {"features": _FEATURES}}).encode()}
    schema = pa.schema([("input_ids", pa.list_(pa.int32())), ("length", pa.int64())],
                       metadata=meta)
    files = []
    for shard, part in enumerate(np.array_split(lengths, SHARDS)):
        name = f"data-{shard:05d}-of-{SHARDS:05d}.arrow"
        files.append({"filename": name})
        with pa.OSFile(str(path / name), "wb") as sink, pa.ipc.new_stream(sink, schema) as w:
            for lo in range(0, part.size, BATCH_ROWS):
                lens = part[lo:lo + BATCH_ROWS]
                offsets = np.zeros(lens.size + 1, np.int32)
                np.cumsum(lens, out=offsets[1:])
                tokens = rng.integers(0, 128_000, int(offsets[-1]), dtype=np.int32)
                ids = pa.ListArray.from_arrays(pa.array(offsets), pa.array(tokens))
                w.write_batch(pa.record_batch([ids, pa.array(lens)], schema=schema))
    (path / "dataset_info.json").write_text(json.dumps(
        {"citation": "", "description": "gpu-profiler demo corpus", "features": _FEATURES,
         "homepage": "", "license": ""}, indent=2))
    (path / "state.json").write_text(json.dumps(
        {"_data_files": files, "_fingerprint": VERSION, "_format_columns": None,
         "_format_kwargs": {}, "_format_type": None, "_output_all_columns": False,
         "_split": None}, indent=2))
