"""The union of [start, end) intervals and the busy time it covers up to a time, or within windows.

Kept apart from the analyses that use it (the timeline's busy segments, the step finder's
busy time, ``busy_bins``) so that they all import it from below and none from another:
numpy only, no ``Trace``.
"""

from __future__ import annotations

import numpy as np


def merge_intervals(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Disjoint, sorted intervals covering exactly the union of ``[start, end)``.

    The one busy-interval union of profkit (the timeline's busy segments and gaps,
    the step finder's busy time and these bins use it).  Intervals that touch
    merge; an end before its start counts as the start (zero length)."""
    if len(starts) == 0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    order = np.argsort(starts, kind="stable")
    s = starts[order].astype(np.int64, copy=False)
    reach = ends[order].astype(np.int64, copy=False)
    del order
    np.maximum(reach, s, out=reach)
    np.maximum.accumulate(reach, out=reach)  # the furthest end so far
    # A new merged interval begins where a start lies beyond everything before it, and the
    # one before ends there.  Boolean masks, not index arrays: a million intervals that
    # rarely overlap are a million merged ones, and two int64 index arrays of them 16 MB.
    begins = np.empty(len(s), dtype=bool)
    begins[0] = True
    np.greater(s[1:], reach[:-1], out=begins[1:])
    merged_starts = s[begins]
    del s
    begins[:-1] = begins[1:]  # now: where a merged interval ends
    begins[-1] = True
    return merged_starts, reach[begins]


def busy_until(merged_starts: np.ndarray, merged_ends: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Busy nanoseconds in ``(-inf, t)`` for each ``t``, given merged intervals."""
    return _busy_until(merged_starts, merged_ends, _busy_before(merged_starts, merged_ends), t)


def busy_within(merged_starts: np.ndarray, merged_ends: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Busy nanoseconds in each window ``[lo, hi)``, given merged intervals (one prefix sum for both ends)."""
    before = _busy_before(merged_starts, merged_ends)
    return _busy_until(merged_starts, merged_ends, before, hi) - _busy_until(merged_starts, merged_ends, before, lo)


def _busy_before(merged_starts: np.ndarray, merged_ends: np.ndarray) -> np.ndarray:
    """Busy time before each merged interval (and, last, in all of them): one array, no temporaries."""
    before = np.zeros(len(merged_starts) + 1, dtype=np.int64)
    np.subtract(merged_ends, merged_starts, out=before[1:])
    np.cumsum(before[1:], out=before[1:])
    return before


def _busy_until(merged_starts: np.ndarray, merged_ends: np.ndarray, before: np.ndarray, t: np.ndarray) -> np.ndarray:
    t = np.asarray(t, dtype=np.int64)
    if len(merged_starts) == 0:
        return np.zeros(len(t), dtype=np.int64)
    i = np.searchsorted(merged_starts, t, side="right")  # intervals starting at or before t
    j = np.maximum(i - 1, 0)  # the last interval starting at or before t
    inside = np.clip(t - merged_starts[j], 0, merged_ends[j] - merged_starts[j])
    return np.where(i > 0, before[j] + inside, 0)
