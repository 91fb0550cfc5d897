"""Annotated ranges (NVTX, ``record_function``) of a ``Trace``, named and timed as the summaries name them.

One place for the two rules every range analysis shares:

- the name: nsys's nvtx_sum prefixes the domain ("domain:text"; from nsys
  2024 on ":text" in the default domain, ``TraceMeta.nvtx_default_domain_prefix``);
  Kineto ranges are named by their text alone;
- the end of a range that never closed (``end == -1``): nvtx_sum ends it at
  the last timestamp of any NVTX event (``meta.extra["nvtx_last_timestamp_ns"]``,
  which the nsys reader records), nvtx_kern_sum at the last range timestamp
  (``open_end="ranges"``).

``cpu_ranges`` returns them as columns (a DataFrame), never as objects.  On top of it:
``nvtx_window`` (the span they cover), ``nvtx_bars`` (the longest ranges in a window with
their nesting depth per thread, as the report's timeline draws them) and
``enclosing_ranges`` (the shortest ranges that contain an interval: what the program was
doing during an idle gap).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from profkit.model import NSYS, Trace
from profkit.model.schema import MISSING_INT
from profkit.model.sync_sites import readable_range

# Ranges drawn and summed as NVTX ranges: CPU-side annotations.  GPU-side
# copies (Kineto's gpu_user_annotation) repeat the CPU ones on a stream.
CPU_RANGE_KINDS = ("nvtx", "sync_site", "user_annotation", "profiler_step")


def range_labels(trace: Trace, name: pd.Categorical, domain: pd.Categorical) -> pd.Categorical:
    """Each range's name as the NVTX summary prints it ("" text -> missing)."""
    prefix_default = trace.meta.nvtx_default_domain_prefix
    nsys = trace.meta.source == NSYS
    name = pd.Categorical(name)
    domain = pd.Categorical(domain)
    n_domains = max(len(domain.categories), 1)
    pair = name.codes.astype(np.int64) * n_domains + np.maximum(domain.codes, 0)
    distinct, codes = np.unique(pair, return_inverse=True)
    labels: list[str | None] = []
    for value in distinct.tolist():
        text = name.categories[value // n_domains] if value >= 0 else ""
        dom = domain.categories[value % n_domains] if len(domain.categories) else ""
        if not text:
            labels.append(None)
        elif nsys and (dom or prefix_default):
            labels.append(f"{dom}:{text}")
        else:
            labels.append(text)
    return _categorical(codes, labels)


def _categorical(codes: np.ndarray, labels: Sequence[str | None]) -> pd.Categorical:
    """Codes into ``labels`` (which may repeat, or be None = missing) as a Categorical."""
    categories: dict[str, int] = {}
    remap = np.array([-1 if label is None else categories.setdefault(label, len(categories)) for label in labels],
                     dtype=np.int64)
    return pd.Categorical.from_codes(remap[codes] if len(codes) else np.zeros(0, dtype=np.int64), list(categories))


def cpu_ranges(trace: Trace, columns: Sequence[str] = (), open_end: str = "nvtx_sum") -> pd.DataFrame:
    """CPU-side ranges with ``label`` (the summary's name), ``start``, ``end`` (open ranges
    closed as ``open_end`` says: "nvtx_sum" or "ranges") and ``columns`` of the ranges table.

    Rows keep the table's order; ``row`` is each range's row in the table."""
    if not trace.has("ranges"):
        return pd.DataFrame({"row": np.zeros(0, dtype=np.int64), "label": pd.Categorical([]),
                             "start": np.zeros(0, dtype=np.int64), "end": np.zeros(0, dtype=np.int64),
                             **{c: [] for c in columns}})
    wanted = ["start", "end", "name", "domain", "kind", *[c for c in columns if c not in ("start", "end")]]
    frame = trace.table("ranges", list(dict.fromkeys(wanted)))
    keep = np.asarray(frame["kind"].isin(CPU_RANGE_KINDS))
    start = frame["start"].to_numpy()
    end = frame["end"].to_numpy()
    open_ = end == MISSING_INT
    if open_.any():
        if open_end == "nvtx_sum" and trace.meta.extra.get("nvtx_last_timestamp_ns") is not None:
            last = int(trace.meta.extra["nvtx_last_timestamp_ns"])
        else:
            last = int(max(start.max(initial=0), end.max(initial=0)))
        end = np.where(open_, last, end)
    rows = np.flatnonzero(keep)
    out = pd.DataFrame({
        "row": rows,
        "label": range_labels(trace, frame["name"].array[rows], frame["domain"].array[rows]),
        "start": start[rows],
        "end": end[rows],
    })
    for column in columns:
        if column not in ("start", "end"):
            out[column] = frame[column].to_numpy()[rows] if not isinstance(frame[column].dtype, pd.CategoricalDtype) \
                else frame[column].array[rows]
    return out


def nvtx_window(trace: Trace) -> tuple[int, int] | None:
    """(first start, last end) of the CPU-side ranges (an open range ends as nvtx_sum ends it)."""
    ranges = cpu_ranges(trace)
    if not len(ranges):
        return None
    start, end = ranges["start"].to_numpy(), ranges["end"].to_numpy()
    return int(start.min()), int(np.maximum(end, start).max())


@dataclass
class NvtxBar:
    """One range as drawn, named as the NVTX summary names it ("domain:text")."""

    text: str | None
    style: str  # PushPop | StartEnd ('' where the source has no style)
    start_ns: int
    end_ns: int
    tid: int | None
    depth: int = 0  # nesting level within its thread (0 = outermost)


def nvtx_bars(trace: Trace, start_ns: int, end_ns: int, min_duration_ns: int = 0,
              limit: int = 2000) -> tuple[list[NvtxBar], int]:
    """The longest CPU-side ranges overlapping ``[start_ns, end_ns)`` (at most ``limit``,
    none shorter than ``min_duration_ns``), and how many ranges overlap in all.

    Names and open-range ends are those of the NVTX summary.  Depth is the
    nesting level among the returned ranges of the same thread.
    """
    ranges = cpu_ranges(trace, ("pid", "tid", "style"))
    if not len(ranges):
        return [], 0
    s, e = ranges["start"].to_numpy(), ranges["end"].to_numpy()
    overlap = np.flatnonzero((s < end_ns) & (e > start_ns))
    d = e[overlap] - s[overlap]
    keep = overlap[d >= min_duration_ns]
    order = np.lexsort((s[keep], -(e[keep] - s[keep])))[:limit]  # longest first, then earliest
    chosen = keep[order]
    labels, styles = ranges["label"].array, ranges["style"].array
    tids = ranges["tid"].to_numpy()
    bars = [NvtxBar(None if isinstance(labels[i], float) else readable_range(labels[i]), str(styles[i]), int(s[i]),
                    int(e[i]),
                    None if tids[i] < 0 else int(tids[i])) for i in chosen.tolist()]
    _assign_depths(bars)
    return bars, len(overlap)


def _assign_depths(bars: list[NvtxBar]) -> None:
    """A level per range within its thread: the lowest level free at its start.

    A nested range starts while its parent still holds a level, so it lands
    below it; ranges that overlap without nesting (start/end) stack the same way.
    """
    by_thread: dict[int | None, list[NvtxBar]] = {}
    for bar in bars:
        by_thread.setdefault(bar.tid, []).append(bar)
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


def enclosing_ranges(trace: Trace, start_ns: int, end_ns: int, limit: int = 3) -> list[str]:
    """Names (as the NVTX summary names them) of the shortest CPU-side ranges that contain
    all of ``[start_ns, end_ns]``, innermost first; e.g. what the program was doing during an idle gap."""
    ranges = cpu_ranges(trace)
    if not len(ranges):
        return []
    s, e = ranges["start"].to_numpy(), ranges["end"].to_numpy()
    inside = np.flatnonzero((s <= start_ns) & (e >= end_ns))
    order = inside[np.lexsort((s[inside], e[inside] - s[inside]))]
    labels = ranges["label"].array
    names = [labels[i] for i in order.tolist()]
    return [readable_range(n) for n in names if isinstance(n, str)][:limit]
