"""What the capture itself cost the steps: the profiler's own work inside them.

nsys records its work on the program's threads in PROFILER_OVERHEAD (model table
``profiler_overhead``): CUPTI buffer flushes, its thread-local and chunk
allocations, its hooks around ``dlopen``.  The part of it inside the steady-state
steps, on the steps' process (the union over its threads, so that two threads'
overlapping rows count once), per step, is the least the capture added to each
step.  It is not all of it: tracing every CUDA call and sampling Python stacks slow
the program without a row here; only a bare run of the program measures the rest
(benchmarks/capture_overhead.py).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from profkit.analysis.timeline.intervals import covered_within, union
from profkit.model import Trace


def profiler_overhead(trace: Trace, start: np.ndarray, end: np.ndarray, pid: int | None) -> dict[str, Any] | None:
    """``{"ns_per_step", "rows"}`` of the profiler's work inside the windows [start, end) (sorted,
    disjoint) on process ``pid`` (None: any); None when the trace records no such rows."""
    if not trace.has("profiler_overhead") or not len(start):
        return None
    rows = trace.table("profiler_overhead", ["start", "end", "pid"])
    if rows.empty:
        return None
    if pid is not None:
        rows = rows[rows["pid"].to_numpy() == pid]
    s, e = union(rows["start"].to_numpy(np.int64), rows["end"].to_numpy(np.int64))
    inside = covered_within(s, e, start, end)
    starts = rows["start"].to_numpy(np.int64)
    in_steps = int(((starts >= start.min()) & (starts < end.max())).sum())
    return {"ns_per_step": float(inside.sum()) / len(start), "rows": in_steps}
