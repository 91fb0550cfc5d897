"""The terminal side of the output layer: tables that fit the window, text that wraps, progress.

One layout rule for every table command (``profkit.output.emit_rows`` calls ``fit_table``):

- the table fits the terminal: ``COLUMNS`` if set, else the window, else (output not a
  terminal: a file, a pipe, a CI log) ``PIPE_WIDTH`` columns;
- numbers are never cut or wrapped: a number column is as wide as its widest value;
- names are shortened with "…" (kernel names first by the short-name rule,
  ``profkit.output.short_kernel_names``); with ``--wide`` they wrap and show whole;
- sentences (advice, verdicts, causes: ``Column.fit == "wrap"``) wrap between words,
  never narrower than ``PROSE_MIN`` columns;
- when that still does not fit, columns go in the table's order of priority
  (``Column.drop``), and a note below the table names them.

Progress (``progress``, ``progress_bar``) goes to stderr, and only when stderr is a
terminal: stdout stays the command's output, byte for byte, whatever the terminal.
"""

from __future__ import annotations

import os
import sys
import textwrap
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

class Column(Protocol):
    """What the layout reads of a ``profkit.output.Column`` (which imports this module)."""

    key: str
    title: str
    kind: str
    fit: str
    drop: int


TEXT_KINDS = ("text", "kernel")  # every other Column.kind is a number
PIPE_WIDTH = 200  # nobody's window to fit: keep names whole, as before
NAME_MIN = 12  # a name column is never made narrower than this (unless the name is shorter)
KERNEL_MIN = 20  # ... a kernel name column
PROSE_MIN = 20  # a sentence wraps at no fewer columns than this: never one word per line
NAME_COMFORT = 40  # names grow to this before number headers get a line of their own
NAME_READABLE = 24  # optional columns (Column.drop > 0) give way to names narrower than this


def terminal_width() -> int:
    """The width tables and text are fitted to."""
    from rich.console import Console

    console = Console()
    if not console.is_terminal and "COLUMNS" not in os.environ:
        return PIPE_WIDTH
    return max(console.width, 20)


def cell_len(text: str) -> int:
    from rich.cells import cell_len as rich_cell_len

    return rich_cell_len(text)


def shorten(text: str, width: int, keep_end: bool = False) -> str:
    """``text`` in at most ``width`` cells, the cut marked with "…" (at the start with
    ``keep_end``: a path or ``file:line`` keeps its line number)."""
    if cell_len(text) <= width:
        return text
    if width <= 1:
        return "…"[:width]
    if text.isascii() and text.isprintable():  # one cell a character: cut once (C++ names run to 10k+)
        return "…" + text[len(text) - (width - 1):] if keep_end else text[:width - 1].rstrip() + "…"
    if keep_end:  # wide characters: cut one at a time
        kept = text
        while cell_len(kept) > width - 1:
            kept = kept[1:]
        return "…" + kept
    kept = text
    while cell_len(kept) > width - 1:
        kept = kept[:-1]
    return kept.rstrip() + "…"


@dataclass
class Fitted:
    """The columns shown, their widths (cells inside padding), and the columns hidden."""

    columns: list[Column]
    widths: list[int]
    hidden: list[Column]


def overhead(n: int) -> int:
    """Border and padding cells of a rich table of ``n`` columns: " x │" per column, one edge."""
    return 3 * n + 1


def _is_number(c: Column) -> bool:
    return c.kind not in TEXT_KINDS and c.fit != "wrap"


def fit_table(cells: Sequence[Sequence[str]], columns: Sequence[Column], width: int) -> Fitted:
    """Which columns to show, and how wide, so that the table fits ``width`` cells."""
    n = len(columns)
    values = [max([cell_len(row[i]) for row in cells] + [0]) for i in range(n)]
    word = [max((cell_len(w) for w in c.title.split()), default=0) for c in columns]
    title = [cell_len(c.title) for c in columns]
    need, want, head = [], [], []
    for i, c in enumerate(columns):
        natural = max(values[i], word[i])
        if _is_number(c) or c.fit == "whole":
            need.append(natural)  # never narrower: numbers and the names a user types are never cut
        else:
            floor = PROSE_MIN if c.fit == "wrap" else KERNEL_MIN if c.kind == "kernel" else NAME_MIN
            need.append(min(natural, floor))
        want.append(natural)
        head.append(max(natural, title[i]))  # the title on one line
    # Optional columns (drop > 0) stay while the names still get a readable width;
    # the others only while every column gets its least width.
    comfort = [need[i] if _is_number(c) or c.fit == "whole" else max(need[i], min(want[i], NAME_READABLE))
               for i, c in enumerate(columns)]
    shown = list(range(n))
    for i in drop_order(columns):
        least = comfort if columns[i].drop > 0 else need
        if sum(least[j] for j in shown) + overhead(len(shown)) <= width:
            break
        shown.remove(i)
    widths = {i: need[i] for i in shown}
    spare = width - overhead(len(shown)) - sum(widths.values())
    flexible = [i for i in shown if need[i] < want[i]]
    numbers = [i for i in shown if _is_number(columns[i])]
    # names first to a width that reads, then number titles on one line, then names whole
    for limit in (KERNEL_MIN + 4, None, NAME_COMFORT):
        if limit is None:
            spare = _grow(widths, numbers, head, spare)
        else:
            spare = _grow(widths, flexible, {i: min(want[i], max(need[i], limit)) for i in flexible}, spare)
    spare = _grow(widths, flexible, want, spare)
    if spare < 0:  # nothing left to drop: squeeze the names, never the numbers
        squeezable = [i for i in shown if not _is_number(columns[i]) and columns[i].fit != "whole"]
        while spare < 0 and any(widths[i] > 4 for i in squeezable):
            widest = max(squeezable, key=lambda i: widths[i])
            widths[widest] -= 1
            spare += 1
    return Fitted([columns[i] for i in shown], [widths[i] for i in shown],
                  [c for i, c in enumerate(columns) if i not in shown])


