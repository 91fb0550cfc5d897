"""Sync stalls: every CPU-GPU synchronization, its Python line, and what it cost.

``analyze_stalls(trace)`` takes any ``Trace`` (nsys export, Kineto trace):
``profkit.analysis.sync.inputs`` turns its columns into the candidate calls,
GPU activity and CPU ranges that the event functions of
``profkit.analysis.sync.events`` consume (where the definitions of CPU time
blocked, GPU idle time caused, source and steps live); then it aggregates
per call site and per range, prices the steps and writes plain-language
findings.  The Python line of a sync comes from profkit's sync-hook ranges
(kind 'sync_site'), else, for traces with Python stacks (Kineto
``with_stack=True``), from the ``python_sites`` table (a function's first
line).  ``compare_steps`` puts two runs' step times side by side.  Nothing
here prints.
"""

from __future__ import annotations

import linecache
import os
import statistics
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from profkit.analysis.sync.events import (
    NO_RANGE,
    NvtxScan,
    Step,
    SyncEvent,
    attach_nvtx,
    attach_steps,
    build_events,
    group_text,
    label_of,
    step_matcher,
)
from profkit.analysis.compare import noise
from profkit.analysis.sync import inputs
from profkit.analysis.sync.idle import attach_gpu_idle, cut_idle_at_host_work, cut_idle_at_queued_work
from profkit.analysis.timeline.queued import queued_intervals
from profkit.analysis.sync.calls import NvtxRange, decode_thread, thread_key
from profkit.errors import ProfkitError
from profkit.model import Trace

__all__ = ["StallReport", "Step", "SyncEvent", "analyze_stalls", "compare_steps"]


# -- source lines -----------------------------------------------------------------
def local_source_line(source: str, roots: Sequence[Path] = ()) -> tuple[str | None, str | None]:
    """(path found here, its line) for a recorded "file:line", or (None, None).

    The hook records paths relative to the profiled program's working folder
    (often "../../x/y.py"); the file is looked up as given under each root
    (the current folder last), then by ever shorter tails of the path
    ("x/y.py", then "y.py"), longest first.  ``local_code`` differing from
    the recorded code shows when the file changed since, or another file
    of that name was found.
    """
    path, _, line = source.rpartition(":")
    if not path or not line.isdigit():
        return None, None
    parts = [p for p in Path(path).parts if p not in ("..", ".", "/")]
    all_roots = [*roots, Path.cwd()]
    candidates = [Path(path)] if Path(path).is_absolute() else []
    candidates += [Path(os.path.normpath(root / path)) for root in all_roots]
    candidates += [root.joinpath(*parts[i:]) for i in range(len(parts)) for root in all_roots]
    for candidate in candidates:
        if candidate.is_file():
            text = linecache.getline(str(candidate), int(line))
            return str(candidate), (" ".join(text.split()) or None)
    return None, None


# -- aggregation ------------------------------------------------------------------
def nvtx_label(event: SyncEvent, is_step: Callable[[NvtxRange], bool] | None, step_label: str | None) -> str:
    """The innermost enclosing range's name; a step range reads as the step label ("step" for "step 7")."""
    if not event.nvtx:
        return NO_RANGE
    innermost = event.nvtx[-1]
    if is_step is not None and step_label and is_step(innermost):
        return step_label
    return innermost.name


