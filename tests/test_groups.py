"""``--group-by``: one exact histogram per group in one scan, on every format that has
columns (string, dictionary and integer group columns, nulls on both sides), and per file
or subdirectory of a source of many; each group checked against numpy on the raw rows,
the mixture's shares against a computation from the per-bucket counts."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import run_cli
from test_megatron import build, flat, random_docs

import gpu_profiler as gp
from gpu_profiler import groups
from gpu_profiler.schemas import load


def corpus(n: int, k: int, seed: int):
    """``n`` lengths of ``k`` groups whose lengths differ by group, some nulls on both
    sides: (lengths or None, group names or None)."""
    rng = np.random.default_rng(seed)
    names = [f"src-{i}" for i in range(k)]
    pick = rng.integers(0, k, n)
    lengths = (rng.lognormal(5 + 3 * pick / k, 0.6)).astype(np.int64) + 1
    length = [None if rng.random() < 0.01 else int(v) for v in lengths]
    group = [None if rng.random() < 0.01 else names[i] for i in pick]
    return length, group


def reference(length, group) -> dict[str, tuple[np.ndarray, int]]:
    """Each group's (bincount of its lengths, nulls), straight from the rows."""
    out: dict[str, list] = {}
    for v, g in zip(length, group, strict=True):
        out.setdefault(groups.NULL if g is None else str(g), []).append(v)
    return {g: (np.bincount([v for v in vs if v is not None], minlength=1),
                sum(v is None for v in vs)) for g, vs in out.items()}


def same(result, ref) -> None:
    assert set(result.group_histograms) == set(ref)
    for name, h in result.group_histograms.items():
        counts, nulls = ref[name]
        got = h.counts
        n = max(got.size, counts.size)
        assert np.array_equal(np.pad(got, (0, n - got.size)),
                              np.pad(counts, (0, n - counts.size))), name
        assert h.null_count == nulls and h.above_count == 0, name


@pytest.mark.parametrize("k", [3, 17, 50])
@pytest.mark.parametrize("backend, bins", [("numpy", 0), ("numba", 0),
                                           ("numba", groups.COUNTED_BINS)])
def test_parquet_string_groups_equal_each_groups_rows(tmp_path, k, backend, bins,
                                                      monkeypatch):
    """Each group's rows gathered and counted by the backend (bins 0), or every group
    counted at once."""
    monkeypatch.setattr(groups, "COUNTED_BINS", bins)
    length, group = corpus(20_000, k, seed=k)
    path = tmp_path / "mix.parquet"
    pq.write_table(pa.table({"length": pa.array(length, pa.int32()), "text": ["x"] * 20_000,
                             "source": group}), path, row_group_size=3_000)
    r = gp.profile(path, group_by="source", backend=backend)
    same(r, reference(length, group))
    # the groups sum to the whole source, scanned the usual way
    whole = gp.histogram(path, backend=backend)
    assert np.array_equal(r.histogram.counts, whole.counts)
    assert r.histogram.null_count == whole.null_count


def test_mixture_shares_and_composition_from_the_bucket_counts(tmp_path):
    length, group = corpus(30_000, 4, seed=3)
    path = tmp_path / "mix.parquet"
    pq.write_table(pa.table({"length": length, "source": group}), path)
    r = gp.profile(path, group_by="source", max_seq_len=4096, bounds="0,300,900,2000,4097")
    bounds = [0, 300, 900, 2000, 4097]
    rows = [(min(v, 4096), g) for v, g in zip(length, group, strict=True) if v is not None]
    names = sorted({groups.NULL if g is None else g for _, g in rows})
    per = {n: np.zeros(4) for n in names}
    for v, g in rows:
        per[groups.NULL if g is None else g][np.searchsorted(bounds, v, "right") - 1] += 1
    bucket = sum(per.values())
    batches = np.array([b.est_batches for b in r.table.buckets])
    for share in r.mixture.shares:
        want = float((per[share.name] / np.maximum(bucket, 1) * batches).sum())
        assert share.batches == pytest.approx(want, rel=1e-12)
        assert share.samples == per[share.name].sum()
        toks = sum(v for v, g in zip(length, group, strict=True)
                   if v is not None and (groups.NULL if g is None else g) == share.name)
        assert share.token_pct == pytest.approx(toks / r.table.total_tokens * 100)
    for m in r.mixture.buckets:
        for n in names:
            assert m.groups[n] == pytest.approx(per[n][m.index] / bucket[m.index] * 100)
    assert sum(s.batch_pct for s in r.mixture.shares) == pytest.approx(100)


