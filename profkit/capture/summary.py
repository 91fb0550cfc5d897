"""The short terminal summary after `profkit trace`: top kernels, total GPU
time, partial-run warning, where the report is."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from profkit.output import format_value

_NOISE = (
    (re.compile(r"^void "), ""),
    (re.compile(r"\b(at::native::|at::|std::|c10::|cutlass::|binary_internal::)|<unnamed>::"), ""),
    (re.compile(r"\((int|unsigned int|long|unsigned long|bool)\)(?=-?\d)"), ""),  # "(int)4" -> "4"
    (re.compile(r", array<char \*, \d+>"), ""),  # torch's elementwise kernels' pointer pack
)


def short_kernel_name(name: str, width: int = 90) -> str:
    """A demangled name made readable in a terminal: no "void ", no common
    namespaces, integer casts or parameter list of a template kernel, cut
    at ``width``."""
    text = name
    for pattern, replacement in _NOISE:
        text = pattern.sub(replacement, text)
    close = text.rfind(">")
    if close != -1 and text.endswith(")") and text.find("(", close) != -1:
        text = text[: text.find("(", close)]  # "kernel<...>(int, T2, T3)" -> "kernel<...>"
    return text if len(text) <= width else text[: width - 1] + "…"


def summary_rows(kernels: list[dict[str, Any]], total_ns: int) -> list[dict[str, Any]]:
    rows = []
    for k in kernels:
        total = int(k.get("total_ns") or 0)
        instances = int(k.get("instances") or 0)
        rows.append({
            "name": str(k.get("name")),
            "total_ns": total,
            "instances": instances,
            "avg_ns": total / instances if instances else None,
            "time_pct": 100.0 * total / total_ns if total_ns else None,
        })
    return rows


def _shown(path: Path) -> str:
    try:
        relative = os.path.relpath(path)
    except ValueError:
        return str(path)
    return str(path) if relative.startswith(os.pardir) else relative


def print_summary(result: Any, console: Any = None) -> None:
    """Render a TraceResult on stdout."""
    from rich.console import Console
    from rich.table import Table

    # markup off: kernel names such as "[lambda() (instance 1)]" must print verbatim
    console = console or Console(markup=False, highlight=False)
    record = result.record
    if result.kernels:
        table = Table(title="Top kernels by GPU time", header_style="bold")
        rows = summary_rows(result.kernels, result.total_gpu_ns)
        numbers = [(format_value(r["time_pct"], "pct"), format_value(r["total_ns"], "ns"),
                    format_value(r["instances"], "int"), format_value(r["avg_ns"], "ns")) for r in rows]
        titles = ("Time %", "Total (ns)", "Launches", "Avg (ns)")
        widths = [max(len(title), *(len(n[i]) for n in numbers)) for i, title in enumerate(titles)]
        for title, width in zip(titles, widths):
            table.add_column(title, justify="right", no_wrap=True, min_width=width)
        # the kernel name gets what is left of the line: 3 characters of border and padding per column
        name_width = max(20, console.width - sum(widths) - 3 * (len(titles) + 1) - 1)
        table.add_column("Kernel", no_wrap=True)
        for r, n in zip(rows, numbers):
            table.add_row(*n, short_kernel_name(r["name"], name_width))
        console.print(table)
        console.print(f"Total GPU kernel time: {result.total_gpu_ns / 1e6:,.3f} ms")
    else:
        console.print("No CUDA kernels in the trace.")
    window = (record.recorded or {}).get("capture_window") if isinstance(record.recorded, dict) else None
    if isinstance(window, dict) and window.get("sentence") and not window.get("inflated"):
        console.print(window["sentence"][0].upper() + window["sentence"][1:] + ".")  # inflated: a warning below
    for warning in record.warnings:
        console.print(f"warning: {warning}", style="yellow")
    if record.partial:
        console.print(f"PARTIAL: {record.partial_reason}; the report shows what nsys captured.",
                      style="bold yellow")
    console.print(f"Run folder: {_shown(result.run_dir)}")
    for role, name in record.files.items():
        if "snapshot" in role:
            console.print(f"Memory snapshot: profkit memory {_shown(result.run_dir / name)}")
    if result.report is not None:
        console.print(f"Report: {_shown(Path(result.report.html))}", style="bold")