def aggregate_sites(events: Sequence[SyncEvent], steady: Sequence[int] | int, label: Callable[[SyncEvent], str],
                    roots: Sequence[Path] = ()) -> list[dict[str, Any]]:
    """One row per call site (known source) or per (API, NVTX range) (source unknown), by cost.

    ``steady``: the indices of the steady-state steps (an int n: steps 0..n-1).
    ``in_steps`` counts a site's syncs in any step; ``per_step`` figures are
    over the steady-state steps only (warm-up syncs are not a per-step cost),
    and its ``gpu_idle_ns`` is only the idle that lies inside steady steps
    (``SyncEvent.steady_idle_ns``): the rest, ``one_time_gpu_idle_ns``, is
    start-up, warm-up, teardown or time between steps, never a per-step cost."""
    steady_steps = set(range(steady)) if isinstance(steady, int) else set(steady)
    n_steps = len(steady_steps)
    groups: dict[tuple, list[SyncEvent]] = defaultdict(list)
    for e in events:
        groups[_event_site_key(e, label)].append(e)
    rows = []
    for key, es in groups.items():
        first = es[0]
        in_steps = [e for e in es if e.step is not None]
        per_steady = [e for e in in_steps if e.step in steady_steps]
        path, local = local_source_line(first.source, roots) if first.source else (None, None)
        file, _, line = (first.source or "").rpartition(":")
        rows.append({
            "source": first.source,
            "file": file or None,
            "line": int(line) if line.isdigit() else None,
            "code": first.code or local,
            "local_path": path,
            "local_code": local,
            "kind": first.kind,
            "cause": _most_common(e.cause for e in es),
            "api": _most_common(e.api for e in es),
            "copy": _most_common(e.copy for e in es if e.copy),
            "copy_pattern": _most_common(e.copy_pattern for e in es if e.copy_pattern),
            "count": len(es),
            "cpu_blocked_ns": sum(e.cpu_blocked_ns for e in es),
            "gpu_idle_ns": sum(e.gpu_idle_ns for e in es),
            "steady_gpu_idle_ns": sum(e.steady_idle_ns for e in es),
            "one_time_gpu_idle_ns": sum(e.gpu_idle_ns - e.steady_idle_ns for e in es),
            "max_cpu_blocked_ns": max(e.cpu_blocked_ns for e in es),
            "nvtx": _most_common(label(e) for e in es),
            "thread": _most_common(e.tid for e in es),
            "pid": first.pid,
            "device": _most_common(e.device for e in es if e.device is not None),
            "in_steps": len(in_steps),
            "per_step": {
                "syncs": len(per_steady) / n_steps,
                "cpu_blocked_ns": sum(e.cpu_blocked_ns for e in per_steady) / n_steps,
                "gpu_idle_ns": sum(e.steady_idle_ns for e in es) / n_steps,
                "steps_with_sync": len({e.step for e in per_steady}),
                "steady_steps": n_steps,
            } if n_steps else None,
        })
    # Cost inside steps first: a long idle gap after start-up copies is real
    # but is not what slows the loop down.
    rows.sort(key=lambda r: (-(r["per_step"] or {}).get("gpu_idle_ns", 0), -r["gpu_idle_ns"], -r["cpu_blocked_ns"],
                             -r["count"], r["source"] or "", r["api"]))
    return rows


def _event_site_key(e: SyncEvent, label: Callable[[SyncEvent], str]) -> tuple:
    """A sync's site: its source line and the sync hook's kind (`.item()`), or, where no hook named
    the kind, the line and the cause: a `.item()` and a device synchronize on one line (a loop's
    `print(loss.item())` and the profiler's own synchronize under `prof.step()`) are two sites,
    not 18 of one.  Without a source: the API, copy and range."""
    if e.source is not None:
        return ("source", e.source, e.kind, None if e.kind else e.cause)
    return ("api", e.api, e.copy_pattern, label(e))


def aggregate_by_nvtx(events: Sequence[SyncEvent], label: Callable[[SyncEvent], str]) -> list[dict[str, Any]]:
    groups: dict[str, list[SyncEvent]] = defaultdict(list)
    for e in events:
        groups[label(e)].append(e)
    rows = [{
        "nvtx": name,
        "count": len(es),
        "cpu_blocked_ns": sum(e.cpu_blocked_ns for e in es),
        "gpu_idle_ns": sum(e.gpu_idle_ns for e in es),
        "sites": len({e.source for e in es if e.source}),
        "source_unknown": sum(1 for e in es if e.source is None),
        "apis": ", ".join(f"{api} x{n}" for api, n in Counter(e.api for e in es).most_common()),
    } for name, es in groups.items()]
    rows.sort(key=lambda r: (-r["gpu_idle_ns"], -r["cpu_blocked_ns"], r["nvtx"]))
    return rows


