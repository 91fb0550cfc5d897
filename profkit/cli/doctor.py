"""`profkit doctor`: which tools, GPU, packages and permissions profkit can use here."""

from __future__ import annotations

import click

from profkit.output import FORMATS, Column

COLUMNS = (
    Column("status", "Status"),
    Column("group", "Group"),
    Column("name", "Check"),
    Column("detail", "Found"),
    Column("fix", "How to fix"),
)


@click.command()
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True,
              help="table: terminal table; json: list of checks; csv; md: Markdown table.")
def doctor(fmt: str) -> None:
    """Check for nsys, ncu, the CUDA tools, the GPU, Python packages and profiling permissions."""
    from dataclasses import asdict

    from profkit.capture.doctor import run_checks

    rows = [asdict(check) for check in run_checks()]
    if fmt == "table":
        _print_table(rows)
    else:
        from profkit.output import emit_rows

        emit_rows(rows, COLUMNS, fmt, title="profkit doctor")


def _print_table(rows: list[dict]) -> None:
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:  # doctor must work on a bare host, so it can say rich is missing
        for row in rows:
            fix = f"  -> {row['fix']}" if row["fix"] else ""
            click.echo(f"[{row['status']:>7}] {row['name']}: {row['detail']}{fix}")
        return
    marks = {"ok": "[green]✓ ok[/]", "missing": "[red]✗ missing[/]", "warn": "[yellow]! warn[/]",
             "info": "[dim]· info[/]"}
    from rich.markup import escape

    table = Table(title="profkit doctor", header_style="bold", show_lines=False)
    for title in ("", "Check", "Found", "How to fix"):
        table.add_column(title, overflow="fold")
    group = None
    for row in rows:
        if row["group"] != group:
            group = row["group"]
            table.add_section()
        table.add_row(marks.get(row["status"], row["status"]), escape(row["name"]), escape(row["detail"]),
                      escape(row["fix"]))
    Console(highlight=False).print(table)
