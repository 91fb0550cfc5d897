"""The report's "Steps" section and the findings that lead the report.

``fill_steps(section, trace, found)`` fills the section from
``profkit.analysis.steps`` (``find_steps``, ``per_step_breakdown``): the
phases as facts, a step-time figure with each step's breakdown as stacked
bars, a timeline of a few steady-state steps with their boundaries, and the
step table.  ``steps_findings`` writes the steady-state headline and the
start-up line; ``build.build_report`` puts them first.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from profkit import allocator
from profkit.analysis.steps import KERNEL_PATTERN, PROFILER_STEP, StepResult, find_steps
from profkit.analysis.cpu_only import CPU_ONLY
from profkit.analysis.steps.activity import load_activity
from profkit.analysis.steps.result import CUT_OFF, capture_cost
from profkit.analysis.timeline.intervals import covered_within, union
from profkit.analysis.steps.per_step import PARTS, per_step_breakdown
from profkit.analysis.timeline.busy import ACTIVITY_TABLES
from profkit.model import Trace
from profkit.model.clock import SESSION_START, seconds_text, session_zero
from profkit.output import Column
from profkit.report.model import Figure, Section, Table
from profkit.report.text import duration

MAX_TABLE_STEPS = 100
ZOOM_STEPS = 3

STEP_COLUMNS = [
    Column("index", "Step", "int"),
    Column("phase", "Phase"),
    Column("start_s", f"Start ({SESSION_START})"),
    Column("duration_ns", "Duration (ns)", "ns"),
    Column("gpu_busy_pct", "GPU busy %", "pct"),
    Column("compute_pct", "Compute %", "pct"),
    Column("communication_pct", "Communication %", "pct"),
    Column("memory_pct", "Memory %", "pct"),
    Column("idle_pct", "Idle %", "pct"),
    Column("launches", "GPU ops", "int"),
]


def source_words(result: StepResult) -> str:
    if result.source == PROFILER_STEP:
        return "torch.profiler's ProfilerStep ranges"
    if result.source == KERNEL_PATTERN:
        return f"the repeating launch pattern ({result.evidence.get('period_launches', '?')} GPU operations a step)"
    return f"the {result.name!r} ranges"


def steady_shares(parts: pd.DataFrame) -> dict[str, float] | None:
    """Each part's share (%) of the steady-state steps' total time."""
    steady = parts[parts["phase"] == "steady"]
    total = float(steady["duration_ns"].sum()) if not steady.empty else 0.0
    if total <= 0:
        return None
    return {p.removesuffix("_ns"): 100.0 * float(steady[p].sum()) / total for p in PARTS}


def steps_findings(trace: Trace, result: StepResult, parts: pd.DataFrame | None,
                   idle_causes: dict[str, int] | None = None, startup_busy_ns: int | None = None) -> list[str]:
    """The steady-state headline, then the start-up line (empty without steps).

    ``startup_busy_ns``: the GPU busy time before the first step, where the caller has it."""
    if not result.found:
        return [f"No steps found: {result.message}." if result.message else "No steps found."]
    s = result.summary
    text = (f"{s['count']} steps, {duration(s['median_ns'])} median (from {source_words(result)}"
            + (f"; {s['warmup_count']} warm-up step{'s' if s['warmup_count'] != 1 else ''} left out" if
               s["warmup_count"] else "")
            + (f"; {CUT_OFF}" if s.get("cut_off_count") else "") + ")")
    shares = steady_shares(parts) if parts is not None else None
    if shares:
        busy = 100.0 - shares["idle"]
        text += (f"; in the steady state the GPU is busy {busy:.0f}%: compute {shares['compute']:.0f}%, "
                 f"communication {shares['communication']:.0f}%, memory {shares['memory']:.0f}%")
        if shares["other"] >= 0.5:
            text += f", other {shares['other']:.0f}%"
        text += f", idle {shares['idle']:.0f}%"
        if idle_causes and sum(idle_causes.values()) > 0:
            cause = max(idle_causes, key=idle_causes.get)
            text += f" ({cause.replace('_ns', '').replace('_', ' ')})"
    out = [text + "."]
    if result.startup and result.startup[1] > result.startup[0]:
        out.append(_startup_line(trace, result, startup_busy_ns))
    return out


def _startup_line(trace: Trace, result: StepResult, busy: int | None = None) -> str:
    lo, hi = result.startup
    if busy is None:
        act = load_activity(trace)
        busy = _busy_between(act.all_start, act.all_end, lo, hi)
    return (f"Start-up (before the first step) took {duration(hi - lo)}, the GPU busy "
            f"{100.0 * busy / (hi - lo):.1f}% of it; it is left out of the step figures.")


def fill_steps(section: Section, trace: Trace, found: dict[str, Any]) -> None:
    result = find_steps(trace)
    allocator.give_back()  # the step finder's temporaries (a million GPU operations' worth) go back first
    found["steps"] = result
    section.intro = ("One step is one iteration of the program's loop: from the user's step ranges (NVTX, "
                     "record_function, ProfilerStep#N; never a library's range), otherwise from the repeating "
                     "sequence of launched GPU operations. A step runs from its first GPU operation to the next "
                     "step's; figures are over the steady state, after the warm-up steps.")
    if not result.found:
        section.notes.append(result.message or "No steps found.")
        section.data = result.to_dict()
        return
    # One frame of the GPU work for the per-step parts and the idle causes (a million
    # kernels joined to their launches once), made while the API columns are loaded.
    events = _gpu_work(trace)
    allocator.give_back()
    parts = per_step_breakdown(trace, result, events)
    found["step_parts"] = parts
    found["steady_idle_causes"] = _steady_idle_causes(result, events)
    if events is not None and result.startup:
        found["startup_busy_ns"] = _busy_between(events["start"].to_numpy(), events["end"].to_numpy(),
                                                 *result.startup)
    del events
    s = result.summary
    section.facts = [
        ("Steps from", source_words(result)),
        ("Steps", f"{s['count']:,} ({s['warmup_count']} warm-up, {s['steady_count']:,} steady)"),
        ("Steady-state step time", f"median {duration(s['median_ns'])}, mean {duration(s['mean_ns'])}, "
                                   f"p90 {duration(s['p90_ns'])} (min {duration(s['min_ns'])}, "
                                   f"max {duration(s['max_ns'])})"),
        ("Steady-state GPU busy", f"{s['steady_gpu_busy_pct']:.1f}%" if s["steady_gpu_busy_pct"] is not None else ""),
        ("Start-up (before the first step)", duration(s.get("startup_ns"))),
        ("Teardown (after the last step)", duration(s.get("teardown_ns"))),
        ("Capture cost", capture_cost(s["profiler_overhead_ns_per_step"], s["median_ns"])
         if s.get("profiler_overhead_ns_per_step") is not None else ""),
        ("No GPU work", CPU_ONLY if s.get("cpu_only") else ""),
    ]
    sites = result.evidence.get("sync_sites_once_per_step") or []
    if sites:
        section.facts.append(("Synchronizes once per step", "; ".join(_site_label(x) for x in sites[:3])))
    section.facts = [(k, v) for k, v in section.facts if v]
    from profkit.report.steps_figure import step_times_png, steps_zoom_png

    section.figures.append(Figure(
        "step_times", "Step time and where it goes",
        "Each bar is one step, split into compute, communication (not under compute), memory (under neither), "
        "other GPU work and idle; warm-up steps are hatched; the line is the steady-state median.",
        step_times_png(parts, s["median_ns"]), {"steps": {c: parts[c].tolist() for c in parts.columns}}))
    zoom = zoom_window(trace, result)
    if zoom is not None:
        section.figures.append(Figure(
            "steps_zoom", f"{len(zoom['steps'])} steady-state steps",
            f"GPU work per stream over {duration(zoom['end_ns'] - zoom['start_ns'])}; the vertical lines are step "
            "boundaries.", steps_zoom_png(zoom), {k: v for k, v in zoom.items() if k != "events"}))
    rows = _table_rows(result, parts, MAX_TABLE_STEPS, session_zero(trace))
    section.tables.append(Table("steps", "Steps", STEP_COLUMNS, rows, None, label_key="index"))
    if len(result.steps) > MAX_TABLE_STEPS:
        section.notes.append(f"The table shows the first {MAX_TABLE_STEPS} of {len(result.steps):,} steps "
                             "(profkit steps TRACE --format csv lists them all).")
    section.data = result.to_dict(with_steps=False)


def _site_label(name: str) -> str:
    fields = name.split("|")
    return f"{fields[2].rpartition('/')[2]} {fields[3]}" if len(fields) >= 4 else name


def _table_rows(result: StepResult, parts: pd.DataFrame, limit: int, zero: int) -> list[dict[str, Any]]:
    """The first ``limit`` steps' table rows; ``zero``: the session start (``profkit.model.clock``)."""
    rows = []
    for step, part in zip(result.steps.head(limit).to_dict(orient="records"),
                          parts.head(limit).to_dict(orient="records")):
        d = step["duration_ns"] or 1
        rows.append({**step, "start_s": seconds_text(step["start_ns"] - zero),
                     "gpu_busy_pct": 100.0 * step["gpu_busy_ns"] / d,
                     **{f"{p.removesuffix('_ns')}_pct": 100.0 * part[p] / d for p in PARTS}})
    return rows


