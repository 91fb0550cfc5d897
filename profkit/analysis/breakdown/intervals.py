"""Interval arithmetic on int64 ns arrays: merge, union length, overlaps.

Vectorised with numpy (a million kernels are a few sorts, not a Python
loop).  Intervals are half-open ``[start, end)``; intervals that touch are
merged, as HTA's ``merge_kernel_intervals`` does (it starts a new group only
when ``start > running max end``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def merge(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Disjoint, sorted intervals covering the same time as the input."""
    starts = np.asarray(starts, dtype=np.int64)
    ends = np.asarray(ends, dtype=np.int64)
    if starts.size == 0:
        return starts.copy(), ends.copy()
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    running_end = np.maximum.accumulate(e)
    opens = np.empty(s.size, dtype=bool)
    opens[0] = True
    opens[1:] = s[1:] > running_end[:-1]
    first = np.flatnonzero(opens)
    return s[first], np.maximum.reduceat(e, first)


def total(starts: np.ndarray, ends: np.ndarray) -> int:
    """Length of the union of the intervals."""
    ms, me = merge(starts, ends)
    return int((me - ms).sum())


def clip(starts: np.ndarray, ends: np.ndarray, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The intervals cut to ``[lo, hi)``; returns (starts, ends, kept mask of the input)."""
    keep = (ends > lo) & (starts < hi)
    return np.maximum(starts[keep], lo), np.minimum(ends[keep], hi), keep


def overlap_by_mask(sets: Sequence[tuple[np.ndarray, np.ndarray]]) -> dict[int, int]:
    """Time covered by each combination of the interval sets.

    Returns {bitmask: ns}, where bit i set means set i is active; only masks
    with time > 0 appear.  With sets (computation, communication) the key 3
    is the time both run at once.  This is HTA's sweep in
    ``_get_gpu_kernel_type_time`` (+2^i at a start, -2^i at an end)."""
    times, deltas = [], []
    for i, (s, e) in enumerate(sets):
        ms, me = merge(s, e)
        times += [ms, me]
        deltas += [np.full(ms.size, 1 << i, dtype=np.int64), np.full(me.size, -(1 << i), dtype=np.int64)]
    if not times:
        return {}
    t = np.concatenate(times)
    d = np.concatenate(deltas)
    if t.size == 0:
        return {}
    order = np.argsort(t, kind="stable")
    t, d = t[order], d[order]
    mask = np.cumsum(d)[:-1]  # the state between boundary k and k+1
    span = np.diff(t)
    out: dict[int, int] = {}
    for m in np.unique(mask):
        if m > 0:
            ns = int(span[mask == m].sum())
            if ns > 0:
                out[int(m)] = ns
    return out


def gaps(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The holes between the merged intervals: (gap starts, gap ends)."""
    ms, me = merge(starts, ends)
    return me[:-1], ms[1:]
