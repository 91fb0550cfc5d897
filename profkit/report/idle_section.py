"""The report's longest GPU idle stretches and what the launching CPU thread did in them.

Two tables in the GPU utilization section: the whole capture's longest
stretches (usually start-up: model build, library loading) and, when steps
are found, the steady state's (what the loop itself waits on: a sleeping
data loader, a sync, Python between launches).  Each row names the
launching thread's ranges, CUDA calls and OS runtime calls (nsys ``-t osrt``)
with their time inside the stretch (``analysis.breakdown.idle.cpu_in_gaps``).

The stretches are found with the utilization section (GPU operations only);
what the CPU did is filled in later by ``describe_idle_cpu``, which runs
after the CUDA API section has read the calls (``build.BUILD_ORDER``).  The
steady state's longest stretch also becomes a finding (``steady_idle_finding``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from profkit.model import Trace
from profkit.model.clock import SESSION_START, seconds_text
from profkit.output import Column
from profkit.report.model import Section, Table
from profkit.report.text import cpu_activity, duration

TOP_GAPS = 5
GAP_COLUMNS = [
    Column("device", "GPU", "int"),
    Column("duration", "Idle for"),
    Column("start_s", f"From ({SESSION_START})"),
    Column("end_s", f"To ({SESSION_START})"),
    Column("cpu", "Launching thread meanwhile"),
]
STEADY_GAP_COLUMNS = GAP_COLUMNS[:2] + [Column("step", "Step", "int")] + GAP_COLUMNS[2:]


def add_gap_tables(section: Section, trace: Trace, whole_gaps: list[tuple[int, int, int]], origin_ns: int,
                   found: dict[str, Any]) -> None:
    """The whole capture's longest stretches ``(start, end, device)``, and the steady state's."""
    rows = [_row(gap, origin_ns) for gap in whole_gaps]
    rows.sort(key=lambda g: -g["duration_ns"])
    if rows:
        section.tables.append(Table("idle_gaps", "Longest idle stretches", GAP_COLUMNS, rows))
    steady = _steady_gaps(trace, found.get("steps"), origin_ns)
    if steady:
        section.tables.append(Table("steady_idle_gaps", "Longest idle stretches in the steady state",
                                    STEADY_GAP_COLUMNS, steady))
        found["steady_longest_idle"] = steady[0]
    found["idle_gaps"] = rows + steady


def _row(gap: tuple[int, int, int], origin_ns: int) -> dict[str, Any]:
    a, b, device = gap
    return {"device": device, "duration": duration(b - a), "duration_ns": b - a, "start_ns": a, "end_ns": b,
            "start_s": seconds_text(a - origin_ns), "end_s": seconds_text(b - origin_ns),
            "cpu": ""}  # filled by describe_idle_cpu once the CUDA calls are read


def _steady_gaps(trace: Trace, result: Any, origin_ns: int) -> list[dict[str, Any]]:
    from profkit.analysis.breakdown.idle import longest_gaps_within

    window = result.steady_window if result is not None and result.found else None
    if window is None:
        return []
    steps = result.steps
    starts, ends, indices = (steps[c].to_numpy(np.int64) for c in ("start_ns", "end_ns", "index"))
    rows = []
    for gap in longest_gaps_within(trace, *window, top=TOP_GAPS):
        row = _row(gap, origin_ns)
        # the step holding most of the stretch: one that begins in the last microseconds of a step
        # is the next step's idle (its host time before its first operation)
        held = np.minimum(ends, gap[1]) - np.maximum(starts, gap[0])
        row["step"] = int(indices[int(np.argmax(held))]) if len(held) and held.max() > 0 else None
        rows.append(row)
    return rows


def describe_idle_cpu(trace: Trace, found: dict[str, Any]) -> None:
    """What the launching thread did in each stretch of the gap tables (ranges, CUDA calls,
    OS runtime calls, each with its time in the stretch), filled into their rows."""
    from profkit.analysis.breakdown.idle import CPU_KINDS, cpu_in_gaps

    gaps = found.get("idle_gaps") or []
    for gap, cpu in zip(gaps, cpu_in_gaps(trace, [(g["start_ns"], g["end_ns"], g["device"]) for g in gaps])):
        gap["cpu"] = cpu_activity(cpu, platform=trace.meta.gpu_platform)
        gap.update(pid=cpu["pid"], tid=cpu["tid"], next_op=cpu["next_op"],
                   launched_ns_into_gap=cpu["launched_ns_into_gap"], **{k: cpu[k] for k in CPU_KINDS})


def steady_idle_finding(found: dict[str, Any]) -> list[str]:
    """The steady state's longest GPU idle stretch and what the launching thread did in it."""
    gap = found.get("steady_longest_idle")
    if not gap:
        return []
    where = f" (in step {gap['step']})" if gap.get("step") is not None else ""
    text = f"In the steady state the longest GPU idle stretch lasted {gap['duration']}{where}"
    return [text + (f"; the launching thread meanwhile: {gap['cpu']}." if gap["cpu"] else ".")]