def zoom_window(trace: Trace, result: StepResult, n: int = ZOOM_STEPS) -> dict[str, Any] | None:
    """A few steady-state steps (around the median one, as the Timeline section's zoom) and the GPU work in them."""
    chosen = result.steps_around_median(n)
    if chosen.empty:
        return None
    lo, hi = int(chosen["start_ns"].iloc[0]), int(chosen["end_ns"].iloc[-1])
    events = []
    for kind, table in ACTIVITY_TABLES:
        frame = trace.table(table, ["start", "end", "device", "stream"])
        inside = frame[(frame["end"].to_numpy() > lo) & (frame["start"].to_numpy() < hi)]
        if len(inside):
            events.append(pd.DataFrame({"start": inside["start"].to_numpy(), "end": inside["end"].to_numpy(),
                                        "lane": [f"GPU {d} stream {s}" for d, s in
                                                 zip(inside["device"].to_numpy(), inside["stream"].to_numpy())],
                                        "kind": kind}))
    frame = pd.concat(events, ignore_index=True) if events else pd.DataFrame(columns=["start", "end", "lane", "kind"])
    return {"start_ns": lo, "end_ns": hi, "events": frame, "lanes": sorted(frame["lane"].unique().tolist()),
            "steps": [{"index": int(i), "start_ns": int(a), "end_ns": int(b)} for i, a, b in
                      zip(chosen["index"], chosen["start_ns"], chosen["end_ns"])]}


