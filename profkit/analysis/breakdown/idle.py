"""The longest stretches with nothing on the GPU, and what the CPU did then.

For each of the longest gaps between GPU events (the pieces of the
temporal breakdown's ``idle_ns``), the thread that launched the work ending
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

from profkit.analysis.breakdown import intervals
from profkit.model import Trace

TOP_PER_KIND = 5
# What the launching thread did, one list per kind: the keys of a gap's row.
CPU_KINDS = ("ranges", "api", "cpu_ops", "osrt")
_GPU_TABLES = ("kernels", "memcpy", "memset")


def longest_idle(trace: Trace, events: pd.DataFrame, top: int = 5) -> list[dict[str, Any]]:
    """The ``top`` longest GPU idle stretches, longest first.

    Each row: start_ns, end_ns, duration_ns, next_kernel (the GPU event that
    ended it), pid, tid (its launching thread, -1 unknown), launched_ns_into_gap
    (when its launch call started, relative to the gap's start; negative:
    launched before the gap, so the GPU waited on something else), cause
    ('host' or 'other'), and lists ranges, api, cpu_ops, osrt of
    {name, count, overlap_ns} on that thread (osrt: OS runtime calls, empty
    where the trace has none)."""
    if len(events) < 2:
        return []
    gap_start, gap_end = intervals.gaps(events["start"].to_numpy(), events["end"].to_numpy())
    if gap_start.size == 0:
        return []
    order = np.argsort(-(gap_end - gap_start), kind="stable")[:top]
    starts = events["start"].to_numpy()
    cpu = _cpu_tables(trace)
    out = []
    for i in order:
        g0, g1 = int(gap_start[i]), int(gap_end[i])
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
    operation (kernel, memcpy, memset) that ended it: the first one on that
    device starting at or after ``end_ns``, found by correlation id.  Each
    row: pid, tid (-1 unknown), next_op (its name), launched_ns_into_gap (as
    in ``longest_idle``; None unknown) and the CPU_KINDS lists.  For the
    report's gaps, which come from its own utilization bins rather than from
    ``gpu_events``."""
    cpu = _cpu_tables(trace)
    api = cpu["api"]
    gpu = [trace.table(t, ["start", "device", "pid", "correlation"]) for t in _GPU_TABLES]
    names = [trace.table("kernels", ["name"])["name"].array, None, None]
    out = []
    for g0, g1, device in gaps:
        nxt = _first_op_from(gpu, g1, device)
        pid = tid = -1
        launched: int | None = None
        label = ""
        if nxt is not None:
            table, row = nxt
            label = str(names[table][row]) if names[table] is not None else _GPU_TABLES[table]
            launch = _launch_row(api, int(gpu[table]["pid"].iat[row]), int(gpu[table]["correlation"].iat[row]))
            if launch is not None:
                pid, tid = int(api["pid"].iat[launch]), int(api["tid"].iat[launch])
                launched = int(api["start"].iat[launch]) - g0
        if tid < 0:
            pid, tid = _busiest_thread(api, g0, g1)
        out.append({"pid": pid, "tid": tid, "next_op": label, "launched_ns_into_gap": launched,
                    **_activity(cpu, pid, tid, g0, g1)})
    return out


def longest_gaps_within(trace: Trace, lo: int, hi: int, top: int = 5) -> list[tuple[int, int, int]]:
    """The ``top`` longest stretches ``(start_ns, end_ns, device)`` inside ``[lo, hi)`` with no
    kernel, memcpy or memset on a device, between two of its operations; longest first."""
    frames = [trace.table(t, ["start", "end", "device"]) for t in _GPU_TABLES]
    start = np.concatenate([f["start"].to_numpy() for f in frames])
    end = np.concatenate([f["end"].to_numpy() for f in frames])
    device = np.concatenate([f["device"].to_numpy() for f in frames])
    found: list[tuple[int, int, int]] = []
    for d in np.unique(device):
        s, e, _ = intervals.clip(start[device == d], end[device == d], lo, hi)
        g0, g1 = intervals.gaps(s, e)
        for i in np.argsort(-(g1 - g0), kind="stable")[:top]:
            found.append((int(g0[i]), int(g1[i]), int(d)))
    found.sort(key=lambda g: (g[0] - g[1], g[0]))
    return found[:top]


