"""Where a rank's GPU time goes, under HTA's definitions.

- **Temporal breakdown** (``get_temporal_breakdown``): ``kernel_time`` is
  the span from the first GPU event's start to the last one's end; ``idle``
  is the part of it with nothing running; ``compute`` the union of
  computation kernels; ``non_compute = kernel_time - compute - idle``
  (communication, memory and synchronization not hidden under compute).
- **Kernel type breakdown** (``get_gpu_kernel_breakdown`` with memory
  kernels): the time in which exactly a given set of kernel types runs,
  e.g. "computation overlapping communication".
- **Communication/computation overlap** (``get_comm_comp_overlap``): the
  share of communication time (union of NCCL kernels) during which a
  computation kernel runs too.
- **Idle time per stream** (``get_idle_time_breakdown``): each gap between
  consecutive kernels/memcpy/memset on a stream is *host wait* when the
  next one's launching CUDA call started after the previous one ended (the
  CPU was late), else *kernel wait* when the gap is under 30 µs, else
  *other*.  HTA's docstring calls its default threshold "30 nanoseconds",
  but HTA's timestamps are microseconds, so it compares gaps with 30 µs;
  profkit uses 30,000 ns, which is what HTA computes.
- **Idle time of the rank by cause** (profkit's, not HTA's): the same three
  causes for the rank's idle time, the union over streams (``idle_ns``: no
  stream busy).  Each gap between the merged busy intervals takes the cause
  of the operation that ends it (host wait when its launch started after the
  gap began).  The three add up to ``idle_ns``.  Summing HTA's per-stream
  figures instead counts a moment once per idle stream: on the committed DDP
  capture (rank 0, steady state, two streams) that summed 134 ms of host
  wait against 41 ms of idle time.

Times are integer ns.  HTA rounds Kineto's fractional microseconds to whole
microseconds (start up, end down) before it measures; profkit keeps the
nanoseconds the trace records.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from profkit.analysis.kernels import origin
from profkit.analysis.timeline import intervals

# HTA's default consecutive_kernel_delay (30, compared with microsecond gaps).
KERNEL_WAIT_THRESHOLD_NS = 30_000
HOST_WAIT = "host_wait"
KERNEL_WAIT = "kernel_wait"
OTHER_WAIT = "other"
IDLE_CATEGORIES = (HOST_WAIT, KERNEL_WAIT, OTHER_WAIT)
# HTA's kernel_type_to_analysis order; labels name the types in this order.
KERNEL_TYPES = (origin.COMPUTATION, origin.COMMUNICATION, origin.MEMORY)


def _of_type(events: pd.DataFrame, kind: str) -> np.ndarray:
    """Mask of the events of one kernel type (a categorical compares codes, not strings)."""
    return (events["kernel_type"] == kind).to_numpy()


def _pct(part: float, whole: float) -> float | None:
    return 100.0 * part / whole if whole else None


def temporal_breakdown(events: pd.DataFrame) -> dict[str, Any]:
    """kernel_time_ns, idle_ns, compute_ns, non_compute_ns and their shares (%)."""
    s = events["start"].to_numpy()
    e = events["end"].to_numpy()
    if s.size == 0:
        return {"span_start_ns": None, "span_end_ns": None, "kernel_time_ns": 0, "busy_ns": 0, "idle_ns": 0, "compute_ns": 0, "non_compute_ns": 0,
                "idle_pct": None, "compute_pct": None, "non_compute_pct": None}
    ms, me = intervals.union(s, e, keep_reversed=True)
    kernel_time = int(me[-1] - ms[0])
    busy = int((me - ms).sum())
    idle = kernel_time - busy
    is_compute = _of_type(events, origin.COMPUTATION)
    compute = intervals.union_length(s[is_compute], e[is_compute], keep_reversed=True)
    non_compute = kernel_time - compute - idle
    return {
        "span_start_ns": int(ms[0]), "span_end_ns": int(me[-1]), "kernel_time_ns": kernel_time, "busy_ns": busy, "idle_ns": idle, "compute_ns": compute,
        "non_compute_ns": non_compute, "idle_pct": _pct(idle, kernel_time),
        "compute_pct": _pct(compute, kernel_time), "non_compute_pct": _pct(non_compute, kernel_time),
    }


def kernel_type_breakdown(events: pd.DataFrame) -> dict[str, Any]:
    """Time per kernel type and per overlap of types, plus plain duration sums.

    ``time_ns``: {label: ns} with HTA's labels in lower case ("computation",
    "communication", "memory", "computation overlapping communication", ...);
    ``pct``: each label's share of their total (HTA's ``percentage``);
    ``kernel_ns``: the sum of event durations per type (overlaps counted
    twice, like ``nsys stats`` totals)."""
    s = events["start"].to_numpy()
    e = events["end"].to_numpy()
    masks = {t: _of_type(events, t) for t in (*KERNEL_TYPES, origin.OTHER)}
    sets = [(s[masks[t]], e[masks[t]]) for t in KERNEL_TYPES]
    by_mask = intervals.overlap_by_mask(sets, keep_reversed=True)
    time_ns: dict[str, int] = {}
    for mask, ns in sorted(by_mask.items()):
        label = " overlapping ".join(t for i, t in enumerate(KERNEL_TYPES) if mask & (1 << i))
        time_ns[label] = ns
    whole = sum(time_ns.values())
    durations = e - s
    kernel_ns = {t: int(durations[m].sum()) for t, m in masks.items()}
    return {"time_ns": time_ns, "pct": {k: _pct(v, whole) for k, v in time_ns.items()}, "kernel_ns": kernel_ns}


def comm_comp_overlap(events: pd.DataFrame) -> dict[str, Any]:
    """Communication time, the part of it overlapped by computation, and the share (%)."""
    s = events["start"].to_numpy()
    e = events["end"].to_numpy()
    comm = _of_type(events, origin.COMMUNICATION)
    comp = _of_type(events, origin.COMPUTATION)
    by_mask = intervals.overlap_by_mask([(s[comm], e[comm]), (s[comp], e[comp])], keep_reversed=True)
    comm_ns = by_mask.get(1, 0) + by_mask.get(3, 0)
    overlap_ns = by_mask.get(3, 0)
    return {"comm_ns": comm_ns, "comm_comp_overlap_ns": overlap_ns,
            "comm_comp_overlap_pct": _pct(overlap_ns, comm_ns)}


def idle_by_stream(events: pd.DataFrame, threshold_ns: int = KERNEL_WAIT_THRESHOLD_NS) -> list[dict[str, Any]]:
    """Per stream, idle time between its kernels/memcpy/memset by cause.

    Rows: stream, host_wait_ns, kernel_wait_ns, other_ns, idle_ns and each
    category's share of the stream's idle time (``*_pct``)."""
    work = events[events["source"] != "sync"]
    rows = []
    for stream, group in work.groupby("stream", sort=True):
        g = group.sort_values("start", kind="stable")
        start = g["start"].to_numpy()
        end = g["end"].to_numpy()
        launch = g["launch_start"].to_numpy()
        prev_end = end[:-1]
        gap = start[1:] - prev_end
        host, kernel, other = _idle_causes(gap, prev_end, launch[1:], threshold_ns)
        row: dict[str, Any] = {"stream": int(stream), "host_wait_ns": int(gap[host].sum()),
                               "kernel_wait_ns": int(gap[kernel].sum()), "other_ns": int(gap[other].sum())}
        row["idle_ns"] = row["host_wait_ns"] + row["kernel_wait_ns"] + row["other_ns"]
        for cat in IDLE_CATEGORIES:
            row[f"{cat}_pct"] = _pct(row[f"{cat}_ns"], row["idle_ns"])
        rows.append(row)
    return rows


def idle_union_causes(events: pd.DataFrame, threshold_ns: int = KERNEL_WAIT_THRESHOLD_NS) -> dict[str, int]:
    """The rank's idle time (no stream busy) by cause: host_wait_ns, kernel_wait_ns, other_ns,
    summing to ``temporal_breakdown``'s idle_ns (see the module docstring)."""
    s = events["start"].to_numpy()
    e = events["end"].to_numpy()
    gap_start, gap_end = intervals.gaps(s, e, keep_reversed=True)
    if gap_start.size == 0:
        return {"host_wait_ns": 0, "kernel_wait_ns": 0, "other_ns": 0}
    # the operation that ends each gap: the one starting at its end (the earliest launch among
    # several starting together: the GPU waited for the first of them)
    launch_all = events["launch_start"].to_numpy()
    order = np.lexsort((np.where(launch_all < 0, np.iinfo(np.int64).max, launch_all), s))  # unknown last
    launch = launch_all[order[np.searchsorted(s[order], gap_end, side="left")]]
    gap = gap_end - gap_start
    host, kernel, other = _idle_causes(gap, gap_start, launch, threshold_ns)
    return {"host_wait_ns": int(gap[host].sum()), "kernel_wait_ns": int(gap[kernel].sum()),
            "other_ns": int(gap[other].sum())}


