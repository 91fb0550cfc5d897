"""Where each step's time goes: compute, communication, memory, other GPU work, idle.

The parts of a step add up to its duration, layered the way HTA's temporal
breakdown reads (``profkit.analysis.breakdown``): **compute** is the time
any computation kernel runs; **communication** the time NCCL kernels run
with no computation under them; **memory** the time copies/sets run with
neither; **other** the remaining GPU work; **idle** the time nothing runs.
Kernel types are HTA's (``profkit.analysis.kernels.origin``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from profkit.analysis.timeline.intervals import covered_within, union
from profkit.analysis.steps.result import StepResult
from profkit.model import Trace

PARTS = ("compute_ns", "communication_ns", "memory_ns", "other_ns", "idle_ns")


def per_step_breakdown(trace: Trace, result: StepResult, events: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per step: ``index``, ``phase``, ``duration_ns`` and ``PARTS`` (they sum to the duration).

    ``events``: the trace's kernels, memcpy and memset as
    ``breakdown.events.gpu_events(trace, include_syncs=False, hta_filter=False)``
    gives them, when the caller has them already (the report shares one
    frame between this and the idle causes).  Without the kernel-type
    classifier (``profkit.analysis.breakdown``), all GPU work counts as
    ``other_ns``.  The union of all the work in a step is the step's own
    ``gpu_busy_ns`` (``find_steps`` merged the same kernels, memcpy and
    memset over the same windows), so it is read, not merged again."""
    steps = result.steps
    out = steps[["index", "phase", "duration_ns"]].copy()
    if steps.empty:
        for part in PARTS:
            out[part] = np.empty(0, dtype=np.int64)
        return out
    lo, hi = steps["start_ns"].to_numpy(np.int64), steps["end_ns"].to_numpy(np.int64)
    start, end, kind = _typed_gpu_work(trace) if events is None else _typed(events)
    layers: list[np.ndarray] = []  # cumulative unions: compute, +communication, +memory, +everything
    mask = np.zeros(len(start), dtype=bool)
    for kinds in (("computation",), ("communication",), ("memory",), None):
        if kinds is None:
            added = ~mask
            mask[:] = True
        else:  # compare the categorical's codes, not a million strings
            wanted = [i for i, c in enumerate(kind.categories) if c in kinds]
            added = np.isin(kind.codes, wanted) & ~mask
            mask |= added
        if layers and not added.any():  # no work of this kind: the union is the one before
            layers.append(layers[-1])
        elif kinds is None:  # all the work: the steps' own GPU busy time (the same union, the same windows)
            layers.append(steps["gpu_busy_ns"].to_numpy(np.int64))
        else:
            layers.append(covered_within(*union(start[mask], end[mask]), lo, hi))
        del added
    previous = np.zeros(len(steps), dtype=np.int64)
    for part, layer in zip(PARTS[:4], layers):
        out[part] = layer - previous
        previous = layer
    out["idle_ns"] = out["duration_ns"].to_numpy(np.int64) - previous
    return out


def _typed(events: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, pd.Categorical]:
    work = (events["source"] != "sync").to_numpy()
    kind = events["kernel_type"].array
    if not work.all():
        events, kind = events[work], kind[work]
    return events["start"].to_numpy(np.int64), events["end"].to_numpy(np.int64), pd.Categorical(kind)


def _typed_gpu_work(trace: Trace) -> tuple[np.ndarray, np.ndarray, pd.Categorical]:
    try:
        from profkit.analysis.breakdown.events import gpu_events
    except ModuleNotFoundError as exc:
        if not (exc.name or "").startswith("profkit"):
            raise
        from profkit.analysis.steps.activity import load_activity

        act = load_activity(trace)
        return (act.all_start, act.all_end,
                pd.Categorical.from_codes(np.zeros(len(act.all_start), dtype=np.int8), ["other"]))
    events, _ = gpu_events(trace, include_syncs=False, hta_filter=False)
    return _typed(events)