def _most_common(values: Iterable[Any]) -> Any:
    counts = Counter(values)
    return counts.most_common(1)[0][0] if counts else None


# -- findings ---------------------------------------------------------------------
def step_statistics(steps: Sequence[Step]) -> dict[str, Any] | None:
    """Step times and sync costs over the steady-state steps (``count``: all steps).

    ``sync_gpu_idle_pct`` is the sync-caused idle inside the steady steps as a
    share of those steps' time (their summed durations): never over 100%,
    since a step holds only the idle inside its own GPU window."""
    if not steps:
        return None
    all_steps = steps
    steps = [s for s in all_steps if s.phase == "steady"] or list(all_steps)
    durations = [s.duration_ns for s in steps]
    estimates = [s.estimated_without_syncs_ns for s in steps]
    total = sum(durations)
    idle = sum(s.gpu_idle_ns for s in steps)
    return {
        "count": len(all_steps),
        "steady_count": len(steps),
        "total_ns": total,
        "mean_ns": statistics.fmean(durations),
        "median_ns": statistics.median(durations),
        "min_ns": min(durations),
        "max_ns": max(durations),
        "sync_gpu_idle_mean_ns": statistics.fmean(s.gpu_idle_ns for s in steps),
        "sync_gpu_idle_pct": 100.0 * idle / total if total > 0 else 0.0,
        "sync_cpu_blocked_mean_ns": statistics.fmean(s.cpu_blocked_ns for s in steps),
        "syncs_per_step": statistics.fmean(s.syncs for s in steps),
        "estimated_mean_without_syncs_ns": statistics.fmean(estimates),
        "estimated_median_without_syncs_ns": statistics.median(estimates),
    }


def write_findings(sites: Sequence[dict[str, Any]], step_stats: dict[str, Any] | None, step_label: str | None,
                   run_ns: int | None, threshold_pct: float) -> list[str]:
    """Plain-language findings for syncs that cost at least ``threshold_pct`` of the steady-state
    step time (or of the run).

    A per-step cost is the sync-caused GPU idle inside the steady steps, per
    steady step (a site that syncs every other step costs half its idle per
    step), given as a share of the steady-state step time (their summed
    durations, so never over 100%) next to the median step time.  Idle a
    site caused outside the steady steps (start-up, warm-up, teardown: a
    final ``torch.cuda.synchronize()`` after the loop) is one-time: said as
    a total and a share of the run, never per step.
    """
    out = []
    if step_stats:
        typical = step_stats["median_ns"]
        mean = step_stats["mean_ns"]
        label = step_label or "step"
        for site in sites:
            per = site["per_step"]
            if not per or mean <= 0 or per["gpu_idle_ns"] <= 0:
                continue
            pct = 100.0 * per["gpu_idle_ns"] / mean
            if pct < threshold_pct:
                continue
            # the steady steps' syncs, which the per-step figures are over (in_steps also counts warm-up's)
            steady_syncs = round(per["syncs"] * per["steady_steps"]) if per.get("steady_steps") else site["in_steps"]
            times = "once" if steady_syncs == 1 else f"{steady_syncs:,} times"
            out.append(f"{_site_name(site)} synchronizes {times} in the steady steps, {_num(per['syncs'])} per step, "
                       f"costing {_ms(per['gpu_idle_ns'])} ms per step in GPU idle time ({pct:.0f}% of the "
                       f"steady-state {label} time: a mean {label} of {_ms(mean)} ms; median {label} "
                       f"{_ms(typical)} ms)")
        total_pct = step_stats.get("sync_gpu_idle_pct", 0.0)
        if total_pct >= threshold_pct:
            text = (f"Synchronizations leave the GPU idle {_ms(step_stats['sync_gpu_idle_mean_ns'])} ms per "
                    f"{label} ({total_pct:.0f}% of the steady-state {label} time: a mean {label} of {_ms(mean)} ms)")
            without = step_stats["estimated_median_without_syncs_ns"]
            if _ms(without) != _ms(typical):  # the median step may hold no sync: nothing to estimate then
                text += (f"; estimated median {label} time without them: {_ms(without)} ms instead of "
                         f"{_ms(typical)} ms (an estimate: a launch-bound loop gains less)")
            out.append(text)
        out += _one_time_findings(sites, run_ns, threshold_pct, label)
    elif run_ns:
        for site in sites:
            pct = 100.0 * site["gpu_idle_ns"] / run_ns
            if pct >= threshold_pct:
                out.append(f"{_site_name(site)} synchronizes {site['count']} times, costing "
                           f"{_ms(site['gpu_idle_ns'])} ms of GPU idle time ({pct:.0f}% of the run)")
    return out


