"""The attribution of a step's host time and GPU idle time to Python functions (see the package)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from profkit.analysis.cpu_only import unread_device_categories
from profkit.analysis.host.threads import other_thread_rows
from profkit.analysis.steps import find_steps
from profkit.analysis.host.data_loading import loading_mask, loop_files
from profkit.analysis.host.own_frames import without_own_frames
from profkit.analysis.steps.activity import load_activity
from profkit.analysis.timeline.intervals import complement, covered_within, difference, union
from profkit.analysis.timeline.queued import queued_intervals
from profkit.errors import ProfkitError
from profkit.model import Trace
from profkit.model.schema import GPU_WORK_TABLES
from profkit.model.trace import KINETO
from profkit.model.unread import describe_unread

KINETO_STACKS = "kineto_stacks"
NSYS_SAMPLING = "nsys_python_sampling"
HOW = ("capture Python stacks: torch.profiler.profile(with_stack=True) (profkit trace --backend torch records "
       "them), or nsys profile --python-sampling=true then nsys export --type sqlite --include-blobs=true")
FUNCTION_COLUMNS = ("function", "file", "line", "self_ns_per_step", "inclusive_ns_per_step", "gpu_idle_ns_per_step")


@dataclass
class HostResult:
    """``summary``: steps (those the per-step figures are over), steady_steps, step_median_ns,
    gpu_idle_ns_per_step, explained_idle_pct, source,
    main_tid; ``functions``: rows of ``FUNCTION_COLUMNS`` (main thread), most GPU idle first;
    ``other_threads``: rows of ``tid`` + ``FUNCTION_COLUMNS``."""

    summary: dict[str, Any]
    functions: list[dict[str, Any]]
    other_threads: list[dict[str, Any]] = field(default_factory=list)
    step_windows: np.ndarray | None = None  # (n, 2) the steps' [start, end)
    # the main thread's innermost-frame segments (start, end, "function (file:line)") and the idle intervals,
    # for the verdict
    segments: tuple[np.ndarray, np.ndarray, list[str]] | None = None
    idle: tuple[np.ndarray, np.ndarray] | None = None
    main: tuple[int, int] | None = None
    # the main thread's data-loading frames (``data_loading``): "function (file:line)" -> (starts, ends)
    loading: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"summary": self.summary, "functions": self.functions, "other_threads": self.other_threads}


def host_time(trace: Trace, steady_only: bool = True) -> HostResult:
    """The host time per step per Python function (see the package docstring): over the
    steady-state steps, or with ``steady_only=False`` over every step (warm-up too)."""
    if not trace.has("python_frames"):
        raise ProfkitError(f"{trace.name} has no Python stacks", hint=HOW)
    # profkit's own frames (its launcher, its sync hook) are transparent: their time is the caller's
    frames = without_own_frames(trace.table("python_frames"))
    if frames.empty:
        raise ProfkitError(f"{trace.name} has no Python stacks", hint=HOW)
    unread = unread_device_categories(trace)
    if unread and not any(trace.has(table) for table in GPU_WORK_TABLES):
        raise ProfkitError(f"{trace.name} records {describe_unread(unread)}, which profkit does not read: no GPU "
                           "idle to attribute", hint="profkit reads CUDA and ROCm GPU work")
    steps = find_steps(trace)
    if not steps.found or steps.steady.empty:
        raise ProfkitError(f"{trace.name}: no steady-state steps to attribute host time to "
                           f"({steps.message or 'no steps found'})", hint="see profkit steps")
    steady = steps.steady if steady_only else steps.steps
    lo, hi = steady["start_ns"].to_numpy(np.int64), steady["end_ns"].to_numpy(np.int64)
    n = len(steady)
    raw_start, raw_end = idle_intervals(trace, lo, hi)
    # idle with work already launched and not yet started (a dependency, the launch path) is no host
    # code's: the function the host is in then did not hold the GPU up (a final sync while queued work runs)
    idle_start, idle_end = difference(raw_start, raw_end, *queued_intervals(trace))
    # host time per step over the steps' host windows; GPU idle over their GPU windows (lo, hi)
    host_lo, host_hi, own_windows = host_windows(steps.steps, steady)
    idle_total = int((idle_end - idle_start).sum())
    raw_total = int((raw_end - raw_start).sum())
    main = main_thread(trace, frames, steps)
    tids = frames["tid"].to_numpy(np.int64)
    pids = frames["pid"].to_numpy(np.int64)
    threads = sorted(set(zip(pids.tolist(), tids.tolist())), key=lambda t: t != main)
    functions: list[dict[str, Any]] = []
    attributed = 0
    main_segments = None
    loading: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    if main in threads:
        main_frames = frames[(pids == main[0]) & (tids == main[1])]
        functions, attributed, main_segments = _thread_rows(main_frames, host_lo, host_hi, idle_start, idle_end, n)
        loading = _loading_frames(main_frames, functions, int(min(lo[0], host_lo[0])), int(max(hi[-1], host_hi[-1])))
    # every other thread in one pass (a thread at a time took minutes for 40,000 threads)
    others = other_thread_rows(frames, [t for t in threads if t != main], host_lo, host_hi, idle_start, idle_end, n,
                               innermost_segments)
    summary = {
        "steps": n,  # the steps every per-step figure is over: the steady ones, or every step
        "steady_steps": int(len(steps.steady)),
        "steady_only": steady_only,
        "step_median_ns": steps.summary["median_ns"],  # the steady median, as `profkit steps` says it
        "gpu_idle_ns_per_step": raw_total / n,
        # of it, idle while launched work waited to start: charged to no function
        "gpu_idle_queued_ns_per_step": (raw_total - idle_total) / n,
        "explained_idle_pct": round(100.0 * attributed / idle_total, 2) if idle_total else None,
        "source": KINETO_STACKS if trace.meta.source == KINETO else NSYS_SAMPLING,
        "main_tid": main[1],
        "step_source": steps.source,
        # where self and inclusive time are measured: the steps' host ranges ("cpu"), or their GPU
        # windows ("gpu") where the trace has no host range for every step
        "host_windows": "cpu" if own_windows else "gpu",
    }
    return HostResult(summary, functions, others, np.column_stack((lo, hi)), main_segments,
                      (idle_start, idle_end), main, loading)


def function_label(function: str, file: str, line: int) -> str:
    """How the verdict names a function: as the table's row, "forward (linear.py:130)"."""
    return f"{function} ({Path(file).name}:{line})"


