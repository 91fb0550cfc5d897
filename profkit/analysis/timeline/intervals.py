"""The one interval algebra of profkit: half-open ``[start, end)`` intervals as numpy columns.

Every analysis that merges, cuts or measures intervals uses these (the timeline's busy
segments, the steps' busy time, HTA's breakdowns, the host's GPU-idle time, the verdict's
causes).  numpy only, no ``Trace``: the analyses import it from below, none from another.

- ``union``: sorted, disjoint intervals covering exactly the input (intervals that touch
  merge, as HTA's ``merge_kernel_intervals`` does; an end before its start counts as the
  start, a zero-length interval, unless ``keep_reversed``);  ``union_length``: the time
  that union covers;
- ``intersection``, ``difference``: of two sorted, disjoint lists;
- ``complement``: the holes of a union inside each window; ``gaps``: its holes in its own span;
- ``covered_until``, ``covered_within``: the time a union covers before each instant, or
  inside each window (one prefix sum, ``searchsorted`` per query: the per-window sums);
- ``clip``: intervals cut to one window; ``overlap_by_mask``: the time each combination of
  several interval sets runs at once (HTA's sweep); ``longest``: the longest few.

Vectorized throughout: a million kernels are a few sorts and prefix sums, not a Python loop.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

_EMPTY = np.empty(0, dtype=np.int64)


def union(starts: np.ndarray, ends: np.ndarray, *, keep_reversed: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Disjoint, sorted intervals covering exactly the union of ``[start, end)`` (int64).

    Intervals that touch merge; an end before its start counts as the start (zero length).
    ``keep_reversed``: HTA's ``merge_kernel_intervals`` instead, to the nanosecond: such an
    end stays as it is (a merged interval ends at the latest end of its members, before its
    start where all are), as a sub-microsecond kernel gets when HTA rounds its start up and
    its end down; the breakdowns, which reproduce HTA's figures, ask for it."""
    starts = np.asarray(starts)
    ends = np.asarray(ends)
    if len(starts) == 0:
        return _EMPTY.copy(), _EMPTY.copy()
    order = np.argsort(starts, kind="stable")
    s = starts[order].astype(np.int64, copy=False)
    reach = ends[order].astype(np.int64, copy=False)
    del order
    if keep_reversed:
        raw = reach.copy()
    else:
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
    if keep_reversed:  # each merged interval's own latest end (the running one may be an earlier's)
        return merged_starts, np.maximum.reduceat(raw, np.flatnonzero(begins))
    begins[:-1] = begins[1:]  # now: where a merged interval ends
    begins[-1] = True
    return merged_starts, reach[begins]


def union_length(starts: np.ndarray, ends: np.ndarray, *, keep_reversed: bool = False) -> int:
    """Total time covered by the intervals, overlaps counted once (``keep_reversed``: ``union``'s)."""
    ms, me = union(starts, ends, keep_reversed=keep_reversed)
    return int((me - ms).sum())


