"""The stall analysis's inputs, built from any ``Trace``'s columns.

- ``api_calls``: the CUDA calls that may block (``calls.api_role``), each
  joined with the memcpy, memset and synchronization rows of the same
  (process, correlation id), ordered by thread, start, correlation;
- ``unmatched_syncs``: synchronization rows whose API call the trace lacks;
- ``gpu_devices`` / ``gpu_activity`` / ``gpu_activity_window``: kernel,
  memcpy and memset intervals per device, ordered by start;
- ``cpu_ranges``: annotated CPU ranges as columns (``RangeColumns``), ordered
  by thread, start, longest first (the order ``events.attach_nvtx`` reads);
- ``python_sites``: where a trace's Python stacks put each API call (Kineto);
- ``host_work``: where each thread loaded GPU modules or compiled (the idle after a
  sync ends there).

Everything stays columns: the candidate calls (``CallColumns``) and the
ranges (``RangeColumns``) become Python records only where they make a sync
event (thousands, not the millions of API rows or a range per step).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from profkit.analysis.sync.calls import (
    TID_BITS,
    ApiCall,
    CallColumns,
    api_role,
    base_api_name,
    kind_values,
    thread_key,
)
from profkit.analysis.sync.idle import HostWork
from profkit.analysis.sync.ranges import RangeColumns
from profkit.analysis.timeline.launch_calls import KeyIndex
from profkit.model import NSYS, Coded, Trace
from profkit.model.cuda_labels import COPY_KIND_LABELS, MEM_KIND_LABELS

_COPY_KINDS = kind_values(COPY_KIND_LABELS)
_MEM_KINDS = kind_values(MEM_KIND_LABELS)
LAUNCH = "Launch"  # in the name of every call that launches a kernel or a graph (launches_through)
_GPU_TABLES = (("kernels", "kernel"), ("memcpy", "memcpy"), ("memset", "memset"), ("graphs", "graph"))


class _Matches:
    """Each candidate call's rows in one activity table (memcpy, memset, syncs), found by
    (process, correlation) in a ``KeyIndex`` of the table.

    Where the table does not know the process (Kineto's GPU events carry the device, not
    the pid) the correlation id alone joins."""

    def __init__(self, trace: Trace, table: str, pid: np.ndarray, corr: np.ndarray) -> None:
        self.trace, self.table = trace, table
        self.present = trace.has(table) and trace.count(table) > 0
        if not self.present:
            self.lo = self.hi = np.zeros(len(pid), dtype=np.int64)
            self.found = np.zeros(len(pid), dtype=bool)
            return
        by_process = _by_process(trace, table)
        self.index = KeyIndex(trace.array(table, "pid") if by_process else None, trace.array(table, "correlation"))
        self.lo, self.hi = self.index.spans(pid if by_process else None, corr)
        self.found = self.hi > self.lo
        self.first = self.index.rows(np.where(self.found, self.lo, 0))

    def first_int(self, column: str) -> np.ndarray:
        """The column at each call's first row (row order); -1 where no row matched."""
        if not self.present:
            return np.full(len(self.lo), -1, dtype=np.int64)
        values = self.trace.array(self.table, column)
        return np.where(self.found, values[self.first], -1).astype(np.int64)

    def first_label(self, column: str, values: dict[str, int]) -> np.ndarray:
        """A text column's label at each call's first row, as its value in ``values`` (-1: none, unknown)."""
        if not self.present:
            return np.full(len(self.lo), -1, dtype=np.int64)
        coded = self.trace.codes(self.table, column)
        lookup = np.array([values.get(label, -1) for label in coded.categories] + [-1], dtype=np.int64)
        codes = coded.codes[self.first].astype(np.int64)
        return np.where(self.found & (codes >= 0), lookup[codes], -1)

    def total(self, column: str) -> np.ndarray:
        """The sum of the column over each call's rows; -1 (unknown) where one of them is -1
        (a ROCm copy without a size): a part of unknown size leaves the sum unknown."""
        if not self.present:
            return np.zeros(len(self.lo), dtype=np.int64)
        values = self.index.in_key_order(self.trace.array(self.table, column))
        unknown = values == -1
        sums = np.concatenate([[0], np.cumsum(np.where(unknown, 0, values), dtype=np.int64)])
        missing = np.concatenate([[0], np.cumsum(unknown, dtype=np.int64)])
        return np.where(missing[self.hi] > missing[self.lo], -1, sums[self.hi] - sums[self.lo])


