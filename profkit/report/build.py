"""Gather everything the report shows into one data model (``Report``).

``build_report(trace)`` takes a ``profkit.model.Trace`` of any source (nsys
export, Kineto trace).  The trace loads each column once and every section
shares it (the kernels' start/end serve the timeline, the utilization, the
capture's GPU busy time and the summaries alike).  The renderers (html.py,
markdown.py, json_report.py) only turn a ``Report`` into text.  Every
figure comes from the analyses: ``profkit.analysis.kernels.summaries`` (equal to
``nsys stats``), ``.timeline``, ``.capture``, ``.nvtx_kernels``,
``.occupancy``, ``.stalls``, and the ncu reader; sections.py fills one
section each.

A section whose data the trace lacks (no NVTX trace, no memory copies)
carries a note saying so and how to record it, instead of failing the whole
report.  Nothing is read from the profiled process's environment
(``analysis.capture.capture_info`` never reads it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from profkit import allocator
from profkit._version import __version__
from profkit.analysis.cpu_only import is_cpu_only
from profkit.analysis.kernels import summaries
from profkit.analysis.kernels.graphs import GRAPH_LEVEL
from profkit.analysis.kernels.launches import launch_profile
from profkit.analysis.memory import SNAPSHOT_SOURCE
from profkit.analysis.timeline import busy as timeline
from profkit.analysis.timeline.ranges import enclosing_ranges
from profkit.analysis.timeline.capture import capture_info
from profkit.analysis.steps.windows import kernels_in_window
from profkit.errors import ProfkitError
from profkit.model import NSYS, Trace
from profkit.model.clock import SESSION_START, seconds_text, session_zero
from profkit.model.schema import LAUNCH_CONFIG_COLUMNS
from profkit.model.sync_sites import readable_rows
from profkit.model.trace import DURATION
from profkit.output import API_COLUMNS, NVTX_COLUMNS
from profkit.report import sections as fill
from profkit.report import columns, graphs_section, host_section, idle_section, kernel_table, memory_section
from profkit.report import steps_section
from profkit.report.findings import findings as make_findings
from profkit.report.findings import longest_gap
from profkit.report.model import Figure, Report, Section, Table
from profkit.report.text import duration, percent, size


# -- building ----------------------------------------------------------------------------
def build_report(trace: Trace, *, ncu_csv: Path | None = None, partial: bool = False,
                 run_info: dict[str, Any] | None = None, top: int = 20, bins: int = fill.TIMELINE_BINS,
                 baseline: Trace | None = None, code_dirs: Sequence[Path] = (),
                 kernel_targets: Any = None) -> Report:
    """Everything the report shows.  Raises ProfkitError when the trace holds no
    CUDA trace at all (unless ``partial``: a failed run still gets its report).
    ``code_dirs``: folders with the compiled Triton/inductor kernels; ``kernel_targets``:
    sources to compile for the kernels (--kernels; both kernel_table.py)."""
    if top < 1:
        raise ProfkitError("--top must be at least 1")
    if trace.meta.source == SNAPSHOT_SOURCE:  # the allocator's history alone: no timeline to report on
        raise ProfkitError(f"{trace.name} is a PyTorch memory snapshot, not a trace: the report needs kernels",
                           hint=f"read it with profkit memory {trace.name}, or beside an nsys trace of the same run: "
                                f"profkit memory TRACE --snapshot {trace.name}")
    if not partial and not (trace.has("kernels") or trace.has("api")) and not is_cpu_only(trace):
        hint = ("re-run nsys profile with -t cuda" if trace.meta.source == NSYS else
                "profile with activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]")
        raise ProfkitError(f"{trace.name} has no CUDA trace data (no kernels, no CUDA API calls)", hint=hint)
    columns.start_loading(trace)
    fill.start_figure_imports()
    found: dict[str, Any] = {}
    plan: list[tuple[str, str, Callable[[Section], Section | None]]] = []

    def add(key: str, title: str, build: Callable[[Section], Section | None]) -> None:
        """Register a section, in the order the report shows it; ``build`` fills the section
        it gets (or returns the one it made).  They run in ``BUILD_ORDER`` (see there)."""
        plan.append((key, title, build))

    capture: dict[str, Any] = {}

    def capture_section(section: Section) -> None:
        capture.update(capture_info(trace))
        section.facts = _capture_facts(capture, run_info)
        section.facts.insert(0, ("Times", _clock_words(trace)))

    add("capture", "Capture", capture_section)
    add("steps", "Steps", lambda s: steps_section.fill_steps(s, trace, found))
    # Built in BUILD_ORDER after the CUDA API calls are loaded (finding graph launches reads their
    # names); a trace that replayed no graph shows no section.
    add("graphs", "CUDA graphs", lambda s: graphs_section.fill_graphs(s, trace, found))
    add("timeline", "Timeline", lambda s: fill.fill_timeline(s, trace, bins, found, zoom=False))
    add(TIMELINE_ZOOM, "", lambda s: fill.fill_timeline_zoom(trace, bins, found))
    add("utilization", "GPU utilization", lambda s: fill.fill_utilization(s, trace, found))
    nsys = trace.meta.source == NSYS
    gpu = trace.meta.gpu_platform  # "CUDA", or "HIP" on a ROCm trace: named in headings and labels
    add("kernels", f"{gpu} kernels", lambda s: kernel_table.fill_kernels(
        s, trace, top, found,
        "Time per kernel name, as nsys stats --report cuda_gpu_kern_sum." if nsys else
        "Time per kernel name, from the trace's kernel events (the figures nsys stats would give).",
        code_dirs, ncu_csv, kernel_targets))
    add("api", f"{gpu} API", lambda s: fill.fill_summary(
        s, summaries.api_summary(trace), API_COLUMNS, top, "api", found,
        "Time the CPU spent in each CUDA runtime/driver call, as nsys stats --report cuda_api_sum." if nsys else
        f"Time the CPU spent in each {gpu} runtime/driver call, from the trace's cuda_runtime/cuda_driver events."))
    add("nvtx", "NVTX ranges" if nsys else "Annotated ranges", lambda s: fill.fill_summary(
        s, readable_rows(summaries.nvtx_summary(trace)), NVTX_COLUMNS, top, "nvtx", found,
        "Push/pop and start/end ranges, as nsys stats --report nvtx_sum." if nsys else
        "record_function / user annotation ranges, ProfilerStep#N included."))
    add("nvtx_kernels", "Kernels per NVTX range" if nsys else "Kernels per annotated range",
        lambda s: fill.fill_nvtx_kernels(s, trace, top, found))
    add("memory", "Memory copies and sets", lambda s: fill.fill_memory(s, trace, top, found))
    add("occupancy", "Occupancy and registers", lambda s: fill.fill_occupancy(s, trace, ncu_csv, top, found))
    add("stalls", "Synchronization stalls", lambda s: fill.stalls_section(trace, top, found, baseline))
    if trace.has("python_frames"):
        add("host", "Host", lambda s: host_section.fill_host(s, trace, top, found))
    if trace.has("memory"):
        add("allocator_memory", "Memory", lambda s: memory_section.fill_memory(s, trace, top, found))
    if ncu_csv is not None:
        add("ncu", "Nsight Compute (ncu)", lambda s: fill.fill_ncu(s, Path(ncu_csv), top, found))
    add(INTERACTIVE, "", lambda s: found.update(interactive_timeline=_interactive_timeline(trace)))
    add(IDLE_CPU, "", lambda s: idle_section.describe_idle_cpu(trace, found))
    sections = [s for s in _build_sections(plan, trace) if s.key not in (INTERACTIVE, IDLE_CPU, TIMELINE_ZOOM)
                and not (s.key == "graphs" and found.get("graphs") is None)]

    # The steady state leads: a headline over the whole capture is made by start-up.
    items = steps_section.findings_for(trace, found)
    items[1:1] = idle_section.steady_idle_finding(found)  # right after the steady-state headline
    items[1:1] = graphs_section.graphs_finding(found)  # what the steady state runs in, first
    items[0:0] = host_section.host_finding(found)  # the verdict: what bounds the step, in plain words
    items += list(found.get("stall_findings", []))
    items += memory_section.memory_findings(found)
    gap = longest_gap(found.get("utilization"))
    gap_ranges = enclosing_ranges(trace, gap[0], gap[1]) if gap else []
    items += make_findings(capture=capture or None, kernels=found.get("kernels"), api=found.get("api"),
                           memory=found.get("memory"), utilization=found.get("utilization"),
                           longest_gap_ranges=gap_ranges,
                           occupancy=found.get("occupancy"), nvtx_ranges=found.get("nvtx_ranges"),
                           ncu=found.get("ncu"), time_origin_ns=session_zero(trace),
                           steps_found=bool(found.get("steps") and found["steps"].found),
                           longest_gap_cpu=next((g["cpu"] for g in found.get("idle_gaps") or ()
                                                 if gap and (g["start_ns"], g["end_ns"], g["device"]) == gap), ""),
                           steady_kernels=_steady_kernels(trace, found.get("steps")),
                           launches=_launches(trace, found.get("steps")),
                           graph_replay_ns=_unrecorded_graph_ns(found.get("graphs")))
    partial_reason = (run_info or {}).get("partial_reason") if partial else None
    command = (run_info or {}).get("command")
    title = f"profkit report: {' '.join(command) if command else trace.name}"
    return Report(
        interactive_timeline=found.get("interactive_timeline"),
        title=title, export_name=trace.name,
        generated_utc=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        profkit_version=__version__, partial=partial, partial_reason=partial_reason, run_info=run_info,
        findings=items, capture=capture, sections=sections, top=top,
    )


def _launches(trace: Trace, steps: Any) -> dict[str, Any]:
    """How the steady state's kernels (the capture's, without steps) were launched."""
    window = steps.steady_window if steps is not None and steps.found else None
    return launch_profile(trace, window)


def _unrecorded_graph_ns(graphs: dict[str, Any] | None) -> int:
    """GPU time of graph replays whose kernels no kernel row holds (graph level); 0 at node level."""
    return int(graphs["in_graphs_ns"]) if graphs and graphs["level"] == GRAPH_LEVEL else 0


def _steady_kernels(trace: Trace, steps: Any) -> list[dict[str, Any]] | None:
    """Kernel time by name over the steady-state steps, for the kernel findings; None without steps."""
    window = steps.steady_window if steps is not None and steps.found else None
    if window is None:
        return None
    return kernels_in_window(trace, window[0], window[1], per=int(steps.summary["steady_count"]))


# The order sections are computed in (the report shows them in the order they were
# added).  Sections that read the same columns run next to each other and the columns
# are dropped once no later section needs them (RELEASE), which bounds the peak
# memory on big traces: the kernels' launch configurations and durations are dropped
# after occupancy (kernels per NVTX range derives the durations again, and drops them),
# the API durations after the API summary.  The capture runs after the API summary so
# that its row counts come from columns already read; the interactive timeline before
# kernels per NVTX range, so that the merged busy intervals are gone by then.
INTERACTIVE = "interactive_timeline"  # report.html's canvas timeline: built here, not a section
# The CPU side of the longest idle stretches (fills the utilization section's table):
# after the CUDA API section, whose columns it reads.
IDLE_CPU = "idle_cpu"
# The whole capture's timeline needs no CUDA API call: it is drawn while they load.  Its
# zoom (fills the timeline section) shows a few steady-state steps: after the steps.
TIMELINE_ZOOM = "timeline_zoom"
BUILD_ORDER = ("kernels", "occupancy", "timeline", "api", "steps", "graphs", TIMELINE_ZOOM, "utilization", IDLE_CPU, "nvtx",
               "capture", INTERACTIVE, "nvtx_kernels", "memory", "stalls", "ncu")
# Columns read in one scan of their table before the section that first needs them
# (where ``columns.start_loading`` did not start them on a background thread already).
PREFETCH: dict[str, dict[str, tuple[str, ...]]] = {
    "kernels": {"kernels": columns.KERNEL_COLUMNS},
    "api": {"api": columns.API_COLUMNS},
}
RELEASE = {"occupancy": {"kernels": (*LAUNCH_CONFIG_COLUMNS, DURATION)}, "api": {"api": (DURATION,)},
           IDLE_CPU: {"osrt": None}, "nvtx_kernels": {"kernels": (DURATION,)}, "stalls": {"api": None, "syncs": None}}
# Per-trace caches dropped where the next sections do not need them: the merged GPU busy
# intervals (16 MB for a million kernels) after the whole timeline (not held through the
# steps) and after their last user, the interactive timeline (utilization, capture and it
# share one merge).
RELEASE_CACHES: dict[str, Callable[[Trace], None]] = {"timeline": timeline.forget_busy_segments,
                                                      INTERACTIVE: timeline.forget_busy_segments}


def _build_sections(plan: list[tuple[str, str, Callable[[Section], Section | None]]], trace: Trace) -> list[Section]:
    """Run each registered section in BUILD_ORDER (others after the known ones, in their
    order); a ProfkitError becomes the section's note.  Returns them in registration order."""
    built: dict[str, Section] = {}
    rank = {key: i for i, key in enumerate(BUILD_ORDER)}
    for index, (key, title, build) in sorted(enumerate(plan), key=lambda p: (rank.get(p[1][0], len(rank)), p[0])):
        for table, wanted in PREFETCH.get(key, {}).items():
            if trace.has(table):
                trace.table(table, list(wanted))
        section = Section(key, title)
        try:
            section = build(section) or section
        except ProfkitError as exc:
            section.notes.append(exc.one_line())
        built[key] = section
        for table, dropped in RELEASE.get(key, {}).items():
            trace.forget(table, dropped)
        if key in RELEASE_CACHES:
            RELEASE_CACHES[key](trace)
        allocator.give_back()  # the section's temporaries are gone: their memory goes back
    return [built[key] for key, _, _ in plan]


