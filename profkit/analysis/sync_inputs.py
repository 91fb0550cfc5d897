"""The stall analysis's inputs, built from any ``Trace``'s columns.

- ``api_calls``: the CUDA calls that may block (``sync_calls.api_role``), each
  joined with the memcpy, memset and synchronization rows of the same
  (process, correlation id), ordered by thread, start, correlation;
- ``unmatched_syncs``: synchronization rows whose API call the trace lacks;
- ``gpu_devices`` / ``gpu_activity`` / ``gpu_activity_window``: kernel,
  memcpy and memset intervals per device, ordered by start;
- ``cpu_ranges``: annotated CPU ranges as ``NvtxRange``, ordered by thread,
  start, longest first (the order ``sync_events.attach_nvtx`` walks);
- ``python_sites``: where a trace's Python stacks put each API call (Kineto).

Only the candidate calls and the ranges become Python records (thousands);
the big tables stay columns.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from profkit.analysis.sync_calls import (
    COPY_KIND_LABELS,
    MEM_KIND_LABELS,
    ApiCall,
    NvtxRange,
    api_role,
    base_api_name,
    kind_values,
    thread_key,
)
from profkit.model import NSYS, Coded, Trace

_COPY_KINDS = kind_values(COPY_KIND_LABELS)
_MEM_KINDS = kind_values(MEM_KIND_LABELS)
_GPU_TABLES = (("kernels", "kernel"), ("memcpy", "memcpy"), ("memset", "memset"))


def _keys(pid: np.ndarray, correlation: np.ndarray) -> np.ndarray:
    """(process, correlation) as one int64 (correlation ids stay below 2**39)."""
    return (pid.astype(np.int64) << 39) | (correlation.astype(np.int64) & ((1 << 39) - 1))


class _Activity:
    """Rows of one activity table (memcpy, memset, syncs) looked up by (process, correlation).

    Where the table does not know the process (Kineto's GPU events carry the
    device, not the pid) the correlation id alone joins."""

    def __init__(self, trace: Trace, table: str, columns: list[str]) -> None:
        self.present = trace.has(table) and trace.count(table) > 0
        if not self.present:
            return
        pid, corr = trace.array(table, "pid"), trace.array(table, "correlation")
        self.by_process = bool((pid != -1).any())
        keys = _keys(pid, corr) if self.by_process else corr
        self.order = np.argsort(keys, kind="stable")  # row order among equal keys
        self.sorted = keys[self.order]
        self.values = {c: _plain(trace, table, c) for c in columns}

    def match(self, pid: np.ndarray, corr: np.ndarray) -> list[list[int]]:
        """The rows of each (pid, correlation), in row order."""
        if not self.present:
            return [[] for _ in range(len(pid))]
        keys = _keys(pid, corr) if self.by_process else corr
        lo = np.searchsorted(self.sorted, keys, side="left").tolist()
        hi = np.searchsorted(self.sorted, keys, side="right").tolist()
        return [self.order[a:b].tolist() if b > a else [] for a, b in zip(lo, hi)]

    def get(self, column: str, row: int) -> Any:
        return self.values[column][row]


def _plain(trace: Trace, table: str, column: str) -> list[Any]:
    """A column as Python values (text as its labels, -1 / '' as None), for a few lookups per call."""
    try:
        values = trace.array(table, column)
        return [None if v == -1 else v for v in values.tolist()]
    except TypeError:
        coded = trace.codes(table, column)
        labels = [label or None for label in coded.categories]
        return [labels[c] if c >= 0 else None for c in coded.codes.tolist()]


def api_calls(trace: Trace) -> list[ApiCall]:
    """The calls that may block, ordered by thread, then start; a call with several
    activity rows (a copy CUPTI split in two) comes once, its bytes summed."""
    names: Coded = trace.codes("api", "name")
    bases = [base_api_name(n) for n in names.categories]
    candidates = [i for i, b in enumerate(bases) if api_role(b) is not None]
    if not candidates:
        return []
    rows = np.flatnonzero(np.isin(names.codes, candidates))
    pid, tid = trace.array("api", "pid")[rows], trace.array("api", "tid")[rows]
    start, end = trace.array("api", "start")[rows], trace.array("api", "end")[rows]
    corr = trace.array("api", "correlation")[rows]
    name = names.codes[rows]
    threads = (pid << 24) | tid
    order = np.lexsort((corr, start, threads))
    memcpy = _Activity(trace, "memcpy", ["device", "stream", "copy_kind", "src_kind", "dst_kind", "bytes"])
    memset = _Activity(trace, "memset", ["device", "stream", "dst_kind", "bytes"])
    syncs = _Activity(trace, "syncs", ["device", "stream", "sync_type"])
    pid, tid, start, end, corr, name = (a[order] for a in (pid, tid, start, end, corr, name))
    threads = threads[order]
    matches = zip(memcpy.match(pid, corr), memset.match(pid, corr), syncs.match(pid, corr))
    out: list[ApiCall] = []
    for i, (m, ms, s) in enumerate(matches):
        m0, ms0, s0 = (m[0] if m else None), (ms[0] if ms else None), (s[0] if s else None)

        def first(column: str) -> Any:
            for table, row in ((memcpy, m0), (memset, ms0), (syncs, s0)):
                if row is not None and (value := table.get(column, row)) is not None:
                    return value
            return None

        byte_rows = [memcpy.get("bytes", r) for r in m] or [memset.get("bytes", r) for r in ms]
        out.append(ApiCall(
            global_tid=int(threads[i]), start=int(start[i]), end=int(end[i]), name=bases[name[i]],
            correlation_id=_or_none(corr[i]), device=first("device"), stream=first("stream"),
            copy_kind=_COPY_KINDS.get(memcpy.get("copy_kind", m0)) if m0 is not None else None,
            src_kind=_MEM_KINDS.get(memcpy.get("src_kind", m0)) if m0 is not None else None,
            dst_kind=_MEM_KINDS.get(memcpy.get("dst_kind", m0)) if m0 is not None else None,
            bytes=sum(b for b in byte_rows if b is not None) if byte_rows else None,
            mem_kind=_MEM_KINDS.get(memset.get("dst_kind", ms0)) if ms0 is not None else None,
            sync_type=syncs.get("sync_type", s0) if s0 is not None else None,
        ))
    return out


def unmatched_syncs(trace: Trace) -> list[ApiCall]:
    """Synchronization rows whose API call is not in the trace, ordered by start.

    Their thread is unknown: ``global_tid`` carries the process only."""
    if not trace.has("syncs"):
        return []
    s_pid, s_corr = trace.array("syncs", "pid"), trace.array("syncs", "correlation")
    by_process = bool((s_pid != -1).any())  # else (Kineto) the correlation id alone joins
    s_keys = _keys(s_pid, s_corr) if by_process else s_corr
    api_pid, api_corr = trace.array("api", "pid"), trace.array("api", "correlation")
    # a sort and a binary search: np.unique/np.isin on 2.5M wide int64 keys take seconds (numpy 2.4's hash path)
    api_keys = np.sort(_keys(api_pid, api_corr) if by_process else api_corr)
    at = np.minimum(np.searchsorted(api_keys, s_keys), max(len(api_keys) - 1, 0))
    known = api_keys[at] == s_keys if len(api_keys) else np.zeros(len(s_keys), dtype=bool)
    alone = np.flatnonzero(~known)
    if not len(alone):
        return []
    start, end = trace.array("syncs", "start"), trace.array("syncs", "end")
    pid, corr = trace.array("syncs", "pid"), trace.array("syncs", "correlation")
    device, stream = _plain(trace, "syncs", "device"), _plain(trace, "syncs", "stream")
    types = _plain(trace, "syncs", "sync_type")
    out = []
    for i in alone[np.argsort(start[alone], kind="stable")].tolist():
        label = types[i] or "CUPTI sync"
        out.append(ApiCall(global_tid=thread_key(int(pid[i]), 0), start=int(start[i]), end=int(end[i]),
                           name=f"CUPTI synchronization ({label})", correlation_id=_or_none(corr[i]),
                           device=device[i], stream=stream[i], sync_type=label))
    return out


def _or_none(value: Any) -> int | None:
    return None if value == -1 else int(value)


# -- GPU activity -------------------------------------------------------------------------
def gpu_devices(trace: Trace) -> list[int]:
    """Devices that ran any kernel, memcpy or memset."""
    found: set[int] = set()
    for table, _ in _GPU_TABLES:
        if trace.has(table):
            found.update(int(d) for d in np.unique(trace.array(table, "device")) if d != -1)
    return sorted(found)


def _intervals(trace: Trace, device: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(kind index, start, end) of a device's GPU work, ordered by start, then end."""
    kinds, starts, ends = [], [], []
    for k, (table, _) in enumerate(_GPU_TABLES):
        if not trace.has(table):
            continue
        on = trace.array(table, "device") == device
        starts.append(trace.array(table, "start")[on])
        ends.append(trace.array(table, "end")[on])
        kinds.append(np.full(int(on.sum()), k, dtype=np.int64))
    if not starts:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty
    kind, start, end = np.concatenate(kinds), np.concatenate(starts), np.concatenate(ends)
    order = np.lexsort((end, start))
    return kind[order], start[order], end[order]


