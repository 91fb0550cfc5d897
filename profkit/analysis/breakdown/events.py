"""The GPU activity of one trace as one frame, the way HTA sees it.

HTA's analyses (``hta/analyzers/breakdown_analysis.py``,
``communication_analysis.py``) work on every trace event with a GPU stream
(``stream != -1``): kernels, memcpy, memset and the CUDA synchronization
records CUPTI puts on a stream ("Stream Sync", "Stream Wait Event"), after
``Trace._filter_irrelevant_gpu_kernels`` dropped the GPU work of the last
``ProfilerStep`` (a trace with two or more ``ProfilerStep#N`` ranges keeps
only GPU events whose launching CUDA call started before the last step
began).  ``gpu_events`` builds exactly that set from the trace model, with
each event's kernel type and the CPU call that launched it.

Columns of the returned frame (one row per GPU event, sorted by start):
``start``, ``end`` (ns), ``stream``, ``device``, ``pid``, ``correlation``,
``source`` ('kernel', 'memcpy', 'memset', 'graph', 'sync'), ``name`` (kernel name;
'CUDA graph <id>' for a graph replay whose kernels were not traced;
'Memcpy <kind>' / 'Memset' / the sync type otherwise), ``kernel_type``
('computation', 'communication', 'memory', 'other'), and from the launching
runtime/driver call (-1 / '' when the trace has none): ``launch_start``,
``launch_end``, ``launch_pid``, ``launch_tid``, ``launch_api``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from pandas.api.types import union_categoricals

from profkit.analysis.kernels import origin
from profkit.analysis.timeline.launch_calls import KeyIndex, launch_calls
from profkit.model import Trace

_EVENT_COLUMNS = ["start", "end", "stream", "device", "pid", "correlation"]
PROFILER_STEP_MARK = "ProfilerStep"


@dataclass(frozen=True)
class EventWindow:
    """Which GPU events an analysis took, in words and numbers."""

    dropped_last_profiler_step: bool   # HTA's default filter applied
    last_step_start_ns: int | None     # the launches from here on were left out
    start_ns: int | None               # optional clip (steady state), else None
    end_ns: int | None


LAUNCH_COLUMNS = ("launch_start", "launch_end", "launch_pid", "launch_tid", "launch_api")
EVENT_COLUMNS = (*_EVENT_COLUMNS[2:], "source", "name", "kernel_type")


def gpu_events(trace: Trace, include_syncs: bool = True, hta_filter: bool = True,
               launch_columns: tuple[str, ...] = LAUNCH_COLUMNS,
               columns: tuple[str, ...] = EVENT_COLUMNS) -> tuple[pd.DataFrame, EventWindow]:
    """Every GPU event HTA's breakdowns count, with kernel type and launch.

    ``include_syncs``: add CUPTI synchronization records that sit on a stream
    and have a correlation id, as HTA does (they count as kernel time of type
    'other').  ``hta_filter``: leave out the last ProfilerStep's GPU work when
    the trace has two or more ProfilerStep ranges, as HTA's ``load_traces``
    does by default.  ``launch_columns``: which of the launch columns to add
    (a 1M-event frame costs 8 MB per column; the report's Steps section needs
    only ``launch_start``); the HTA filter needs ``launch_start``.
    ``columns``: which of the other columns (``EVENT_COLUMNS``) to return; start
    and end always come."""
    wanted = {"start", "end", *columns}
    parts: list[dict[str, Any]] = []
    for table, source in (("kernels", "kernel"), ("memcpy", "memcpy"), ("memset", "memset"), ("graphs", "graph"),
                          ("syncs", "sync")):
        if table == "syncs" and not include_syncs:
            continue
        rows: np.ndarray | slice = slice(None)
        if table == "syncs":
            rows = np.flatnonzero((trace.array(table, "stream") >= 0) & (trace.array(table, "correlation") >= 0))
        n = len(trace.array(table, "start")[rows])
        if not n:
            continue
        part: dict[str, Any] = {c: trace.array(table, c)[rows] for c in _EVENT_COLUMNS if c in wanted}
        part["call"] = _calls(trace, table, rows)
        part["source"] = source
        if "name" in wanted:
            part["name"] = _names(trace, table, rows, n)
        if "kernel_type" in wanted:
            # HTA types every "... Sync" record 'other'; a "Stream Wait Event" too on its main branch.
            # A graph replay whose kernels were not traced is typed by its label ("CUDA graph 4"):
            # computation, the type of what cannot be told apart.
            part["kernel_type"] = origin.kernel_types(_names(trace, table, rows, n)) \
                if table in ("kernels", "graphs") \
                else origin.OTHER if table == "syncs" else origin.MEMORY
        parts.append(part)
    events = _concat(parts, [c for c in (*_EVENT_COLUMNS, *EVENT_COLUMNS) if c in wanted])
    call = events.pop("call")
    with_start = set(launch_columns) | ({"launch_start"} if hta_filter else set())
    events.update(_launches(trace, call, with_start))
    del call
    window = EventWindow(False, None, None, None)
    keep = None
    if hta_filter:
        last_step = _last_profiler_step_start(trace)
        if last_step is not None:
            launch = events["launch_start"]
            keep = np.flatnonzero((launch >= 0) & (launch < last_step))
            window = EventWindow(True, last_step, None, None)
        if "launch_start" not in launch_columns:
            del events["launch_start"]
    # one reorder (filter + sort by start) for every column: a 1M-event frame is copied once
    starts = events["start"] if keep is None else events["start"][keep]
    order = np.argsort(starts, kind="stable")
    if keep is not None:
        order = keep[order]
    # column by column, each unordered column dropped once reordered: one column's copy at a time
    frame = pd.DataFrame({name: events.pop(name)[order] for name in list(events)}, copy=False)
    return frame, window


def _names(trace: Trace, table: str, rows: np.ndarray | slice, n: int) -> pd.Categorical:
    """The events' names: kernel names, 'Memcpy <kind>', 'Memset', the sync type."""
    if table == "memset":
        return _constant("Memset", n)
    column = {"kernels": "name", "graphs": "name", "memcpy": "copy_kind", "syncs": "sync_type"}[table]
    names = trace.table(table, [column])[column].array[rows]
    return names.rename_categories(lambda kind: f"Memcpy {kind}") if table == "memcpy" else names


