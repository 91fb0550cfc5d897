"""When a GPU had work launched but not yet started: the stretches no host code holds the GPU up in.

From each GPU operation's launch call's return (``launch_calls``: the call with its correlation
id) plus the trace's own launch latency, to the operation's start, as a union.  Idle inside them
waits on the GPU's side (another stream, an event, a graph's upload), not on the host: the host
verdict charges it to no Python function, and a synchronization's idle ends where it begins.

The **launch latency** is the median, over operations launched while their device was idle, of
the time from the launch call's return to their start: what any launch onto an idle GPU costs,
measured in the trace itself.  It stays the host's (work launched late starts that much later),
so the launch path of a launch-bound loop is never counted as a wait inside the GPU.  Operations
whose launch call the trace did not record add nothing.
"""

from __future__ import annotations

import weakref

import numpy as np

from profkit.analysis.timeline.intervals import union
from profkit.analysis.timeline.launch_calls import launch_calls
from profkit.model import Trace
from profkit.model.schema import GPU_WORK_TABLES


def queued_intervals(trace: Trace, device: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(starts, ends), sorted and disjoint: launched work waiting to start beyond the launch
    latency, on ``device`` (None: any).  Worked out once per trace."""
    found = _cache.get(trace)
    if found is None:
        launched, began, ended, on = _launches(trace)
        ready = launched + int(_latency(launched, began, ended, on))
        waited = began > ready
        ready, began, on = ready[waited], began[waited], on[waited]
        found = _cache[trace] = {None: union(ready, began),
                                 **{d: union(ready[on == d], began[on == d]) for d in np.unique(on).tolist()}}
    empty = np.zeros(0, np.int64)
    return found.get(device, (empty, empty))


_cache: weakref.WeakKeyDictionary[Trace, dict[int | None, tuple[np.ndarray, np.ndarray]]] = \
    weakref.WeakKeyDictionary()


def launch_latency_ns(trace: Trace) -> float:
    """The median time from a launch call's return to its operation's start, over the operations
    launched onto a drained device: every operation that started before it had ended by its launch
    (nothing ran, nothing queued ahead of it).  0 when the trace has none."""
    return _latency(*_launches(trace))


def _latency(launched: np.ndarray, began: np.ndarray, ended: np.ndarray, on: np.ndarray) -> float:
    waits = []
    for device in np.unique(on).tolist():
        mine = np.flatnonzero(on == device)
        order = mine[np.argsort(began[mine], kind="stable")]
        before = np.maximum.accumulate(ended[order])  # the latest end of the operations started so far
        drained = np.concatenate([[True], before[:-1] <= launched[order][1:]])
        drained &= began[order] >= launched[order]
        waits.append((began[order] - launched[order])[drained])
    found = np.concatenate(waits) if waits else np.zeros(0, np.int64)
    return float(np.median(found)) if len(found) else 0.0


def _launches(trace: Trace) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(launch call's return, operation's start, its end, its device) of every GPU operation whose
    launch call the trace recorded."""
    columns: list[list[np.ndarray]] = [[], [], [], []]
    api_end = trace.array("api", "end") if trace.has("api") else np.zeros(0, np.int64)
    for table in GPU_WORK_TABLES:
        if not len(api_end) or not trace.has(table) or not trace.count(table):
            continue
        call = launch_calls(trace, table).call
        # a row without a correlation id (-1, some Kineto traces) matches any call without one: no launch
        known = (call >= 0) & (trace.array(table, "correlation") >= 0)
        for out, values in zip(columns, (api_end[call[known]], trace.array(table, "start")[known],
                                         trace.array(table, "end")[known], trace.array(table, "device")[known])):
            out.append(values.astype(np.int64))
    if not columns[0]:
        return tuple(np.zeros(0, np.int64) for _ in range(4))  # type: ignore[return-value]
    return tuple(np.concatenate(c) for c in columns)  # type: ignore[return-value]
