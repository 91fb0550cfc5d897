"""The longest stretches with nothing on the GPU, and what the CPU did then.

For each of the longest gaps between GPU operations (no kernel, copy or set
running: the report's idle stretches, see ``longest_idle``), the thread that launched the work ending
the gap is the one to look at: its annotation ranges (NVTX,
``record_function``), CUDA API calls, framework operators and, where the
trace has them (nsys ``-t osrt``), OS runtime calls overlapping the gap, each
with the time it overlapped.  A gap the thread spent in ``pthread_cond_wait``
or ``nanosleep`` says the host itself was waiting, not launching.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from profkit.analysis.timeline.launch_calls import launch_calls
from profkit.analysis.timeline import intervals
from profkit.analysis.timeline.busy import gpu_busy_segments
from profkit.model import Trace, schema
from profkit.model.sync_sites import readable_range

TOP_PER_KIND = 5
# What the launching thread did, one list per kind: the keys of a gap's row.
CPU_KINDS = ("ranges", "api", "cpu_ops", "osrt")
_GPU_TABLES = schema.GPU_WORK_TABLES


def longest_idle(trace: Trace, events: pd.DataFrame, top: int = 5) -> list[dict[str, Any]]:
    """The ``top`` longest GPU idle stretches, longest first: stretches with no kernel, copy,
    set or graph replay on the rank's GPU, as the report's idle stretches (the same stretches,
    to the ns).  HTA's ``idle_ns`` also counts CUDA synchronization records (the CPU waiting on
    a stream) as GPU events, so a stretch can be a few microseconds longer than its piece of
    ``idle_ns``: the time from the last operation's end to the moment the waiting call returned.

    Each row: start_ns, end_ns, duration_ns, next_kernel (the GPU event that
    ended it), pid, tid (its launching thread, -1 unknown), launched_ns_into_gap
    (when its launch call started, relative to the gap's start; negative:
    launched before the gap, so the GPU waited on something else), cause
    ('host' or 'other'), and lists ranges, api, cpu_ops, osrt of
    {name, count, overlap_ns} on that thread (osrt: OS runtime calls, empty
    where the trace has none)."""
    events = events[events["source"].to_numpy() != "sync"]
    if len(events) < 2:
        return []
    gap_start, gap_end = intervals.gaps(events["start"].to_numpy(), events["end"].to_numpy(), keep_reversed=True)
    if gap_start.size == 0:
        return []
    starts = events["start"].to_numpy()
    cpu = _cpu_tables(trace)
    out = []
    for g0, g1 in intervals.longest(gap_start, gap_end, top):
        nxt = events.iloc[int(np.searchsorted(starts, g1, side="left"))]
        pid, tid = int(nxt["launch_pid"]), int(nxt["launch_tid"])
        if tid < 0:
            pid, tid = _busiest_thread(cpu["api"], g0, g1)
        launched = int(nxt["launch_start"]) - g0 if nxt["launch_start"] >= 0 else None
        out.append({
            "start_ns": g0, "end_ns": g1, "duration_ns": g1 - g0,
            "next_kernel": str(nxt["name"]), "stream": int(nxt["stream"]), "pid": pid, "tid": tid,
            "launched_ns_into_gap": launched,
            "cause": "host" if launched is not None and launched > 0 else "other",
            **_activity(cpu, pid, tid, g0, g1),
        })
    return out


def cpu_in_gaps(trace: Trace, gaps: Sequence[tuple[int, int, int]]) -> list[dict[str, Any]]:
    """What the launching thread did in each ``(start_ns, end_ns, device)`` idle gap.

    The gap's launching thread is the one whose CUDA call launched the GPU
    operation (kernel, memcpy, memset, graph replay) that ended it: the first one on that
    device starting at or after ``end_ns``, found by correlation id.  Each
    row: pid, tid (-1 unknown), next_op (its name), launched_ns_into_gap (as
    in ``longest_idle``; None unknown) and the CPU_KINDS lists.  For the
    report's gaps, which come from its own utilization bins rather than from
    ``gpu_events``."""
    if not gaps:
        return []
    cpu = _cpu_tables(trace)
    api = cpu["api"]
    # each table by start time once: a gap then reads the rows near it, not millions
    by_start = {kind: _ByStart(table) for kind, table in cpu.items()}
    gpu = [trace.table(t, ["start", "device", "pid", "correlation"]) for t in _GPU_TABLES]
    gpu_by_start = [_ByStart(frame) for frame in gpu]
    # what names the operation that ends a gap: kernels and graph replays by name, the rest by table
    names = [trace.table(t, ["name"])["name"].array if t in ("kernels", "graphs") else None for t in _GPU_TABLES]
    out = []
    for g0, g1, device in gaps:
        nxt = _first_op_from(gpu, gpu_by_start, g1, device)
        pid = tid = -1
        launched: int | None = None
        label = ""
        if nxt is not None:
            table, row = nxt
            label = str(names[table][row]) if names[table] is not None else _GPU_TABLES[table]
            launch = _launch_row(trace, _GPU_TABLES[table], row, api, int(gpu[table]["pid"].iat[row]),
                                 int(gpu[table]["correlation"].iat[row]))
            if launch is not None:
                pid, tid = int(api["pid"].iat[launch]), int(api["tid"].iat[launch])
                launched = int(api["start"].iat[launch]) - g0
        if tid < 0:
            pid, tid = _busiest_thread(api, g0, g1, by_start["api"])
        out.append({"pid": pid, "tid": tid, "next_op": label, "launched_ns_into_gap": launched,
                    **_activity(cpu, pid, tid, g0, g1, by_start)})
    return out


def longest_gaps_within(trace: Trace, lo: int, hi: int, top: int = 5) -> list[tuple[int, int, int]]:
    """The ``top`` longest stretches ``(start_ns, end_ns, device)`` inside ``[lo, hi)`` with no
    kernel, memcpy or memset on a device that works in the window; longest first.  The window's
    edges count: a step that opens with host time before its first operation (steps start at
    their range where the GPU had nothing left) idles from ``lo``, as one that ends idle does to ``hi``.

    Read off the device's busy intervals, merged once per trace (``timeline.gpu_busy_segments``):
    the union clipped to the window is the union of the clipped operations, so its holes are
    the window's idle stretches, with no second sort of a million operations."""
    found: list[tuple[int, int, int]] = []
    for device, busy in gpu_busy_segments(trace).items():
        s, e, _ = intervals.clip(busy.starts, busy.ends, lo, hi)
        if not len(s):
            continue
        gap_s, gap_e = np.concatenate([[lo], e]), np.concatenate([s, [hi]])
        held = gap_e > gap_s
        gap_s, gap_e = gap_s[held], gap_e[held]
        found += [(g0, g1, device) for g0, g1 in intervals.longest(gap_s, gap_e, top)]
    found.sort(key=lambda g: (g[0] - g[1], g[0]))
    return found[:top]