def _by_process(trace: Trace, table: str) -> bool:
    """Whether a table's rows know their process (Kineto's GPU events do not: pid -1)."""
    return bool((trace.array(table, "pid") != -1).any())


def _first_known(*columns: np.ndarray) -> np.ndarray:
    """Per row, the first column's value that is not -1."""
    out = columns[0].copy()
    for column in columns[1:]:
        out = np.where(out == -1, column, out)
    return out


def api_calls(trace: Trace) -> CallColumns:
    """The calls that may block, ordered by thread, then start; a call with several
    activity rows (a copy CUPTI split in two) comes once, its bytes summed.

    Only rows whose name has a role (a handful of names: the syncs, copies and
    blocking memsets) are read; the launches, most of a big trace, are skipped
    by their name code before any per-row work."""
    names: Coded = trace.codes("api", "name")
    bases = [base_api_name(n) for n in names.categories]
    candidates = [i for i, b in enumerate(bases) if api_role(b) is not None]
    lookup = np.full(len(bases) + 1, -1, dtype=np.int64)
    lookup[candidates] = np.arange(len(candidates))
    rows = np.flatnonzero(lookup[names.codes] >= 0) if candidates else np.zeros(0, dtype=np.int64)
    pid = trace.array("api", "pid")[rows].astype(np.int64)
    tid = trace.array("api", "tid")[rows].astype(np.int64)
    start, end = trace.array("api", "start")[rows], trace.array("api", "end")[rows]
    corr = trace.array("api", "correlation")[rows].astype(np.int64)
    threads = (pid << TID_BITS) | tid
    order = np.lexsort((corr, start, threads))
    rows, pid, corr = rows[order], pid[order], corr[order]
    memcpy = _Matches(trace, "memcpy", pid, corr)
    memset = _Matches(trace, "memset", pid, corr)
    syncs = _Matches(trace, "syncs", pid, corr)
    # bytes: the memcpy rows' sum where there are any, else the memset rows'; -1: no row
    byte_total = np.where(memcpy.found, memcpy.total("bytes"), np.where(memset.found, memset.total("bytes"), -1))
    if syncs.present:
        sync_labels = trace.codes("syncs", "sync_type").categories
        sync_type = syncs.first_label("sync_type", {label: k for k, label in enumerate(sync_labels) if label})
    else:
        sync_labels, sync_type = [], np.full(len(rows), -1, dtype=np.int64)
    return CallColumns(
        names=[bases[i] for i in candidates], name=lookup[names.codes[rows]],
        global_tid=threads[order], start=start[order].astype(np.int64), end=end[order].astype(np.int64),
        correlation_id=corr,
        device=_first_known(*(m.first_int("device") for m in (memcpy, memset, syncs))),
        stream=_first_known(*(m.first_int("stream") for m in (memcpy, memset, syncs))),
        copy_kind=memcpy.first_label("copy_kind", _COPY_KINDS),
        src_kind=memcpy.first_label("src_kind", _MEM_KINDS),
        dst_kind=memcpy.first_label("dst_kind", _MEM_KINDS),
        bytes=byte_total, mem_kind=memset.first_label("dst_kind", _MEM_KINDS),
        sync_types=list(sync_labels), sync_type=sync_type,
        launches_through=launches_through(trace, threads[order], start[order].astype(np.int64)))