def test_a_bucket_made_of_one_source_is_warned_about_and_an_even_mix_is_not(tmp_path):
    rng = np.random.default_rng(0)
    n = 20_000
    src = rng.choice(["web", "code"], n, p=[0.7, 0.3])
    apart = np.where(src == "code", rng.integers(3000, 8000, n), rng.integers(10, 700, n))
    even = rng.integers(10, 8000, n)
    for name, lengths, warned in (("apart", apart, True), ("even", even, False)):
        path = tmp_path / f"{name}.parquet"
        pq.write_table(pa.table({"length": lengths, "source": src}), path)
        r = gp.profile(path, group_by="source")
        said = [w for w in r.table.warnings if "mostly of one source" in w]
        assert bool(said) == warned, said
        assert bool(r.mixture.warnings) == warned


def test_hf_dir_by_datasets_with_offsets_and_a_split(tmp_path):
    datasets = pytest.importorskip("datasets")
    length, group = corpus(3_000, 5, seed=9)
    ids = [[1] * (v % 300) if v is not None else None for v in length]
    path = tmp_path / "dd"
    datasets.DatasetDict({
        "train": datasets.Dataset.from_dict({"input_ids": ids, "lang": group}),
        "test": datasets.Dataset.from_dict({"input_ids": ids[:100], "lang": group[:100]}),
    }).save_to_disk(str(path), num_shards={"train": 3, "test": 1})
    r = gp.profile(path, group_by="lang", offsets_of="input_ids")
    assert r.group_split == "train"
    same(r, reference([None if i is None else len(i) for i in ids], group))


@pytest.mark.parametrize("kind", ["file", "stream"])
def test_ipc_dictionary_column_with_a_dictionary_per_batch(tmp_path, kind):
    rng = np.random.default_rng(4)
    schema = pa.schema([("length", pa.int64()), ("ds", pa.dictionary(pa.int8(), pa.string()))])
    path = tmp_path / f"x.{kind}"
    length, group = [], []
    new = pa.ipc.new_file if kind == "file" else pa.ipc.new_stream
    options = pa.ipc.IpcWriteOptions(emit_dictionary_deltas=False)
    with new(path, schema, options=options) as w:
        for b in range(6):  # each batch its own dictionary, in its own order
            words = [f"d{(b + i) % 7}" for i in range(3)] + ([None] if b % 2 else [])
            idx = rng.integers(0, len(words), 500)
            vals = [words[i] for i in idx]
            lens = rng.integers(0, 5000, 500).tolist()
            arr = pa.array(vals).dictionary_encode() if kind == "stream" else \
                pa.DictionaryArray.from_arrays(pa.array(idx, pa.int8()), pa.array(words))
            if kind == "file":  # a file holds one dictionary: the same words every batch
                words = [f"d{i}" for i in range(4)]
                idx = rng.integers(0, 4, 500)
                vals = [words[i] for i in idx]
                arr = pa.DictionaryArray.from_arrays(pa.array(idx, pa.int8()), pa.array(words))
            w.write_batch(pa.record_batch([pa.array(lens), arr], schema=schema))
            length += lens
            group += vals
    r = gp.profile(path, group_by="ds")
    same(r, reference(length, group))


def test_jsonl_integer_field_and_absent_groups(tmp_path):
    rng = np.random.default_rng(6)
    path = tmp_path / "x.jsonl"
    length, group = [], []
    with open(path, "w") as f:
        for i in range(5_000):
            n = int(rng.integers(1, 9000))
            row = {"num_tokens": n, "text": "é" * (i % 5)}
            if i % 13:
                row["shard"] = int(rng.integers(0, 6))
            f.write(json.dumps(row) + "\n")
            length.append(n)
            group.append(row.get("shard"))
    r = gp.profile(path, group_by="shard", column="num_tokens")
    same(r, reference(length, group))


