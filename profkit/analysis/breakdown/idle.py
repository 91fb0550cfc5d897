"""The longest stretches with nothing on the GPU, and what the CPU did then.

For each of the longest gaps between GPU events (the pieces of the
temporal breakdown's ``idle_ns``), the thread that launched the work ending
the gap is the one to look at: its annotation ranges (NVTX,
``record_function``), CUDA API calls and framework operators overlapping the
gap, each with the time it overlapped.  OS runtime calls are not part of the
trace model, so they are not listed.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from profkit.analysis.breakdown import intervals
from profkit.model import Trace

TOP_PER_KIND = 5


def longest_idle(trace: Trace, events: pd.DataFrame, top: int = 5) -> list[dict[str, Any]]:
    """The ``top`` longest GPU idle stretches, longest first.

    Each row: start_ns, end_ns, duration_ns, next_kernel (the GPU event that
    ended it), pid, tid (its launching thread, -1 unknown), launched_ns_into_gap
    (when its launch call started, relative to the gap's start; negative:
    launched before the gap, so the GPU waited on something else), cause
    ('host' or 'other'), and lists ranges, api, cpu_ops of
    {name, count, overlap_ns} on that thread."""
    if len(events) < 2:
        return []
    gap_start, gap_end = intervals.gaps(events["start"].to_numpy(), events["end"].to_numpy())
    if gap_start.size == 0:
        return []
    order = np.argsort(-(gap_end - gap_start), kind="stable")[:top]
    starts = events["start"].to_numpy()
    api = trace.table("api", ["start", "end", "pid", "tid", "name"])
    ranges = trace.table("ranges", ["start", "end", "pid", "tid", "name"])
    cpu_ops = trace.table("cpu_ops", ["start", "end", "pid", "tid", "name"])
    out = []
    for i in order:
        g0, g1 = int(gap_start[i]), int(gap_end[i])
        nxt = events.iloc[int(np.searchsorted(starts, g1, side="left"))]
        pid, tid = int(nxt["launch_pid"]), int(nxt["launch_tid"])
        if tid < 0:
            pid, tid = _busiest_thread(api, g0, g1)
        launched = int(nxt["launch_start"]) - g0 if nxt["launch_start"] >= 0 else None
        out.append({
            "start_ns": g0, "end_ns": g1, "duration_ns": g1 - g0,
            "next_kernel": str(nxt["name"]), "stream": int(nxt["stream"]), "pid": pid, "tid": tid,
            "launched_ns_into_gap": launched,
            "cause": "host" if launched is not None and launched > 0 else "other",
            "ranges": _overlapping(ranges, pid, tid, g0, g1),
            "api": _overlapping(api, pid, tid, g0, g1),
            "cpu_ops": _overlapping(cpu_ops, pid, tid, g0, g1),
        })
    return out


def _overlapping(table: pd.DataFrame, pid: int, tid: int, g0: int, g1: int) -> list[dict[str, Any]]:
    """Names of the table's events on (pid, tid) overlapping [g0, g1), with
    count and overlapped ns, most overlap first."""
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
    overlap = np.minimum(e[hit], g1) - np.maximum(s[hit], g0)
    frame = pd.DataFrame({"name": np.asarray(table["name"].array[hit].astype(str)), "overlap_ns": overlap})
    grouped = frame.groupby("name", sort=False)["overlap_ns"].agg(n="count", ns="sum").reset_index()
    grouped = grouped.sort_values(["ns", "name"], ascending=[False, True]).head(TOP_PER_KIND)
    return [{"name": name, "count": int(n), "overlap_ns": int(ns)}
            for name, n, ns in zip(grouped["name"], grouped["n"], grouped["ns"])]


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