def _interactive_timeline(trace: Trace) -> Any:
    """The interactive timeline's page data (None when it cannot be built: the static figures
    still show what there is), from the report's own trace and its columns."""
    from profkit.export.tracks import step_table
    from profkit.report.interactive_timeline import build_interactive_timeline

    try:
        return build_interactive_timeline(trace, step_table(trace))
    except ProfkitError:
        return None


def _clock_words(trace: Trace) -> str:
    """What every time in the report counts from (``profkit.model.clock``), and where the capture began on it."""
    zero = session_zero(trace)
    what = ("the export's time 0" if trace.meta.source == NSYS else
            "the start of the profiler's span" if trace.meta.capture_start_ns is not None else "the first event")
    words = f"every time is {SESSION_START} ({what})"
    start = trace.meta.capture_start_ns
    if start is not None and start != zero:
        words += f"; the capture began at {seconds_text(start - zero)} s"
    return words + "; profkit export --window takes these times"


def _capture_facts(info: dict[str, Any], run_info: dict[str, Any] | None) -> list[tuple[str, str]]:
    def text(value: Any) -> str:
        return "" if value is None else str(value)

    facts = [
        ("Export" if info.get("source") in (None, NSYS) else "Trace", text(info.get("export"))),
        ("Nsight Systems version", text(info.get("nsys_version"))),
        ("Profiler", "" if info.get("source") in (None, NSYS) else
         f"{info.get('tool')} {text(info.get('tool_version'))}".strip()),
        ("Rank", "" if info.get("rank") is None else
         f"{info['rank']} of {info['world_size']}" if info.get("world_size") else str(info["rank"])),
        ("Export schema version", text(info.get("export_schema_version"))),
        ("GPU", text(info.get("gpu_name"))),
        ("SM count", text(info.get("sm_count"))),
        ("Memory bandwidth", f"{info['memory_bandwidth_gbps']:,} GB/s" if info.get("memory_bandwidth_gbps") else ""),
        ("Memory", size(info.get("memory_total_bytes"))),
        ("Compute capability", text(info.get("compute_capability"))),
        ("Driver", text(info.get("driver_version"))),
        ("CUDA runtime", text(info.get("cuda_runtime_version"))),
        ("Session start (UTC)", text(info.get("session_start_utc"))),
        ("Capture span", duration(info.get("span_ns"))),
        ("GPU span (first to last GPU operation)", duration(info.get("gpu_span_ns"))),
        ("GPU busy", f"{percent(info.get('gpu_busy_pct'), 2)} of the GPU span ({duration(info.get('gpu_busy_ns'))})"
         if info.get("gpu_busy_pct") is not None else ""),
        ("GPU busy, of the capture", percent(info.get("gpu_busy_pct_of_capture"), 2)),
        ("Traced", ", ".join(info.get("traced") or [])),
    ]
    counts = info.get("counts") or {}
    if counts:
        facts.append(("Recorded", ", ".join(f"{n:,} {what.replace('_', ' ')}" for what, n in counts.items())))
    if len(info.get("gpus") or []) > 1:
        facts.append(("GPUs", "; ".join(f"{g['id']}: {g['name']}" for g in info["gpus"])))
    for proc in info.get("processes") or []:
        if proc.get("command_line"):
            facts.append(("Launched", proc["command_line"]))
        elif proc.get("ran_kernels"):
            facts.append(("Process that ran kernels", f"{proc.get('name') or '?'} (pid {proc.get('pid')})"))
    if run_info:
        if run_info.get("command"):
            facts.append(("profkit trace command", " ".join(map(str, run_info["command"]))))
        if run_info.get("exit_code") is not None:
            facts.append(("Program exit status", text(run_info["exit_code"])))
        if run_info.get("started"):
            facts.append(("Run started", text(run_info["started"])))
        if run_info.get("bare_run"):
            facts.append(("Measured against a bare run", text(run_info["bare_run"])))
        if run_info.get("capture_window"):
            facts.append(("Traced window against the untraced steps", text(run_info["capture_window"])))
        for tool, about in (run_info.get("tools") or {}).items():
            if isinstance(about, dict) and about.get("version"):
                facts.append((f"{tool} used", text(about["version"])))
    return [(label, value) for label, value in facts if value]


__all__ = ["Figure", "Report", "Section", "Table", "build_report"]
