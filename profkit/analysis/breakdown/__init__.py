"""Where the GPU time goes, per rank: HTA's breakdowns on the trace model.

``rank_breakdown(trace)`` is the one entry point: a pure function of one
trace (one rank) returning plain data, so that many ranks can be mapped over
workers and only these small dicts travel.  The parts:

- ``events``: the GPU events HTA counts, with kernel type and launching call;
- ``temporal``: temporal / kernel-type breakdowns, comm/comp overlap, idle
  time per stream (host wait, kernel wait, other);
- ``idle``: the longest GPU idle stretches and what the CPU did meanwhile;
- ``launch``: CPU launch time vs GPU time, launch delays, queue depth.
"""

from __future__ import annotations

import re
from typing import Any

from profkit.analysis.breakdown import events as _events
from profkit.analysis.breakdown import idle as _idle
from profkit.analysis.timeline import intervals
from profkit.analysis.breakdown import launch as _launch
from profkit.analysis.breakdown import temporal as _temporal
from profkit.analysis.kernels.graphs import has_graphs
from profkit.analysis.cpu_only import unread_device_categories
from profkit.errors import ProfkitError
from profkit.model import Trace
from profkit.model.unread import describe_unread

_RANK_IN_NAME = re.compile(r"rank[_-]?(\d+)", re.IGNORECASE)


def rank_of(trace: Trace) -> int | None:
    """The trace's rank: what the trace records, else ``rank<N>`` in its file name."""
    if trace.meta.rank is not None:
        return int(trace.meta.rank)
    m = _RANK_IN_NAME.search(trace.path.name)
    return int(m.group(1)) if m else None


def steady_window(trace: Trace) -> tuple[int, int, int]:
    """(start_ns, end_ns, steps) spanning the steady-state steps (``profkit.analysis.steps``)."""
    from profkit.analysis.steps import find_steps

    result = find_steps(trace)
    window = result.steady_window
    if window is None:
        why = result.message or "no steady-state steps"
        raise ProfkitError(f"{trace.name}: {why}, so there is no steady-state window",
                           "run without --steady, or annotate the training step")
    return window[0], window[1], len(result.steady)


def rank_breakdown(trace: Trace, steady: bool = False, top_idle: int = 5) -> dict[str, Any]:
    """Every breakdown figure of one rank, as a dict of plain values.

    Keys: rank, file, window (what was counted), the temporal breakdown
    (kernel_time_ns, busy_ns, idle_ns, compute_ns, non_compute_ns, idle_pct,
    compute_pct, non_compute_pct), comm_ns, comm_comp_overlap_ns,
    comm_comp_overlap_pct, per-type duration sums (computation_kernel_ns,
    communication_kernel_ns, memory_kernel_ns, other_kernel_ns), idle causes
    of the rank's idle time, no stream busy (host_wait_ns, kernel_wait_ns, other_wait_ns: they
    add up to idle_ns) and HTA's per-stream figures summed over streams (stream_host_wait_ns,
    stream_kernel_wait_ns, stream_other_wait_ns: a moment counts once per idle stream),
    kernel_types ({time_ns, pct} per type and overlap), idle_by_stream,
    longest_idle, launch (summary, verdict, delay_outliers) and queue (per
    stream).  With ``steady``, only the steady-state steps' window counts."""
    events, window = _events.gpu_events(trace)
    window_info: dict[str, Any] = {
        "dropped_last_profiler_step": window.dropped_last_profiler_step,
        "last_step_start_ns": window.last_step_start_ns, "start_ns": None, "end_ns": None, "steady_steps": None,
    }
    if steady:
        lo, hi, n = steady_window(trace)
        events = _events.clip_events(events, lo, hi)
        window_info.update(start_ns=lo, end_ns=hi, steady_steps=n)
    row: dict[str, Any] = {"rank": rank_of(trace), "file": trace.name, "steady": steady}
    row.update(_temporal.temporal_breakdown(events))
    row.update(_temporal.comm_comp_overlap(events))
    types = _temporal.kernel_type_breakdown(events)
    for kind, ns in types["kernel_ns"].items():
        row[f"{kind}_kernel_ns"] = ns
    per_stream = _temporal.idle_by_stream(events)
    totals = _temporal.idle_totals(per_stream)
    union = _temporal.idle_union_causes(events)
    for cause, key in (("host_wait", "host_wait_ns"), ("kernel_wait", "kernel_wait_ns"), ("other_wait", "other_ns")):
        row[f"{cause}_ns"] = union[key]
        row[f"stream_{cause}_ns"] = totals[key]
    stream_idle = sum(totals.values())
    launches = _launch.launches(events)
    launch = _launch.launch_summary(launches, row["idle_pct"],
                                    totals["host_wait_ns"] / stream_idle if stream_idle else None,
                                    _launch.long_gap_share(*intervals.gaps(events["start"].to_numpy(),
                                                                           events["end"].to_numpy(),
                                                                           keep_reversed=True)),
                                    graphs_launched=has_graphs(trace))
    launch["delay_outliers"] = _launch.launch_delay_outliers(launches)
    unread = unread_device_categories(trace)
    if not launch["launches"] and unread:  # an MTIA trace, kernels under CUPTI's range profiler
        launch["verdict"] = f"no kernel that profkit reads: the trace records {describe_unread(unread)}"
    row.update(
        window=window_info,
        kernel_types={"time_ns": types["time_ns"], "pct": types["pct"]},
        idle_by_stream=per_stream,
        longest_idle=_idle.longest_idle(trace, events, top=top_idle),
        launch=launch,
        queue=_launch.queue_summary(_launch.queue_depth(events)),
    )
    return row
