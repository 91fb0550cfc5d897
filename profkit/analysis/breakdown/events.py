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
``source`` ('kernel', 'memcpy', 'memset', 'sync'), ``name`` (kernel name;
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

from profkit.analysis import kernel_origin
from profkit.analysis.launch_calls import CallIndex, launch_calls
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


def gpu_events(trace: Trace, include_syncs: bool = True, hta_filter: bool = True,
               launch_columns: tuple[str, ...] = LAUNCH_COLUMNS) -> tuple[pd.DataFrame, EventWindow]:
    """Every GPU event HTA's breakdowns count, with kernel type and launch.

    ``include_syncs``: add CUPTI synchronization records that sit on a stream
    and have a correlation id, as HTA does (they count as kernel time of type
    'other').  ``hta_filter``: leave out the last ProfilerStep's GPU work when
    the trace has two or more ProfilerStep ranges, as HTA's ``load_traces``
    does by default.  ``launch_columns``: which of the launch columns to add
    (a 1M-event frame costs 8 MB per column; the report's Steps section needs
    only ``launch_start``); the HTA filter needs ``launch_start``."""
    parts: list[dict[str, Any]] = []
    calls: list[np.ndarray] = []  # each event's launching call (launch_calls), table by table
    kernels = trace.table("kernels", [*_EVENT_COLUMNS, "name"])
    if len(kernels):
        parts.append({**{c: kernels[c].to_numpy() for c in _EVENT_COLUMNS}, "source": "kernel",
                      "name": kernels["name"].array, "kernel_type": kernel_origin.kernel_types(kernels["name"])})
        calls.append(_earliest_calls(trace, "kernels"))
    memcpy = trace.table("memcpy", [*_EVENT_COLUMNS, "copy_kind"])
    if len(memcpy):
        parts.append({**{c: memcpy[c].to_numpy() for c in _EVENT_COLUMNS}, "source": "memcpy",
                      "name": memcpy["copy_kind"].array.rename_categories(lambda kind: f"Memcpy {kind}"),
                      "kernel_type": kernel_origin.MEMORY})
        calls.append(_earliest_calls(trace, "memcpy"))
    memset = trace.table("memset", _EVENT_COLUMNS)
    if len(memset):
        parts.append({**{c: memset[c].to_numpy() for c in _EVENT_COLUMNS}, "source": "memset",
                      "name": _constant("Memset", len(memset)), "kernel_type": kernel_origin.MEMORY})
        calls.append(_earliest_calls(trace, "memset"))
    if include_syncs:
        syncs = trace.table("syncs", [*_EVENT_COLUMNS, "sync_type"])
        on_stream = ((syncs["stream"] >= 0) & (syncs["correlation"] >= 0)).to_numpy()
        if on_stream.any():
            # HTA types every "... Sync" record 'other'; a "Stream Wait Event" too on its main branch.
            parts.append({**{c: syncs[c].to_numpy()[on_stream] for c in _EVENT_COLUMNS}, "source": "sync",
                          "name": syncs["sync_type"].array[on_stream], "kernel_type": kernel_origin.OTHER})
            calls.append(_earliest_calls(trace, "syncs")[on_stream])
    columns = _concat(parts)
    wanted = set(launch_columns) | ({"launch_start"} if hta_filter else set())
    call = np.concatenate(calls) if calls else np.zeros(0, dtype=np.int64)
    del calls
    columns.update(_launches(trace, call, columns["pid"], columns["correlation"], wanted))
    del call
    window = EventWindow(False, None, None, None)
    keep = None
    if hta_filter:
        last_step = _last_profiler_step_start(trace)
        if last_step is not None:
            launch = columns["launch_start"]
            keep = np.flatnonzero((launch >= 0) & (launch < last_step))
            window = EventWindow(True, last_step, None, None)
        if "launch_start" not in launch_columns:
            del columns["launch_start"]
    # one reorder (filter + sort by start) for every column: a 1M-event frame is copied once
    starts = columns["start"] if keep is None else columns["start"][keep]
    order = np.argsort(starts, kind="stable")
    if keep is not None:
        order = keep[order]
    # column by column, each unordered column dropped once reordered: one column's copy at a time
    events = pd.DataFrame({name: columns.pop(name)[order] for name in list(columns)}, copy=False)
    return events, window


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


def _launches(trace: Trace, calls: np.ndarray, pid: np.ndarray, correlation: np.ndarray,
              wanted: set[str] | frozenset[str] = frozenset(LAUNCH_COLUMNS)) -> dict[str, Any]:
    """For each GPU event, the CUDA call with its correlation id (the earliest such call,
    should a correlation id repeat): launch_start, launch_end, launch_pid, launch_tid (-1 none)
    and launch_api ('' none), those of them in ``wanted``.  ``calls``: each event's call
    from ``launch_calls`` (same process and correlation id)."""
    found = (calls >= 0) & (correlation >= 0)
    foreign = ~found & (correlation >= 0)
    if foreign.any():
        # Where every call with a correlation id is one process's, the id alone names the
        # call, whichever pid the event carries (as HTA matches).
        api_corr = trace.array("api", "correlation")
        api_pid = trace.array("api", "pid")[api_corr >= 0]
        if api_pid.size and int(api_pid.min()) == int(api_pid.max()):
            foreign &= pid != int(api_pid[0])
            rows = np.flatnonzero(foreign)
            by_id = CallIndex(None, api_corr).match(None, correlation[rows]).earliest(trace.array("api", "start"))
            calls = calls.copy()
            calls[rows] = by_id
            found[rows] = by_id >= 0
    missing = ~found
    row = np.where(found, calls, 0)
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


def _earliest_calls(trace: Trace, table: str) -> np.ndarray:
    """Each row's launching call; the one that started first where a correlation id repeats."""
    return launch_calls(trace, table).earliest(trace.array("api", "start"))


def _concat(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """Stack the per-table columns, keeping names categorical (a million kernels
    of a few hundred names stay a million small codes, not a million strings)."""
    if not parts:
        return {c: v.to_numpy() if hasattr(v, "to_numpy") else v for c, v in _empty_events().items()}
    sizes = [len(p["start"]) for p in parts]
    out: dict[str, Any] = {c: np.concatenate([p[c] for p in parts]).astype(np.int64, copy=False)
                           for c in _EVENT_COLUMNS}
    out["source"] = union_categoricals([_constant(p["source"], n) for p, n in zip(parts, sizes)])
    out["name"] = union_categoricals([p["name"] for p in parts])
    out["kernel_type"] = union_categoricals([
        p["kernel_type"] if isinstance(p["kernel_type"], pd.Categorical) else _constant(p["kernel_type"], n)
        for p, n in zip(parts, sizes)])
    return out


def _empty_events() -> pd.DataFrame:
    frame = pd.DataFrame({c: np.empty(0, dtype=np.int64) for c in _EVENT_COLUMNS})
    for c in ("source", "name", "kernel_type"):
        frame[c] = np.empty(0, dtype=object)
    return frame