def _one_time_findings(sites: Sequence[dict[str, Any]], run_ns: int | None, threshold_pct: float,
                       label: str) -> list[str]:
    """Sites whose idle outside the steady steps is at least ``threshold_pct`` of the run: a one-time cost."""
    out = []
    for site in sites:
        once = site.get("one_time_gpu_idle_ns") or 0
        if not run_ns or once <= 0 or 100.0 * once / run_ns < threshold_pct:
            continue
        out.append(f"{_site_name(site)} left the GPU idle {_ms(once)} ms outside the steady-state {label}s "
                   f"(a one-time cost: start-up, warm-up or teardown; {100.0 * once / run_ns:.0f}% of the run)")
    return out


def host_work_findings(host_work: dict[str, int], run_ns: int | None, threshold_pct: float) -> list[str]:
    """The one-time host work no sync is charged with (``inputs.host_work``), where it is at
    least ``threshold_pct`` of the run: torch.compile's compile, GPU module loading."""
    out = []
    for key, what in (("compile_ns", "torch.compile compiled"), ("module_load_ns", "GPU modules were loaded")):
        ns = host_work.get(key) or 0
        if run_ns and ns > 0 and 100.0 * ns / run_ns >= threshold_pct:
            out.append(f"{what} for {_ms(ns)} ms ({100.0 * ns / run_ns:.0f}% of the run; a one-time cost): "
                       "the GPU idle meanwhile is charged to no synchronization")
    return out


def _site_name(site: dict[str, Any]) -> str:
    if site["source"]:
        file = os.path.basename(site["file"] or "") or site["file"]
        code = f" `{site['code']}`" if site["code"] else ""
        return f"{file}:{site['line']}{code}"
    where = f" in {site['nvtx']}" if site["nvtx"] != NO_RANGE else ""
    copy = f" ({site['copy_pattern']})" if site.get("copy_pattern") else ""
    return f"{site['api']}{copy} (source unknown){where}"


def _ms(ns: float) -> str:
    return f"{ns / 1e6:.3g}" if ns < 1e7 else f"{ns / 1e6:,.1f}"


def _num(x: float) -> str:
    if 0 < x < 0.95:
        return f"{x:.2g}"  # a sync every 30 steps is 0.033 per step, not 0
    return f"{x:.0f}" if abs(x - round(x)) < 0.05 else f"{x:.1f}"


