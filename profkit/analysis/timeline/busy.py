"""Time-binned GPU activity of a ``Trace``, for the report's timeline and utilization figures.

- ``stream_busy``: busy ns per (device, process, stream, kind of operation)
  and time bin.  Each operation is split exactly across the bins it covers:
  its first and last bin get their parts, the bins in between are covered
  whole and come from a difference array; one ``bincount`` over
  (lane, bin) does every lane at once.
- ``gpu_busy_segments``: per device, the union of kernel, memcpy and memset
  intervals as disjoint segments, and the idle gaps between them.  One sort
  and one running maximum of the ends; computed once per trace and shared
  by ``gpu_busy`` (the capture's GPU busy %), ``gpu_utilization`` (busy ns
  per bin, any window) and the longest gaps.
- ``gpu_busy_per_bin``: busy ns per device in any equal bins (the Perfetto
  export's and the interactive timeline's counters), read off the same segments.

The annotated ranges drawn under the timeline are ``profkit.analysis.timeline.ranges``'s.
Columns read: kernels/memcpy/memset (start, end, device, stream, pid).  Memory is a few
arrays of the operations' length (int64), never an object per operation.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field

import numpy as np

from profkit.analysis.timeline.intervals import covered_until, longest, union, union_length
from profkit.analysis.timeline.ranges import nvtx_window
from profkit.model import Trace
from profkit.model.keys import encode_rows

# Kinds of GPU operation, drawn in this order; each is a table of the model.
# A CUDA graph replay is a row of its own only where its kernels were not traced (schema.GRAPHS).
ACTIVITY_TABLES = (("kernel", "kernels"), ("memcpy", "memcpy"), ("memset", "memset"), ("graph", "graphs"))


@dataclass(frozen=True)
class TimeBins:
    """``count`` equal bins of ``width_ns`` from ``start_ns`` (trace time).

    ``origin_ns`` is the trace time shown as 0 s: the session start
    (``profkit.model.clock.session_zero``)."""

    start_ns: int
    width_ns: int
    count: int
    origin_ns: int = 0

    @property
    def end_ns(self) -> int:
        return self.start_ns + self.width_ns * self.count

    def edges(self) -> np.ndarray:
        return self.start_ns + self.width_ns * np.arange(self.count + 1, dtype=np.int64)


def make_bins(start_ns: int, end_ns: int, count: int, origin_ns: int = 0) -> TimeBins:
    """Bins covering ``[start_ns, end_ns)``: ``count`` of them, each at least 1 ns wide."""
    if count < 1:
        raise ValueError("count must be >= 1")
    span = max(end_ns - start_ns, 1)
    width = -(-span // count)  # ceil: the last bin reaches end_ns
    return TimeBins(start_ns, width, min(count, -(-span // width)), origin_ns)


@dataclass
class StreamActivity:
    """Busy time of one stream for one kind of operation, per bin."""

    device_id: int
    pid: int | None
    stream_id: int | None
    kind: str  # kernel | memcpy | memset | graph
    operations: int
    busy_ns: int
    busy_per_bin: np.ndarray = field(repr=False)  # int64 ns, len == bins.count


@dataclass
class Utilization:
    """How busy one device was, per bin, and its longest idle gaps."""

    device_id: int
    busy_per_bin: np.ndarray = field(repr=False)  # int64 ns, each <= the bin width
    busy_ns: int = 0
    first_ns: int | None = None  # first operation's start
    last_ns: int | None = None  # last operation's end
    gaps: list[tuple[int, int]] = field(default_factory=list)  # (start, end), longest first


# -- the GPU operations -------------------------------------------------------------------
def _operations(trace: Trace, columns: tuple[str, ...] = ("device", "start", "end")) -> dict[str, np.ndarray]:
    """Every kernel, memcpy, memset and graph replay as aligned columns; ``kind`` indexes ACTIVITY_TABLES."""
    parts: dict[str, list[np.ndarray]] = {c: [] for c in ("kind", *columns)}
    for index, (_, table) in enumerate(ACTIVITY_TABLES):
        if not trace.has(table):
            continue
        frame = trace.table(table, list(columns))
        parts["kind"].append(np.full(len(frame), index, dtype=np.int8))
        for column in columns:
            parts[column].append(frame[column].to_numpy())
    out = {c: np.concatenate(v) if v else np.zeros(0, dtype=np.int64) for c, v in parts.items()}
    if "end" in out:
        out["end"] = np.maximum(out["end"], out["start"])  # a malformed negative duration counts as 0
    return out


def gpu_window(trace: Trace) -> tuple[int, int] | None:
    """(first start, last end) of all GPU work (kernels, memcpys, memsets, graph replays); None without any."""
    segments = gpu_busy_segments(trace)
    if not segments:
        return None
    return min(s.first_ns for s in segments.values()), max(s.last_ns for s in segments.values())


def time_window(trace: Trace) -> tuple[int, int] | None:
    """The span the figures cover: GPU activity and ranges together."""
    spans = [w for w in (gpu_window(trace), nvtx_window(trace)) if w is not None]
    if not spans:
        return None
    return min(s for s, _ in spans), max(e for _, e in spans)


# -- busy time per stream ---------------------------------------------------------------
def stream_busy(trace: Trace, bins: TimeBins) -> list[StreamActivity]:
    """Busy ns per bin for each (device, process, stream) and kind of operation.

    Operations not wholly inside ``bins`` are left out.  Sorted by device,
    stream, process, kind.  ``busy_per_bin`` sums to ``busy_ns``, the
    operations' total duration (operations of one stream that overlap each
    count in full).
    """
    # The lanes come from the small columns of the operations wholly inside; the times are
    # binned a chunk of rows at a time, straight from each table's columns: a million
    # operations' temporaries would otherwise be ~100 MB at the report's peak.
    times = [(trace.array(table, "start"), trace.array(table, "end"))
             for _, table in ACTIVITY_TABLES if trace.has(table)]
    inside = np.concatenate([np.zeros(0, dtype=bool), *(
        (start >= bins.start_ns) & (np.maximum(end, start) <= bins.end_ns) for start, end in times)])
    if not inside.any():
        return []
    ops = _operations(trace, ("device", "pid", "stream"))
    if not inside.all():
        ops = {c: v[inside] for c, v in ops.items()}
    lane, keys = encode_rows([ops["device"], ops["stream"], ops["pid"], ops["kind"]])
    del ops
    busy = np.zeros((len(keys), bins.count), dtype=np.int64)
    row = done = 0
    for start, end in times:
        for lo in range(0, len(start), BINNING_CHUNK_ROWS):
            hi = min(lo + BINNING_CHUNK_ROWS, len(start))
            mine = inside[row + lo:row + hi]
            a = start[lo:hi][mine]
            b = np.maximum(end[lo:hi][mine], a)  # a malformed negative duration counts as 0
            busy += _binned(a, b, bins, lane[done:done + len(a)], len(keys))
            done += len(a)
        row += len(start)
    counts = np.bincount(lane, minlength=len(keys))
    out = []
    for i, (device, stream, pid, kind) in enumerate(keys):
        out.append(StreamActivity(int(device), None if pid < 0 else int(pid), None if stream < 0 else int(stream),
                                  ACTIVITY_TABLES[kind][0], int(counts[i]), int(busy[i].sum()), busy[i]))
    return sorted(out, key=lambda a: (a.device_id, -1 if a.stream_id is None else a.stream_id, a.pid or 0,
                                      [k for k, _ in ACTIVITY_TABLES].index(a.kind)))


BINNING_CHUNK_ROWS = 1 << 18  # operations binned at once by stream_busy


def _binned(a: np.ndarray, b: np.ndarray, bins: TimeBins, lane: np.ndarray | None = None,
            lanes: int = 1) -> np.ndarray:
    """ns of the intervals [a, b) (within the bins) in each (lane, bin), as a lanes x bins int64 array."""
    n, t0, w = bins.count, bins.start_ns, bins.width_ns
    lane = np.zeros(len(a), dtype=np.int64) if lane is None else lane.astype(np.int64, copy=False)
    out = np.zeros(lanes * n, dtype=np.int64)
    if len(a) == 0:
        return out.reshape(lanes, n)
    fb = (a - t0) // w
    lb = (np.maximum(b, a + 1) - 1 - t0) // w  # a zero-length operation stays in its first bin
    base = lane * n
    out += np.bincount(base + fb, weights=np.minimum(b, t0 + (fb + 1) * w) - a, minlength=lanes * n).astype(np.int64)
    multi = lb > fb
    if multi.any():
        out += np.bincount(base[multi] + lb[multi], weights=(b - (t0 + lb * w))[multi],
                           minlength=lanes * n).astype(np.int64)
        inner = lb > fb + 1
        if inner.any():
            # bins fb+1 .. lb-1 are covered whole: +1 at fb+1, -1 at lb, summed along each lane
            row = lane[inner] * (n + 1)
            cover = (np.bincount(row + fb[inner] + 1, minlength=lanes * (n + 1))
                     - np.bincount(row + lb[inner], minlength=lanes * (n + 1))).reshape(lanes, n + 1)
            out += (np.cumsum(cover[:, :n], axis=1) * w).reshape(-1)
    return out.reshape(lanes, n)


# -- the union of GPU work per device -------------------------------------------------------
@dataclass
class BusySegments:
    """One device's busy time as disjoint segments [starts, ends), and the idle gaps between."""

    device_id: int
    starts: np.ndarray = field(repr=False)
    ends: np.ndarray = field(repr=False)
    gap_starts: np.ndarray = field(repr=False)
    gap_ends: np.ndarray = field(repr=False)
    operations: int = 0
    first_ns: int = 0
    last_ns: int = 0

    @property
    def busy_ns(self) -> int:
        return int((self.ends - self.starts).sum())


