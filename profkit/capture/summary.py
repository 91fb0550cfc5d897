"""The short terminal summary after `profkit trace`: top kernels, total GPU
time, partial-run warning, where the report is."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from profkit.output import Column, rows_to_rich_table

KERNEL_COLUMNS = (
    Column("time_pct", "Time %", "pct"),
    Column("total_ns", "Total (ns)", "ns"),
    Column("instances", "Launches", "int"),
    Column("avg_ns", "Avg (ns)", "ns"),
    Column("name", "Kernel"),
)


def summary_rows(kernels: list[dict[str, Any]], total_ns: int) -> list[dict[str, Any]]:
    rows = []
    for k in kernels:
        total = int(k.get("total_ns") or 0)
        instances = int(k.get("instances") or 0)
        rows.append({
            "name": k.get("name"),
            "total_ns": total,
            "instances": instances,
            "avg_ns": total / instances if instances else None,
            "time_pct": 100.0 * total / total_ns if total_ns else None,
        })
    return rows


def _shown(path: Path) -> str:
    try:
        return os.path.relpath(path)
    except ValueError:
        return str(path)


def print_summary(result: Any, console: Any = None) -> None:
    """Render a TraceResult on stdout."""
    from rich.console import Console

    console = console or Console(highlight=False)
    record = result.record
    if result.kernels:
        table = rows_to_rich_table(summary_rows(result.kernels, result.total_gpu_ns), KERNEL_COLUMNS,
                                   title="Top kernels by GPU time")
        console.print(table)
        console.print(f"Total GPU kernel time: {result.total_gpu_ns / 1e6:,.3f} ms", markup=False)
    else:
        console.print("No CUDA kernels in the trace.", markup=False)
    for warning in record.warnings:
        console.print(f"warning: {warning}", markup=False, style="yellow")
    if record.partial:
        console.print(f"PARTIAL: {record.partial_reason}; the report shows what nsys captured.",
                      markup=False, style="bold yellow")
    console.print(f"Run folder: {_shown(result.run_dir)}", markup=False)
    if result.report is not None:
        console.print(f"Report: {_shown(Path(result.report.html))}", markup=False, style="bold")