def test_tables_in_memory_and_a_selected_dataset():
    datasets = pytest.importorskip("datasets")
    length, group = corpus(4_000, 6, seed=1)
    table = pa.table({"length": length, "g": group})
    same(gp.profile(table, group_by="g"), reference(length, group))
    ds = datasets.Dataset(table).shuffle(seed=0).select(range(1_000))
    picked = ds.to_dict()
    same(gp.profile(ds, group_by="g"), reference(picked["length"], picked["g"]))


def test_files_and_directories_of_parquet_and_megatron(tmp_path):
    rng = np.random.default_rng(2)
    want: dict[str, list[int]] = {}
    for sub, lo in (("web", 10), ("code", 2000)):
        (tmp_path / sub).mkdir()
        for i in range(3):
            lens = rng.integers(lo, lo + 3000, 400)
            pq.write_table(pa.table({"length": lens}), tmp_path / sub / f"{i}.parquet")
            want.setdefault(sub, []).extend(lens.tolist())
            want.setdefault(f"{sub}/{i}.parquet", []).extend(lens.tolist())
    by_dir = gp.profile(tmp_path, group_by="@dir")
    by_file = gp.profile(tmp_path, group_by="@file")
    assert list(by_dir.group_histograms) == ["code", "web"]
    assert len(by_file.group_histograms) == 6
    for r in (by_dir, by_file):
        for name, h in r.group_histograms.items():
            ref = np.bincount(want[name])
            assert np.array_equal(h.counts[:ref.size], ref) and not h.counts[ref.size:].any()
    mega = tmp_path / "mega"
    docs = {}
    for sub in ("a", "b"):
        (mega / sub).mkdir(parents=True)
        docs[sub] = random_docs(300, seed=len(sub) + ord(sub))
        build(mega / sub / "part", docs[sub])
    r = gp.profile(mega, group_by="@dir")
    for sub in ("a", "b"):
        ref = np.bincount(flat(docs[sub]))
        got = r.group_histograms[sub].counts
        assert np.array_equal(got[:ref.size], ref) and not got[ref.size:].any()


def test_grouped_cli_json_validates_and_renders(tmp_path, capsys):
    import jsonschema

    length, group = corpus(5_000, 3, seed=5)
    path = tmp_path / "mix.parquet"
    pq.write_table(pa.table({"length": length, "source": group}), path)
    rc, out, err = run_cli(["profile", path, "--group-by", "source", "-f", "json",
                            "--policy", "fixed"], capsys)
    assert rc == 0, err
    doc = json.loads(out)
    jsonschema.validate(doc, load("profile"), cls=jsonschema.Draft202012Validator)
    assert doc["group_by"] == "source" and set(doc["groups"]) == {"src-0", "src-1", "src-2",
                                                                   groups.NULL}
    assert sum(g["total_samples"] for g in doc["groups"].values()) == doc["total_samples"]
    for fmt, marker in (("table", "bucket composition"), ("markdown", "**Bucket composition**")):
        rc, out, err = run_cli(["profile", path, "--group-by", "source", "-f", fmt], capsys)
        assert rc == 0 and marker in out and "src-2" in out, err


def test_grouped_csv_has_each_groups_table_after_the_corpus(tmp_path, capsys):
    """``-f csv``: a first column ``group``, empty on the corpus's rows and the policies',
    then every group's buckets and ``all`` row, equal to the JSON's."""
    import csv
    import io

    length, group = corpus(4_000, 4, seed=9)
    path = tmp_path / "mix.parquet"
    pq.write_table(pa.table({"length": length, "source": group}), path)
    args = ["profile", path, "--group-by", "source", "--policy", "fixed"]
    rc, out, err = run_cli([*args, "-f", "json"], capsys)
    assert rc == 0, err
    doc = json.loads(out)
    rc, out, err = run_cli([*args, "-f", "csv"], capsys)
    assert rc == 0, err
    rows = list(csv.DictReader(io.StringIO(out)))
    assert list(rows[0])[0] == "group"
    named = [r for r in rows if r["group"]]
    assert rows[:len(rows) - len(named)] == [r for r in rows if not r["group"]]  # last
    assert {r["policy"] for r in rows if not r["group"]} == {"table", "fixed"}
    assert {r["group"] for r in named} == set(doc["groups"])
    for name, g in doc["groups"].items():
        mine = [r for r in named if r["group"] == name]
        assert [int(r["samples"]) for r in mine[:-1]] == [b["samples"] for b in g["buckets"]]
        assert mine[-1]["bucket"] == "all" and int(mine[-1]["samples"]) == g["total_samples"]
        assert int(mine[-1]["total_tokens"]) == g["total_tokens"]
    rc, out, err = run_cli(["profile", path, "-f", "csv"], capsys)  # no groups: no column
    assert rc == 0 and out.split(",", 1)[0] == "split", err