def gpu_activity(trace: Trace, device: int, batch: int = 1 << 20) -> Iterator[np.ndarray]:
    """(start, end) rows of a device's kernels, memcpys and memsets, ordered by start, in batches."""
    _, start, end = _intervals(trace, device)
    for at in range(0, len(start), batch):
        yield np.stack([start[at:at + batch], end[at:at + batch]], axis=1)


def gpu_activity_window(trace: Trace, device: int, t0: int, t1: int) -> list[tuple[str, int, int]]:
    """(kind, start, end) of a device's GPU work that overlaps [t0, t1], by start."""
    kind, start, end = _intervals(trace, device)
    inside = (end > t0) & (start < t1)
    names = [name for _, name in _GPU_TABLES]
    return [(names[k], s, e) for k, s, e in zip(kind[inside].tolist(), start[inside].tolist(), end[inside].tolist())]


# -- ranges and Python sites ------------------------------------------------------------------
# CPU-side range kinds (GPU-side copies of annotations have no thread).
_CPU_KINDS = ("nvtx", "sync_site", "user_annotation", "profiler_step")


def cpu_ranges(trace: Trace) -> list[NvtxRange]:
    """CPU ranges that began and ended on one thread, ordered by thread, start, longest first.

    A range that never ended lasts until the last range timestamp (as in
    nvtx_kern_sum.py).  NVTX domains name nsys ranges ("domain:text");
    Kineto ranges go by their name alone."""
    if not trace.has("ranges"):
        return []
    kinds = trace.codes("ranges", "kind")
    cpu_codes = [i for i, k in enumerate(kinds.categories) if k in _CPU_KINDS]
    pid, tid, end_tid = (trace.array("ranges", c) for c in ("pid", "tid", "end_tid"))
    keep = np.isin(kinds.codes, cpu_codes) & (tid != -1) & ((end_tid == -1) | (end_tid == tid))
    start, end = trace.array("ranges", "start"), trace.array("ranges", "end")
    if len(end) and (end == -1).any():
        end = np.where(end == -1, max(int(start.max()), int(end.max())), end)
    rows = np.flatnonzero(keep)
    threads = (pid[rows] << 24) | tid[rows]
    rows = rows[np.lexsort((-end[rows], start[rows], threads))]
    names, styles = trace.codes("ranges", "name"), trace.codes("ranges", "style")
    domains = trace.codes("ranges", "domain") if trace.meta.source == NSYS else None
    push_pop = [s == "PushPop" for s in styles.categories]
    return [NvtxRange(
        global_tid=thread_key(int(pid[i]), int(tid[i])), start=int(start[i]), end=int(end[i]),
        text=names.categories[names.codes[i]] or None,
        domain=(domains.categories[domains.codes[i]] or None) if domains is not None else None,
        push_pop=push_pop[styles.codes[i]],
    ) for i in rows.tolist()]


def python_sites(trace: Trace) -> dict[tuple[int, int], tuple[str, str]]:
    """(pid, correlation) of an API call -> (site "file.py:LINE", function), where the trace has stacks."""
    if not trace.has("python_sites"):
        return {}
    pid, corr = trace.array("python_sites", "pid"), trace.array("python_sites", "correlation")
    sites, functions = trace.codes("python_sites", "site"), trace.codes("python_sites", "function")
    return {(int(p), int(c)): (sites.categories[s], functions.categories[f])
            for p, c, s, f in zip(pid.tolist(), corr.tolist(), sites.codes.tolist(), functions.codes.tolist())
            if sites.categories[s]}
