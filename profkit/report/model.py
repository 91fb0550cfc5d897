"""The report's data model: what build.py gathers and the renderers show.

A ``Report`` is a list of ``Section``s; a section has facts (label, value),
``Table``s (all rows, shown cut to the top N) and ``Figure``s (PNG bytes
and the numbers they plot).
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from profkit.analysis.kernels import summaries
from profkit.output import Column

Row = dict[str, Any]


@dataclass
class Table:
    """Rows and the columns to show.  ``rows`` holds every row; HTML and
    Markdown show ``shown`` (the first ``top`` and the rest summed)."""

    key: str
    title: str
    columns: list[Column]
    rows: list[Row]
    top: int | None = None
    label_key: str = "name"
    blank: dict[str, str] = field(default_factory=dict)
    sum_keys: tuple[str, ...] = ()  # more columns the "(other K)" row sums (top_n sums times and counts)

    @cached_property
    def shown(self) -> list[Row]:
        if self.top is None:
            return list(self.rows)
        shown = summaries.top_n(self.rows, self.top, self.label_key)
        if len(shown) < len(self.rows):
            rest = self.rows[len(shown) - 1:]
            for key in self.sum_keys:
                values = [r[key] for r in rest if r.get(key) is not None]
                shown[-1][key] = sum(values) if values else None
        return shown

    @cached_property
    def other(self) -> Row | None:
        """The "(other K)" row the cut adds, or None when every row is shown."""
        return self.shown[-1] if self.top is not None and len(self.rows) > self.top + 1 else None

    def cell(self, row: Row, column: Column) -> str:
        """A cell as text; a missing value shows ``blank[column.key]`` (e.g. "(outside any range)")."""
        value = row.get(column.key)
        if value is None and column.key in self.blank and row is not self.other:
            return self.blank[column.key]
        return column.show(value)


@dataclass
class Figure:
    key: str
    title: str
    caption: str
    png: bytes = field(repr=False)
    data: dict[str, Any] = field(default_factory=dict, repr=False)  # the plotted numbers, for report.json

    @property
    def uri(self) -> str:
        return "data:image/png;base64," + base64.b64encode(self.png).decode("ascii")


@dataclass
class Section:
    key: str
    title: str
    intro: str = ""
    facts: list[tuple[str, str]] = field(default_factory=list)  # label, value (shown as a two-column table)
    tables: list[Table] = field(default_factory=list)
    figures: list[Figure] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what is missing and how to get it
    data: dict[str, Any] = field(default_factory=dict)  # extra numbers for report.json only


@dataclass
class Report:
    title: str
    export_name: str
    generated_utc: str
    profkit_version: str
    partial: bool
    partial_reason: str | None
    run_info: dict[str, Any] | None
    findings: list[str]
    capture: dict[str, Any]
    sections: list[Section]
    top: int
    interactive_timeline: Any = None  # report.interactive_timeline.InteractiveTimeline (HTML only)

    def section(self, key: str) -> Section | None:
        return next((s for s in self.sections if s.key == key), None)
