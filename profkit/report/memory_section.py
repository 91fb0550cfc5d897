"""The report's Memory section (the allocator's events) and its findings, from
``profkit.analysis.memory``: per-step peaks, what holds the peak, leaks, and a figure of allocated
and reserved bytes per step with the peak step marked and what holds the peak stacked."""

from __future__ import annotations

from typing import Any

from pathlib import Path

from profkit.analysis.memory import findings, is_driver_level, memory_report
from profkit.model import Trace
from profkit.output import Column
from profkit.report.model import Figure, Section, Table

STEP_COLUMNS = [
    Column("index", "Step", "int"), Column("phase", "Phase"),
    Column("peak_allocated_bytes", "Peak allocated", "bytes"),
    Column("peak_reserved_bytes", "Peak reserved", "bytes", missing="—"),
    Column("end_allocated_bytes", "Allocated at step end", "bytes"), Column("growth_bytes", "Growth", "bytes"),
]
DRIVER_STEP_COLUMNS = [Column("index", "Step", "int"), Column("phase", "Phase"),
                       Column("peak_reserved_bytes", "Peak device memory held", "bytes")]
SITE_COLUMNS = [Column("site", "Allocated at"), Column("bytes", "Live at the peak", "bytes"),
                Column("count", "Blocks", "int")]
CATEGORY_COLUMNS = [Column("category", "What it is"), Column("bytes", "Live at the peak", "bytes"),
                    Column("count", "Blocks", "int")]
LEAK_COLUMNS = [Column("site", "Allocated at"), Column("bytes_per_step", "Never freed, per step", "bytes"),
                Column("steps", "Steps", "int")]


def fill_memory(section: Section, trace: Trace, top: int, found: dict[str, Any]) -> None:
    """Fill the section (a ProfkitError, e.g. no steps, becomes its note in build.py)."""
    report = memory_with_run_snapshot(trace)
    found["allocator_memory"] = report
    section.data = report
    driver = any(d.get("level") for d in report["devices"])
    section.intro = ("The device memory the process took from the driver, as nsys --cuda-memory-usage recorded it: "
                     "each step's peak, and at the peak whose it was (PyTorch's caching allocator's segments, "
                     "where a snapshot of the run says which) and the call that allocated it." if driver else
                     "The allocator's blocks as recorded: each step's peak of allocated (and, on a GPU, reserved) "
                     "bytes, what was alive at the peak (what it is, and where it was allocated), and what the "
                     "steps never give back.")
    for device in report["devices"]:
        label = device["label"]
        columns = DRIVER_STEP_COLUMNS if device.get("level") else STEP_COLUMNS
        section.tables.append(Table(f"memory_steps_{device['device']}", f"Per step ({label})", columns,
                                    device["steps"], label_key="index"))
        section.tables.append(Table(f"memory_categories_{device['device']}", f"What the peak holds ({label})",
                                    CATEGORY_COLUMNS, device["held_by_category"], label_key="category"))
        section.tables.append(Table(f"memory_sites_{device['device']}", f"What holds the peak ({label})",
                                    SITE_COLUMNS, device["held_by_site"], top=top, label_key="site"))
        if device["growth"]["sites"]:
            section.tables.append(Table(f"memory_leaks_{device['device']}", f"Leaking sites ({label})",
                                        LEAK_COLUMNS, device["growth"]["sites"], label_key="site"))
        section.figures.append(Figure(f"memory_{device['device']}", f"Memory per step ({label})",
                                      "Peak allocated and reserved bytes per step and the bytes still allocated "
                                      "at each step's end; the peak step is marked; below, what the peak holds, "
                                      "stacked by category.",
                                      _steps_png(device), data={"steps": device["steps"]}))


def memory_with_run_snapshot(trace: Trace, steady: bool = False, snapshot: Path | None = None) -> dict[str, Any]:
    """``memory_report`` with a snapshot of the same run: ``snapshot``, else, for a driver-level
    trace (nsys), the one ``profkit trace --memory`` wrote beside it, where there is one."""
    from profkit.readers.snapshot import open_snapshot, same_run_snapshot

    if snapshot is None and is_driver_level(trace) and trace.meta.path is not None:
        snapshot = same_run_snapshot(Path(trace.meta.path), trace.meta.rank)
    if snapshot is None:
        return memory_report(trace, steady=steady)
    with open_snapshot(snapshot) as snap:
        return memory_report(trace, steady=steady, snapshot=snap)


def memory_findings(found: dict[str, Any]) -> list[str]:
    report = found.get("allocator_memory")
    return findings(report) if report else []


def _steps_png(device: dict[str, Any]) -> bytes:
    import matplotlib
    from matplotlib.figure import Figure as MplFigure

    from profkit.report.figures import png_bytes

    steps = device["steps"]
    x = [s["index"] for s in steps]
    mib = 1024.0 * 1024.0
    driver = bool(device.get("level"))  # nsys: only the device memory held is known
    with matplotlib.rc_context({"text.parse_math": False, "text.usetex": False, "font.size": 9}):
        parts = device.get("held_by_category") or []
        fig = MplFigure(figsize=(12.0, 4.2 if parts else 3.0), dpi=100)
        grid = fig.add_gridspec(2, 1, height_ratios=[3, 1]) if parts else None
        ax = fig.add_subplot(grid[0] if grid is not None else 111)
        if not driver:
            ax.bar(x, [s["peak_allocated_bytes"] / mib for s in steps], color="#1f6fb4", width=0.8,
                   label="peak allocated")
        reserved = [s["peak_reserved_bytes"] for s in steps]
        if any(r is not None for r in reserved):
            ax.plot(x, [(r or 0) / mib for r in reserved], color="#f28e2b", marker="o",
                    label="peak device memory held" if driver else "peak reserved")
        if not driver:
            ax.plot(x, [s["end_allocated_bytes"] / mib for s in steps], color="black", marker=".",
                    label="allocated at step end")
        peak_step = device["peak"]["step"]
        if peak_step is not None:
            ax.axvline(peak_step, color="#d1495b", linestyle="--", linewidth=0.8, label=f"peak (step {peak_step})")
        ax.set_xlabel("step")
        ax.set_ylabel("MiB")
        ax.legend(loc="upper left", fontsize=8, frameon=False, ncols=4)
        if grid is not None:
            _stacked_parts(fig.add_subplot(grid[1]), parts, mib)
        fig.tight_layout()
        return png_bytes(fig, 100)


def _stacked_parts(ax: Any, parts: list[dict[str, Any]], mib: float) -> None:
    """What the peak holds, as one bar stacked by category (biggest first)."""
    left = 0.0
    colors = ["#1f6fb4", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#9c755f", "#bab0ac"]
    for k, part in enumerate(parts):
        width = part["bytes"] / mib
        ax.barh([0], [width], left=left, color=colors[k % len(colors)], label=part["category"])
        left += width
    ax.set_yticks([])
    ax.set_xlabel("MiB live at the peak")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.6), fontsize=7, frameon=False, ncols=3)
