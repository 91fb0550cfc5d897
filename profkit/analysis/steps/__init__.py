"""Steps: what one iteration of the program is, its phases, and how long it takes.

``find_steps(trace) -> StepResult`` is the one step finder of profkit (the
report, breakdown, stalls, diff and ranks analyses use it).  In order:

1. the user's step ranges (``ranges``): NVTX or ``record_function`` ranges
   named like a step, or torch.profiler's ``ProfilerStep#N``; ranges of
   libraries (CUB, NCCL, cuBLAS, cuDNN, PyTorch internals) are never steps;
2. otherwise the repeating pattern of the launch sequence (``pattern``),
   which needs no annotation;
3. sync sites that occur once per step are reported as supporting evidence
   (``StepResult.evidence``).

How a step's times, busy time and phases are defined: ``result``.  Use
``StepResult.steady_window`` for "the steady state" and ``StepResult.steps``
(columns in ``result.STEP_COLUMNS``) for per-step figures.
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np
import pandas as pd

from profkit.analysis.cpu_only import is_cpu_only, unread_device_categories
from profkit.analysis.steps.activity import Activity, load_activity
from profkit.analysis.steps.overhead import profiler_overhead
from profkit.analysis.timeline.intervals import covered_within, union
from profkit.analysis.steps.pattern import find_pattern_steps, forget_prefix_sums, segment_signatures
from profkit.analysis.steps.ranges import NVTX, PROFILER_STEP, find_range_steps, is_library_range
from profkit.analysis.steps.result import (
    STEADY,
    STEP_COLUMNS,
    TEARDOWN,
    WARMUP,
    StepResult,
    format_duration,
    headline,
    nothing_found,
    summarize,
    teardown_start,
    warmup_count,
)
from profkit.model import Trace
from profkit.model.sync_sites import readable_range

KERNEL_PATTERN = "kernel_pattern"
SOURCES = (NVTX, PROFILER_STEP, KERNEL_PATTERN)

__all__ = ["KERNEL_PATTERN", "NVTX", "PROFILER_STEP", "SOURCES", "STEADY", "STEP_COLUMNS", "TEARDOWN", "WARMUP",
           "StepResult",
           "find_steps", "format_duration", "headline", "is_library_range"]

_cache: weakref.WeakKeyDictionary[Trace, dict[Any, StepResult]] = weakref.WeakKeyDictionary()


def find_steps(trace: Trace, *, use_ranges: bool = True, step_range: str | None = None) -> StepResult:
    """The steps of a trace (see the module docstring).  Cached per trace.

    ``use_ranges=False`` ignores annotations and finds steps from the launch
    pattern only (to compare the two, or when the annotations are wrong).
    ``step_range`` names the step range ("step" also matches "step 7" and
    "domain:step"); a ``ProfkitError`` when no range has that name."""
    per_trace = _cache.setdefault(trace, {})
    key = (use_ranges, step_range)
    if key not in per_trace:
        try:
            per_trace[key] = _find(trace, use_ranges, step_range)
        finally:
            forget_prefix_sums()
    return per_trace[key]


def _find(trace: Trace, use_ranges: bool, step_range: str | None) -> StepResult:
    act = load_activity(trace)
    span = _trace_span(trace, act)
    why_not_ranges = "annotations ignored"
    if use_ranges or step_range:
        found, why_not_ranges = find_range_steps(trace, act, step_range)
        if found is not None:
            first, last = _launched_within(act, found.pid, found.start, found.end)
            result = _result(trace, act, found.source, found.label, first, last, found.start, found.end, span,
                             evidence={"candidates": found.candidates}, names=found.names)
            result.pid, result.tid = found.pid, found.tid
            return result
    pattern, why_not_pattern = find_pattern_steps(act)
    if pattern is None:
        return nothing_found(f"no steps found: {why_not_ranges}; {why_not_pattern}", span)
    cpu_start = act.launch[pattern.first]
    cpu_end = act.launch[np.maximum(pattern.last - 1, pattern.first)]
    result = _result(trace, act, KERNEL_PATTERN, f"repeating sequence of {pattern.period} GPU operations",
                     pattern.first, pattern.last, cpu_start, cpu_end, span,
                     evidence={"period_launches": pattern.period})
    result.pid = act.pid
    return result


def _launched_within(act: Activity, pid: int, start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per range: the half-open index range of the activity launched inside it (launch order)."""
    if act.pid != pid or len(act) == 0:
        zero = np.zeros(len(start), dtype=np.int64)
        return zero, zero
    return (np.searchsorted(act.launch, start, side="left").astype(np.int64),
            np.searchsorted(act.launch, end, side="right").astype(np.int64))


