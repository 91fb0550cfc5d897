"""The report's sections: each fills a ``Section`` from the analyses.

Every function here takes the ``Trace`` (any source; its columns are loaded
once and shared by every section) and what earlier sections found, in
``found``, and never renders text beyond table cells and captions; a
``ProfkitError`` (missing table) becomes the section's note in
``build.build_report``.
"""

from __future__ import annotations

import importlib
import sys
import threading
from pathlib import Path
from types import ModuleType
from typing import Any

from profkit.analysis.kernels import summaries
from profkit.analysis.timeline import busy as timeline
from profkit.analysis.timeline.ranges import nvtx_bars
from profkit.errors import ProfkitError
from profkit.model import Trace
from profkit.model.clock import session_zero
from profkit.output import Column
from profkit.report.model import Figure, Row, Section, Table
from profkit.report import idle_section
from profkit.report.text import duration

TIMELINE_BINS = 1000  # about one bin per pixel of the figure
ZOOM_SHARE = 0.9  # the zoomed timeline shows the shortest window with this share of the busy time...
ZOOM_MAX_FRACTION = 0.3  # ...when that window is at most this fraction of the whole
ZOOM_STEPS = 3  # with steady-state steps, the zoom shows this many around the median one instead
NO_RANGE = "(outside any range)"

# -- columns ----------------------------------------------------------------------------
RANGE_GPU_COLUMNS = [
    Column("time_pct", "Kernel time %", "pct"),
    Column("total_ns", "Kernel time (ns)", "ns"),
    Column("instances", "Kernel launches", "int"),
    Column("kernels", "Kernels", "int"),
    Column("style", "Style"),
    Column("range", "Range"),
]
RANGE_KERNEL_COLUMNS = [
    Column("range", "Range"),
    Column("total_ns", "Total (ns)", "ns"),
    Column("instances", "Instances", "int"),
    Column("nvtx_instances", "Range instances", "int"),
    Column("avg_ns", "Avg (ns)", "float"),
    Column("min_ns", "Min (ns)", "ns"),
    Column("max_ns", "Max (ns)", "ns"),
    Column("name", "Kernel"),
]
MEMORY_COLUMNS = [
    Column("direction", "Direction"),
    Column("instances", "Count", "int"),
    Column("total_bytes", "Bytes", "bytes", "unknown"),  # None: a copy the trace gave no size (ROCm)
    Column("total_ns", "Total (ns)", "ns"),
    Column("time_pct", "Time %", "pct"),
    Column("avg_ns", "Avg (ns)", "float"),
    Column("min_ns", "Min (ns)", "ns"),
    Column("max_ns", "Max (ns)", "ns"),
    Column("name", "Operation"),
]
OCCUPANCY_COLUMNS = [
    Column("time_pct", "Time %", "pct"),
    Column("total_ns", "Total (ns)", "ns"),
    Column("instances", "Launches", "int"),
    Column("grid", "Grid"),
    Column("block", "Block"),
    Column("registers_per_thread", "Regs/thread", "int"),
    Column("shared_mem_bytes", "Smem/block", "bytes"),
    Column("theoretical_occupancy_pct", "Theor. occ. %", "pct"),
    Column("limiter", "Limited by"),
    Column("blocks_per_sm", "Blocks/SM", "int"),
    Column("waves", "Waves", "float"),
    Column("advice", "What would change it"),
    Column("kernel", "Kernel"),
]
OCCUPANCY_NCU_COLUMNS = [Column("ncu_achieved_occupancy_pct", "ncu achieved occ. %", "pct")]
NCU_COLUMNS = [
    Column("instances", "Launches", "int"),
    Column("duration_ns", "Avg duration (ns)", "float"),
    Column("dram_throughput_pct", "DRAM % of peak", "pct"),
    Column("achieved_occupancy_pct", "Achieved occ. %", "pct"),
    Column("theoretical_occupancy_pct", "Theor. occ. %", "pct"),
    Column("registers_per_thread", "Regs/thread", "int"),
    Column("block_size", "Block", "int"),
    Column("grid_size", "Grid", "int"),
    Column("block_limit_sm", "Limit: blocks", "int"),
    Column("block_limit_registers", "Limit: regs", "int"),
    Column("block_limit_shared_mem", "Limit: smem", "int"),
    Column("block_limit_warps", "Limit: warps", "int"),
    Column("limiter", "Limited by"),
    Column("trace_time_pct", "Trace time %", "pct"),
    Column("name", "Kernel"),
]
STALL_COLUMNS = [
    Column("gpu_idle_ns", "GPU idle caused (ns)", "ns"),
    Column("one_time_gpu_idle_ns", "Of it outside the steady state (ns)", "ns"),
    Column("cpu_blocked_ns", "CPU blocked (ns)", "ns"),
    Column("count", "Syncs", "int"),
    Column("per_step_syncs", "Per step", "float"),
    Column("cause", "Cause"),
    Column("api", "API"),
    Column("where", "Source"),
    Column("code", "Code"),
    Column("nvtx", "NVTX range"),
]


