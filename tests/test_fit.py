"""Terminal tables keep every digit and header at any width: stacked when too wide."""

from __future__ import annotations

import re

import numpy as np
import pytest
from conftest import run_cli

from gpu_profiler.backends import get_backend
from gpu_profiler.chunk import Chunk

NUMBER = re.compile(r"[-+]?\d[\d,]*(?:\.\d+)?")




@pytest.fixture(scope="module")
def big(tmp_path_factory):
    """A saved histogram with long numbers: 36 million samples, some past max_seq_len."""
    x = np.random.default_rng(3).lognormal(6.8, 1.3, 20_000).astype(np.int64) + 1
    h = get_backend("numpy").histogram_chunk(Chunk(x), int(x.max()))
    path = tmp_path_factory.mktemp("fit") / "big.json"
    type(h)(h.counts * 1815).save(path)
    return path


@pytest.mark.parametrize("cmd", [
    ["profile", "--policy", "fixed,packed"], ["schedule", "--order", "stride,sequential"],
    ["compare", "--bounds-b", "0,1000,2000,4000,8193"], ["suggest", "--buckets", "4"]])
def test_80_and_200_columns_keep_every_number(big, cmd, capsys):
    rc, natural, _ = run_cli([cmd[0], big, *cmd[1:]], capsys)  # piped: the natural width
    assert rc == 0 and "…" not in natural
    want = set(NUMBER.findall(natural))  # (a stacked table repeats its headers)
    assert f"{36_300_000:,}" in want or cmd[0] != "profile"  # the long numbers are there
    for width in (80, 200):
        rc, out, _ = run_cli([cmd[0], big, *cmd[1:], "--width", width], capsys)
        assert rc == 0 and "…" not in out
        assert max(map(len, out.splitlines())) <= width
        assert set(NUMBER.findall(out)) == want