# -- the facade -----------------------------------------------------------------
@dataclass
class StallReport:
    """Everything ``profkit stalls`` and the report show; ``to_dict`` is the JSON form."""

    export: str
    step_range: str | None
    threshold_pct: float
    sites: list[dict[str, Any]]
    by_nvtx: list[dict[str, Any]]
    events: list[SyncEvent]
    steps: list[Step]
    step_stats: dict[str, Any] | None
    findings: list[str]
    run_ns: int | None = None
    # one-time host work that no sync is charged with: {"compile_ns": .., "module_load_ns": ..}
    host_work: dict[str, int] | None = None

    def event_dicts(self) -> list[dict[str, Any]]:
        return [{
            "start": e.start, "end": e.end, "api": e.api, "cause": e.cause, "kind": e.kind,
            "source": e.source, "code": e.code, "thread": e.tid, "pid": e.pid, "device": e.device,
            "cpu_blocked_ns": e.cpu_blocked_ns, "gpu_idle_ns": e.gpu_idle_ns,
            "idle_start": e.idle_start, "idle_end": e.idle_end, "copy": e.copy,
            "nvtx": [r.name for r in e.nvtx], "step": e.step,
        } for e in self.events]

    def summary_dict(self) -> dict[str, Any]:
        """``to_dict`` without the per-event and per-step lists (they grow with the run)."""
        return {
            "export": self.export, "step_range": self.step_range, "threshold_pct": self.threshold_pct,
            "run_ns": self.run_ns, "findings": self.findings, "sites": self.sites, "by_nvtx": self.by_nvtx,
            "step_stats": self.step_stats, "host_work": self.host_work,
        }

    def to_dict(self) -> dict[str, Any]:
        return {**self.summary_dict(), "steps": [s.to_dict() for s in self.steps], "events": self.event_dicts()}


def analyze_stalls(trace: Trace, *, step_range: str | None = None, threshold_pct: float = 5.0,
                   source_roots: Sequence[Path] = ()) -> StallReport:
    """Find, price and attribute every synchronization of a trace (see the module docstring).

    ``source_roots``: folders to look for the recorded source files in (the
    profiled program's working folder, when known).
    """
    trace.require("api", "CUDA API trace data")
    # the kernels (GPU idle, steps) load on a second connection while the API calls load here;
    # a no-op where the report has them already
    trace.prefetch("kernels", ["start", "end", "device", "pid", "correlation", "name"])
    events = build_events(inputs.api_calls(trace))
    events += [SyncEvent(c.global_tid, (c,)) for c in inputs.unmatched_syncs(trace)]
    events.sort(key=lambda e: (e.start, e.global_tid))
    devices = inputs.gpu_devices(trace)
    # only a call that made the CPU wait can leave the GPU without work (a cudaStreamWaitEvent
    # returns at once: 6.5 us calls were charged 25 ms of cuBLAS module loading)
    blocking = [e for e in events if e.blocks_cpu]
    attach_gpu_idle(blocking, devices, lambda device: inputs.gpu_activity(trace, device),
                    lambda device: inputs.first_kernel_start(trace, device))
    cut_idle_at_queued_work(blocking, lambda device: queued_intervals(trace, device))
    host_work = inputs.host_work(trace)
    cut_idle_at_host_work(blocking, host_work)
    scan = attach_nvtx(events, inputs.cpu_ranges(trace))
    attach_python_sites(events, inputs.python_sites(trace))
    label, steps = finder_steps(trace, step_range)
    attach_steps(events, steps)
    is_step = step_matcher(step_range) if step_range else _key_matcher(label, scan)
    roots = [*source_roots, trace.path.parent]

    def range_label(e: SyncEvent) -> str:
        return nvtx_label(e, is_step, label)

    sites = aggregate_sites(events, [s.index for s in steps if s.phase == "steady"], range_label, roots)
    stats = step_statistics(steps)
    window = _run_ns(trace)
    return StallReport(
        export=trace.name, step_range=label, threshold_pct=threshold_pct, sites=sites,
        by_nvtx=aggregate_by_nvtx(events, range_label), events=events, steps=steps, step_stats=stats,
        findings=write_findings(sites, stats, label, window, threshold_pct)
        + host_work_findings(host_work.totals(), window, threshold_pct), run_ns=window,
        host_work=host_work.totals())


