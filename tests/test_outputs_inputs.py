"""No output replaces an input, and a PATH that exists is itself.

Every writer of every command (``-o``, ``--save-hist``, ``--emit-order``, ``--plot``,
``merge -o``, ``demo --report``) refuses, before any scan, a target that is one of the
command's inputs (the file itself, a symlink or a hard link to it, a file under an input
directory, a file an input glob matches, a Megatron-LM prefix's .idx or .bin) or another
output of the same command: one line, exit 2, every file left byte for byte as it was.
A PATH that exists is read literally, its glob characters too; one that names nothing is a
glob; stderr says which was used when both could apply."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
from conftest import run_cli as run
from test_megatron import build

#: (command, option, the command's other arguments): every writer there is.
WRITERS = [
    ("profile", "-o", []),
    ("profile", "--save-hist", []),
    ("profile", "--plot", []),
    ("suggest", "-o", ["-k", "2"]),
    ("suggest", "--plot", ["-k", "2"]),
    ("schedule", "-o", []),
    ("schedule", "--emit-order", []),
    ("schedule", "--plot", []),
    ("plan", "-o", []),
    ("plan", "--emit-order", ["-o", "{tmp}/plan.npz"]),
    ("compare", "-o", []),
    ("compare", "--plot", []),
    ("report", "-o", []),
]


def snapshot(root: Path) -> dict[str, str]:
    """Every file under ``root`` (links as links) and its SHA-256."""
    out = {}
    for top, dirs, names in os.walk(root):
        for name in dirs + names:
            p = Path(top, name)
            if p.is_symlink():
                out[str(p)] = "-> " + os.readlink(p)
            elif p.is_file():
                out[str(p)] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def refused(args, capsys, tmp_path, says):
    """Run ``args``: one line saying ``says``, exit 2, nothing under ``tmp_path`` written."""
    before = snapshot(tmp_path)
    rc, out, err = run(args, capsys)
    assert rc == 2 and out == "", err
    assert len(err.strip().splitlines()) == 1 and says in err, err
    assert snapshot(tmp_path) == before


@pytest.fixture
def corpus(tmp_path):
    """``corpus/a.jsonl`` and ``corpus/b.jsonl``, 30 samples each."""
    d = tmp_path / "corpus"
    d.mkdir()
    for name, base in (("a", 10), ("b", 500)):
        (d / f"{name}.jsonl").write_text(
            "".join(json.dumps({"length": base + i}) + "\n" for i in range(30)))
    return d


def _target(kind: str, tmp: Path, corpus: Path) -> tuple[str, str]:
    """(PATH, output target) of one way an output can be an input."""
    a = corpus / "a.jsonl"
    if kind == "same":
        return str(a), str(a)
    if kind == "symlink":
        (tmp / "link.png").symlink_to(a)
        return str(a), str(tmp / "link.png")
    if kind == "hardlink":
        os.link(a, tmp / "hard.png")
        return str(a), str(tmp / "hard.png")
    if kind == "in-dir":
        return str(corpus), str(corpus / "b.jsonl")
    if kind == "glob-match":
        return f"{corpus}/*.jsonl", str(corpus / "b.jsonl")
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["same", "symlink", "hardlink", "in-dir", "glob-match"])
@pytest.mark.parametrize(("command", "option", "extra"), WRITERS)
def test_no_writer_replaces_an_input(tmp_path, corpus, capsys, command, option, extra, kind):
    path, target = _target(kind, tmp_path, corpus)
    extra = [e.format(tmp=tmp_path) for e in extra]
    refused([command, path, "-q", *extra, option, target], capsys, tmp_path,
            "would replace the input")


def test_compare_guards_both_inputs_and_a_saved_histogram(tmp_path, corpus, capsys):
    a, b = corpus / "a.jsonl", corpus / "b.jsonl"
    refused(["compare", a, b, "-q", "-o", b], capsys, tmp_path, f"would replace the input {b}")
    hist = tmp_path / "h.json"
    assert run(["profile", a, "-q", "--save-hist", hist], capsys)[0] == 0
    for command in (["suggest", hist, "-k", "2"], ["schedule", hist], ["compare", a, hist]):
        refused([*command, "-q", "-o", hist], capsys, tmp_path, "would replace the input")


def test_merge_never_writes_over_a_part(tmp_path, corpus, capsys):
    parts = [tmp_path / f"p{i}.json" for i in range(2)]
    for i, p in enumerate(parts):
        rc, _, err = run(["profile", corpus, "-q", "--part", f"{i}/2", "--save-hist", p], capsys)
        assert rc == 0, err
    (tmp_path / "link.json").symlink_to(parts[0])
    os.link(parts[1], tmp_path / "hard.json")
    for target in (parts[0], parts[1], tmp_path / "link.json", tmp_path / "hard.json"):
        refused(["merge", *parts, "-o", target], capsys, tmp_path, "would replace the input")
    rc, _, err = run(["merge", *parts, "-o", tmp_path / "all.json"], capsys)
    assert rc == 0, err


def test_a_megatron_prefix_guards_its_idx_and_its_bin(tmp_path, capsys):
    prefix = build(tmp_path / "m_text_document", [[3, 5], [7]])
    for target in (f"{prefix}.idx", f"{prefix}.bin"):
        refused(["profile", prefix, "-q", "-o", target], capsys, tmp_path,
                "would replace the input")
        refused(["profile", f"{prefix}.idx", "-q", "--save-hist", target], capsys, tmp_path,
                "would replace the input")


def test_demo_report_never_replaces_the_demo_corpus(tmp_path, capsys):
    demo = tmp_path / "demo"
    rc, _, err = run(["demo", "--dir", demo, "-f", "json"], capsys)
    assert rc == 0, err
    refused(["demo", "--dir", demo, "--report", demo / "state.json"], capsys, tmp_path,
            "would replace the input")


@pytest.mark.parametrize("args", [
    ["profile", "{a}", "-o", "{x}", "--save-hist", "{x}"],
    ["profile", "{a}", "-o", "{x}", "--save-hist", "{dot_x}"],
    ["profile", "{a}", "-o", "{x}", "--save-hist", "{via_link}"],
    ["profile", "{a}", "--save-hist", "{old}", "-o", "{old_link}"],
    ["profile", "{a}", "-o", "{png}", "--plot", "{png}"],
    ["plan", "{a}", "-o", "{npz}", "--emit-order", "{npz}"],
    ["schedule", "{a}", "-o", "{x}", "--emit-order", "{dot_x}"],
    ["schedule", "{a}", "--order", "random,stride", "--emit-order", "random={x}",
     "--emit-order", "stride={via_link}"],
    ["suggest", "{a}", "-k", "2", "-o", "{png}", "--plot", "{png}"],
    ["compare", "{a}", "-o", "{png}", "--plot", "{png}"],
])
def test_two_outputs_on_one_file_are_refused(tmp_path, corpus, capsys, monkeypatch, args):
    out = tmp_path / "out"
    out.mkdir()
    (tmp_path / "alias").symlink_to(out, target_is_directory=True)
    (out / "old.json").write_text("{}")
    (out / "old_link.json").symlink_to(out / "old.json")
    monkeypatch.chdir(out)
    names = {"a": corpus / "a.jsonl", "x": "x.txt", "dot_x": "./x.txt",
             "via_link": tmp_path / "alias" / "x.txt", "old": out / "old.json",
             "old_link": "old_link.json", "png": "o.png", "npz": "p.npz"}
    refused([a.format(**names) for a in args] + ["-q"], capsys, tmp_path, "name the same file")


def test_stdout_twice_and_distinct_outputs_are_fine(tmp_path, corpus, capsys):
    rc, out, err = run(["profile", corpus, "-q", "-f", "json", "-o", "-", "--save-hist", "-"],
                       capsys)
    assert rc == 0 and out.count('"schema"') == 2, err
    rc, _, err = run(["profile", corpus, "-q", "-o", tmp_path / "r.txt", "--save-hist",
                      tmp_path / "h.json"], capsys)
    assert rc == 0 and (tmp_path / "r.txt").is_file() and (tmp_path / "h.json").is_file(), err
    # a new file in an input directory replaces nothing; an old report there is refused
    rc, _, err = run(["profile", corpus, "-q", "-o", corpus / "report.txt"], capsys)
    assert rc == 0, err
    refused(["profile", corpus, "-q", "-o", corpus / "report.txt"], capsys, tmp_path,
            "would replace the input")


def total(args, capsys) -> tuple[int, str]:
    rc, out, err = run([*args, "-q", "-f", "json"], capsys)
    assert rc == 0, err
    return json.loads(out)["total_samples"], err


def lines(path: Path, n: int) -> None:
    path.write_text("".join(json.dumps({"length": 5 + i}) + "\n" for i in range(n)))


def test_an_existing_name_is_itself_never_a_glob(tmp_path, capsys):
    lines(tmp_path / "x[1].jsonl", 2)
    lines(tmp_path / "x1.jsonl", 7)
    n, err = total(["profile", tmp_path / "x[1].jsonl"], capsys)
    assert n == 2  # the glob would read x1.jsonl's 7
    assert err.count("\n") == 1 and "read as itself, not as a glob" in err
    assert "x1.jsonl" in err
    (tmp_path / "x1.jsonl").unlink()
    n, err = total(["profile", tmp_path / "x[1].jsonl"], capsys)
    assert n == 2 and err == ""  # both readings are the same file: nothing to say


def test_a_name_that_exists_nowhere_is_a_glob(tmp_path, capsys):
    lines(tmp_path / "x1.jsonl", 7)
    lines(tmp_path / "x2.jsonl", 3)
    assert total(["profile", tmp_path / "x[1].jsonl"], capsys) == (7, "")
    assert total(["profile", tmp_path / "x*.jsonl"], capsys) == (10, "")
    lines(tmp_path / "x*.jsonl", 1)  # now a file has that name: it is read alone
    n, err = total(["profile", tmp_path / "x*.jsonl"], capsys)
    assert n == 1 and "2 other files" in err


def test_a_directory_and_a_megatron_prefix_with_brackets_are_themselves(tmp_path, capsys):
    d = tmp_path / "d[12]"
    d.mkdir()
    lines(d / "a.jsonl", 4)
    lines(tmp_path / "d1", 9)
    n, err = total(["profile", d], capsys)
    assert n == 4 and "exists and is read as itself" in err and "d1" in err
    build(tmp_path / "m[1]", [[3, 5], [7]])
    build(tmp_path / "m1", [[2]])
    n, err = total(["profile", tmp_path / "m[1]"], capsys)
    assert n == 3 and "m1.idx" in err  # the prefix, literally; the glob would be m1's
    os.remove(tmp_path / "m[1].idx")
    assert total(["profile", tmp_path / "m[1]"], capsys) == (1, "")  # now a glob: m1


def test_the_files_an_input_names(tmp_path):
    """What the guard compares outputs with, nothing read: an existing name itself, a
    glob's files, a prefix's .idx and .bin."""
    from gpu_profiler.readers import named_paths

    lines(tmp_path / "x[1].jsonl", 1)
    lines(tmp_path / "x1.jsonl", 1)
    build(tmp_path / "m", [[3]])
    t = str(tmp_path)
    assert named_paths(f"{t}/x[1].jsonl") == [f"{t}/x[1].jsonl"]
    assert named_paths(f"{t}/x[2].jsonl") == []
    assert sorted(named_paths(f"{t}/x*.jsonl")) == [f"{t}/x1.jsonl", f"{t}/x[1].jsonl"]
    assert named_paths(f"{t}/m") == [f"{t}/m.idx", f"{t}/m.bin"]
    assert named_paths(f"{t}/m.bin") == [f"{t}/m.bin", f"{t}/m.idx"]