def _cpu_tables(trace: Trace) -> dict[str, pd.DataFrame]:
    tables = {kind: trace.table(kind, ["start", "end", "pid", "tid", "name"]) for kind in CPU_KINDS}
    tables["api"] = trace.table("api", ["start", "end", "pid", "tid", "name", "correlation"])
    return tables


class _ByStart:
    """A table's rows ordered by start, with the running maximum of their ends: the rows
    that can overlap a window ``[g0, g1)`` are one slice of that order (binary searches),
    so each gap reads the rows near it instead of scanning the table."""

    def __init__(self, table: pd.DataFrame) -> None:
        start = table["start"].to_numpy() if len(table) else np.zeros(0, dtype=np.int64)
        # rows come (nearly) in start order: usually no sort and no order array
        self.order = None if not len(start) or bool(np.all(start[1:] >= start[:-1])) else \
            np.argsort(start, kind="stable")
        self.start = start if self.order is None else start[self.order]
        if "end" in table:
            end = table["end"].to_numpy()
            ends = np.where(end < 0, np.iinfo(np.int64).max, end)  # a range never closed lasts to the end
            if self.order is not None:
                ends = ends[self.order]
            self.max_end = np.maximum.accumulate(ends, out=ends) if len(ends) else ends

    def overlapping(self, g0: int, g1: int) -> np.ndarray:
        """Rows (ascending) that may overlap [g0, g1): a superset, filtered exactly by the caller."""
        hi = int(np.searchsorted(self.start, g1, side="left"))
        lo = min(int(np.searchsorted(self.max_end, g0, side="right")), hi)
        return np.arange(lo, hi) if self.order is None else np.sort(self.order[lo:hi])

    def first_from(self, at: int) -> int:
        """Position (in start order) of the first row starting at or after ``at``."""
        return int(np.searchsorted(self.start, at, side="left"))

    def row(self, position: np.ndarray) -> np.ndarray:
        return position if self.order is None else self.order[position]