# One computation per trace, shared by the capture, the utilization figure and the findings.
_SEGMENTS: weakref.WeakKeyDictionary[Trace, dict[int, BusySegments]] = weakref.WeakKeyDictionary()


def gpu_busy_segments(trace: Trace) -> dict[int, BusySegments]:
    """Per device, the union of its kernel, memcpy and memset intervals (overlaps counted once)."""
    cached = _SEGMENTS.get(trace)
    if cached is not None:
        return cached
    ops = _operations(trace)
    out: dict[int, BusySegments] = {}
    devices = np.unique(ops["device"]) if len(ops["device"]) else []
    for device in devices.tolist() if len(devices) else []:
        if len(devices) == 1:
            s, e = ops["start"], ops["end"]
        else:
            mine = ops["device"] == device
            s, e = ops["start"][mine], ops["end"][mine]
        out[int(device)] = _segments(int(device), s, e)
    del ops
    _SEGMENTS[trace] = out
    return out


def forget_busy_segments(trace: Trace) -> None:
    """Drop the trace's merged busy intervals (a later call merges them again): the report
    does once its last user has run, to bound its peak memory (16 MB for a million kernels)."""
    _SEGMENTS.pop(trace, None)


def _segments(device: int, s: np.ndarray, e: np.ndarray) -> BusySegments:
    """The merged busy intervals; the gaps are what lies between consecutive ones."""
    starts, ends = union(s, e)
    return BusySegments(device, starts, ends, ends[:-1], starts[1:], operations=len(s),
                        first_ns=int(starts[0]), last_ns=int(ends[-1]))


