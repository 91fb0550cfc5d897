"""Which step each event falls in: the per-step attribution that diff, history
and the cross-rank summary share; and the kernels of a window of steps."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from profkit.model import Trace


def step_of(times: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Per time, the position (into ``starts``/``ends``) of the step ``[start, end)``
    holding it, -1 for a time in none.  Steps must not overlap (profkit's never
    do: each ends where the next begins); an event is attributed by its start."""
    times = np.asarray(times, dtype=np.int64)
    starts = np.asarray(starts, dtype=np.int64)
    ends = np.asarray(ends, dtype=np.int64)
    if not len(starts):
        return np.full(len(times), -1, dtype=np.int64)
    # by start, and an empty step before a longer one of the same start, so
    # that the step found (the last one starting at or before t) is the longer
    order = np.lexsort((ends, starts))
    at = np.searchsorted(starts[order], times, side="right") - 1
    clipped = np.clip(at, 0, None)
    inside = (at >= 0) & (times < ends[order][clipped])
    return np.where(inside, order[clipped], -1)


def sum_per_step(step: np.ndarray, values: np.ndarray, steps: int) -> np.ndarray:
    """Sum of ``values`` per step (int64), from ``step_of``'s positions; -1 rows are left out."""
    inside = step >= 0
    out = np.zeros(steps, dtype=np.int64)
    np.add.at(out, step[inside], np.asarray(values, dtype=np.int64)[inside])
    return out


def kernels_in_window(trace: Trace, start_ns: int, end_ns: int, per: int = 1) -> list[dict[str, Any]]:
    """Kernel time by name for the kernels that start in ``[start_ns, end_ns)``, most first:
    rows of ``name``, ``total_ns``, ``instances``, ``avg_ns`` and ``per_step`` (instances / ``per``).

    The report's steady-state kernel finding: the whole capture's top kernel is
    often start-up's (a compile's autotuning launches thousands of cache flushes)."""
    starts = trace.array("kernels", "start")
    durations = trace.array("kernels", "end") - starts
    names = trace.codes("kernels", "name")
    inside = (starts >= start_ns) & (starts < end_ns)
    codes = names.codes[inside]
    totals = np.bincount(codes, weights=durations[inside], minlength=len(names.categories)).astype(np.int64)
    counts = np.bincount(codes, minlength=len(names.categories))
    order = np.argsort(-totals, kind="stable")
    return [{"name": names.categories[i], "total_ns": int(totals[i]), "instances": int(counts[i]),
             "avg_ns": totals[i] / counts[i], "per_step": counts[i] / max(per, 1)}
            for i in order if counts[i]]