def _result(trace: Trace, act: Activity, source: str, name: str, first: np.ndarray, last: np.ndarray,
            cpu_start: np.ndarray, cpu_end: np.ndarray, span: tuple[int, int],
            evidence: dict[str, Any], names: np.ndarray | None = None) -> StepResult:
    n = len(first)
    has = last > first
    gpu_start = cpu_start.astype(np.int64).copy()
    gpu_end = cpu_end.astype(np.int64).copy()
    if has.any():
        # an operation whose launch the trace lacks (launched before the recording began, run by the
        # GPU inside it) belongs to no step: placed by its GPU start, it would start a step early
        lo, hi = np.iinfo(np.int64).max, np.iinfo(np.int64).min
        known = act.launched if act.launched.any() else np.ones(len(act), dtype=bool)
        gpu_start[has] = _segment_reduce(np.minimum, np.where(known, act.start, lo), first[has], last[has])
        gpu_end[has] = _segment_reduce(np.maximum, np.where(known, act.end, hi), first[has], last[has])
        unknown = has & (gpu_start == lo)  # only such operations: their own times
        if unknown.any():
            gpu_start[unknown] = _segment_reduce(np.minimum, act.start, first[unknown], last[unknown])
            gpu_end[unknown] = _segment_reduce(np.maximum, act.end, first[unknown], last[unknown])
        # A step's first operation may run on another stream at once (a side stream preparing the
        # next input) while the step before still runs on the main stream: the step starts no
        # earlier than the main stream is done with the steps before it, where the program's own
        # per-step events, recorded on that stream, begin.
        main_end = np.full(n, hi, dtype=np.int64)
        on_main = known & _on_main_stream(act)
        main_end[has] = _segment_reduce(np.maximum, np.where(on_main, act.end, hi), first[has], last[has])
        done_before = np.maximum.accumulate(np.concatenate([[hi], main_end[:-1]]))
        gpu_start = np.where(has, np.maximum(gpu_start, done_before), gpu_start)
    start = gpu_start
    if source != KERNEL_PATTERN and n:
        # A step whose range begins while the GPU has nothing left of the work before it (it waits
        # for the next batch, a sleep, a profiler step's own work) owns that wait: it starts when
        # its range does, or when the earlier GPU work ends, whichever is later.  Cut at its first
        # GPU operation instead, the wait went to the step before (the zoo's dataloader).
        prior = int(act.end[: int(first[0])].max()) if len(act) and first[0] > 0 else np.iinfo(np.int64).min
        before_end = np.maximum.accumulate(np.concatenate([[prior], gpu_end[:-1]]))
        start = np.minimum(gpu_start, np.maximum(cpu_start.astype(np.int64), before_end))
    end = np.empty(n, dtype=np.int64)
    end[:-1] = start[1:]
    end[-1] = max(int(gpu_end[-1]), int(cpu_end[-1]))
    end = np.maximum(end, start)
    busy = covered_within(*union(act.all_start, act.all_end), start, end)
    signature = segment_signatures(act.token, first, last) if len(act) else np.zeros(n, dtype=np.uint64)
    duration = end - start
    k = warmup_count(duration, signature)
    phase = np.where(np.arange(n) < k, WARMUP, STEADY).astype(object)
    # the last step has no next step to end at: ended by its last GPU operation (no range end after
    # it), it lacks the host time that leads to a next step, and would be the steady state's "min"
    # (a step with no GPU operation ends at its range's end, which is a period's end: no cut)
    if n - k >= 2 and gpu_end[-1] > cpu_end[-1]:
        phase[-1] = TEARDOWN
    steps = pd.DataFrame({
        "index": np.arange(n, dtype=np.int64), "start_ns": start, "end_ns": end, "duration_ns": duration,
        "gpu_busy_ns": busy, "phase": phase,
        "cpu_start_ns": cpu_start.astype(np.int64), "cpu_end_ns": cpu_end.astype(np.int64),
        "launches": _launches(act, first, last),
        "name": names if names is not None else np.array([f"step {i}" for i in range(n)], dtype=object)})
    startup = (span[0], int(start[0]))
    teardown = (teardown_start(steps), max(span[1], int(end[-1])))
    evidence = {**evidence, **_sync_sites_once_per_step(trace, steps)}
    summary = summarize(steps, source, name, span)
    if not len(act):
        summary["cpu_only"] = is_cpu_only(trace)
        unread = unread_device_categories(trace)
        if unread:  # an MTIA or XPU trace: its device work is there, unread
            summary["unread_device"] = unread
    steady = steps[steps["phase"] == STEADY]
    cost = profiler_overhead(trace, steady["start_ns"].to_numpy(np.int64), steady["end_ns"].to_numpy(np.int64),
                             None)
    if cost is not None:
        summary["profiler_overhead_ns_per_step"] = round(cost["ns_per_step"], 1)
    return StepResult(source, name, steps, startup, teardown, summary, None, evidence)