def covered_until(merged_starts: np.ndarray, merged_ends: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Time in ``(-inf, t)`` covered by sorted, disjoint intervals, for each ``t`` (int64)."""
    return _covered_until(merged_starts, merged_ends, _covered_before(merged_starts, merged_ends), t)


def covered_within(merged_starts: np.ndarray, merged_ends: np.ndarray, lo: np.ndarray,
                   hi: np.ndarray) -> np.ndarray:
    """Time inside each window ``[lo, hi)`` covered by sorted, disjoint intervals (int64;
    one prefix sum for both ends).  Of unsorted intervals: ``covered_within(*union(s, e), lo, hi)``."""
    before = _covered_before(merged_starts, merged_ends)
    return (_covered_until(merged_starts, merged_ends, before, hi)
            - _covered_until(merged_starts, merged_ends, before, lo))


def _covered_before(merged_starts: np.ndarray, merged_ends: np.ndarray) -> np.ndarray:
    """Time covered before each interval (and, last, by all of them): one array, no temporaries."""
    before = np.zeros(len(merged_starts) + 1, dtype=np.int64)
    np.subtract(merged_ends, merged_starts, out=before[1:])
    np.cumsum(before[1:], out=before[1:])
    return before


def _covered_until(merged_starts: np.ndarray, merged_ends: np.ndarray, before: np.ndarray,
                   t: np.ndarray) -> np.ndarray:
    t = np.asarray(t, dtype=np.int64)
    if len(merged_starts) == 0:
        return np.zeros(len(t), dtype=np.int64)
    i = np.searchsorted(merged_starts, t, side="right")  # intervals starting at or before t
    j = np.maximum(i - 1, 0)  # the last interval starting at or before t
    inside = np.clip(t - merged_starts[j], 0, merged_ends[j] - merged_starts[j])
    return np.where(i > 0, before[j] + inside, 0)


def intersection(a_starts: np.ndarray, a_ends: np.ndarray, b_starts: np.ndarray,
                 b_ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The time in both of two sorted, disjoint lists, as a union."""
    if not len(a_starts) or not len(b_starts):
        return _EMPTY.copy(), _EMPTY.copy()
    lo, hi = _pieces(a_starts, a_ends, b_starts, b_ends)
    whole = hi - lo
    inside = ((covered_within(a_starts, a_ends, lo, hi) == whole)
              & (covered_within(b_starts, b_ends, lo, hi) == whole))
    return union(lo[inside], hi[inside])


def difference(a_starts: np.ndarray, a_ends: np.ndarray, b_starts: np.ndarray,
               b_ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The time in the first of two sorted, disjoint lists and not in the second, as a union
    (the first list as it is where the second is empty)."""
    if not len(b_starts):
        return a_starts, a_ends
    lo, hi = _pieces(a_starts, a_ends, b_starts, b_ends)
    inside = ((covered_within(a_starts, a_ends, lo, hi) == hi - lo)
              & (covered_within(b_starts, b_ends, lo, hi) == 0))
    return union(lo[inside], hi[inside])


def _pieces(*bounds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The elementary pieces between consecutive boundaries of several lists: each piece is
    wholly inside or wholly outside every one of them."""
    points = np.unique(np.concatenate(bounds))
    return points[:-1], points[1:]


def complement(merged_starts: np.ndarray, merged_ends: np.ndarray, lo: np.ndarray,
               hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The holes of sorted, disjoint intervals inside each window ``[lo, hi)``: window by
    window, in window order (holes of touching windows stay apart), empty ones left out."""
    lo = np.asarray(lo, dtype=np.int64)
    hi = np.asarray(hi, dtype=np.int64)
    first = np.searchsorted(merged_ends, lo, side="right")  # the first interval ending after lo
    stop = np.searchsorted(merged_starts, hi, side="left")  # the intervals starting before hi
    count = np.maximum(stop - first, 0)
    # window k holds count[k] + 1 holes: [lo, e0), [s1, e1) ... [s_last, hi) with the
    # overlapping intervals' ends and starts (cut to the window) in between
    holes = count + 1
    offset = np.cumsum(holes) - holes
    total = int(holes.sum())
    gap_s = np.empty(total, dtype=np.int64)
    gap_e = np.empty(total, dtype=np.int64)
    gap_s[offset] = lo
    gap_e[offset + count] = hi
    window = np.repeat(np.arange(len(lo)), count)
    position = np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count, count)
    interval = first[window] + position
    at = offset[window] + position
    gap_e[at] = np.clip(merged_starts[interval], lo[window], hi[window])
    gap_s[at + 1] = np.clip(merged_ends[interval], lo[window], hi[window])
    keep = gap_e > gap_s
    return gap_s[keep], gap_e[keep]


def gaps(starts: np.ndarray, ends: np.ndarray, *, keep_reversed: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """The holes between the union's intervals: (gap starts, gap ends) (``keep_reversed``: ``union``'s)."""
    ms, me = union(starts, ends, keep_reversed=keep_reversed)
    return me[:-1], ms[1:]


def clip(starts: np.ndarray, ends: np.ndarray, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The intervals cut to ``[lo, hi)``; returns (starts, ends, kept mask of the input)."""
    keep = (ends > lo) & (starts < hi)
    return np.maximum(starts[keep], lo), np.minimum(ends[keep], hi), keep


def overlap_by_mask(sets: Sequence[tuple[np.ndarray, np.ndarray]], *, keep_reversed: bool = False) -> dict[int, int]:
    """Time covered by each combination of the interval sets.

    Returns {bitmask: ns}, where bit i set means set i is active; only masks
    with time > 0 appear.  With sets (computation, communication) the key 3
    is the time both run at once.  This is HTA's sweep in
    ``_get_gpu_kernel_type_time`` (+2^i at a start, -2^i at an end) over each set's ``union``
    (``keep_reversed``: its)."""
    times, deltas = [], []
    for i, (s, e) in enumerate(sets):
        ms, me = union(s, e, keep_reversed=keep_reversed)
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


def longest(starts: np.ndarray, ends: np.ndarray, count: int) -> list[tuple[int, int]]:
    """The ``count`` longest intervals, longest first, then earliest: only those at least as long
    as the count-th longest are sorted (a million gaps hold a handful of candidates)."""
    if count <= 0 or not len(starts):
        return []
    lengths = ends - starts
    if len(lengths) > count:
        shortest_kept = np.partition(lengths, len(lengths) - count)[len(lengths) - count]
        candidates = np.flatnonzero(lengths >= shortest_kept)
    else:
        candidates = np.arange(len(lengths))
    order = candidates[np.lexsort((starts[candidates], -lengths[candidates]))][:count]
    return [(int(starts[i]), int(ends[i])) for i in order.tolist()]
