"""Show `profkit trace`'s stages while nsys runs: a spinner and the elapsed time
per stage on a terminal, one plain line per stage otherwise (CI logs).

The profiled program's own output passes through unchanged: stdout to
stdout, stderr to stderr.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

from profkit.capture.nsys import Reporter

STAGE_TITLES = {
    "profiling": "profiling (running the program under the profiler)",
    "importing": "importing the capture",
    "exporting": "exporting SQLite",
    "ncu": "ncu",
    "report": "writing the report",
    "interrupted": "interrupted",
}


class PlainReporter(Reporter):
    """One line per stage on stderr, with the time the previous stage took."""

    def __init__(self, err: TextIO | None = None, out: TextIO | None = None) -> None:
        self.err, self.out = err, out
        self.current: str | None = None
        self.detail = ""
        self.started = time.monotonic()

    def _err(self) -> TextIO:
        return self.err or sys.stderr

    def _out(self) -> TextIO:
        return self.out or sys.stdout

    def stage(self, name: str, detail: str = "") -> None:
        if name == self.current and detail == self.detail:
            return
        now = time.monotonic()
        if self.current is not None and name != self.current:
            self._err().write(f"profkit: {self.current} took {now - self.started:.1f}s\n")
            self.started = now
        self.current, self.detail = name, detail
        if name != "done":
            title = STAGE_TITLES.get(name, name)
            self._err().write(f"profkit: {title}{': ' + detail if detail else ''}\n")
        self._err().flush()

    def progress(self, percent: int) -> None:
        pass  # one line per stage is enough in a log

    def output(self, text: str, stream: str) -> None:
        target = self._err() if stream == "stderr" else self._out()
        target.write(text)
        target.flush()

    def close(self) -> None:
        pass


class RichReporter(Reporter):
    """A live stage list: spinner, stage, detail, elapsed; finished stages get a check mark."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        self.console = Console(stderr=True)
        self.progress_bar = Progress(
            SpinnerColumn(finished_text="[green]✓[/]"),
            TextColumn("{task.description}"),
            TextColumn("[dim]{task.fields[detail]}[/]"),
            TimeElapsedColumn(),
            console=self.console,
            redirect_stdout=True,
            redirect_stderr=True,
        )
        self.task = None
        self.current: str | None = None
        self.closed = False
        self.progress_bar.start()

    def stage(self, name: str, detail: str = "") -> None:
        if name == self.current:
            if detail:
                self.progress_bar.update(self.task, detail=_escape(detail))
            return
        if self.task is not None:
            self.progress_bar.update(self.task, completed=1, detail="")
        self.current = name
        if name == "done":
            self.close()
            return
        self.task = self.progress_bar.add_task(STAGE_TITLES.get(name, name), total=1, detail=_escape(detail))

    def progress(self, percent: int) -> None:
        if self.task is not None:
            self.progress_bar.update(self.task, detail=f"{percent}%")

    def output(self, text: str, stream: str) -> None:
        target = sys.stderr if stream == "stderr" else sys.stdout
        target.write(text)
        target.flush()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.progress_bar.stop()


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)


def make_reporter() -> PlainReporter | RichReporter:
    """Rich progress on a terminal, plain lines elsewhere."""
    if sys.stderr.isatty():
        try:
            return RichReporter()
        except ImportError:
            pass
    return PlainReporter()
