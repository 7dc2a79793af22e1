"""What the commands print reads the same everywhere (issue 27, item 8): piped tables end
their lines without padding, ``plan`` prints the plain tables every other command prints
and says its longest run counts steps, Markdown averages carry thousands separators, and
the HTML report labels a mean batch size as a mean and an expected padding as expected."""

from __future__ import annotations

import re

import pytest
from conftest import run_cli

from gpu_profiler.backends import get_backend
from gpu_profiler.chunk import Chunk
from gpu_profiler.demo import demo_lengths

#: The box-drawing characters of rich's boxed tables (every other command draws none but
#: the rule under the header).
BOX = re.compile("[│┃┏┓┗┛┌┐└┘├┤┡┩╇┼┬┴━]")


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """The demo corpus' histogram, saved: long averages (thousands of tokens)."""
    path = tmp_path_factory.mktemp("render") / "demo.json"
    x = demo_lengths()
    get_backend("numpy").histogram_chunk(Chunk(x), int(x.max())).save(path)
    return path


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """The demo lengths as a JSON Lines file (plan reads per-sample lengths)."""
    path = tmp_path_factory.mktemp("render") / "demo.jsonl"
    path.write_text("".join(f'{{"length": {n}}}\n' for n in demo_lengths(4000)))
    return path


@pytest.mark.parametrize("cmd", [
    ["profile", "--policy", "all"], ["suggest", "--buckets", "4"], ["schedule"],
    ["compare", "--bounds-b", "0,1000,2000,4000,8193"]])
def test_piped_tables_have_no_trailing_spaces(saved, tmp_path, capsys, cmd):
    rc, out, err = run_cli([cmd[0], saved, "-q", *cmd[1:]], capsys)
    assert rc == 0, err
    assert out.count("\n") > 10
    assert [line for line in out.splitlines() if line != line.rstrip()] == []
    target = tmp_path / "out.txt"  # the same table written with -o
    rc, _, err = run_cli([cmd[0], saved, "-q", *cmd[1:], "-o", target], capsys)
    assert rc == 0, err
    assert [line for line in target.read_text().splitlines() if line != line.rstrip()] == []
    for width in ("80", "200"):  # a table stacked or not, at a given width
        rc, out, _ = run_cli([cmd[0], saved, "-q", *cmd[1:], "--width", width], capsys)
        assert rc == 0 and [w for w in out.splitlines() if w != w.rstrip()] == []


def test_plan_prints_plain_tables_like_the_other_commands(corpus, tmp_path, capsys):
    rc, out, err = run_cli(["plan", corpus, "-q", "-o", tmp_path / "p.npz",
                            "--world-size", "2"], capsys)
    assert rc == 0, err
    assert not BOX.search(out), out
    rc, prof, _ = run_cli(["profile", corpus, "-q"], capsys)
    assert rc == 0 and not BOX.search(prof)  # the style plan now shares
    assert [line for line in out.splitlines() if line != line.rstrip()] == []
    assert "epoch plan" in out and "batches per bucket" in out


def test_plan_says_its_longest_run_counts_steps(corpus, tmp_path, capsys):
    import json

    rc, js, err = run_cli(["plan", corpus, "-q", "-o", tmp_path / "p.npz", "-f", "json",
                           "--world-size", "2"], capsys)
    assert rc == 0, err
    d = json.loads(js)
    rc, out, _ = run_cli(["plan", corpus, "-q", "-o", tmp_path / "p.npz",
                          "--world-size", "2"], capsys)
    assert rc == 0
    line = next(w for w in out.splitlines() if "longest same-bucket run" in w)
    assert re.search(rf"longest same-bucket run \(steps\)\s+{d['longest_run']} steps "
                     rf"\(least possible: {d['min_run']}\)", line), line
    rc, md, _ = run_cli(["plan", corpus, "-q", "-o", tmp_path / "p.npz", "-f", "markdown"],
                        capsys)
    assert rc == 0 and "| longest same-bucket run (steps) |" in md


def test_markdown_averages_have_thousands_separators(saved, capsys):
    import json

    rc, md, err = run_cli(["profile", saved, "-q", "-f", "markdown"], capsys)
    assert rc == 0, err
    rc, js, _ = run_cli(["profile", saved, "-q", "-f", "json"], capsys)
    d = json.loads(js)
    rows = [line for line in md.splitlines() if line.startswith("| [")]
    assert len(rows) == len(d["buckets"])
    for row, b in zip(rows, d["buckets"], strict=True):
        assert f"| {b['avg_len']:,.1f} |" in row, row
    assert any(b["avg_len"] >= 1000 for b in d["buckets"])  # a separator is needed


def test_markdown_policy_batch_sizes_read_as_the_table_does(saved, capsys):
    """A sorted policy's batch size varies within a bucket: Markdown shows its range, as
    the terminal table does, never a float in ``g`` notation."""
    rc, md, err = run_cli(["profile", saved, "-q", "--policy", "sorted", "-f", "markdown"],
                          capsys)
    assert rc == 0, err
    sizes = [row.split("|")[2].strip() for row in md.splitlines()
             if row.startswith("| [") and row.count("|") == 8]
    assert sizes and all(re.fullmatch(r"\d+(-\d+)?", s) for s in sizes), sizes
    assert any("-" in s for s in sizes)


# ---------------------------------------------------------------- HTML
def _policies_html(saved):
    from gpu_profiler import profile
    from gpu_profiler.render.report import policies

    result = profile(str(saved), policies="all")
    return policies(result.policies, result.table.params.cost)


def _header(html: str, ident: str) -> list[str]:
    table = html[html.index(f'id="{ident}"'):]
    table = table[:table.index("</table>")]
    return re.findall(r"<th[^>]*>([^<]*)</th>", table)


def _cells(html: str, ident: str, field: str) -> list[str]:
    table = html[html.index(f'id="{ident}"'):]
    table = table[:table.index("</table>")]
    return re.findall(rf'<td data-field="{field}">([^<]*)</td>', table)


def test_html_labels_a_sorted_batch_size_as_a_mean(saved):
    html = _policies_html(saved)
    sorted_header = _header(html, "policy-sorted")
    assert "mean batch size" in sorted_header
    assert "min batch size" in sorted_header and "max batch size" in sorted_header
    assert "batch size" in _header(html, "policy-fixed")  # one size per bucket: no mean
    assert "mean batch size" not in _header(html, "policy-fixed")


def test_html_says_which_padded_tokens_are_expectations(saved):
    html = _policies_html(saved)
    names = _cells(html, "policies", "name")
    padded = dict(zip(names, _cells(html, "policies", "padded_tokens"), strict=True))
    kind = dict(zip(names, _cells(html, "policies", "expected"), strict=True))
    assert kind["fixed"] == "expected" and kind["sorted"] == "exact"
    for name, cell in padded.items():  # an exact count is an integer
        assert ("." in cell) == (kind[name] == "expected"), (name, cell)