def finder_steps(trace: Trace, step_range: str | None = None) -> tuple[str | None, list[Step]]:
    """The steps of ``profkit.analysis.steps.find_steps`` (the one step finder) and their label.

    A step's syncs are those called in its CPU window: its range, or for
    steps of the launch pattern from its first launch to the next step's
    (the last one: as long as the median step)."""
    from profkit.analysis.steps import KERNEL_PATTERN, find_steps

    result = find_steps(trace, step_range=step_range)
    if not result.found:
        return None, []
    frame = result.steps
    cpu_start = frame["cpu_start_ns"].to_numpy()
    cpu_end = frame["cpu_end_ns"].to_numpy().copy()
    if result.source == KERNEL_PATTERN:
        # up to the next step's first launch; the last step, which has no next, as long as
        # the typical one (its closing sync comes after its last launch)
        cpu_end[:-1] = cpu_start[1:]
        typical = int(np.median(np.diff(cpu_start))) if len(cpu_start) > 1 else 0
        cpu_end[-1] = max(int(cpu_end[-1]), int(frame["end_ns"].iloc[-1]), int(cpu_start[-1]) + typical)
    thread = thread_key(result.pid or 0, max(result.tid or 0, 0))
    label = step_range if step_range else ("step" if result.source == KERNEL_PATTERN else result.name)
    steps = [Step(int(i), str(name), thread, int(a), int(b), duration=int(d), phase=str(phase), gpu_start=int(g))
             for i, name, a, b, d, phase, g in zip(frame["index"].tolist(), frame["name"].tolist(),
                                                   cpu_start.tolist(), cpu_end.tolist(), frame["duration_ns"].tolist(),
                                                   frame["phase"].tolist(), frame["start_ns"].tolist())]
    return label, steps


def _key_matcher(label: str | None, scan: NvtxScan) -> Callable[[NvtxRange], bool] | None:
    keys = {key for key in scan.top_level if label_of(key) == label}
    return (lambda r: (r.domain, group_text(r.text or "")) in keys) if keys else None


def attach_python_sites(events: Sequence[SyncEvent], sites: dict[tuple[int, int], tuple[str, str]]) -> None:
    """Give events without a sync-hook range the Python frame the trace's stacks put
    around their waiting call (``python_sites``: "file.py:LINE" of the function)."""
    if not sites:
        return
    for event in events:
        if event.source is None and event.anchor.correlation_id is not None:
            found = sites.get((decode_thread(event.global_tid)[0], event.anchor.correlation_id))
            if found is not None:
                event.source = found[0]


def _run_ns(trace: Trace) -> int | None:
    meta = trace.meta
    if meta.capture_start_ns is None or meta.capture_end_ns is None:
        return None
    return (meta.capture_end_ns - meta.capture_start_ns) or None


def compare_steps(report_a: StallReport, report_b: StallReport) -> dict[str, Any]:
    """Step times of two runs (e.g. with and without a print), from ``find_steps``: run A
    (this one) against run B (the baseline).

    The verdict is `profkit diff`'s: ``noise.step_change`` of the two runs' steady-state step
    durations (the median's change with its 95% bootstrap interval; "slower"/"faster" only
    when the interval excludes 0 and the change is at least 2%), in ``change``.  Means and
    the estimate of run A without its syncs are given too.
    """
    a, b = report_a.step_stats, report_b.step_stats
    if not a or not b:
        missing = report_a.export if not a else report_b.export
        raise ProfkitError(f"{missing} has no steps to compare (no step ranges, no repeating launch pattern)",
                           hint="name them with --step-range, or wrap each step in an NVTX range")
    change = noise.step_change(steady_durations(report_b.steps), steady_durations(report_a.steps))
    diff_median = a["median_ns"] - b["median_ns"]
    diff_mean = a["mean_ns"] - b["mean_ns"]
    pct = 100.0 * diff_median / b["median_ns"] if b["median_ns"] else None
    finding = (f"{report_a.export}: median {report_a.step_range} {_ms(a['median_ns'])} ms vs "
               f"{report_b.export}: {_ms(b['median_ns'])} ms -- {noise.change_words(change)} "
               f"per step; the sync-idle estimate for {report_a.export} without its syncs is "
               f"{_ms(a['estimated_median_without_syncs_ns'])} ms")
    keys_a, keys_b = {_site_key(s): s for s in report_a.sites}, {_site_key(s): s for s in report_b.sites}
    return {
        "a": {"export": report_a.export, "step_range": report_a.step_range, **a},
        "b": {"export": report_b.export, "step_range": report_b.step_range, **b},
        "median_difference_ns": diff_median,
        "mean_difference_ns": diff_mean,
        "median_difference_pct": pct,
        "change": change,
        "sites_only_in_a": [_site_name(keys_a[k]) for k in keys_a if k not in keys_b],
        "sites_only_in_b": [_site_name(keys_b[k]) for k in keys_b if k not in keys_a],
        "finding": finding,
    }