@pytest.mark.parametrize("args, message", [
    (["--group-by", "nope"], "no column 'nope' for --group-by"),
    (["--group-by", "score"], "has type double; --group-by takes a string"),
    (["--group-by", "length"], "that is the length source itself"),
    (["--group-by", "@nope"], "the file groupings are @file and @dir"),
    (["--group-by", "source", "--cache-dir", "{tmp}/c"], "a column is grouped in this process"),
])
def test_bad_groupings_are_one_line(tmp_path, capsys, args, message):
    path = tmp_path / "mix.parquet"
    pq.write_table(pa.table({"length": [1, 2, 3], "source": ["a", "b", "a"],
                             "score": [0.5, 1.0, 2.0]}), path)
    rc, out, err = run_cli(["profile", path, *[a.format(tmp=tmp_path) for a in args]], capsys)
    assert rc == 2 and message in err and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1


def test_too_many_groups_and_formats_without_columns(tmp_path, capsys, monkeypatch):
    path = tmp_path / "ids.parquet"
    pq.write_table(pa.table({"length": np.arange(100), "id": np.arange(100)}), path)
    monkeypatch.setattr(groups, "MAX_GROUPS", 50)
    rc, _, err = run_cli(["profile", path, "--group-by", "id"], capsys)
    assert rc == 2 and "more than 50 groups" in err
    monkeypatch.setattr(groups, "MAX_GROUPS", 2)  # files are counted before any is read
    for i in range(3):
        pq.write_table(pa.table({"length": [i]}), tmp_path / f"f{i}.parquet")
    with monkeypatch.context() as mp:
        mp.setattr(groups.driver, "run", lambda *a: pytest.fail("a file was read"))
        rc, _, err = run_cli(["profile", *(tmp_path / f"f{i}.parquet" for i in range(3)),
                              "--group-by", "@file"], capsys)
    assert rc == 2 and "more than 2 groups" in err, err
    build(tmp_path / "m", random_docs(20, seed=1))
    rc, _, err = run_cli(["profile", tmp_path / "m.idx", "--group-by", "source"], capsys)
    assert rc == 2 and "has no columns to group by" in err and "@file" in err, err
    hist = tmp_path / "h.json"
    gp.histogram(path).save(hist)
    rc, _, err = run_cli(["profile", hist, "--group-by", "id"], capsys)
    assert rc == 2 and "a histogram has no groups" in err, err


