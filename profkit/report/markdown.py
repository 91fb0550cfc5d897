"""report.md: the report as Markdown for a pull-request comment.

Tables only (no HTML), every cell escaped with ``profkit.output.md_escape``.
Figures are images inside report.html; the Markdown names them and gives
their numbers in words.  Long names are shortened to keep tables readable
(report.json has them whole).
"""

from __future__ import annotations

from profkit.output import Column, md_escape
from profkit.report.model import Report, Table

MAX_CELL_CHARS = 160
# A fact's value is a sentence (the capture's measured slowdown, a run's command): cut only past this
MAX_FACT_CHARS = 600
FACT_COLUMNS = [Column("field", "Field"), Column("value", "Value")]


def _clip(text: str, limit: int = MAX_CELL_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _table(columns: list[Column], cells: list[list[str]], limit: int = MAX_CELL_CHARS) -> list[str]:
    align = ["---" if c.kind == "text" else "--:" for c in columns]
    lines = ["| " + " | ".join(md_escape(c.title) for c in columns) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(md_escape(_clip(cell, limit)) for cell in row) + " |" for row in cells]
    return lines


def _data_table(table: Table) -> list[str]:
    cells = [[table.cell(row, column) for column in table.columns] for row in table.shown]
    title = f"**{md_escape(table.title)}**"
    if table.other is not None:
        title += f" (top {table.top} of {len(table.rows)} rows; the rest summed in the last row)"
    return [title, "", *_table(table.columns, cells), ""]


def render_markdown(report: Report) -> str:
    out = [f"# {md_escape(report.title)}", ""]
    out.append(f"Export {md_escape(report.export_name)}, generated {md_escape(report.generated_utc)} "
               f"by profkit {md_escape(report.profkit_version)}.")
    out.append("")
    if report.partial:
        reason = f" ({md_escape(report.partial_reason)})" if report.partial_reason else ""
        out += [(f"> **Partial report:** the profiled program did not finish{reason}. "
                 "The trace holds what ran until then."), ""]
    out += ["## Findings", ""]
    out += [f"- {md_escape(item)}" for item in report.findings] or ["Nothing stands out."]
    out.append("")
    for section in report.sections:
        out += [f"## {md_escape(section.title)}", ""]
        if section.intro:
            out += [md_escape(section.intro), ""]
        for note in section.notes:
            out += [f"> {md_escape(note)}", ""]
        if section.facts:
            out += [*_table(FACT_COLUMNS, [[label, value] for label, value in section.facts], MAX_FACT_CHARS), ""]
        for figure in section.figures:
            out += [f"*Figure: {md_escape(figure.title)}* (in report.html). {md_escape(figure.caption)}", ""]
        for table in section.tables:
            out += _data_table(table)
    out.append("Times in nanoseconds unless marked; kernel, API and NVTX tables equal `nsys stats` on the same "
               "export. Full data: report.json.")
    return "\n".join(out) + "\n"
