"""The dominant-bucket warning agrees with the table it sits under (issue 27, item 5): it
names its policy (fixed: whole batches), and states the bucket table's estimate too, so
``profile``'s table (est. batches, a float) and ``schedule``/``suggest``'s (fixed) both
find their own numbers in it."""

from __future__ import annotations

import json
import re

import jsonschema
import pytest
from conftest import run_cli

from gpu_profiler.backends import get_backend
from gpu_profiler.chunk import Chunk
from gpu_profiler.demo import demo_lengths
from gpu_profiler.schemas import load


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """The demo corpus' histogram: bucket 5 makes ~51% of the batches."""
    path = tmp_path_factory.mktemp("advice") / "demo.json"
    x = demo_lengths()
    get_backend("numpy").histogram_chunk(Chunk(x), int(x.max())).save(path)
    return path


def run(args, capsys):
    rc, out, err = run_cli(args, capsys)
    assert rc == 0, err
    return out


def test_the_advice_states_the_fixed_policys_and_the_tables_numbers(saved, capsys):
    d = json.loads(run(["profile", saved, "-q", "-f", "json", "--policy", "fixed"], capsys))
    a = d["advice"]
    top = d["buckets"][a["bucket"]]
    fixed = d["policies"][0]
    assert a["policy"] == "fixed"
    assert a["batches"] == fixed["buckets"][a["bucket"]]["batches"]
    assert a["total_batches"] == fixed["total_batches"]
    assert a["est_batch_pct"] == pytest.approx(top["batch_pct"])
    assert a["est_total_batches"] == pytest.approx(d["total_est_batches"])
    assert a["est_total_batches"] != a["total_batches"]  # the demo's two numbers differ
    text = a["text"]
    assert (f"makes {a['batch_pct']:.1f}% of the batches under the fixed policy "
            f"({a['batches']:,} of {a['total_batches']:,} whole batches; "
            f"{top['batch_pct']:.1f}% of the {d['total_est_batches']:,.2f} that profile's "
            "bucket table estimates as samples / batch size)") in text
    jsonschema.validate(d, load("profile"), cls=jsonschema.Draft202012Validator)


def test_the_warning_under_profiles_table_quotes_the_table(saved, capsys):
    out = " ".join(run(["profile", saved, "-q"], capsys).split())
    row = re.search(r"5 \[3296,8193\)(?: \S+){7} (\d+\.\d) ", out)
    assert row, out
    est = re.search(r"([\d,]+\.\d\d) est\. batches", out).group(1)
    warning = out[out.index("warning:"):]
    assert f"{row.group(1)}% of the {est} that profile's bucket table estimates" in warning


@pytest.mark.parametrize("cmd", [["schedule"], ["suggest", "--buckets", "6"]])
def test_the_warning_under_the_fixed_tables_quotes_them(saved, capsys, cmd):
    d = json.loads(run([cmd[0], saved, "-q", "-f", "json", *cmd[1:]], capsys))
    a = d["advice"]
    if cmd[0] == "schedule":  # its table: the fixed policy's batches per bucket
        assert d["policy"] == "fixed"
        batches, total = d["buckets"][a["bucket"]]["batches"], d["total_batches"]
    else:  # its first table: the current bounds, scored under the fixed policy
        current = d["proposals"][0]
        assert current["method"] == "current"
        batches, total = current["buckets"][a["bucket"]]["batches"], current["total_batches"]
    assert (batches, total) == (a["batches"], a["total_batches"])
    out = " ".join(run([cmd[0], saved, "-q", *cmd[1:]], capsys).split())
    assert f"({batches:,} of {total:,} whole batches;" in out
    jsonschema.validate(d, load(cmd[0]), cls=jsonschema.Draft202012Validator)


def test_a_warning_shared_by_splits_gives_each_splits_numbers_and_policy(tmp_path, capsys):
    datasets = pytest.importorskip("datasets")
    x = demo_lengths()
    datasets.DatasetDict({name: datasets.Dataset.from_dict({"length": part.tolist()})
                          for name, part in (("train", x), ("test", x[:6000]))}
                         ).save_to_disk(str(tmp_path / "dd"))
    d = json.loads(run(["profile", tmp_path / "dd", "-q", "-f", "json"], capsys))
    a = d["splits"]["test"]["advice"]
    out = " ".join(run(["profile", tmp_path / "dd", "-q"], capsys).split())
    assert (f"test: {a['batch_pct']:.1f}% of its {a['total_batches']:,} batches under the "
            f"fixed policy, {a['est_batch_pct']:.1f}% of its {a['est_total_batches']:,.2f} "
            "estimated") in out
