"""``length_source`` says what the lengths are (issue 27, item 8): a Megatron-LM index's
sequence (or document) lengths and a token stream's documents, not ``column 'length'``
(the schema field their readers make up)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
from conftest import run_cli

from gpu_profiler.readers.base import LengthSpec, SourceOptions
from gpu_profiler.readers.megatron import MegatronPart
from gpu_profiler.readers.tokens import TokenPart

sys.path.insert(0, str(Path(__file__).parent))
from test_megatron import build, random_docs  # noqa: E402 (the index writer of its tests)

EOT = 50256


def test_each_format_says_what_its_lengths_are():
    spec = LengthSpec("length")
    assert spec.describe() == "column 'length'"  # a column of the user's, as before
    assert LengthSpec("input_ids", offsets=True).describe() == "offsets of 'input_ids'"
    mega = MegatronPart("x.idx")
    assert spec.described_by(mega, SourceOptions()).describe() == \
        "Megatron-LM index: sequence lengths"
    assert spec.described_by(mega, SourceOptions(unit="document")).describe() == \
        "Megatron-LM index: document lengths"
    stream = TokenPart("train.bin")
    assert spec.described_by(stream, SourceOptions(eot=EOT)).describe() == \
        "token stream: documents split at EOT 50256"
    assert spec.described_by(stream, SourceOptions(eot=0, eot_position="start")).describe() \
        == "token stream: documents split at EOT 0 (each EOT opens one)"
    from gpu_profiler.readers.parquet import ParquetPart

    assert spec.described_by(ParquetPart("x.parquet"), SourceOptions()) is spec


def test_profile_json_and_table_name_the_formats_lengths(tmp_path, capsys):
    prefix = build(tmp_path / "corpus_text_document", random_docs(200, 3))
    stream = tmp_path / "train.bin"
    ids = np.random.default_rng(1).integers(0, EOT, 50_000)
    ids[::700] = EOT
    ids.astype(np.uint16).tofile(stream)
    for args, want in (([prefix], "Megatron-LM index: sequence lengths"),
                       ([prefix, "--unit", "document"], "Megatron-LM index: document lengths"),
                       ([stream, "--eot", EOT], "token stream: documents split at EOT 50256")):
        rc, out, err = run_cli(["profile", *args, "-q", "-f", "json"], capsys)
        assert rc == 0, err
        assert json.loads(out)["length_source"] == want
        rc, out, _ = run_cli(["profile", *args, "-q"], capsys)
        assert rc == 0 and f"— {want}, backend" in " ".join(out.split())