def _cpu_tables(trace: Trace) -> dict[str, pd.DataFrame]:
    tables = {kind: trace.table(kind, ["start", "end", "pid", "tid", "name"]) for kind in CPU_KINDS}
    tables["api"] = trace.table("api", ["start", "end", "pid", "tid", "name", "correlation"])
    return tables


def _activity(cpu: dict[str, pd.DataFrame], pid: int, tid: int, g0: int, g1: int) -> dict[str, Any]:
    return {kind: _overlapping(cpu[kind], pid, tid, g0, g1) for kind in CPU_KINDS}


def _first_op_from(gpu: list[pd.DataFrame], at: int, device: int) -> tuple[int, int] | None:
    """(table index, row) of the earliest GPU operation on ``device`` starting at or after ``at``."""
    best: tuple[int, int, int] | None = None
    for index, frame in enumerate(gpu):
        if not len(frame):
            continue
        s = frame["start"].to_numpy()
        hit = np.flatnonzero((s >= at) & (frame["device"].to_numpy() == device))
        if hit.size:
            row = int(hit[np.argmin(s[hit])])
            if best is None or s[row] < best[0]:
                best = (int(s[row]), index, row)
    return None if best is None else (best[1], best[2])


def _launch_row(api: pd.DataFrame, pid: int, correlation: int) -> int | None:
    """The earliest CUDA call with this correlation id (of this process where several share it)."""
    if correlation < 0 or not len(api):
        return None
    hit = np.flatnonzero(api["correlation"].to_numpy() == correlation)
    if hit.size > 1 and pid >= 0:
        same = hit[api["pid"].to_numpy()[hit] == pid]
        hit = same if same.size else hit
    if not hit.size:
        return None
    return int(hit[np.argmin(api["start"].to_numpy()[hit])])


def _overlapping(table: pd.DataFrame, pid: int, tid: int, g0: int, g1: int) -> list[dict[str, Any]]:
    """Names of the table's events on (pid, tid) overlapping [g0, g1), with their
    count and the time they cover inside it (ns), most time first."""
    if not len(table) or tid < 0:
        return []
    s = table["start"].to_numpy()
    e = table["end"].to_numpy()
    e = np.where(e < 0, g1, e)  # a range never closed lasts to the end
    hit = (table["tid"].to_numpy() == tid) & (e > g0) & (s < g1)
    if pid >= 0:
        hit &= table["pid"].to_numpy() == pid
    if not hit.any():
        return []
    lo, hi = np.maximum(s[hit], g0), np.minimum(e[hit], g1)
    names = np.asarray(table["name"].array[hit].astype(str))
    # time covered, not summed: an operator nested in one of the same name (Kineto's
    # aten::mse_loss_backward inside aten::mse_loss_backward) counts its time once
    rows = [(name, int((names == name).sum()), intervals.total(lo[names == name], hi[names == name]))
            for name in np.unique(names)]
    rows.sort(key=lambda r: (-r[2], r[0]))
    return [{"name": name, "count": n, "overlap_ns": ns} for name, n, ns in rows[:TOP_PER_KIND]]


def _busiest_thread(api: pd.DataFrame, g0: int, g1: int) -> tuple[int, int]:
    """The thread with the most CUDA API time in the gap, when the launch is unknown."""
    s = api["start"].to_numpy()
    e = api["end"].to_numpy()
    hit = (e > g0) & (s < g1)
    if not hit.any():
        return -1, -1
    overlap = np.minimum(e[hit], g1) - np.maximum(s[hit], g0)
    frame = pd.DataFrame({"pid": api["pid"].to_numpy()[hit], "tid": api["tid"].to_numpy()[hit], "ns": overlap})
    best = frame.groupby(["pid", "tid"])["ns"].sum().idxmax()
    return int(best[0]), int(best[1])