def gpu_busy(trace: Trace) -> dict:
    """Union of kernel/memcpy/memset intervals, per device and over all devices.

    Keys: span_ns (first GPU operation's start to the last one's end),
    busy_ns, busy_pct (of the span), per_device (device, span_ns, busy_ns,
    busy_pct, operations).  Overlapping work (concurrent streams) counts once.
    """
    segments = gpu_busy_segments(trace)
    if not segments:
        return {"span_ns": None, "busy_ns": 0, "busy_pct": None, "per_device": []}
    per_device = []
    for device, seg in sorted(segments.items()):
        span = seg.last_ns - seg.first_ns
        per_device.append({"device": device, "span_ns": span, "busy_ns": seg.busy_ns,
                           "busy_pct": round(100.0 * seg.busy_ns / span, 2) if span else None,
                           "operations": seg.operations})
    if len(segments) == 1:
        busy_ns = per_device[0]["busy_ns"]
    else:  # the union over devices: their segments merged
        all_s = np.concatenate([s.starts for s in segments.values()])
        all_e = np.concatenate([s.ends for s in segments.values()])
        busy_ns = union_length(all_s, all_e)
    span = max(s.last_ns for s in segments.values()) - min(s.first_ns for s in segments.values())
    return {"span_ns": span, "busy_ns": busy_ns, "busy_pct": round(100.0 * busy_ns / span, 2) if span else None,
            "per_device": per_device}


