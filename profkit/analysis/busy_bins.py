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
    # A new merged interval begins where a start lies beyond everything before it.
    begins = np.ones(len(s), dtype=bool)
    begins[1:] = s[1:] > reach[:-1]
    first = np.flatnonzero(begins)
    last = np.append(first[1:] - 1, len(s) - 1)
    return s[first], reach[last]


def busy_until(merged_starts: np.ndarray, merged_ends: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Busy nanoseconds in ``(-inf, t)`` for each ``t``, given merged intervals."""
    t = np.asarray(t, dtype=np.int64)
    if len(merged_starts) == 0:
        return np.zeros(len(t), dtype=np.int64)
    lengths = merged_ends - merged_starts
    before = np.concatenate(([0], np.cumsum(lengths)))
    i = np.searchsorted(merged_starts, t, side="right")  # intervals starting at or before t
    j = np.maximum(i - 1, 0)  # the last interval starting at or before t
    inside = np.clip(t - merged_starts[j], 0, lengths[j])
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