def _constant(label: str, n: int) -> pd.Categorical:
    return pd.Categorical.from_codes(np.zeros(n, dtype=np.int8), [label])


def clip_events(events: pd.DataFrame, start_ns: int, end_ns: int) -> pd.DataFrame:
    """The events overlapping ``[start_ns, end_ns)``, cut to it."""
    s = events["start"].to_numpy()
    e = events["end"].to_numpy()
    keep = (e > start_ns) & (s < end_ns)
    out = events[keep].copy()
    out["start"] = np.maximum(out["start"].to_numpy(), start_ns)
    out["end"] = np.minimum(out["end"].to_numpy(), end_ns)
    return out.reset_index(drop=True)


def _last_profiler_step_start(trace: Trace) -> int | None:
    """Start of the last ProfilerStep when there are two or more distinct ones
    (HTA counts distinct ``ProfilerStep`` names, CPU and GPU annotations alike)."""
    ranges = trace.table("ranges", ["name", "start"])
    if not len(ranges):
        return None
    names = ranges["name"].astype(str)
    is_step = names.str.contains(PROFILER_STEP_MARK, regex=False).to_numpy()
    if names[is_step].nunique() < 2:
        return None
    return int(ranges["start"].to_numpy()[is_step].max())


def _calls(trace: Trace, table: str, rows: np.ndarray | slice) -> np.ndarray:
    """For each event (``rows`` of a GPU table), the API row of the CUDA call with its
    correlation id, -1 none: of the same process (``launch_calls``); the earliest such call,
    should a correlation id repeat."""
    correlation = trace.array(table, "correlation")[rows]
    calls = launch_calls(trace, table).earliest(trace.array("api", "start"))[rows]
    calls = np.where(correlation >= 0, calls, -1)
    foreign = (calls < 0) & (correlation >= 0)
    if foreign.any():
        # Where every call with a correlation id is one process's, the id alone names the
        # call, whichever pid the event carries (as HTA matches).
        api_corr = trace.array("api", "correlation")
        api_pid = trace.array("api", "pid")[api_corr >= 0]
        if api_pid.size and int(api_pid.min()) == int(api_pid.max()):
            foreign &= trace.array(table, "pid")[rows] != int(api_pid[0])
            at = np.flatnonzero(foreign)
            calls[at] = KeyIndex(None, api_corr).match(None, correlation[at]).earliest(trace.array("api", "start"))
    return calls


def _launches(trace: Trace, calls: np.ndarray,
              wanted: set[str] | frozenset[str] = frozenset(LAUNCH_COLUMNS)) -> dict[str, Any]:
    """launch_start, launch_end, launch_pid, launch_tid (-1 none) and launch_api ('' none) of
    each event's call (``_calls``), those of them in ``wanted``."""
    missing = calls < 0
    row = np.where(missing, 0, calls)
    out: dict[str, Any] = {}
    for column, source in (("launch_start", "start"), ("launch_end", "end"), ("launch_pid", "pid"),
                           ("launch_tid", "tid")):
        if column in wanted:
            values = trace.array("api", source)
            out[column] = values[row].astype(np.int64, copy=False) if values.size else \
                np.full(row.size, -1, dtype=np.int64)
            out[column][missing] = -1
    if "launch_api" in wanted:
        names = trace.codes("api", "name")
        categories = list(names.categories) + ([""] if "" not in names.categories else [])
        codes = names.codes[row] if len(names.codes) else np.zeros(row.size, dtype=np.int64)
        codes[missing] = categories.index("")
        out["launch_api"] = pd.Categorical.from_codes(codes, categories=categories)
    return out


def _concat(parts: list[dict[str, Any]], wanted: list[str]) -> dict[str, Any]:
    """Stack the per-table columns, keeping names categorical (a million kernels
    of a few hundred names stay a million small codes, not a million strings)."""
    if not parts:
        empty = _empty_events()
        return {**{c: empty[c].to_numpy() for c in wanted}, "call": np.zeros(0, dtype=np.int64)}
    sizes = [len(p["start"]) for p in parts]
    out: dict[str, Any] = {c: np.concatenate([p[c] for p in parts]).astype(np.int64, copy=False)
                           for c in _EVENT_COLUMNS if c in wanted}
    out["call"] = np.concatenate([p["call"] for p in parts])
    if "source" in wanted:
        out["source"] = union_categoricals([_constant(p["source"], n) for p, n in zip(parts, sizes)])
    if "name" in wanted:
        out["name"] = union_categoricals([p["name"] for p in parts])
    if "kernel_type" in wanted:
        out["kernel_type"] = union_categoricals([
            p["kernel_type"] if isinstance(p["kernel_type"], pd.Categorical) else _constant(p["kernel_type"], n)
            for p, n in zip(parts, sizes)])
    return out


def _empty_events() -> pd.DataFrame:
    frame = pd.DataFrame({c: np.empty(0, dtype=np.int64) for c in _EVENT_COLUMNS})
    for c in ("source", "name", "kernel_type"):
        frame[c] = np.empty(0, dtype=object)
    return frame