def _on_main_stream(act: Activity) -> np.ndarray:
    """Whether each operation ran on the process's main stream: the one most of its GPU time ran on."""
    known = act.stream >= 0
    if not known.any():
        return np.ones(len(act), dtype=bool)
    streams, where = np.unique(act.stream[known], return_inverse=True)
    busy = np.bincount(where, weights=(act.end - act.start)[known].astype(np.float64))
    return act.stream == streams[int(np.argmax(busy))]


def _launches(act: Activity, first: np.ndarray, last: np.ndarray) -> np.ndarray:
    """Operations each step launched (those launched before the recording, which the GPU ran in
    the step's range, are not its own)."""
    if not len(act) or not act.launched.any():
        return (last - first).astype(np.int64)
    counted = np.concatenate([[0], np.cumsum(act.launched, dtype=np.int64)])
    return counted[last] - counted[first]


def _segment_reduce(ufunc: np.ufunc, values: np.ndarray, first: np.ndarray, last: np.ndarray) -> np.ndarray:
    """ufunc over each non-empty values[first:last] (ordered, non-overlapping segments), vectorized."""
    bounds = np.column_stack((first, last)).ravel()
    if bounds[-1] == len(values):  # reduceat needs every index < len; the last segment runs to the end anyway
        bounds = bounds[:-1]
    return ufunc.reduceat(values, bounds)[::2]


def _trace_span(trace: Trace, act: Activity) -> tuple[int, int]:
    """The trace's time span: the capture window where recorded, widened to every recorded event."""
    lo, hi = [], []
    if len(act.all_start):
        lo.append(int(act.all_start.min()))
        hi.append(int(act.all_end.max()))
    for table in ("api", "ranges"):
        frame = trace.table(table, ["start", "end"])
        if not frame.empty:
            lo.append(int(frame["start"].min()))
            hi.append(int(frame["end"].max()))
    if trace.meta.capture_start_ns is not None:
        lo.append(int(trace.meta.capture_start_ns))
    if trace.meta.capture_end_ns is not None:
        hi.append(int(trace.meta.capture_end_ns))
    start = min(lo, default=0)
    return start, max(max(hi, default=start), start)


def _sync_sites_once_per_step(trace: Trace, steps: pd.DataFrame) -> dict[str, Any]:
    """Sync sites (profkit's recorded Python lines) that occur exactly once in every steady-state step."""
    ranges = trace.table("ranges", ["start", "name", "kind"])
    sites = ranges[ranges["kind"].astype(str).to_numpy() == "sync_site"]
    steady = steps[steps["phase"] == STEADY]
    if sites.empty or steady.empty:
        return {}
    s, e = steady["cpu_start_ns"].to_numpy(), np.maximum(steady["end_ns"].to_numpy(), steady["cpu_end_ns"].to_numpy())
    t = sites["start"].to_numpy()
    j = np.searchsorted(s, t, side="right") - 1
    inside = (j >= 0) & (t <= e[np.maximum(j, 0)])
    per = pd.DataFrame({"name": sites["name"].astype(str).to_numpy()[inside], "step": j[inside]})
    counts = per.groupby(["name", "step"]).size().unstack(fill_value=0).reindex(columns=range(len(steady)),
                                                                               fill_value=0)
    once = [readable_range(str(name)) for name, row in counts.iterrows() if (row.to_numpy() == 1).all()]
    return {"sync_sites_once_per_step": once} if once else {}