_figure_imports: threading.Thread | None = None


def start_figure_imports() -> None:
    """Import matplotlib (about half a second) on a thread while the first columns are read:
    SQLite scans release the GIL, so both proceed at once."""
    global _figure_imports
    if _figure_imports is None and "profkit.report.figures" not in sys.modules:
        _figure_imports = threading.Thread(target=importlib.import_module, args=("profkit.report.figures",),
                                           daemon=True)
        _figure_imports.start()


def _figures() -> ModuleType:
    if _figure_imports is not None:
        _figure_imports.join()
    return importlib.import_module("profkit.report.figures")


def _ranges_word(trace: Trace, capital: bool = False) -> str:
    if trace.meta.source == "nsys":
        return "NVTX ranges"
    return "Annotated ranges" if capital else "annotated ranges"


def _stalls_source(trace: Trace) -> Any:
    return trace


# -- sections --------------------------------------------------------------------------------
def fill_summary(section: Section, rows: list[Row], columns: list[Column], top: int, key: str,
             found: dict[str, Any], intro: str) -> None:
    found[key] = rows
    section.intro = intro
    if not rows:
        section.notes.append("The export has the table but no rows.")
    section.tables.append(Table(key, section.title, columns, rows, top))


def fill_nvtx_kernels(section: Section, trace: Trace, top: int, found: dict[str, Any]) -> None:
    rows = summaries.nvtx_kernel_summary(trace)
    kernel_total = sum(k["total_ns"] for k in found.get("kernels") or ()) or None
    per_range = summaries.nvtx_range_gpu_time(rows, kernel_total)
    found["nvtx_ranges"] = per_range
    section.intro = (f"Which {_ranges_word(trace)} the GPU time went to: a kernel counts in every range that "
                     f"encloses the {trace.meta.gpu_platform} call that launched it, on the same thread (nested "
                     "ranges included, so shares can add up to more than 100%), as nsys stats --report nvtx_kern_sum.")
    by_time = sorted(rows, key=lambda r: (-r["total_ns"], r["range"] is None, r["range"] or "", r["name"]))
    blank = {"range": NO_RANGE}
    section.tables.append(Table("nvtx_range_gpu_time", "Kernel time per range", RANGE_GPU_COLUMNS, per_range, top,
                                label_key="range", blank=blank))
    section.tables.append(Table("nvtx_kernel_summary", "Kernels within ranges (by time)", RANGE_KERNEL_COLUMNS,
                                by_time, top, label_key="range", blank=blank))


def fill_memory(section: Section, trace: Trace, top: int, found: dict[str, Any]) -> None:
    rows = summaries.memory_summary(trace)
    found["memory"] = rows
    section.intro = ("GPU time and bytes of memcpy and memset operations, as nsys stats --report "
                     "cuda_gpu_mem_time_sum and cuda_gpu_mem_size_sum.")
    if not rows:
        section.notes.append("No memcpy or memset operations were recorded.")
        return
    section.tables.append(Table("memory", section.title, MEMORY_COLUMNS, rows, top))