def _activity(cpu: dict[str, pd.DataFrame], pid: int, tid: int, g0: int, g1: int,
              by_start: dict[str, _ByStart] | None = None) -> dict[str, Any]:
    return {kind: _overlapping(cpu[kind], pid, tid, g0, g1, by_start[kind] if by_start else None)
            for kind in CPU_KINDS}


def _first_op_from(gpu: list[pd.DataFrame], by_start: list[_ByStart], at: int, device: int) -> tuple[int, int] | None:
    """(table index, row) of the earliest GPU operation on ``device`` starting at or after ``at``
    (the first in row order among equal starts; the first table among equal starts)."""
    best: tuple[int, int, int] | None = None
    for index, (frame, ordered) in enumerate(zip(gpu, by_start)):
        if not len(frame):
            continue
        devices = frame["device"].to_numpy()
        position = ordered.first_from(at)
        step = 1024
        while position < len(ordered.start):  # the next operation is usually within a few rows
            rows = ordered.row(np.arange(position, min(position + step, len(ordered.start))))
            hit = np.flatnonzero(devices[rows] == device)
            if hit.size:
                row = int(rows[hit[0]])
                if best is None or ordered.start[position + hit[0]] < best[0]:
                    best = (int(ordered.start[position + hit[0]]), index, row)
                break
            position += step
            step *= 4
    return None if best is None else (best[1], best[2])


def _launch_row(trace: Trace, table: str, row: int, api: pd.DataFrame, pid: int, correlation: int) -> int | None:
    """The earliest CUDA call with this correlation id (of this process where several share it)."""
    if correlation < 0 or not len(api):
        return None
    if pid >= 0:
        same = launch_calls(trace, table).calls_of(row)  # this process's calls with the id
        if same.size:
            return int(same[np.argmin(api["start"].to_numpy()[same])])
    hit = np.flatnonzero(api["correlation"].to_numpy() == correlation)
    if not hit.size:
        return None
    return int(hit[np.argmin(api["start"].to_numpy()[hit])])


def _overlapping(table: pd.DataFrame, pid: int, tid: int, g0: int, g1: int,
                 by_start: _ByStart | None = None) -> list[dict[str, Any]]:
    """Names of the table's events on (pid, tid) overlapping [g0, g1), with their
    count and the time they cover inside it (ns), most time first."""
    if not len(table) or tid < 0:
        return []
    rows = by_start.overlapping(g0, g1) if by_start is not None else slice(None)
    s = table["start"].to_numpy()[rows]
    e = table["end"].to_numpy()[rows]
    e = np.where(e < 0, g1, e)  # a range never closed lasts to the end
    hit = (table["tid"].to_numpy()[rows] == tid) & (e > g0) & (s < g1)
    if pid >= 0:
        hit &= table["pid"].to_numpy()[rows] == pid
    if not hit.any():
        return []
    lo, hi = np.maximum(s[hit], g0), np.minimum(e[hit], g1)
    names = np.asarray(table["name"].array[rows][hit].astype(str))
    # time covered, not summed: an operator nested in one of the same name (Kineto's
    # aten::mse_loss_backward inside aten::mse_loss_backward) counts its time once
    rows = [(readable_range(name), int((names == name).sum()),
             intervals.union_length(lo[names == name], hi[names == name], keep_reversed=True))
            for name in np.unique(names)]
    rows.sort(key=lambda r: (-r[2], r[0]))
    return [{"name": name, "count": n, "overlap_ns": ns} for name, n, ns in rows[:TOP_PER_KIND]]


def _busiest_thread(api: pd.DataFrame, g0: int, g1: int, by_start: _ByStart | None = None) -> tuple[int, int]:
    """The thread with the most CUDA API time in the gap, when the launch is unknown."""
    rows = by_start.overlapping(g0, g1) if by_start is not None else slice(None)
    s = api["start"].to_numpy()[rows]
    e = api["end"].to_numpy()[rows]
    hit = (e > g0) & (s < g1)
    if not hit.any():
        return -1, -1
    overlap = np.minimum(e[hit], g1) - np.maximum(s[hit], g0)
    frame = pd.DataFrame({"pid": api["pid"].to_numpy()[rows][hit], "tid": api["tid"].to_numpy()[rows][hit],
                          "ns": overlap})
    best = frame.groupby(["pid", "tid"])["ns"].sum().idxmax()
    return int(best[0]), int(best[1])