def gpu_utilization(trace: Trace, bins: TimeBins, gaps: int = 5) -> list[Utilization]:
    """Per device: ns of each bin in which the GPU ran at least one kernel, memcpy or memset,
    and the ``gaps`` longest idle stretches that lie within the bins.

    Overlapping operations count once, so a bin's value is at most its
    width; busy time outside the bins is cut off at their edges.  Over bins
    that cover the whole GPU span, ``busy_ns`` equals ``gpu_busy``'s.
    """
    out = []
    edges = bins.edges()
    for device, seg in sorted(gpu_busy_segments(trace).items()):
        if seg.first_ns >= bins.end_ns or seg.last_ns < bins.start_ns:
            continue
        # the segments are disjoint and sorted: busy ns before each edge, differenced
        busy = np.diff(covered_until(seg.starts, seg.ends, edges)).astype(np.int64)
        # the gaps are sorted too: those within the bins are one slice
        first = np.searchsorted(seg.gap_starts, bins.start_ns, side="left")
        last = np.searchsorted(seg.gap_ends, bins.end_ns, side="right")
        gs, ge = seg.gap_starts[first:last], seg.gap_ends[first:last]
        out.append(Utilization(device, busy, int(busy.sum()), max(seg.first_ns, bins.start_ns),
                               min(seg.last_ns, bins.end_ns), longest(gs, ge, gaps)))
    return out


def busiest_window(busy_per_bin: np.ndarray, bins: TimeBins, share: float = 0.9) -> tuple[int, int] | None:
    """The shortest run of bins holding ``share`` of all busy time, as (start_ns, end_ns);
    None when nothing ran."""
    total = int(busy_per_bin.sum())
    if total <= 0:
        return None
    need = share * total
    cumulative = np.concatenate(([0], np.cumsum(busy_per_bin)))
    # For each first bin i, the first end j with cumulative[j] - cumulative[i] >= need.
    ends = np.searchsorted(cumulative, cumulative[:-1] + need, side="left")
    valid = ends <= bins.count
    if not valid.any():
        return bins.start_ns, bins.end_ns
    first = np.flatnonzero(valid)
    widths = ends[first] - first
    best = int(first[np.argmin(widths)])
    last = int(ends[best])
    return bins.start_ns + best * bins.width_ns, bins.start_ns + last * bins.width_ns


# -- busy time per bin, any bins ----------------------------------------------------------
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
    busy = {device: np.diff(covered_until(seg.starts, seg.ends, edges)).astype(np.int64)
            for device, seg in sorted(gpu_busy_segments(trace).items())}
    return BusyBins(edges=edges, busy_ns=busy)
