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

import numpy as np
import pandas as pd
from pandas.api.types import union_categoricals

from profkit.analysis import kernel_origin
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


def gpu_events(trace: Trace, include_syncs: bool = True, hta_filter: bool = True) -> tuple[pd.DataFrame, EventWindow]:
    """Every GPU event HTA's breakdowns count, with kernel type and launch.

    ``include_syncs``: add CUPTI synchronization records that sit on a stream
    and have a correlation id, as HTA does (they count as kernel time of type
    'other').  ``hta_filter``: leave out the last ProfilerStep's GPU work when
    the trace has two or more ProfilerStep ranges, as HTA's ``load_traces``
    does by default."""
    parts = []
    kernels = trace.table("kernels", [*_EVENT_COLUMNS, "name"])
    if len(kernels):
        parts.append(pd.DataFrame({
            **{c: kernels[c].to_numpy() for c in _EVENT_COLUMNS},
            "source": "kernel",
            "name": kernels["name"].array,
            "kernel_type": kernel_origin.kernel_types(kernels["name"]),
        }))
    memcpy = trace.table("memcpy", [*_EVENT_COLUMNS, "copy_kind"])
    if len(memcpy):
        parts.append(pd.DataFrame({
            **{c: memcpy[c].to_numpy() for c in _EVENT_COLUMNS},
            "source": "memcpy",
            "name": memcpy["copy_kind"].array.rename_categories(lambda kind: f"Memcpy {kind}"),
            "kernel_type": kernel_origin.MEMORY,
        }))
    memset = trace.table("memset", _EVENT_COLUMNS)
    if len(memset):
        parts.append(pd.DataFrame({**{c: memset[c].to_numpy() for c in _EVENT_COLUMNS},
                                   "source": "memset", "name": pd.Categorical.from_codes(np.zeros(len(memset), int),
                                                                                         ["Memset"]),
                                   "kernel_type": kernel_origin.MEMORY}))
    if include_syncs:
        syncs = trace.table("syncs", [*_EVENT_COLUMNS, "sync_type"])
        on_stream = syncs[(syncs["stream"] >= 0) & (syncs["correlation"] >= 0)]
        if len(on_stream):
            parts.append(pd.DataFrame({
                **{c: on_stream[c].to_numpy() for c in _EVENT_COLUMNS},
                "source": "sync",
                "name": on_stream["sync_type"].array,
                # HTA types every "... Sync" record 'other'; a "Stream Wait Event" too on its main branch.
                "kernel_type": kernel_origin.OTHER,
            }))
    events = _concat(parts) if parts else _empty_events()
    events = _with_launches(trace, events)
    window = EventWindow(False, None, None, None)
    if hta_filter:
        last_step = _last_profiler_step_start(trace)
        if last_step is not None:
            keep = (events["launch_start"].to_numpy() >= 0) & (events["launch_start"].to_numpy() < last_step)
            events = events[keep]
            window = EventWindow(True, last_step, None, None)
    events = events.sort_values("start", kind="stable").reset_index(drop=True)
    return events, window


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


def _with_launches(trace: Trace, events: pd.DataFrame) -> pd.DataFrame:
    """Join each GPU event to the CUDA call with its correlation id (the
    earliest such call, should a correlation id repeat)."""
    api = trace.table("api", ["start", "end", "pid", "tid", "correlation", "name"])
    corr = api["correlation"].to_numpy()
    usable = corr >= 0
    api_pid = api["pid"].to_numpy()[usable]
    # Correlation ids are per process: with several processes the key is (pid, correlation).
    single_process = np.unique(api_pid).size <= 1
    api_key = _key(api_pid, corr[usable], single_process)
    api_start = api["start"].to_numpy()[usable]
    order = np.lexsort((api_start, api_key))
    sorted_key = api_key[order]
    first = np.ones(sorted_key.size, dtype=bool)
    first[1:] = sorted_key[1:] != sorted_key[:-1]
    sorted_key, rows = sorted_key[first], np.flatnonzero(usable)[order[first]]

    event_corr = events["correlation"].to_numpy()
    event_key = _key(events["pid"].to_numpy(), event_corr, single_process)
    at = np.minimum(np.searchsorted(sorted_key, event_key), max(sorted_key.size - 1, 0))
    found = (event_corr >= 0) & (sorted_key.size > 0)
    if sorted_key.size:
        found &= sorted_key[at] == event_key
    row = np.where(found, rows[at] if rows.size else 0, -1)
    out = events.copy()
    for column, source in (("launch_start", "start"), ("launch_end", "end"), ("launch_pid", "pid"),
                           ("launch_tid", "tid")):
        values = api[source].to_numpy()
        out[column] = np.where(found, values[np.maximum(row, 0)] if values.size else -1, -1).astype(np.int64)
    names = api["name"].array
    codes = np.where(found, names.codes[np.maximum(row, 0)] if len(names) else -1, -1)
    launch_api = pd.Categorical.from_codes(codes, categories=names.categories)
    out["launch_api"] = launch_api.add_categories([""]).fillna("") if "" not in names.categories else \
        launch_api.fillna("")
    return out


def _key(pid: np.ndarray, correlation: np.ndarray, single_process: bool) -> np.ndarray:
    if single_process:
        return correlation.astype(np.int64)
    return (pid.astype(np.int64) << 40) | (correlation.astype(np.int64) & ((1 << 40) - 1))


def _concat(parts: list[pd.DataFrame]) -> pd.DataFrame:
    """Stack the per-table frames, keeping names categorical (a million kernels
    of a few hundred names stay a million small codes, not a million strings)."""
    names = union_categoricals([p["name"].astype("category").array for p in parts])
    kinds = union_categoricals([pd.Categorical(p["kernel_type"]) if not isinstance(p["kernel_type"].dtype,
                                pd.CategoricalDtype) else p["kernel_type"].array for p in parts])
    sources = union_categoricals([pd.Categorical(p["source"]) for p in parts])
    frame = pd.concat([p.drop(columns=["name", "kernel_type", "source"]) for p in parts], ignore_index=True)
    frame["source"] = sources
    frame["name"] = names
    frame["kernel_type"] = kinds
    return frame


def _empty_events() -> pd.DataFrame:
    frame = pd.DataFrame({c: np.empty(0, dtype=np.int64) for c in _EVENT_COLUMNS})
    for c in ("source", "name", "kernel_type"):
        frame[c] = np.empty(0, dtype=object)
    return frame
