"""Time-binned GPU activity for the report's timeline and utilization figures.

Memory stays bounded whatever the export's size:

- ``stream_busy``: busy time per (device, context, stream, kind) and time bin,
  aggregated inside SQLite.  Each operation is split exactly across the bins
  it covers: SQLite groups operations by (first bin, last bin) and sums the
  parts that fall into the first and the last bin; the bins in between are
  covered whole and are added from a count (a difference array), so the
  result holds one row per group, never one per kernel.
- ``gpu_utilization``: the union of kernel, memcpy and memset intervals per
  device and bin (overlapping streams count once, as in
  ``summaries.gpu_busy``).  SQLite sorts the intervals (spilling to a temp
  file beyond its cache); Python streams them in chunks and keeps only the
  furthest end seen so far.
- ``nvtx_bars``: the longest NVTX ranges (at most ``limit``), with their
  nesting depth per thread, for the band above the streams.

Tables and columns read: CUPTI_ACTIVITY_KIND_KERNEL / _MEMCPY / _MEMSET
(start, end, and where present deviceId, contextId, streamId); NVTX_EVENTS
through ``queries.nvtx_durations`` (the rows and names of nvtx_sum).
Timestamps are nanoseconds of session time, as in the export.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from profkit.readers.nsys import queries
from profkit.readers.nsys.reader import NsysExport

# (kind, table) of everything that occupies the GPU, drawn in this order.
ACTIVITY_TABLES = (
    ("kernel", queries.KERNELS.table),
    ("memcpy", queries.MEMCPY.table),
    ("memset", queries.MEMSET.table),
)

STREAM_CHUNK_ROWS = 100_000


@dataclass(frozen=True)
class TimeBins:
    """``count`` equal bins of ``width_ns`` from ``start_ns`` (session time)."""

    start_ns: int
    width_ns: int
    count: int

    @property
    def end_ns(self) -> int:
        return self.start_ns + self.width_ns * self.count

    def edges(self) -> np.ndarray:
        return self.start_ns + self.width_ns * np.arange(self.count + 1, dtype=np.int64)


def make_bins(start_ns: int, end_ns: int, count: int) -> TimeBins:
    """Bins covering ``[start_ns, end_ns)``: ``count`` of them, each at least 1 ns wide."""
    if count < 1:
        raise ValueError("count must be >= 1")
    span = max(end_ns - start_ns, 1)
    width = -(-span // count)  # ceil: the last bin reaches end_ns
    return TimeBins(start_ns, width, min(count, -(-span // width)))


@dataclass
class StreamActivity:
    """Busy time of one stream for one kind of operation, per bin."""

    device_id: int
    context_id: int | None
    stream_id: int | None
    kind: str  # kernel | memcpy | memset
    operations: int
    busy_ns: int
    busy_per_bin: np.ndarray = field(repr=False)  # int64 ns, len == bins.count


@dataclass
class NvtxBar:
    """One NVTX range as drawn: named as nvtx_sum names it ("domain:text")."""

    text: str | None
    style: str  # PushPop | StartEnd
    start_ns: int
    end_ns: int
    global_tid: int | None
    depth: int = 0  # nesting level within its thread (0 = outermost)


def _present(export: NsysExport) -> list[tuple[str, str]]:
    return [(kind, table) for kind, table in ACTIVITY_TABLES
            if export.has_table(table) and {"start", "end"} <= export.columns(table)]


def _column(export: NsysExport, table: str, column: str, default: str) -> str:
    return f'"{column}"' if export.has_column(table, column) else default


def gpu_window(export: NsysExport) -> tuple[int, int] | None:
    """(first start, last end) of all kernels, memcpys and memsets; None without any."""
    lo, hi = None, None
    for _, table in _present(export):
        row = export.rows(f'SELECT min(start), max(max("end", start)) FROM "{table}"')[0]
        if row[0] is not None:
            lo = row[0] if lo is None else min(lo, row[0])
            hi = row[1] if hi is None else max(hi, row[1])
    return (lo, hi) if lo is not None else None


def nvtx_window(export: NsysExport) -> tuple[int, int] | None:
    """(first start, last end) of the NVTX ranges; an open range ends at the last NVTX timestamp."""
    if not export.has_table(queries.NVTX.table) or not {"start", "end", "eventType"} <= export.columns(
            queries.NVTX.table):
        return None
    types = ", ".join(map(str, queries.NVTX_RANGE_TYPES))
    row = export.rows(f"""SELECT min(start), max(max(start, coalesce("end", start)))
                          FROM NVTX_EVENTS WHERE eventType IN ({types})""")[0]
    return (row[0], row[1]) if row[0] is not None else None


def time_window(export: NsysExport) -> tuple[int, int] | None:
    """The span the figures cover: GPU activity and NVTX ranges together."""
    spans = [w for w in (gpu_window(export), nvtx_window(export)) if w is not None]
    if not spans:
        return None
    return min(s for s, _ in spans), max(e for _, e in spans)


# -- busy time per stream ---------------------------------------------------------
# One row per (device, context, stream, first bin, last bin): how many
# operations, and the ns they spend in their first and in their last bin.
# "end" is clamped to start so a malformed negative duration counts as 0.
_STREAM_BINS_SQL = """
SELECT dev, ctx, stream, fb, lb, count(*),
       sum(min(e, :t0 + (fb + 1) * :w) - s),
       sum(CASE WHEN lb > fb THEN e - (:t0 + lb * :w) ELSE 0 END)
