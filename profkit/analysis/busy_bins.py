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

from profkit.analysis.intervals import busy_until
from profkit.analysis.timeline import gpu_busy_segments
from profkit.model import Trace


@dataclass(frozen=True)
class BusyBins:
    """``busy_ns[device]`` holds ``len(edges) - 1`` bins of busy nanoseconds."""

    edges: np.ndarray               # int64 ns, bins + 1 values
    busy_ns: dict[int, np.ndarray]  # device -> int64 ns per bin

    def percent(self, device: int) -> np.ndarray:
        width = np.diff(self.edges).astype(np.float64)
        return 100.0 * self.busy_ns[device] / np.where(width > 0, width, 1.0)


def gpu_busy_per_bin(trace: Trace, start_ns: int, end_ns: int, bins: int) -> BusyBins:
    """Busy ns per device and bin over ``[start_ns, end_ns)`` (``bins`` equal bins).

    Reads the merged intervals that ``timeline.gpu_busy_segments`` keeps per trace: the
    report's timeline, capture and utilization have merged them already."""
    bins = max(1, int(bins))
    span = max(int(end_ns) - int(start_ns), 1)
    edges = int(start_ns) + (np.arange(bins + 1, dtype=np.int64) * span) // bins
    busy = {device: np.diff(busy_until(seg.starts, seg.ends, edges)).astype(np.int64)
            for device, seg in sorted(gpu_busy_segments(trace).items())}
    return BusyBins(edges=edges, busy_ns=busy)
