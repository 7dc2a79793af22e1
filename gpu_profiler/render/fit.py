"""Terminal output that fits: a table never loses a digit or a header to the width.

`console` gives the rich console every command prints on: as wide as the terminal when
there is one, else (piped, or written to a file) as wide as ``--width`` or, by default,
as the widest table needs. A table wider than its console is printed stacked: each row's
first cell, then every other column's header and value, wrapped between pairs, so every
number and header stays whole at any width. No line ends in spaces: rich pads every line
of a table (title and caption too) to the table's width, and `Stripped` takes that off.
"""

from __future__ import annotations

import sys
from typing import IO, Any

from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.segment import Segment
from rich.table import Table
from rich.text import Text

#: The width of piped output without ``--width``: wider than any table, so each prints
#: at its natural width (rich tables do not stretch to fill it).
NATURAL = 100_000


class _FittingConsole(Console):
    """A console that stacks the tables too wide for it."""

    def print(self, *objects: Any, **kwargs: Any) -> None:  # noqa: A003 (rich's name)
        texts = {k: kwargs[k] for k in ("markup", "highlight", "emoji") if k in kwargs}
        super().print(*(fit(self.render_str(o, **texts) if isinstance(o, str) else o, self)
                        for o in objects), **kwargs)


def console(width: int | None = None, file: IO[str] | None = None,
            record: bool = False) -> Console:
    """The console to print on (see the module docstring for its width)."""
    if width is None and not (file is None and sys.stdout.isatty()):
        width = NATURAL
    return _FittingConsole(width=width, file=file, record=record)


def fit(obj: Any, console: Console) -> Any:
    """``obj`` with its lines ending in no spaces: a table as it is, or stacked when it is
    wider than ``console``."""
    if isinstance(obj, Table):
        unbounded = console.options.update_width(NATURAL)  # measure what it needs, uncapped
        if Measurement.get(console, unbounded, obj).maximum > console.width:
            obj = stacked(obj, console.width)
    return Stripped(obj)


class Stripped:
    """A renderable whose lines end at their last visible character: the spaces rich pads
    a table's lines with (to the table's width) are dropped, so piped output and
    ``-o`` files carry no trailing spaces."""

    def __init__(self, renderable: Any) -> None:
        self.renderable = renderable

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        for line in console.render_lines(self.renderable, options, pad=False):
            yield from _rstrip(line)
            yield Segment.line()


def _rstrip(line: list[Segment]) -> list[Segment]:
    """``line`` without the spaces it ends in."""
    out = list(line)
    while out and not out[-1].control:
        last = out.pop()
        text = last.text.rstrip(" ")
        if text:
            out.append(Segment(text, last.style, last.control))
            break
    return out


def stacked(table: Table, width: int) -> Text:
    """``table`` as lines of at most ``width`` cells: its title, then per row the first
    cell and ``header value`` pairs, a line breaking only between pairs, then its
    caption."""
    out = Text()
    if table.title:
        out.append_text(Text.from_markup(str(table.title), style="bold"))
        out.append("\n")
    columns = table.columns
    cells = [list(c.cells) for c in columns]
    for r in range(table.row_count):
        line = _text(cells[0][r])
        for c, column in enumerate(columns[1:], start=1):
            pair = Text.from_markup(str(column.header), style="dim")
            pair.append(" ")
            pair.append_text(_text(cells[c][r]))
            if line.cell_len + 2 + pair.cell_len > width and line.plain.strip():
                out.append_text(line)
                out.append("\n")
                line = Text("  ")
            else:
                line.append("  ")
            line.append_text(pair)
        out.append_text(line)
        out.append("\n")
    if table.caption:
        out.append_text(Text.from_markup(str(table.caption), style="dim"))
    return out


def _text(cell: Any) -> Text:
    """A cell as rich Text (cells hold rich markup)."""
    return cell.copy() if isinstance(cell, Text) else Text.from_markup(str(cell))
