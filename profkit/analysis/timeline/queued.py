"""When a GPU had work launched but not yet started: the stretches no host code holds the GPU up in.

From each GPU operation's launch call's return (``launch_calls``: the call with its correlation
id) to the operation's start, as a union.  Idle inside them waits on the GPU's side (another
stream, an event, a graph's upload, the launch path), not on the host: the host verdict charges
it to no Python function, and a synchronization's idle ends where it begins.  Operations whose
launch call the trace did not record add nothing.
"""

from __future__ import annotations

import numpy as np

from profkit.analysis.timeline.intervals import union
from profkit.analysis.timeline.launch_calls import launch_calls
from profkit.model import Trace
from profkit.model.schema import GPU_WORK_TABLES


def queued_intervals(trace: Trace, device: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(starts, ends), sorted and disjoint: launched work waiting to start, on ``device`` (None: any)."""
    starts, ends = [], []
    api_end = trace.array("api", "end") if trace.has("api") else np.zeros(0, np.int64)
    for table in GPU_WORK_TABLES:
        if not len(api_end) or not trace.has(table) or not trace.count(table):
            continue
        call = launch_calls(trace, table).call
        known = call >= 0
        if device is not None:
            known &= trace.array(table, "device") == device
        launched = api_end[call[known]].astype(np.int64)
        began = trace.array(table, "start")[known].astype(np.int64)
        waited = began > launched
        starts.append(launched[waited])
        ends.append(began[waited])
    if not starts:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return union(np.concatenate(starts), np.concatenate(ends))
