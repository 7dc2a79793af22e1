"""``gpu-profiler report`` in a real headless Chromium, driven over the DevTools protocol:
the page requests nothing but itself and its inline images (and a page with one external
image shows that such a request would be seen), its tables hold the numbers of
``profile -f json``, its plots render (a screenshot with their colours in it), and every
string from the data is escaped (a path and a column name full of markup)."""

from __future__ import annotations

import base64
import io
import json
import os
import re
import select
import shlex
import subprocess
import warnings
from html.parser import HTMLParser

import numpy as np
import pytest
from conftest import run_cli, sft_lengths
from PIL import Image

HOSTILE = 'c <img src=x onerror=alert(1)> & "q"'
COLUMN = "len <i>"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """A real `datasets` DatasetDict (train, test) whose path and length column are
    markup."""
    import datasets

    path = tmp_path_factory.mktemp("report") / HOSTILE
    datasets.DatasetDict({
        name: datasets.Dataset.from_dict({COLUMN: sft_lengths(n, seed=seed).tolist()})
        for name, n, seed in (("train", 4000, 11), ("test", 1000, 12))}).save_to_disk(str(path))
    return path


@pytest.fixture(scope="module")
def made(corpus, tmp_path_factory):
    """The report (via the CLI), and ``profile --policy all -f json`` of the same corpus."""
    out = tmp_path_factory.mktemp("html") / "report.html"
    code, _, err = run_cli_module(["report", corpus, "-c", COLUMN, "-o", out, "-q"])
    assert code == 0, err
    code, js, err = run_cli_module(["profile", corpus, "-c", COLUMN, "--policy", "all",
                                    "-f", "json", "-q"])
    assert code == 0, err
    return out, json.loads(js)


def run_cli_module(args):
    """`run_cli` without pytest's per-test capsys (module-scoped fixtures)."""
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), \
            pytest.raises(SystemExit) as exc:
        from gpu_profiler.cli import main

        main([str(a) for a in args])
    return exc.value.code, out.getvalue(), err.getvalue()