def test_report_and_plot_show_the_groups(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    length, group = corpus(5_000, 4, seed=8)
    path = tmp_path / "mix.parquet"
    pq.write_table(pa.table({"length": length, "source": group}), path)
    page, png = tmp_path / "r.html", tmp_path / "m.png"
    rc, _, err = run_cli(["report", path, "--group-by", "source", "-o", page], capsys)
    assert rc == 0, err
    html = page.read_text()
    r = gp.profile(path, group_by="source")
    assert '<table id="groups">' in html and '<table id="group-buckets">' in html
    for share in r.mixture.shares:  # every group's row, with its exact sample count
        assert f'<td data-field="name">{share.name}</td>' in html
        assert f'<td data-field="samples">{share.samples:,}</td>' in html
    assert html.count("<svg") == 4  # profile, groups, suggest, schedule
    # the batch order's mix of sources: the same numbers as schedule --group-by's
    rc, out, err = run_cli(["schedule", path, "--group-by", "source", "-f", "json"], capsys)
    assert rc == 0, err
    assert '<table id="order-groups">' in html
    runs = html.split('<table id="group-runs">')[1].split("</table>")[0]
    for o in json.loads(out)["orders"]:
        assert (f'<td data-field="name">{o["name"]}</td><td data-field="longest_run">'
                f'{o["groups"]["longest_run"]:,}</td>') in runs
    # each proposal's one-source runs: suggest --group-by's numbers
    rc, out, err = run_cli(["suggest", path, "-k", "6", "--group-by", "source", "-f", "json"],
                           capsys)
    assert rc == 0, err
    found = html.split('<table id="suggestions">')[1].split("</table>")[0]
    for q in json.loads(out)["proposals"]:
        assert f'<td data-field="group_run">{q["groups"]["longest_run"]:,}</td>' in found
    rc, _, err = run_cli(["profile", path, "--group-by", "source", "--plot", png], capsys)
    assert rc == 0 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", err


def test_a_class_label_column_is_grouped_by_its_names(tmp_path):
    datasets = pytest.importorskip("datasets")
    rng = np.random.default_rng(12)
    names = ["web", "code", "books", "math"]
    label = rng.integers(-1, 4, 3_000)  # -1: datasets' missing label
    length = rng.integers(1, 5_000, 3_000)
    features = datasets.Features({"length": datasets.Value("int32"),
                                  "src": datasets.ClassLabel(names=names)})
    ds = datasets.Dataset.from_dict({"length": length, "src": label}, features=features)
    path = tmp_path / "hf"
    ds.save_to_disk(str(path), num_shards=2)
    ds.to_parquet(str(tmp_path / "x.parquet"))
    want = reference(length.tolist(), [None if v < 0 else names[v] for v in label.tolist()])
    for source in (path, tmp_path / "x.parquet"):
        same(gp.profile(source, group_by="src"), want)


@pytest.mark.parametrize("kind", ["file", "stream"])
def test_damaged_ipc_is_one_line(tmp_path, capsys, kind):
    """A truncated stream, and string offsets pointing past their buffer (which pyarrow
    would read out of bounds unless the batch is checked), are one line, exit 2."""
    t = pa.table({"length": list(range(1000)), "g": [f"s{i % 7}" for i in range(1000)]})
    path = tmp_path / f"t.{kind}"
    new = pa.ipc.new_file if kind == "file" else pa.ipc.new_stream
    with new(path, t.schema) as w:
        w.write_table(t, max_chunksize=100)
    data = bytearray(path.read_bytes())
    if kind == "stream":
        data = data[:len(data) // 2]
    else:  # every int32 offset 40 of a string column: past its 2-byte strings' buffer
        body = bytes(np.arange(0, 101, dtype=np.int32) * 2)
        at = data.find(body)
        assert at > 0
        data[at + 8:at + 12] = np.int32(1 << 20).tobytes()
    path.write_bytes(bytes(data))
    rc, out, err = run_cli(["profile", path, "--group-by", "g"], capsys)
    assert rc == 2 and str(path) in err and len(err.strip().splitlines()) == 1, err


def test_saved_groups_reanalysed_merged_and_checked(tmp_path, capsys):
    """--save-hist keeps the groups; the saved file re-profiles to the same groups without
    a scan; --part slices of an @dir scan merge group by group; a file whose groups do not
    add up to its histogram, or whose group is forged, is one line, exit 2."""
    rng = np.random.default_rng(13)
    for sub, lo in (("web", 10), ("code", 3000), ("books", 500)):
        (tmp_path / "src" / sub).mkdir(parents=True)
        for i in range(3):
            pq.write_table(pa.table({"length": rng.integers(lo, lo + 4000, 300)}),
                           tmp_path / "src" / sub / f"{i}.parquet")

    def doc(*args):
        rc, out, err = run_cli(["profile", *args, "-f", "json"], capsys)
        assert rc == 0, err
        d = json.loads(out)
        return {k: d[k] for k in ("groups", "group_buckets", "total_samples", "buckets")}

    whole = tmp_path / "whole.json"
    want = doc(tmp_path / "src", "--group-by", "@dir", "--save-hist", whole)
    assert doc(whole) == want and doc(whole, "--group-by", "@dir") == want
    parts = [tmp_path / f"part-{i}.json" for i in range(2)]
    for i, part in enumerate(parts):
        doc(tmp_path / "src", "--group-by", "@dir", "--part", f"{i}/2", "--save-hist", part)
    merged = tmp_path / "merged.json"
    rc, _, err = run_cli(["merge", *parts, "-o", merged], capsys)
    assert rc == 0, err
    assert doc(merged) == want
    rc, _, err = run_cli(["profile", whole, "--group-by", "source"], capsys)
    assert rc == 2 and "its groups are by @dir, not source" in err, err
    d = json.loads(whole.read_text())
    for forge in ({"groups": {k: v for k, v in d["groups"].items() if k != "web"}},
                  {"groups": {**d["groups"], "web": {**d["groups"]["web"], "cap": -1}}},
                  {"group_by": 7}):
        bad = tmp_path / "bad.json"
        bad.write_text(json.dumps({**d, **forge}))
        rc, _, err = run_cli(["profile", bad], capsys)
        assert rc == 2 and "not a gpu-profiler histogram" in err, err
        assert len(err.strip().splitlines()) == 1


def test_a_saved_grouped_histogram_validates(tmp_path, capsys):
    import jsonschema

    length, group = corpus(2_000, 5, seed=14)
    path = tmp_path / "mix.parquet"
    pq.write_table(pa.table({"length": length, "source": group}), path)
    saved = tmp_path / "h.json"
    rc, _, err = run_cli(["profile", path, "--group-by", "source", "--save-hist", saved],
                         capsys)
    assert rc == 0, err
    d = json.loads(saved.read_text())
    jsonschema.validate(d, load("histogram"), cls=jsonschema.Draft202012Validator)
    assert set(d["groups"]) == set(reference(length, group)) and d["group_by"] == "source"


@pytest.mark.slow  # (every view rendered, ~3.4 s: the default suite stays under 5 minutes)
def test_group_names_are_text_in_every_view(tmp_path, capsys):
    """Group names are data: rich markup and matplotlib mathtext in them are printed and
    drawn as written, in every command's text, warnings, pictures and report."""
    pytest.importorskip("matplotlib")
    names = ["[/x]", "[bold]y", r"$\frac{$", "a$b_c^", "p|q"]
    rng = np.random.default_rng(4)
    pick = rng.integers(0, 5, 4_000)
    lengths = np.where(pick == 0, rng.integers(3000, 8000, 4_000), rng.integers(1, 600, 4_000))
    for side, keep in (("a", names), ("b", names[1:])):
        rows = np.isin(np.array(names, object)[pick], keep)
        pq.write_table(pa.table({"length": lengths[rows],
                                 "source": np.array(names, object)[pick][rows]}),
                       tmp_path / f"{side}.parquet")
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    for args in (["profile", a], ["schedule", a], ["compare", a, b],
                 ["plan", a, "-o", tmp_path / "p.npz"]):
        rc, out, err = run_cli([*args, "--group-by", "source", "--width", "200"], capsys)
        assert rc == 0, err
        for name in names:  # every name shown as written (the table and the warnings)
            assert name in out, (args[0], name)
    rc, out, err = run_cli(["compare", a, b, "--group-by", "source"], capsys)
    assert rc == 0 and "warning: source only in A: '[/x]'" in out, err
    for cmd in (["compare", a, b], ["schedule", a],  # a Markdown cell escapes its bars
                ["plan", a, "-o", tmp_path / "q.npz"]):
        rc, out, err = run_cli([*cmd, "--group-by", "source", "-f", "markdown"], capsys)
        assert rc == 0 and "a$b_c^ |" in out and "p\\|q |" in out, err
        assert "|q |" not in out.replace("p\\|q |", ""), out  # no bar left unescaped
    png, page = tmp_path / "m.png", tmp_path / "r.html"
    rc, _, err = run_cli(["profile", a, "--group-by", "source", "--plot", png], capsys)
    assert rc == 0 and png.read_bytes()[:4] == b"\x89PNG", err
    rc, _, err = run_cli(["report", a, "--group-by", "source", "-o", page], capsys)
    assert rc == 0 and "a$b_c^" in page.read_text(), err


def test_an_empty_grouped_corpus_reports_without_warnings(tmp_path, capsys):
    """No group to name: the page is written, and matplotlib has nothing to complain of."""
    import warnings

    pytest.importorskip("matplotlib")
    path = tmp_path / "empty.parquet"
    pq.write_table(pa.table({"length": pa.array([], pa.int64()),
                             "source": pa.array([], pa.string())}), path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rc, _, err = run_cli(["report", path, "--group-by", "source", "-o",
                              tmp_path / "r.html"], capsys)
    assert rc == 0 and err == "", err
    assert [str(w.message) for w in caught] == []
