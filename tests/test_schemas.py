"""Every ``-f json`` output (and a saved histogram) validates against the JSON Schema the
package ships for it; the schemas reject what they should."""

from __future__ import annotations

import json

import jsonschema
import numpy as np
import pytest
from conftest import run_cli

from gpu_profiler.backends import get_backend
from gpu_profiler.chunk import Chunk
from gpu_profiler.schemas import NAMES, load


def run(args, capsys):
    rc, out, err = run_cli(args, capsys)
    assert rc == 0, err
    return json.loads(out)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    x = np.random.default_rng(2).lognormal(6.5, 1.2, 4000).astype(np.int64)
    path = tmp_path_factory.mktemp("schemas") / "h.json"
    get_backend("numpy").histogram_chunk(Chunk(x), int(x.max())).save(path)
    return path


@pytest.fixture(scope="module")
def train_test(tmp_path_factory):
    """A DatasetDict written by `datasets`: train and test splits."""
    datasets = pytest.importorskip("datasets")
    rng = np.random.default_rng(5)
    path = tmp_path_factory.mktemp("schemas") / "dd"
    datasets.DatasetDict({name: datasets.Dataset.from_dict(
        {"length": rng.integers(1, 9000, n).tolist()}) for name, n in (("train", 900),
                                                                        ("test", 300))}
    ).save_to_disk(str(path))
    return path


def check(name, doc):
    schema = load(name)
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.validate(doc, schema, cls=jsonschema.Draft202012Validator)
    assert doc["schema"] == f"gpu-profiler/{name}/v1"


@pytest.mark.parametrize("name, args", [
    ("profile", ["--policy", "all"]), ("suggest", ["--buckets", "4", "--balance", "1"]),
    ("schedule", ["--order", "all", "--trials", "10"]),
    ("compare", ["--bounds-b", "0,1000,8193"]), ("blend", ["--train-samples", "10000"])])
def test_outputs_validate(saved, name, args, capsys):
    check(name, run([name, saved, *args, "-f", "json"], capsys))


def test_plan_and_a_dataset_dict_profile_validate(train_test, tmp_path, capsys):
    check("plan", run(["plan", train_test, "-q", "-o", tmp_path / "p.npz", "-f", "json"],
                      capsys))
    check("profile", run(["profile", train_test, "-q", "-f", "json"], capsys))


def test_saved_histogram_validates(saved):
    check("histogram", json.loads(saved.read_text()))


def test_schemas_reject_a_wrong_output(saved, capsys):
    d = run(["profile", saved, "-f", "json"], capsys)
    d["percentiles"]["p99"] = "8k"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(d, load("profile"))
    with pytest.raises(ValueError, match="choose from"):
        load("nope")
    assert set(NAMES) == {"profile", "suggest", "schedule", "plan", "compare", "histogram",
                          "diagnose", "blend"}