class Page:
    """One page loaded in headless Chromium driven over ``--remote-debugging-pipe`` (the
    DevTools protocol): the URL of every request it made (``Network.requestWillBeSent``:
    the page itself, ``data:`` URIs, and anything it would fetch), its DOM once loaded, and
    a screenshot of its first ``<figure>`` (of the whole page when it has none)."""

    def __init__(self, chromium: str, page, tmp_path):
        ours, theirs = os.pipe(), os.pipe()  # commands to fd 3, replies from fd 4

        def pipes():
            os.dup2(ours[0], 3)
            os.dup2(theirs[1], 4)

        proc = subprocess.Popen(
            [chromium, "--headless", "--disable-gpu", "--remote-debugging-pipe",
             "--window-size=1280,1000", "--hide-scrollbars", "--no-first-run",
             f"--user-data-dir={tmp_path / 'chromium'}",
             *(["--no-sandbox"] if os.geteuid() == 0 else []), "about:blank"],
            pass_fds=(3, 4), preexec_fn=pipes, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        os.close(ours[0])
        os.close(theirs[1])
        self._out, self._in, self._buf, self._id = ours[1], theirs[0], b"", 0
        self.events: list[dict] = []
        try:
            target = self._call("Target.createTarget", url="about:blank")["targetId"]
            self._session = self._call("Target.attachToTarget", targetId=target,
                                       flatten=True)["sessionId"]
            self._call("Network.enable", session=True)
            self._call("Page.enable", session=True)
            self._call("Page.navigate", url=page.as_uri(), session=True)
            while not any(e.get("method") == "Page.loadEventFired" for e in self.events):
                self.events.append(self._recv())
            self.requests = [e["params"]["request"]["url"] for e in self.events
                             if e.get("method") == "Network.requestWillBeSent"]
            self.dom = self._call("Runtime.evaluate", session=True, returnByValue=True,
                                  expression="document.documentElement.outerHTML"
                                  )["result"]["value"]
            box = json.loads(self._call(
                "Runtime.evaluate", session=True, returnByValue=True,
                expression="JSON.stringify(document.querySelector('figure')"
                           "?.getBoundingClientRect() ?? null)")["result"]["value"])
            clip = box and {k: box[k] for k in ("x", "y", "width", "height")}
            self.png = base64.b64decode(self._call(  # the first figure, as drawn
                "Page.captureScreenshot", session=True, format="png",
                captureBeyondViewport=True, **({"clip": {**clip, "scale": 1}} if clip
                                               else {}))["data"])
            self._call("Browser.close")
        finally:
            os.close(self._out)
            os.close(self._in)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def _recv(self) -> dict:
        while b"\0" not in self._buf:
            if not select.select([self._in], [], [], 120)[0]:
                raise TimeoutError("chromium sent nothing for 120 s")
            chunk = os.read(self._in, 1 << 20)
            if not chunk:
                raise EOFError("chromium closed the DevTools pipe")
            self._buf += chunk
        message, self._buf = self._buf.split(b"\0", 1)
        return json.loads(message)

    def _call(self, method: str, session: bool = False, **params) -> dict:
        self._id += 1
        message = {"id": self._id, "method": method, "params": params}
        if session:
            message["sessionId"] = self._session
        os.write(self._out, json.dumps(message).encode() + b"\0")
        while (reply := self._recv()).get("id") != self._id:
            self.events.append(reply)
        assert "error" not in reply, reply
        return reply["result"]


@pytest.fixture(scope="module")
def loaded(made, chromium, tmp_path_factory):
    """The report as Chromium loaded it, parsed."""
    page = Page(chromium, made[0], tmp_path_factory.mktemp("chromium"))
    tables = Tables()
    tables.feed(page.dom)
    return page, tables


class Tables(HTMLParser):
    """Every table of a DOM: ``{id: [{data-field: cell text}, ...]}``, and the text of
    the ``h1``, ``pre`` and warning blocks."""

    def __init__(self):
        super().__init__()
        self.tables: dict[str, list[dict[str, str]]] = {}
        self.text: dict[str, str] = {}
        self.tags: list[tuple[str, dict]] = []
        self._table = self._field = self._block = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append((tag, a))
        if tag == "table":
            self._table = a.get("id")
            self.tables[self._table] = []
        elif tag == "tr" and self._table:
            self.tables[self._table].append({})
        elif tag == "td" and self._table:
            self._field = a["data-field"]
            self.tables[self._table][-1][self._field] = ""
        elif tag in ("h1", "pre"):
            self._block = tag
            self.text[tag] = ""

    def handle_endtag(self, tag):
        if tag == "td":
            self._field = None
        elif tag == "table":
            self._table = None
        elif tag in ("h1", "pre"):
            self._block = None

    def handle_data(self, data):
        if self._field:
            self.tables[self._table][-1][self._field] += data
        if self._block:
            self.text[self._block] += data


def number(cell: str) -> float:
    return float(cell.replace(",", ""))


def rows(t: Tables, ident: str) -> list[dict[str, str]]:
    return [r for r in t.tables[ident] if r]  # the header row has no cells


def test_the_page_fetches_nothing_and_its_links_are_fragments(made, loaded, chromium,
                                                              tmp_path):
    page, _ = made
    html = page.read_text()
    refs = re.findall(r'(?:href|src)\s*=\s*"([^"]*)"|url\(([^)]*)\)', html)
    targets = [a or b for a, b in refs]
    assert targets and all(t.startswith(("#", "data:")) for t in targets), \
        sorted({t for t in targets if not t.startswith(("#", "data:"))})
    seen, _ = loaded
    assert seen.requests[0] == page.as_uri()
    assert all(u.startswith("data:image/png;base64,") for u in seen.requests[1:])
    control = tmp_path / "control.html"  # the same logging, one external image: seen
    control.write_text('<html><body><img src="http://gpu-profiler.invalid/x.png">'
                       "</body></html>")
    assert "http://gpu-profiler.invalid/x.png" in Page(chromium, control, tmp_path).requests


def test_tables_hold_the_numbers_of_profile_json(made, loaded):
    _, d = made
    _, t = loaded
    for split, table in (("all", d), *d["splits"].items()):
        buckets = rows(t, f"buckets-{split}")
        assert len(buckets) == len(table["buckets"])
        for got, want in zip(buckets, table["buckets"], strict=True):
            for key, cell in got.items():
                assert number(cell) == pytest.approx(want[key], abs=0.005), (key, cell)
    assert sorted(d["splits"]) == ["test", "train"]
    summary = {r["field"]: r["value"] for r in rows(t, "summary-all")}
    assert summary and all(number(v) == pytest.approx(d[k], abs=0.005)
                           for k, v in summary.items())
    (lengths,) = rows(t, "lengths-all")
    want = {"min_len": d["min_len"], "mean_len": d["mean_len"], **d["percentiles"],
            "max_len": d["max_len"]}
    assert {k: number(v) for k, v in lengths.items()} == pytest.approx(want, abs=0.005)
    assert d["policies"][0]["split"] == "train"
    pols = rows(t, "policies")
    assert [p["name"] for p in pols] == [p["name"] for p in d["policies"]]
    for got, want in zip(pols, d["policies"], strict=True):
        assert number(got["padding_pct"]) == pytest.approx(want["padding_pct"], abs=0.005)
        assert number(got["total_batches"]) == pytest.approx(want["total_batches"], abs=0.005)
    assert {r["name"] for r in rows(t, "orders")} == {"random", "stride"}
    current = rows(t, "suggestions")[0]  # scored on the train split, as the policies
    fixed = next(p for p in d["policies"] if p["name"] == "fixed")
    assert current["method"] == "current"
    assert number(current["padding_pct"]) == pytest.approx(fixed["padding_pct"], abs=0.005)


def test_every_data_string_is_escaped(made, loaded, corpus):
    _, d = made
    _, t = loaded
    assert t.text["h1"] == f"gpu-profiler report: {corpus}"
    assert f"--column '{COLUMN}'" in t.text["pre"]
    assert not any(tag in ("img", "i") for tag, _ in t.tags)  # the markup stayed text
    params = {r["name"]: r["value"] for r in rows(t, "parameters")}
    assert params["length source"] == d["length_source"] == f"column '{COLUMN}'"


def test_the_command_shown_makes_the_same_report(made, loaded, tmp_path):
    page, _ = made
    _, t = loaded
    words = shlex.split(t.text["pre"])
    assert words[:2] == ["gpu-profiler", "report"]
    again = tmp_path / "again.html"
    words[words.index("--output") + 1] = str(again)
    code, _, err = run_cli_module(words[1:])
    assert code == 0, err
    assert again.read_text() == page.read_text().replace(shlex.quote(str(page)),
                                                         shlex.quote(str(again)))


def test_the_plots_render(loaded):
    page, _ = loaded
    img = np.asarray(Image.open(io.BytesIO(page.png)).convert("RGB")).astype(np.int64)
    colours = set(np.unique(img[..., 0] << 16 | img[..., 1] << 8 | img[..., 2]).tolist())
    assert img.shape[0] > 500 and img.shape[1] > 1000  # the profile figure, at full size
    assert len(colours) > 50  # not blank
    for hexa in ("E69F00", "56B4E9", "009E73"):  # the share bars: samples, tokens, batches
        assert int(hexa, 16) in colours, hexa


def test_an_empty_corpus_reports_why_nothing_is_proposed(tmp_path, capsys):
    from gpu_profiler.histogram import LengthHistogram

    saved = tmp_path / "empty.json"
    LengthHistogram.empty(100).save(saved)
    out = tmp_path / "empty.html"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no plotting warning on empty axes either
        code, _, err = run_cli(["report", saved, "-o", out], capsys)
    assert code == 0 and err == ""
    html = out.read_text()
    assert "No bounds to propose: no samples inside the bounds [0, 8193) to split" in html
    assert html.count("<svg") == 2 and "the source holds no samples" in html


def test_report_of_a_missing_path_is_one_line(tmp_path, capsys):
    code, out, err = run_cli(["report", tmp_path / "nope", "-o", tmp_path / "r.html"],
                             capsys)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert not (tmp_path / "r.html").exists()