def fill_timeline(section: Section, trace: Trace, bins: int, found: dict[str, Any], zoom: bool = True) -> None:
    """The whole capture's timeline and its zoom; with ``zoom=False`` the zoom waits for
    ``fill_timeline_zoom`` (the report draws the whole capture while the CUDA API calls are
    still loading, and the zoom once the steps are known)."""
    window = timeline.time_window(trace)
    if window is None:
        section.notes.append("No GPU operations or NVTX ranges to draw.")
        return
    whole = timeline.make_bins(*window, bins, origin_ns=session_zero(trace))
    utilization = timeline.gpu_utilization(trace, whole)
    section.intro = (f"Each row is a {trace.meta.gpu_platform} stream: a light column marks a bin with any GPU work, "
                     f"the solid fill is the share of the bin that was busy, white is idle. "
                     f"{_ranges_word(trace, capital=True)} are drawn above, one row per nesting level and thread.")
    section.figures.append(_timeline_figure("timeline", "Whole capture", trace, whole))
    found["timeline_whole"] = (section, whole, utilization)
    found["utilization"], found["utilization_views"] = utilization, [(whole, utilization, "Whole capture")]
    if zoom:
        fill_timeline_zoom(trace, bins, found)


def fill_timeline_zoom(trace: Trace, bins: int, found: dict[str, Any]) -> None:
    """The timeline's zoom (a few steady-state steps, else the busiest stretch), after ``fill_timeline``."""
    if "timeline_whole" not in found:
        return
    section, whole, utilization = found.pop("timeline_whole")
    try:
        _add_zoom(section, trace, bins, found, whole, utilization)
    except ProfkitError as exc:  # the timeline section's note, as for its first part
        section.notes.append(exc.one_line())