def _loading_frames(frames: pd.DataFrame, rows: list[dict[str, Any]], first_ns: int,
                    last_ns: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The thread's data-loading frames per function (labelled as its table row), as merged intervals."""
    mask = loading_mask(frames, loop_files(frames, first_ns, last_ns))
    if not mask.any():
        return {}
    line = {(r["function"], r["file"]): r["line"] for r in rows}
    hits = frames[mask]
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for (fn, file), group in hits.groupby([hits["function"].astype(str), hits["file"].astype(str)]):
        label = function_label(fn, file, line.get((fn, file), int(group["line"].iloc[0])))
        out[label] = union(group["start"].to_numpy(np.int64), group["end"].to_numpy(np.int64))
    return out


def host_windows(steps: pd.DataFrame, chosen: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, bool]:
    """The host's side of the ``chosen`` steps: from a step's range start on the CPU to the next
    step's (the last step: to its own range end), where the host did that step's work.  A GPU-bound
    program's host runs ahead: inside the steps' GPU windows it is already issuing later steps, or
    running the code after the loop, which is no step's host time.  The GPU windows themselves
    where any step lacks a host range, or the ranges do not follow each other.  The flag: whether
    the windows are the host's."""
    gpu = chosen["start_ns"].to_numpy(np.int64), chosen["end_ns"].to_numpy(np.int64), False
    cpu_start, cpu_end = steps["cpu_start_ns"].to_numpy(np.int64), steps["cpu_end_ns"].to_numpy(np.int64)
    if not len(cpu_start) or (cpu_start < 0).any() or (cpu_end < cpu_start).any() or (np.diff(cpu_start) <= 0).any():
        return gpu
    next_start = np.append(cpu_start[1:], np.maximum(cpu_end[-1], cpu_start[-1]))
    at = steps.index.get_indexer(chosen.index)
    lo, hi = cpu_start[at], next_start[at]
    if (hi <= lo).any():
        return gpu
    return lo, hi, True


def idle_intervals(trace: Trace, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The GPU-idle intervals inside the windows [lo, hi): each window minus the union of all GPU work."""
    act = load_activity(trace)
    return complement(*union(act.all_start, act.all_end), lo, hi)


def main_thread(trace: Trace, frames: pd.DataFrame, steps: Any) -> tuple[int, int]:
    """(pid, tid) of the thread that holds the step ranges, else of the Python thread launching the most."""
    threads = set(zip(frames["pid"].tolist(), frames["tid"].tolist()))
    if steps.tid is not None and (steps.pid, steps.tid) in threads:
        return int(steps.pid), int(steps.tid)
    api = trace.table("api", ["pid", "tid"])
    counts = api.groupby(["pid", "tid"]).size().to_dict() if not api.empty else {}
    span = frames.assign(d=frames["end"] - frames["start"]).groupby(["pid", "tid"])["d"].sum().to_dict()
    return max(threads, key=lambda t: (counts.get(t, 0), span.get(t, 0)))


def innermost_segments(start: np.ndarray, end: np.ndarray, depth: np.ndarray) -> tuple[np.ndarray, ...]:
    """One thread's frames as disjoint segments (seg_start, seg_end, frame index): which frame was
    innermost when.  Frames nest; a sweep with a stack, in start order (outer first at a tie)."""
    order = np.lexsort((depth, start)).tolist()
    s_list, e_list = start.tolist(), end.tolist()
    seg_s: list[int] = []
    seg_e: list[int] = []
    seg_f: list[int] = []
    stack: list[int] = []
    cur = 0

    def close_until(t: float) -> None:
        nonlocal cur
        while stack and e_list[stack[-1]] <= t:
            top = stack.pop()
            if e_list[top] > cur:
                seg_s.append(cur)
                seg_e.append(e_list[top])
                seg_f.append(top)
                cur = e_list[top]

    for k in order:
        s = s_list[k]
        close_until(s)
        if stack and s > cur:
            seg_s.append(cur)
            seg_e.append(s)
            seg_f.append(stack[-1])
        stack.append(k)
        cur = max(cur, s) if stack[:-1] else s
    close_until(float("inf"))
    return (np.array(seg_s, dtype=np.int64), np.array(seg_e, dtype=np.int64), np.array(seg_f, dtype=np.int64))


def _thread_rows(frames: pd.DataFrame, lo: np.ndarray, hi: np.ndarray, idle_s: np.ndarray, idle_e: np.ndarray,
                 n: int) -> tuple[list[dict[str, Any]], int, tuple[np.ndarray, np.ndarray, list[str]]]:
    """The function rows of one thread, and its GPU idle time in a frame (ns, all steps)."""
    start, end = frames["start"].to_numpy(np.int64), frames["end"].to_numpy(np.int64)
    key = pd.MultiIndex.from_arrays([frames["function"].astype(str), frames["file"].astype(str)])
    codes, keys = pd.factorize(key)
    line = frames["line"].to_numpy(np.int64)
    seg_s, seg_e, seg_f = innermost_segments(start, end, frames["depth"].to_numpy(np.int64))
    window_s, window_e = lo, hi  # steady steps tile: sorted and disjoint
    self_t = covered_within(window_s, window_e, seg_s, seg_e)
    idle_t = covered_within(idle_s, idle_e, seg_s, seg_e)
    seg_key = codes[seg_f]
    m = len(keys)
    self_k = np.bincount(seg_key, weights=self_t, minlength=m)
    idle_k = np.bincount(seg_key, weights=idle_t, minlength=m)
    # the line: where the function spent the most self time (nsys samples lines; Kineto has one per function)
    per_line = pd.DataFrame({"k": seg_key, "line": line[seg_f], "t": self_t}).groupby(["k", "line"])["t"].sum()
    best_line = {k: ln for (k, ln), _ in per_line.sort_values(ascending=False).groupby(level=0).head(1).items()}
    first_line = pd.Series(line).groupby(codes).first().to_dict()
    incl = np.zeros(m, dtype=np.int64)
    order = np.lexsort((start, codes))
    bounds = np.flatnonzero(np.diff(codes[order])) + 1
    for group in np.split(order, bounds):
        if len(group):
            ms, me = union(start[group], end[group])
            incl[codes[group[0]]] = int(covered_within(window_s, window_e, ms, me).sum())
    rows = []
    row_line = np.full(m, -1, dtype=np.int64)
    for k in range(m):
        if incl[k] <= 0 and idle_k[k] <= 0:
            continue
        fn, file = keys[k]
        ln = best_line.get(k) if self_k[k] > 0 else None
        row_line[k] = int(ln if ln is not None else first_line.get(k, -1))
        rows.append({"function": fn, "file": file, "line": int(row_line[k]),
                     "self_ns_per_step": float(self_k[k]) / n, "inclusive_ns_per_step": float(incl[k]) / n,
                     "gpu_idle_ns_per_step": float(idle_k[k]) / n})
    rows.sort(key=lambda r: (-r["gpu_idle_ns_per_step"], -r["self_ns_per_step"], -r["inclusive_ns_per_step"]))
    # a segment is named as its function's table row (one label per function, the row's line): the
    # verdict's causes are then the table's rows, with the table's figures
    names = [function_label(fn, file, int(row_line[k])) for k, (fn, file) in enumerate(keys)]
    label = [names[k] for k in seg_key.tolist()]
    return rows, int(idle_t.sum()), (seg_s, seg_e, label)
