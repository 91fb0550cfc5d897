"""GPU busy time per time bin, from the trace model (any source).

``gpu_busy_per_bin(trace, start_ns, end_ns, bins)`` splits ``[start_ns,
end_ns)`` into equal bins and returns, per device, the nanoseconds of each
bin during which at least one kernel, memcpy or memset ran.  Overlapping
work (concurrent streams) counts once, as in ``summaries.gpu_busy``.

Vectorised, no per-kernel Python: the intervals of a device are merged into
disjoint ones (sort by start, running maximum of the ends; once per trace, by
``timeline.gpu_busy_segments``), then the busy
time up to each bin edge is read off the cumulative length of the merged
intervals with ``searchsorted``; a bin's busy time is the difference of its
two edges.  O(n log n) for n operations, O(bins) extra memory.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from profkit.model import Trace

@dataclass(frozen=True)
class BusyBins:
    """``busy_ns[device]`` holds ``len(edges) - 1`` bins of busy nanoseconds."""

    edges: np.ndarray               # int64 ns, bins + 1 values
    busy_ns: dict[int, np.ndarray]  # device -> int64 ns per bin

    def percent(self, device: int) -> np.ndarray:
        width = np.diff(self.edges).astype(np.float64)
        return 100.0 * self.busy_ns[device] / np.where(width > 0, width, 1.0)


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


def gpu_busy_per_bin(trace: Trace, start_ns: int, end_ns: int, bins: int) -> BusyBins:
    """Busy ns per device and bin over ``[start_ns, end_ns)`` (``bins`` equal bins).

    Reads the merged intervals that ``timeline.gpu_busy_segments`` keeps per trace: the
    report's timeline, capture and utilization have merged them already."""
    from profkit.analysis.timeline import gpu_busy_segments  # timeline imports merge_intervals from here

    bins = max(1, int(bins))
    span = max(int(end_ns) - int(start_ns), 1)
    edges = int(start_ns) + (np.arange(bins + 1, dtype=np.int64) * span) // bins
    busy = {device: np.diff(busy_until(seg.starts, seg.ends, edges)).astype(np.int64)
            for device, seg in sorted(gpu_busy_segments(trace).items())}
    return BusyBins(edges=edges, busy_ns=busy)