def findings_for(trace: Trace, found: dict[str, Any]) -> list[str]:
    """The leading findings from what ``fill_steps`` put in ``found`` (none if it did not run)."""
    result: StepResult | None = found.get("steps")
    if result is None:
        return []
    return steps_findings(trace, result, found.get("step_parts"), found.get("steady_idle_causes"),
                          found.get("startup_busy_ns"))


def _busy_between(start: np.ndarray, end: np.ndarray, lo: int, hi: int) -> int:
    """GPU busy time in [lo, hi): the union of the intervals overlapping it (the others add
    nothing inside it), not of a million."""
    near = (end > lo) & (start < hi)
    return int(covered_within(*union(start[near], end[near]), np.array([lo]), np.array([hi]))[0])


def _gpu_work(trace: Trace) -> pd.DataFrame | None:
    """Kernels, memcpy and memset with their kernel type and launch (``breakdown.events``), where available."""
    try:
        from profkit.analysis.breakdown import events as breakdown_events
    except ModuleNotFoundError as exc:
        if not (exc.name or "").startswith("profkit"):
            raise
        return None
    return breakdown_events.gpu_events(trace, include_syncs=False, hta_filter=False,
                                       launch_columns=("launch_start",),
                                       columns=("stream", "source", "kernel_type"))[0]


def _steady_idle_causes(result: StepResult, events: pd.DataFrame | None) -> dict[str, int] | None:
    """Idle time in the steady state by HTA's causes (host wait, kernel wait, other), where available.

    Idle time per stream is between kernels, copies and sets: CUPTI's sync
    records are not in ``events`` (``idle_by_stream`` would leave them out)."""
    window = result.steady_window
    if window is None or events is None:
        return None
    from profkit.analysis.breakdown import temporal

    # the frame's columns, cut to the window inside (no copy of the frame: a million rows)
    totals = temporal.idle_totals_of(*(events[c].to_numpy() for c in ("start", "end", "stream", "launch_start")),
                                     window=window)
    return {"host_wait": totals["host_wait_ns"], "kernel_wait": totals["kernel_wait_ns"],
            "other_wait": totals["other_ns"]}