def _add_zoom(section: Section, trace: Trace, bins: int, found: dict[str, Any], whole: timeline.TimeBins,
              utilization: list[timeline.Utilization]) -> None:
    views = [(whole, utilization, "Whole capture")]
    zoom, title, steps = _steady_zoom(found.get("steps"))
    if zoom is None and utilization:
        # no steps to show: the shortest stretch holding most of the GPU's work
        total = sum(u.busy_per_bin for u in utilization)
        zoom = timeline.busiest_window(total, whole, ZOOM_SHARE)
        if zoom and zoom[1] - zoom[0] > ZOOM_MAX_FRACTION * whole.width_ns * whole.count:
            zoom = None
        title = "Zoom: the busiest {} " + f"({ZOOM_SHARE:.0%} of the GPU's busy time)"
    if zoom is not None:
        margin = max((zoom[1] - zoom[0]) // 50, 1)
        zoom_bins = timeline.make_bins(max(zoom[0] - margin, whole.start_ns),
                                       min(zoom[1] + margin, whole.end_ns), bins, origin_ns=whole.origin_ns)
        title = title.format(duration(zoom_bins.width_ns * zoom_bins.count))
        figure = _timeline_figure("timeline_zoom", title, trace, zoom_bins,
                                  [b for s in steps for b in (s["start_ns"], s["end_ns"])])
        if steps:
            figure.data["steps"] = steps
            figure.caption += " Dashed lines: where each step starts and ends (from its first GPU operation)."
        section.figures.append(figure)
        views.append((zoom_bins, timeline.gpu_utilization(trace, zoom_bins), title))
    found["utilization"], found["utilization_views"] = utilization, views


def _steady_zoom(result: Any) -> tuple[tuple[int, int] | None, str, list[dict[str, Any]]]:
    """The zoomed timeline's window over a few typical steady-state steps (those around the
    median step), its title ("{}" for the window's length) and the steps; (None, "", []) without steps."""
    if result is None or not result.found:
        return None, "", []
    chosen = result.steps_around_median(ZOOM_STEPS)
    if chosen.empty:
        return None, "", []
    steps = [{"index": int(i), "start_ns": int(a), "end_ns": int(b)}
             for i, a, b in zip(chosen["index"], chosen["start_ns"], chosen["end_ns"])]
    first, last = steps[0]["index"], steps[-1]["index"]
    which = f"step {first}" if first == last else f"steps {first}-{last}"
    title = (f"Zoom: {which} of {len(result.steps)}, steady state around the median step "
             f"({duration(result.summary['median_ns'])}); {{}} shown")
    return (steps[0]["start_ns"], steps[-1]["end_ns"]), title, steps


def _timeline_figure(key: str, title: str, trace: Trace, bins: timeline.TimeBins,
                     boundaries: list[int] | None = None) -> Figure:
    lanes = timeline.stream_busy(trace, bins)
    bars, ranges = nvtx_bars(trace, bins.start_ns, bins.end_ns, min_duration_ns=bins.width_ns // 2)
    png = _figures().timeline_png(bins, lanes, bars, title, boundaries or ())
    caption = f"{duration(bins.width_ns * bins.count)} in {bins.count} bins of {duration(bins.width_ns)}."
    if ranges:
        caption += (f" {len(bars):,} of {ranges:,} {_ranges_word(trace)} drawn (the longest; shorter than "
                    "half a bin they would not show).")
    data = {
        "bins": {"start_ns": bins.start_ns, "width_ns": bins.width_ns, "count": bins.count,
                 "origin_ns": bins.origin_ns},
        "streams": [{"device_id": lane.device_id, "pid": lane.pid, "stream_id": lane.stream_id,
                     "kind": lane.kind, "operations": lane.operations, "busy_ns": lane.busy_ns,
                     "busy_ns_per_bin": lane.busy_per_bin.tolist()} for lane in lanes],
        "nvtx_ranges": [{"text": bar.text, "style": bar.style, "start_ns": bar.start_ns, "end_ns": bar.end_ns,
                         "tid": bar.tid, "depth": bar.depth} for bar in bars],
        "nvtx_ranges_in_window": ranges,
    }
    return Figure(key, title, caption, png, data)


def fill_utilization(section: Section, trace: Trace, found: dict[str, Any]) -> None:
    views: list[tuple[timeline.TimeBins, list[timeline.Utilization], str]] | None = found.get("utilization_views")
    if not views:
        section.notes.append("No GPU operations to draw.")
        return
    section.intro = ("Share of each bin in which the GPU ran at least one kernel, memcpy or memset (concurrent "
                     "work counts once). Shaded: the longest idle stretches; the tables say what the thread that "
                     "launched the work ending each one did meanwhile.")
    whole = views[0][0]
    section.figures.append(Figure(
        "utilization", "GPU busy % over time",
        f"{whole.count} bins of {duration(whole.width_ns)} over the whole capture"
        + (", then the zoomed window of the timeline" if len(views) > 1 else "")
        + "; busy time summed over the whole capture's bins equals the GPU busy time of the capture section.",
        _figures().utilization_png(views),
        {"views": [{"title": title,
                    "bins": {"start_ns": bins.start_ns, "width_ns": bins.width_ns, "count": bins.count,
                 "origin_ns": bins.origin_ns},
                    "devices": [{"device_id": u.device_id, "busy_ns": u.busy_ns,
                                 "busy_ns_per_bin": u.busy_per_bin.tolist(),
                                 "gaps": [{"start_ns": a, "end_ns": b} for a, b in u.gaps]} for u in utils]}
                   for bins, utils, title in views]}))
    idle_section.add_gap_tables(section, trace, [(a, b, u.device_id) for u in views[0][1] for a, b in u.gaps],
                                whole.origin_ns, found)


def fill_occupancy(section: Section, trace: Trace, ncu_csv: Path | None, top: int, found: dict[str, Any]) -> None:
    from profkit.analysis.occupancy import attach_ncu, trace_occupancy

    rows = trace_occupancy(trace)
    columns = list(OCCUPANCY_COLUMNS)
    if ncu_csv is not None:
        launches = _read_ncu(ncu_csv)
        if launches:
            rows = attach_ncu(rows, launches)
            columns[-1:-1] = OCCUPANCY_NCU_COLUMNS
    for row in rows:
        row.update(
            kernel=row.get("short_name") or row["name"], instances=row.get("launches"),
            total_ns=row.get("total_time_ns"),
            grid=f"{row.get('grid_x')}x{row.get('grid_y')}x{row.get('grid_z')}",
            block=f"{row.get('block_x')}x{row.get('block_y')}x{row.get('block_z')}",
        )
        if row.get("time_pct") is not None:
            row["time_pct"] = round(row["time_pct"], 1)
    found["occupancy"] = rows
    section.intro = ("Theoretical occupancy of every kernel launch configuration in the trace, computed the way "
                     "the CUDA occupancy calculator does (registers, shared memory, block size, the carveout the "
                     "driver chose), with what limits it and what would change it.")
    for row in rows:
        row.setdefault("advice", "")
    if not rows:
        section.notes.append("No kernel launches to analyse.")
        return
    section.tables.append(Table("occupancy", "Occupancy per launch configuration", columns, rows, top,
                                label_key="kernel"))


def _read_ncu(path: Path) -> list[Any]:
    from profkit.readers.ncu import read_ncu_csv

    return read_ncu_csv(path)


def fill_ncu(section: Section, path: Path, top: int, found: dict[str, Any]) -> None:
    from profkit.analysis.occupancy import kernel_key

    launches = _read_ncu(path)
    section.intro = (f"Per kernel from {path.name}: averages over the profiled launches. Block limits are how "
                     "many blocks fit on an SM by each resource; the smallest one limits occupancy.")
    trace_total = sum(k["total_ns"] for k in found.get("kernels") or ()) or None
    trace_time = {}
    for k in found.get("kernels") or ():
        trace_time[kernel_key(k["name"])] = trace_time.get(kernel_key(k["name"]), 0) + k["total_ns"]
    groups: dict[str, list[Any]] = {}
    for launch in launches:
        groups.setdefault(launch.kernel_name, []).append(launch)
    rows = []
    for name, group in groups.items():
        row: Row = {"name": name, "instances": len(group)}
        for key in ("duration_ns", "dram_throughput_pct", "memory_throughput_pct", "compute_throughput_pct",
                    "achieved_occupancy_pct", "theoretical_occupancy_pct"):
            values = [getattr(x, key) for x in group if getattr(x, key) is not None]
            row[key] = sum(values) / len(values) if values else None
        first = group[0]
        for key in ("registers_per_thread", "block_size", "grid_size", "block_limit_sm", "block_limit_registers",
                    "block_limit_shared_mem", "block_limit_warps", "block_limit_barriers"):
            row[key] = getattr(first, key)
        row["limiter"] = _ncu_limiter(row)
        matched = trace_time.get(kernel_key(name))
        row["trace_time_pct"] = round(100.0 * matched / trace_total, 1) if matched and trace_total else None
        row["total_ns"] = sum(x.duration_ns or 0 for x in group)
        rows.append(row)
    rows.sort(key=lambda r: (-(r["total_ns"] or 0), r["name"]))
    found["ncu"] = rows
    if not rows:
        section.notes.append(f"{path.name} holds no kernel launches.")
        return
    section.tables.append(Table("ncu", "Kernels profiled by ncu", NCU_COLUMNS, rows, top))
    from profkit.report.roofline_section import fill_roofline

    fill_roofline(section, path, top, found)


_NCU_LIMITS = (("block_limit_sm", "blocks per SM"), ("block_limit_registers", "registers"),
               ("block_limit_shared_mem", "shared memory"), ("block_limit_warps", "warps"),
               ("block_limit_barriers", "barriers"))


def _ncu_limiter(row: Row) -> str:
    limits = {label: row.get(key) for key, label in _NCU_LIMITS if row.get(key) is not None}
    if not limits:
        return ""
    lowest = min(limits.values())
    return ", ".join(label for label, value in limits.items() if value == lowest)


# -- synchronization stalls (profkit.analysis.sync.stalls) -------------------------------------
def stalls_section(trace: Trace, top: int, found: dict[str, Any], baseline: Trace | None = None) -> Section:
    """The "Synchronization stalls" section.

    With a ``baseline`` trace (the same program without a change, e.g. without
    a print), the section also compares the two runs' step times."""
    from profkit.analysis.sync import stalls

    section = Section("stalls", "Synchronization stalls")
    try:
        result = stalls.analyze_stalls(_stalls_source(trace))
    except ProfkitError as exc:
        section.notes.append(exc.one_line())
        return section
    found["stall_findings"] = list(result.findings)
    sites = []
    for site in result.sites:
        row = dict(site)
        per_step = row.get("per_step") or {}
        row.update(where=row.get("source") or "(source unknown)", per_step_syncs=per_step.get("syncs"))
        sites.append(row)
    # the table is headed "by GPU idle time caused": in that order (the analysis orders sites by
    # their cost per steady step, which `profkit stalls` shows as its own column)
    sites.sort(key=lambda r: (-r["gpu_idle_ns"], -r["cpu_blocked_ns"], -r["count"], r["where"]))
    section.intro = ("Places in the program where the CPU waited for the GPU (synchronize calls, .item(), "
                     "blocking copies): how long the CPU was blocked, and how long the GPU then sat idle "
                     "because no work was queued (see profkit stalls --help for the exact definitions).")
    window = stalls.timeline(_stalls_source(trace), result)
    if window is not None:
        from profkit.report.stalls_figure import stalls_timeline_png

        section.figures.append(Figure(
            "stalls_timeline", "Syncs and the GPU idle time they caused",
            f"{window.title}: red bars are syncs (the CPU waiting), hatched spans the GPU idle time they caused; "
            f"{duration(window.end - window.start)} shown.", stalls_timeline_png(window, zero_ns=session_zero(trace)),
            {"start_ns": window.start, "end_ns": window.end, "device": window.device, "syncs": window.syncs,
             "steps": [{"index": i, "start_ns": a, "end_ns": b} for i, a, b in window.steps],
             "gpu_operations": len(window.gpu)}))
    # Every sync event and step would make report.json grow with the run; the sites and
    # step_stats sum them up (`profkit stalls --format json` lists them all).
    section.data = result.summary_dict()
    section.data.update(events_count=len(result.events), steps_count=len(result.steps))
    if sites:
        section.tables.append(Table("stall_sites", "Synchronization sites, by GPU idle time caused",
                                    STALL_COLUMNS, sites, top, label_key="where",
                                    sum_keys=("count", "cpu_blocked_ns", "gpu_idle_ns")))
    else:
        section.notes.append("No synchronizations found.")
    if baseline is not None:
        _add_step_comparison(section, result, baseline, found)
    return section


STEP_COMPARISON_COLUMNS = [
    Column("run", "Run"),
    Column("export", "Export"),
    Column("step_range", "Step range"),
    Column("count", "Steps", "int"),
    Column("median_ns", "Median step (ns)", "ns"),
    Column("mean_ns", "Mean step (ns)", "ns"),
    Column("syncs_per_step", "Syncs / step", "float"),
    Column("estimated_median_without_syncs_ns", "Est. median without syncs (ns)", "ns"),
]


def _add_step_comparison(section: Section, result: Any, baseline: Trace, found: dict[str, Any]) -> None:
    """Step times of this run next to the baseline's, from both runs' NVTX step ranges."""
    from profkit.analysis.sync import stalls

    try:
        comparison = stalls.compare_steps(result, stalls.analyze_stalls(_stalls_source(baseline)))
    except ProfkitError as exc:
        section.notes.append(f"Step comparison with {baseline.path.name}: {exc.one_line()}")
        return
    rows = [{"run": label, **comparison[side]} for label, side in (("this run", "a"), ("baseline", "b"))]
    section.tables.append(Table("step_comparison", "Step time vs the baseline run", STEP_COMPARISON_COLUMNS,
                                rows, None, label_key="run"))
    section.notes.append(comparison["finding"])
    found.setdefault("stall_findings", []).append(comparison["finding"])
    section.data["baseline_comparison"] = comparison