def _grow(widths: dict[int, int], which: list[int], target: Any, spare: int) -> int:
    """Hand ``spare`` cells out one at a time, in turn, to the columns below their target."""
    while spare > 0:
        hungry = [i for i in which if widths[i] < target[i]]
        if not hungry:
            break
        for i in hungry:
            if spare == 0:
                break
            widths[i] += 1
            spare -= 1
    return spare


def drop_order(columns: Sequence[Column]) -> list[int]:
    """The columns a narrow terminal hides, first to last: those with the highest
    ``drop`` first, then the others from the right.  Never the first column (the row's
    label), a kernel name, a column with ``fit == "whole"`` or ``drop < 0``."""
    candidates = [i for i, c in enumerate(columns)
                  if i > 0 and c.drop >= 0 and c.kind != "kernel" and c.fit != "whole"]
    return sorted(candidates, key=lambda i: (-columns[i].drop, -i))


def fitted_cells(cells: Sequence[Sequence[str]], columns: Sequence[Column], fitted: Fitted,
                 wide: bool) -> list[list[str]]:
    """The shown columns' cells, names cut to their column's width (unless ``wide``)."""
    index = {id(c): i for i, c in enumerate(columns)}
    out = []
    for row in cells:
        shown = []
        for c, w in zip(fitted.columns, fitted.widths):
            text = row[index[id(c)]]
            if not wide and not _is_number(c) and c.fit not in ("wrap", "whole"):
                text = shorten(text, w, keep_end=c.fit == "left")
            shown.append(text)
        out.append(shown)
    return out


def rich_table(cells: Sequence[Sequence[str]], columns: Sequence[Column], width: int, wide: bool = False,
               title: str | None = None) -> tuple[Any, list[Column]]:
    """A rich Table of ``cells`` fitted to ``width``, and the columns left out."""
    from rich.table import Table

    fitted = fit_table(cells, columns, width)
    table = Table(title=title, show_lines=False, header_style="bold")
    for c, w in zip(fitted.columns, fitted.widths):
        # titles wrap between words by hand: a number column's cells must not wrap, its title may
        heading = "\n".join(textwrap.wrap(c.title, w, break_long_words=True)) or c.title
        if _is_number(c):
            table.add_column(heading, justify="right", no_wrap=True, width=w)
        elif wide or c.fit in ("wrap", "whole"):
            table.add_column(heading, justify="left", overflow="fold", width=w)
        else:
            table.add_column(heading, justify="left", no_wrap=True, overflow="ellipsis", width=w)
    for row in fitted_cells(cells, columns, fitted, wide):
        table.add_row(*row)
    return table, fitted.hidden


def wrap(text: str, width: int | None = None, indent: str = "", subsequent: str | None = None) -> str:
    """``text`` wrapped between words to the terminal (each line of it; ``indent`` before
    the first line of each, ``subsequent`` before the others)."""
    width = width or terminal_width()
    nxt = " " * len(indent) if subsequent is None else subsequent
    out = []
    for line in text.split("\n"):
        if cell_len(indent + line) <= width:
            out.append(indent + line)
            continue
        lead = len(line) - len(line.lstrip(" "))  # a line's own indent carries over to its continuation
        out += textwrap.wrap(line.strip(), width=width, initial_indent=indent + " " * lead,
                             subsequent_indent=nxt + " " * lead, break_on_hyphens=False) or [indent]
    return "\n".join(out)


def echo(text: str, indent: str = "", subsequent: str | None = None, err: bool = False) -> None:
    """Print ``text`` wrapped to the terminal's width."""
    import click

    click.echo(wrap(text, indent=indent, subsequent=subsequent), err=err)


def echo_for(fmt: str) -> Callable[..., None]:
    """How a command prints its sentences in ``fmt``: wrapped to the terminal beside a table
    (``echo``), lines whole elsewhere (a wrapped line would break Markdown)."""
    import click

    return echo if fmt == "table" else click.echo


# -- progress on stderr, only on a terminal -----------------------------------------------
def stderr_is_terminal() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


@contextmanager
def progress(message: str) -> Iterator[None]:
    """A spinner with ``message`` on stderr while the block runs, when stderr is a
    terminal; nothing otherwise (a pipe, a file, a CI log, a test)."""
    if not stderr_is_terminal():
        yield
        return
    from rich.console import Console
    from rich.markup import escape

    with Console(stderr=True).status(escape(message)):
        yield


class ProgressBar:
    """``advance()`` once per item done; a bar on stderr when it is a terminal, else nothing."""

    def __init__(self, description: str, total: int) -> None:
        self.bar = None
        if stderr_is_terminal():
            from rich.console import Console
            from rich.markup import escape
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self.bar = Progress(TextColumn(escape(description)), BarColumn(), MofNCompleteColumn(),
                                TimeElapsedColumn(), console=Console(stderr=True), transient=True)
            self.task = self.bar.add_task(description, total=total)
            self.bar.start()

    @property
    def shown(self) -> bool:
        return self.bar is not None

    def advance(self, total: int | None = None) -> None:
        if self.bar is not None:
            self.bar.update(self.task, advance=1, total=total)

    def print(self, text: str) -> None:
        """A line above the bar (on stderr)."""
        if self.bar is not None:
            self.bar.console.print(text, markup=False, highlight=False)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None