def launches_through(trace: Trace, threads: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Per (thread, start), how many calls on that thread that launch a kernel or a graph (a name
    with "Launch" in it: cudaLaunchKernel, cuLaunchKernelEx, cudaGraphLaunch, hipExtModuleLaunchKernel)
    started at or before it.  Two calls of a thread with the same count have no launch between
    them.  By name, not by joining the kernels to their calls: one pass over the name codes
    instead of a sort of every call's key."""
    out = np.zeros(len(threads), dtype=np.int64)
    if not len(threads) or not trace.has("api") or not trace.count("api"):
        return out
    names: Coded = trace.codes("api", "name")
    is_launch = np.array([LAUNCH in (n or "") for n in names.categories] + [False])
    rows = np.flatnonzero(is_launch[names.codes])
    row_threads = (trace.array("api", "pid")[rows].astype(np.int64) << TID_BITS) | trace.array("api", "tid")[rows]
    wanted = np.unique(threads)
    keep = np.isin(row_threads, wanted)
    row_threads, row_starts = row_threads[keep], trace.array("api", "start")[rows[keep]]
    order = np.lexsort((row_starts, row_threads))
    row_threads, row_starts = row_threads[order], row_starts[order]
    for thread in wanted.tolist():
        lo, hi = np.searchsorted(row_threads, [thread, thread + 1])
        mine = threads == thread
        out[mine] = np.searchsorted(row_starts[lo:hi], starts[mine], side="right")
    return out


def unmatched_syncs(trace: Trace) -> list[ApiCall]:
    """Synchronization rows whose API call is not in the trace, ordered by start.

    Their thread is unknown: ``global_tid`` carries the process only."""
    if not trace.has("syncs"):
        return []
    s_pid, s_corr = trace.array("syncs", "pid"), trace.array("syncs", "correlation")
    by_process = _by_process(trace, "syncs")
    # the few syncs indexed, every API key looked up among them: no sort of the 2.5M API keys
    index = KeyIndex(s_pid if by_process else None, s_corr)
    known = index.matched(trace.array("api", "pid") if by_process else None, trace.array("api", "correlation"))
    alone = np.flatnonzero(~known)
    if not len(alone):
        return []
    alone = alone[np.argsort(trace.array("syncs", "start")[alone], kind="stable")]
    start, end = trace.array("syncs", "start")[alone].tolist(), trace.array("syncs", "end")[alone].tolist()
    pid, corr = s_pid[alone].tolist(), s_corr[alone].tolist()
    device, stream = (_plain(trace, "syncs", c, alone) for c in ("device", "stream"))
    types = _plain(trace, "syncs", "sync_type", alone)
    out = []
    for i in range(len(alone)):
        label = types[i] or "CUPTI sync"
        out.append(ApiCall(global_tid=thread_key(int(pid[i]), 0), start=int(start[i]), end=int(end[i]),
                           name=f"CUPTI synchronization ({label})", correlation_id=_or_none(corr[i]),
                           device=device[i], stream=stream[i], sync_type=label))
    return out


def _plain(trace: Trace, table: str, column: str, rows: np.ndarray) -> list[Any]:
    """Some rows of a column as Python values (text as its labels, -1 / '' as None)."""
    try:
        values = trace.array(table, column)[rows]
        return [None if v == -1 else v for v in values.tolist()]
    except TypeError:
        coded = trace.codes(table, column)
        labels = [label or None for label in coded.categories]
        return [labels[c] if c >= 0 else None for c in coded.codes[rows].tolist()]


def _or_none(value: Any) -> int | None:
    return None if value == -1 else int(value)


# -- GPU activity -------------------------------------------------------------------------
def gpu_devices(trace: Trace) -> list[int]:
    """Devices that ran any kernel, memcpy, memset or graph replay."""
    found: set[int] = set()
    for table, _ in _GPU_TABLES:
        if trace.has(table):
            device = trace.array(table, "device")
            device = device[device != -1]
            if len(device) and 0 <= device.min() and device.max() < 1 << 16:  # ids count (np.unique hashes: 30 ms on 1M)
                found.update(np.flatnonzero(np.bincount(device)).tolist())
            else:
                found.update(int(d) for d in np.unique(device))
    return sorted(found)


def _device_work(trace: Trace, device: int, with_kind: bool) -> tuple[np.ndarray | None, np.ndarray, np.ndarray]:
    """(kind index or None, start, end) of a device's GPU work, table by table, in row order.

    Where every row of a lone table is on the device the columns come as they
    are (no copy of a million-row column): callers only read them."""
    kinds, starts, ends = [], [], []
    for k, (table, _) in enumerate(_GPU_TABLES):
        if not trace.has(table) or trace.count(table) == 0:
            continue
        on = trace.array(table, "device") == device
        every = bool(on.all())
        starts.append(trace.array(table, "start") if every else trace.array(table, "start")[on])
        ends.append(trace.array(table, "end") if every else trace.array(table, "end")[on])
        if with_kind:
            kinds.append(np.full(len(starts[-1]), k, dtype=np.int8))
    if not starts:
        empty = np.zeros(0, dtype=np.int64)
        return (np.zeros(0, dtype=np.int8) if with_kind else None), empty, empty
    if len(starts) == 1:
        return (kinds[0] if with_kind else None), starts[0], ends[0]
    return (np.concatenate(kinds) if with_kind else None), np.concatenate(starts), np.concatenate(ends)


def gpu_activity(trace: Trace, device: int, batch: int = 1 << 20) -> Iterator[np.ndarray]:
    """(start, end) rows of a device's kernels, memcpys and memsets, ordered by start, in batches.

    Rows that start together may come in any order: the idle-time search reads
    the latest end among those started before a time, whatever their order."""
    _, start, end = _device_work(trace, device, with_kind=False)
    if len(start) > 1 and not bool((start[1:] >= start[:-1]).all()):  # sorted already: the usual case
        order = np.argsort(start, kind="stable")
        start, end = start[order], end[order]
    for at in range(0, len(start), batch):
        yield np.stack([start[at:at + batch], end[at:at + batch]], axis=1)


def first_kernel_start(trace: Trace, device: int) -> int | None:
    """When the device's first kernel (or untraced graph replay) started; None: it ran none."""
    firsts = []
    for table in ("kernels", "graphs"):
        if trace.has(table) and trace.count(table):
            start = trace.array(table, "start")[trace.array(table, "device") == device]
            if len(start):
                firsts.append(int(start.min()))
    return min(firsts) if firsts else None


def gpu_activity_window(trace: Trace, device: int, t0: int, t1: int) -> list[tuple[str, int, int]]:
    """(kind, start, end) of a device's GPU work that overlaps [t0, t1], by start, then end."""
    kind, start, end = _device_work(trace, device, with_kind=True)
    assert kind is not None
    inside = np.flatnonzero((end > t0) & (start < t1))
    inside = inside[np.lexsort((end[inside], start[inside]))]
    names = [name for _, name in _GPU_TABLES]
    return [(names[k], s, e) for k, s, e in zip(kind[inside].tolist(), start[inside].tolist(), end[inside].tolist())]


# -- ranges and Python sites ------------------------------------------------------------------
# CPU-side range kinds (GPU-side copies of annotations have no thread).
_CPU_KINDS = ("nvtx", "sync_site", "user_annotation", "profiler_step")


def cpu_ranges(trace: Trace) -> RangeColumns:
    """CPU ranges that began and ended on one thread, ordered by thread, start, longest first.

    A range that never ended lasts until the last range timestamp (as in
    nvtx_kern_sum.py).  NVTX domains name nsys ranges ("domain:text");
    Kineto ranges go by their name alone."""
    if not trace.has("ranges") or trace.count("ranges") == 0:
        return RangeColumns.from_records([])
    kinds = trace.codes("ranges", "kind")
    cpu_codes = [i for i, k in enumerate(kinds.categories) if k in _CPU_KINDS]
    pid, tid, end_tid = (trace.array("ranges", c).astype(np.int64) for c in ("pid", "tid", "end_tid"))
    keep = np.isin(kinds.codes, cpu_codes) & (tid != -1) & ((end_tid == -1) | (end_tid == tid))
    start, end = trace.array("ranges", "start"), trace.array("ranges", "end")
    if len(end) and (end == -1).any():
        end = np.where(end == -1, max(int(start.max()), int(end.max())), end)
    rows = np.flatnonzero(keep)
    threads = (pid[rows] << TID_BITS) | tid[rows]
    order = np.lexsort((-end[rows], start[rows], threads))
    rows, threads = rows[order], threads[order]
    names, styles = trace.codes("ranges", "name"), trace.codes("ranges", "style")
    if trace.meta.source == NSYS:
        domains = trace.codes("ranges", "domain")
        domain, domain_labels = domains.codes[rows].astype(np.int64), [d or None for d in domains.categories]
    else:
        domain, domain_labels = np.zeros(len(rows), dtype=np.int64), [None]
    push_pop = np.array([s == "PushPop" for s in styles.categories], dtype=bool)
    return RangeColumns(global_tid=threads, start=start[rows].astype(np.int64), end=end[rows].astype(np.int64),
                        text=names.codes[rows].astype(np.int64), texts=[n or None for n in names.categories],
                        domain=domain, domains=domain_labels, push_pop=push_pop[styles.codes[rows]])


def python_sites(trace: Trace) -> dict[tuple[int, int], tuple[str, str]]:
    """(pid, correlation) of an API call -> (site "file.py:LINE", function), where the trace has stacks."""
    if not trace.has("python_sites"):
        return {}
    pid, corr = trace.array("python_sites", "pid"), trace.array("python_sites", "correlation")
    sites, functions = trace.codes("python_sites", "site"), trace.codes("python_sites", "function")
    return {(int(p), int(c)): (sites.categories[s], functions.categories[f])
            for p, c, s, f in zip(pid.tolist(), corr.tolist(), sites.codes.tolist(), functions.codes.tolist())
            if sites.categories[s]}


# -- host work that ends a sync's idle ----------------------------------------------------------
# CUDA calls that load GPU code: cuBLAS and Triton load their modules on first use (lazy loading).
MODULE_LOAD_CALLS = ("cuModuleLoad", "cuLibraryLoad", "cuLinkComplete", "cudaLibraryLoad")
# torch.compile's compile phases as torch.profiler records them (cat cpu_op): every phase Dynamo
# and Inductor time with ``dynamo_timed`` is an op "<phase> (dynamo_timed)"; these three enclose them.
COMPILE_OPS = ("inductor_compile", "entire_frame_compile", "backend_compile")
_DYNAMO_TIMED = " (dynamo_timed)"


def host_work(trace: Trace) -> HostWork:
    """Where each thread loaded GPU modules (API calls) or compiled (torch.compile's phases in
    ``cpu_ops``): the stretches that end a sync's idle (``idle.cut_idle_at_host_work``)."""
    found: list[tuple[str, np.ndarray, np.ndarray, np.ndarray]] = []  # (kind, thread, start, end)
    for table, kind, wanted in (("api", "module_load", _module_load_name), ("cpu_ops", "compile", _compile_name)):
        if not trace.has(table) or trace.count(table) == 0:
            continue
        names = trace.codes(table, "name")
        codes = [i for i, name in enumerate(names.categories) if name and wanted(name)]
        if not codes:
            continue
        rows = np.flatnonzero(np.isin(names.codes, codes))
        thread = (trace.array(table, "pid")[rows].astype(np.int64) << TID_BITS) | trace.array(table, "tid")[
            rows].astype(np.int64)
        found.append((kind, thread, trace.array(table, "start")[rows].astype(np.int64),
                      trace.array(table, "end")[rows].astype(np.int64)))
    work = HostWork()
    if not found:
        return work
    for kind in sorted({k for k, *_ in found}):
        parts = [(t, s, e) for k, t, s, e in found if k == kind]
        work.totals_ns[kind] = _union_ns(np.concatenate([s for _, s, _ in parts]),
                                         np.concatenate([e for _, _, e in parts]))
    thread = np.concatenate([t for _, t, _, _ in found])
    start = np.concatenate([s for _, _, s, _ in found])
    end = np.concatenate([e for _, _, _, e in found])
    order = np.lexsort((start, thread))
    thread, start, end = thread[order], start[order], end[order]
    bounds = np.flatnonzero(np.r_[True, thread[1:] != thread[:-1], True])
    for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        work.by_thread[int(thread[a])] = (start[a:b], np.maximum.accumulate(end[a:b]))
    return work


def _module_load_name(name: str) -> bool:
    return base_api_name(name).startswith(MODULE_LOAD_CALLS)


def _compile_name(name: str) -> bool:
    return name.endswith(_DYNAMO_TIMED) or name in COMPILE_OPS


def _union_ns(start: np.ndarray, end: np.ndarray) -> int:
    """Wall time the stretches cover (on any thread; overlapping ones counted once), so that it
    is a share of the run that never passes 100%."""
    order = np.argsort(start, kind="stable")
    start, end = start[order], np.maximum.accumulate(end[order])
    # a stretch adds what it covers past the furthest end before it
    before = np.r_[np.iinfo(np.int64).min, end[:-1]]
    return int(np.maximum(end - np.maximum(start, before), 0).sum())