def steady_durations(steps: Sequence[Step]) -> np.ndarray:
    """The steady-state steps' durations (all steps where none is steady), as `profkit diff`
    samples them (``diff.step_samples``)."""
    chosen = [s for s in steps if s.phase == "steady"] or list(steps)
    return np.asarray([s.duration if s.duration is not None else s.end - s.start for s in chosen], dtype=np.float64)


def _site_key(site: dict[str, Any]) -> tuple:
    """A site across two runs of one program: its source line and kind, or API, copy and range."""
    if site["source"]:
        return ("source", site["source"], site["kind"], None if site["kind"] else site["cause"])
    return ("api", site["api"], site.get("copy_pattern"), site["nvtx"])


# -- timeline figure data -------------------------------------------------------
@dataclass
class Timeline:
    """A window of the trace for the stalls figure: GPU work, syncs, their idle gaps, steps."""

    start: int
    end: int
    device: int | None
    gpu: list[tuple[str, int, int]]  # (kernel|memcpy|memset, start, end)
    syncs: list[dict[str, Any]]  # start, end, idle_start, idle_end, label
    steps: list[tuple[int, int, int]]  # (index, start, end)
    title: str


def timeline(trace: Trace, report: StallReport, *, max_steps: int = 3) -> Timeline | None:
    """The window to draw: up to ``max_steps`` steps after the first (warm-up) one, or,
    without steps, the costliest sync and the gap it caused.  None without syncs."""
    if not report.events:
        return None
    if report.steps:
        first = 1 if len(report.steps) > max_steps else 0
        chosen = report.steps[first:first + max_steps]
        t0, t1 = chosen[0].start, chosen[-1].end
        title = f"{report.export}: {report.step_range} {chosen[0].index}-{chosen[-1].index}"
    else:
        top = max(report.events, key=lambda e: (e.gpu_idle_ns + e.cpu_blocked_ns, -e.start))
        t0, t1 = top.start, max(top.end, top.idle_end or top.end)
        pad = max((t1 - t0) // 4, 1000)
        t0, t1 = t0 - pad, t1 + pad
        title = f"{report.export}: costliest sync"
    inside = [e for e in report.events if e.start < t1 and max(e.end, e.idle_end or 0) > t0]
    device = Counter(e.device for e in inside if e.device is not None).most_common(1)
    dev = device[0][0] if device else None
    gpu = inputs.gpu_activity_window(trace, dev, t0, t1) if dev is not None else []
    syncs = [{"start": e.start, "end": e.end, "idle_start": e.idle_start, "idle_end": e.idle_end,
              "label": (f"{os.path.basename(e.source.rpartition(':')[0])}:{e.source.rpartition(':')[2]}"
                        if e.source else e.anchor.name) + f" ({e.cause})"}
             for e in inside if e.device in (dev, None)]
    steps = [(s.index, s.start, s.end) for s in report.steps if s.start < t1 and s.end > t0]
    return Timeline(t0, t1, dev, gpu, syncs, steps, title)
