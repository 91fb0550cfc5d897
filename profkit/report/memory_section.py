"""The report's Memory section (the allocator's events) and its findings, from
``profkit.analysis.memory``: per-step peaks, what holds the peak, leaks, and a figure of allocated
and reserved bytes per step with the peak step marked and what holds the peak stacked."""

from __future__ import annotations

from typing import Any

from profkit.analysis.memory import findings, memory_report
from profkit.model import Trace
from profkit.output import Column
from profkit.report.model import Figure, Section, Table

STEP_COLUMNS = [
    Column("index", "Step", "int"), Column("phase", "Phase"),
    Column("peak_allocated_bytes", "Peak allocated", "bytes"),
    Column("peak_reserved_bytes", "Peak reserved", "bytes", missing="—"),
    Column("end_allocated_bytes", "Allocated at step end", "bytes"), Column("growth_bytes", "Growth", "bytes"),
]
SITE_COLUMNS = [Column("site", "Allocated at"), Column("bytes", "Live at the peak", "bytes"),
                Column("count", "Blocks", "int")]
LEAK_COLUMNS = [Column("site", "Allocated at"), Column("bytes_per_step", "Never freed, per step", "bytes"),
                Column("steps", "Steps", "int")]


def fill_memory(section: Section, trace: Trace, top: int, found: dict[str, Any]) -> None:
    """Fill the section (a ProfkitError, e.g. no steps, becomes its note in build.py)."""
    report = memory_report(trace)
    found["allocator_memory"] = report
    section.data = report
    section.intro = ("The allocator's blocks as torch.profiler(profile_memory=True) recorded them: each step's "
                     "peak of allocated (and, on a GPU, reserved) bytes, what was alive at the peak by where it "
                     "was allocated, and what the steps never give back.")
    for device in report["devices"]:
        label = device["label"]
        section.tables.append(Table(f"memory_steps_{device['device']}", f"Per step ({label})", STEP_COLUMNS,
                                    device["steps"], label_key="index"))
        section.tables.append(Table(f"memory_sites_{device['device']}", f"What holds the peak ({label})",
                                    SITE_COLUMNS, device["held_by_site"], top=top, label_key="site"))
        if device["growth"]["sites"]:
            section.tables.append(Table(f"memory_leaks_{device['device']}", f"Leaking sites ({label})",
                                        LEAK_COLUMNS, device["growth"]["sites"], label_key="site"))
        section.figures.append(Figure(f"memory_{device['device']}", f"Memory per step ({label})",
                                      "Peak allocated and reserved bytes per step and the bytes still allocated "
                                      "at each step's end; the peak step is marked.",
                                      _steps_png(device), data={"steps": device["steps"]}))


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
    with matplotlib.rc_context({"text.parse_math": False, "text.usetex": False, "font.size": 9}):
        fig = MplFigure(figsize=(12.0, 3.0), dpi=100)
        ax = fig.add_subplot(1, 1, 1)
        ax.bar(x, [s["peak_allocated_bytes"] / mib for s in steps], color="#1f6fb4", width=0.8,
               label="peak allocated")
        reserved = [s["peak_reserved_bytes"] for s in steps]
        if any(r is not None for r in reserved):
            ax.plot(x, [(r or 0) / mib for r in reserved], color="#f28e2b", marker="o", label="peak reserved")
        ax.plot(x, [s["end_allocated_bytes"] / mib for s in steps], color="black", marker=".",
                label="allocated at step end")
        peak_step = device["peak"]["step"]
        if peak_step is not None:
            ax.axvline(peak_step, color="#d1495b", linestyle="--", linewidth=0.8, label=f"peak (step {peak_step})")
        ax.set_xlabel("step")
        ax.set_ylabel("MiB")
        ax.legend(loc="upper left", fontsize=8, frameon=False, ncols=4)
        fig.tight_layout()
        return png_bytes(fig, 100)