FROM (SELECT {device} AS dev, {context} AS ctx, {stream} AS stream, start AS s, max("end", start) AS e,
             (start - :t0) / :w AS fb,
             (max("end", start + 1) - 1 - :t0) / :w AS lb
      FROM "{table}" WHERE start >= :t0 AND "end" <= :t1)
GROUP BY dev, ctx, stream, fb, lb
"""


def stream_busy(export: NsysExport, bins: TimeBins) -> list[StreamActivity]:
    """Busy ns per bin for each (device, context, stream) and kind of operation.

    Operations outside ``bins`` are left out.  Sorted by device, stream,
    kind.  ``busy_per_bin`` sums to ``busy_ns``, the operations' total
    duration (operations of one stream that overlap each count in full).
    """
    params = {"t0": bins.start_ns, "w": bins.width_ns, "t1": bins.end_ns}
    lanes: dict[tuple, StreamActivity] = {}
    full_cover: dict[tuple, np.ndarray] = {}
    for kind, table in _present(export):
        sql = _STREAM_BINS_SQL.format(
            table=table, device=_column(export, table, "deviceId", "0"),
            context=_column(export, table, "contextId", "NULL"), stream=_column(export, table, "streamId", "NULL"))
        for dev, ctx, stream, fb, lb, n, first_part, last_part in export.iter_rows(sql, params):
            key = (dev, ctx, stream, kind)
            lane = lanes.get(key)
            if lane is None:
                lane = lanes[key] = StreamActivity(dev, ctx, stream, kind, 0, 0,
                                                   np.zeros(bins.count, dtype=np.int64))
                full_cover[key] = np.zeros(bins.count + 1, dtype=np.int64)
            lane.operations += n
            lane.busy_per_bin[fb] += first_part
            if lb > fb:
                lane.busy_per_bin[lb] += last_part
                if lb > fb + 1:  # bins fb+1 .. lb-1 are covered whole by n operations
                    full_cover[key][fb + 1] += n
                    full_cover[key][lb] -= n
    for key, lane in lanes.items():
        lane.busy_per_bin += np.cumsum(full_cover[key][:-1]) * bins.width_ns
        lane.busy_ns = int(lane.busy_per_bin.sum())
    kind_order = {kind: i for i, (kind, _) in enumerate(ACTIVITY_TABLES)}
    return sorted(lanes.values(), key=lambda a: (a.device_id, a.stream_id if a.stream_id is not None else -1,
                                                 a.context_id or 0, kind_order[a.kind]))


# -- GPU utilization ----------------------------------------------------------------
@dataclass
class Utilization:
    """How busy one device was, per bin, and its longest idle gaps."""

    device_id: int
    busy_per_bin: np.ndarray = field(repr=False)  # int64 ns, each <= the bin width
    busy_ns: int = 0
    first_ns: int | None = None  # first operation's start
    last_ns: int | None = None  # last operation's end
    gaps: list[tuple[int, int]] = field(default_factory=list)  # (start, end), longest first


def gpu_utilization(export: NsysExport, bins: TimeBins, gaps: int = 5) -> list[Utilization]:
    """Per device: ns of each bin in which the GPU ran at least one kernel, memcpy or memset,
    and the ``gaps`` longest stretches between operations when it ran nothing.

    Overlapping operations count once, so a bin's value is at most its
    width, and over bins that cover the whole GPU span ``busy_ns`` equals
    ``summaries.gpu_busy``'s ``busy_ns`` for the device.
    """
    present = _present(export)
    if not present:
        return []
    union = " UNION ALL ".join(
        f'SELECT coalesce({_column(export, table, "deviceId", "0")}, 0) AS dev, start AS s, max("end", start) AS e '
        f'FROM "{table}" WHERE start >= :t0 AND "end" <= :t1'
        for _, table in present)
    sql = f"SELECT dev, s, e FROM ({union}) ORDER BY dev, s"
    params = {"t0": bins.start_ns, "t1": bins.end_ns}
    out: dict[int, Utilization] = {}
    reach: dict[int, int] = {}  # furthest end seen so far, per device
    for chunk in _chunks(export.iter_rows(sql, params, batch=STREAM_CHUNK_ROWS)):
        devices, starts, ends = chunk[:, 0], chunk[:, 1], chunk[:, 2]
        for dev in np.unique(devices).tolist():
            mine = devices == dev
            s, e = starts[mine], ends[mine]
            util = out.get(dev)
            if util is None:
                util = out[dev] = Utilization(dev, np.zeros(bins.count, dtype=np.int64), first_ns=int(s[0]))
                reach[dev] = int(s[0])
            # The part of an interval past the furthest end reached before it
            # is new busy time; those parts are disjoint.  A start beyond that
            # end opens an idle gap.
            before = np.maximum.accumulate(np.concatenate(([reach[dev]], e)))
            reach[dev] = int(before[-1])
            before = before[:-1]
            a = np.maximum(s, before)
            new = e > a
            _add_segments(util.busy_per_bin, a[new], e[new], bins)
            idle = np.flatnonzero(s > before)
            if len(idle):
                longest = idle[np.argsort(before[idle] - s[idle], kind="stable")[:gaps]]
                util.gaps = sorted(util.gaps + [(int(before[i]), int(s[i])) for i in longest],
                                   key=lambda g: (g[0] - g[1], g[0]))[:gaps]
    for dev, util in out.items():
        util.busy_ns = int(util.busy_per_bin.sum())
        util.last_ns = reach[dev]
    return [out[dev] for dev in sorted(out)]


def _chunks(rows: Iterator[tuple]) -> Iterator[np.ndarray]:
    buffer: list[tuple] = []
    for row in rows:
        buffer.append(row)
        if len(buffer) == STREAM_CHUNK_ROWS:
            yield np.array(buffer, dtype=np.int64)
            buffer = []
    if buffer:
        yield np.array(buffer, dtype=np.int64)


def _add_segments(busy: np.ndarray, a: np.ndarray, b: np.ndarray, bins: TimeBins) -> None:
    """Add the lengths of the disjoint segments [a, b) (a < b) into ``busy``, split at bin edges."""
    if len(a) == 0:
        return
    t0, w, n = bins.start_ns, bins.width_ns, bins.count
    fb = (a - t0) // w
    lb = (b - 1 - t0) // w
    first = np.minimum(b, t0 + (fb + 1) * w) - a
    busy += np.bincount(fb, weights=first, minlength=n).astype(np.int64)
    multi = lb > fb
    if multi.any():
        busy += np.bincount(lb[multi], weights=(b - (t0 + lb * w))[multi], minlength=n).astype(np.int64)
        inner = lb > fb + 1
        if inner.any():
            cover = np.bincount(fb[inner] + 1, minlength=n + 1)[: n + 1] - np.bincount(lb[inner], minlength=n + 1)
            busy += np.cumsum(cover[:n]) * w


# -- NVTX ranges --------------------------------------------------------------------------
def nvtx_bars(export: NsysExport, start_ns: int, end_ns: int, min_duration_ns: int = 0,
              limit: int = 2000) -> tuple[list[NvtxBar], int]:
    """The longest NVTX ranges overlapping ``[start_ns, end_ns)`` (at most ``limit``,
    none shorter than ``min_duration_ns``), and how many ranges overlap in all.

    Names and open-range ends are those of nvtx_sum (``queries.nvtx_durations``).
    Depth is the nesting level among the returned ranges of the same thread.
    """
    if not export.has_table(queries.NVTX.table):
        return [], 0
    query = queries.nvtx_durations(export)
    tag, style = query.text_columns
    duration = query.int_columns[0]
    # nvtx_durations' source names the event table "ne" (see queries.py).
    body = f"""{query.with_clause}
        SELECT ne.start AS s, ne.start + ({duration}) AS e, ({duration}) AS d, ne.globalTid AS tid,
               {tag} AS tag, {style} AS style
        FROM {query.source} WHERE {query.where}"""
    window = "s < :t1 AND e > :t0"
    params = {"t0": start_ns, "t1": end_ns, "min": min_duration_ns, "limit": limit}
    total = export.scalar(f"SELECT count(*) FROM ({body}) WHERE {window}", params) or 0
    rows = export.rows(f"""SELECT s, e, tid, tag, style FROM ({body})
                           WHERE {window} AND d >= :min ORDER BY d DESC, s LIMIT :limit""", params)
    bars = [NvtxBar(tag, style, s, e, tid) for s, e, tid, tag, style in rows]
    _assign_depths(bars)
    return bars, total


def _assign_depths(bars: list[NvtxBar]) -> None:
    """A level per range within its thread: the lowest level free at its start.

    A nested range starts while its parent still holds a level, so it lands
    below it; ranges that overlap without nesting (start/end) stack the same way.
    """
    by_thread: dict[int | None, list[NvtxBar]] = {}
    for bar in bars:
        by_thread.setdefault(bar.global_tid, []).append(bar)
    for group in by_thread.values():
        group.sort(key=lambda b: (b.start_ns, -b.end_ns))
        level_ends: list[int] = []  # when each level becomes free
        for bar in group:
            level = next((i for i, end in enumerate(level_ends) if end <= bar.start_ns), len(level_ends))
            if level == len(level_ends):
                level_ends.append(bar.end_ns)
            else:
                level_ends[level] = bar.end_ns
            bar.depth = level


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


def enclosing_ranges(export: NsysExport, start_ns: int, end_ns: int, limit: int = 3) -> list[str]:
    """Names (as nvtx_sum names them) of the shortest NVTX ranges that contain all of
    ``[start_ns, end_ns]``, innermost first; e.g. what the program was doing during an idle gap."""
    if not export.has_table(queries.NVTX.table):
        return []
    query = queries.nvtx_durations(export)
    tag = query.text_columns[0]
    duration = query.int_columns[0]
    rows = export.rows(f"""{query.with_clause}
        SELECT {tag}, ({duration}) AS d FROM {query.source}
        WHERE {query.where} AND ne.start <= :t0 AND ne.start + ({duration}) >= :t1
        ORDER BY d, ne.start LIMIT :limit""", {"t0": start_ns, "t1": end_ns, "limit": limit})
    return [name for name, _ in rows if name is not None]