def idle_totals_of(start: np.ndarray, end: np.ndarray, stream: np.ndarray, launch_start: np.ndarray,
                   threshold_ns: int = KERNEL_WAIT_THRESHOLD_NS,
                   window: tuple[int, int] | None = None) -> dict[str, int]:
    """``idle_totals(idle_by_stream(events))`` from the columns of kernels, memcpy and
    memset sorted by start (no sync records), without a frame per stream.  ``window``
    (lo, hi): only the events overlapping it, cut to it (``intervals.clip``).

    Each column is gathered in stream order once and dropped when used: a million
    events' temporaries a few at a time."""
    rows = None if window is None else np.flatnonzero((end > window[0]) & (start < window[1]))
    key = stream if rows is None else stream[rows]
    order = np.argsort(key, kind="stable")  # each stream's events stay in start order
    key = key[order]
    same = key[1:] == key[:-1]  # consecutive events of one stream: a gap between them
    del key
    if rows is not None:
        order = rows[order]
        del rows
    prev_end = end[order][:-1]
    next_start = start[order][1:]
    if window is not None:
        np.minimum(prev_end, window[1], out=prev_end)
        np.maximum(next_start, window[0], out=next_start)
    gap = next_start - prev_end
    del next_start
    launch = launch_start[order][1:]
    del order
    host, kernel, other = (same & cause for cause in _idle_causes(gap, prev_end, launch, threshold_ns))
    del launch, prev_end
    return {"host_wait_ns": int(gap[host].sum()), "kernel_wait_ns": int(gap[kernel].sum()),
            "other_ns": int(gap[other].sum())}


def _idle_causes(gap: np.ndarray, prev_end: np.ndarray, next_launch: np.ndarray,
                 threshold_ns: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Masks (host wait, kernel wait, other) of the gaps before each next operation, HTA's
    causes: its launch came after the previous operation ended (host), else a gap under
    ``threshold_ns`` (kernel), else other."""
    host = (next_launch >= 0) & (next_launch > prev_end)
    kernel = ~host & (gap < threshold_ns)
    return host, kernel, ~host & ~kernel


def idle_totals(per_stream: list[dict[str, Any]]) -> dict[str, int]:
    """The per-stream idle categories summed over streams."""
    return {f"{cat}_ns": sum(r[f"{cat}_ns"] for r in per_stream) for cat in IDLE_CATEGORIES}
