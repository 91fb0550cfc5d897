"""Memory: what holds the memory at each step's peak, what grows from step to step, and how close
the run came to the device's memory.

``memory_report(trace, steady=False) -> dict`` reads the trace model's ``memory`` table (the
allocator's events: torch.profiler with ``profile_memory=True``) and returns plain data, one entry
per device (the host's allocator is device -1):

- **per step**: the peak of allocated and reserved bytes inside the step's CPU range (the
  allocator answers on the host, so its events are placed against the steps' CPU ranges), the
  bytes allocated when the step began and ended, and the growth (end - start);
- **the peak** over the trace (over the steady steps with ``steady``), the step it fell in, and
  what held it: the blocks alive at that instant grouped by where they were allocated (the
  innermost Python frame and framework operator on the allocating thread), and by the phase of
  the step that allocated them (forward, backward, optimizer step, other); bytes allocated before
  the profiler started recording are a part of their own, so the parts add up to the peak;
- **fragmentation** at the peak: reserved - allocated (the caching allocator's cached blocks);
- **headroom**: the peak reserved bytes against the device's memory, where the trace records it;
- **growth and leaks**: the bytes allocated at the end of each steady step.  A run whose steady
  steps end higher every time (all but at most one step) is leaking; the leaking sites are the
  sites whose blocks, allocated in the steady steps, are never freed before the trace ends, in
  (nearly) every steady step -- blocks of the last step that outlive the recording are no leak.

- **categories**: what each block alive at the peak *is* (parameters, optimizer state, gradients,
  activations, temporaries, library workspaces, the program's own tensors), from its allocation's
  stack or what the profiler saw open around it, and its lifetime (``categories``); with the bytes
  allocated before the record began they add up to the peak.

An nsys ``--cuda-memory-usage`` export records the level below the caching allocator: the device
memory the process took from the driver (``memory_level`` "driver").  Its figures are held
(reserved) bytes; allocated bytes, sites and leaks are unknown.  With a snapshot of the same run
(``snapshot=``), the bytes held at the peak are split by address into PyTorch's caching allocator's
segments and what libraries allocated outside it (``driver``).

``step_peaks(trace)`` gives the per-step peaks alone (what `profkit diff` and `history` compare:
``profkit.analysis.compare.memory``).

Sizes are bytes.  A trace without allocator events gives a ``ProfkitError`` naming the option
that records them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from profkit.analysis.memory import categories, driver
from profkit.analysis.steps import STEADY, find_steps
from profkit.errors import ProfkitError
from profkit.model import NSYS, Trace

HOST = -1
SNAPSHOT_SOURCE = "snapshot"  # profkit.readers.snapshot's TraceMeta.source (analyses never import readers)
# Phases of a step an allocation can fall in, told by the framework ranges around it
# (torch.profiler records Optimizer.step#..., autograd's backward ops, module forwards).
OPTIMIZER, BACKWARD, FORWARD, OTHER = "optimizer step", "backward", "forward", "other"
BEFORE_TRACE = "allocated before the trace began"
# An allocation whose stack holds no Python frame: autograd's backward thread, C++ code
NO_PYTHON_FRAME = "no Python frame (C++: autograd's backward thread, a library)"
# A steady run leaks when its end-of-step bytes grow at every step but this many.
LEAK_TOLERATED_FLAT_STEPS = 1
TOP_SITES = 10

HOW = "record with torch.profiler.profile(profile_memory=True, ...) (profkit trace --backend torch --memory)"


@dataclass(frozen=True)
class _Events:
    """One device's allocator events in time order."""

    start: np.ndarray
    tid: np.ndarray
    addr: np.ndarray
    size: np.ndarray         # + allocation, - free
    allocated: np.ndarray    # total allocated after the event
    reserved: np.ndarray     # total reserved after the event (-1 unknown)

    def level_before(self, t: np.ndarray, values: np.ndarray) -> np.ndarray:
        """``values`` as they stood just before each time in ``t`` (the first event's
        value before it, minus its own change, before the first event)."""
        at = np.searchsorted(self.start, t, side="left") - 1
        before_first = values[0] - (self.size[0] if values is self.allocated else 0)
        return np.where(at >= 0, values[np.maximum(at, 0)], before_first)


def memory_report(trace: Trace, steady: bool = False, snapshot: Trace | None = None) -> dict[str, Any]:
    """Per-step peaks, what holds the peak, fragmentation, headroom and leaks (module docstring);
    ``snapshot``: a memory snapshot of the same run, to split a driver-level trace's bytes."""
    table, steps, windows = _allocator_and_steps(trace, steady)
    at_driver = is_driver_level(trace)
    devices = []
    for device, rows in table.groupby("device", sort=True):
        ev = _device_events(int(device), rows)
        seen, unseen = _recorded_windows(trace, windows, ev)
        if at_driver:
            devices.append(_driver_device_report(trace, int(device), ev, rows, seen, steady, snapshot))
        else:
            has_site = (rows["file"].astype(str) != "").any()
            recorded = rows[["function", "file", "line"]].reset_index(drop=True) if has_site else None
            stacks = rows["stack"].reset_index(drop=True) if (rows["stack"].astype(str) != "").any() else None
            devices.append(_device_report(trace, int(device), ev, seen, steady, recorded, stacks))
        devices[-1]["unrecorded_steps"] = unseen
    snapshot = trace.meta.extra.get("segments") if trace.meta.source == SNAPSHOT_SOURCE else None
    for d in devices:
        facts = next((f for f in snapshot or () if f["device"] == d["device"]), None)
        d["at_dump"] = facts  # a snapshot: the segments' state when it was written
        if facts and d["fragmentation_bytes"] is not None:
            d["largest_free_block_bytes"] = facts["largest_free_block_bytes"]
    return {"trace": trace.name, "steps_from": steps.source if steps is not None and steps.found else None,
            "devices": devices, "oom": _ooms(trace, table)}


def is_driver_level(trace: Trace) -> bool:
    """Whether the trace's memory rows are the driver's allocations (nsys), not an allocator's blocks."""
    return trace.meta.extra.get("memory_level") == driver.LEVEL


def has_memory(trace: Trace) -> bool:
    """Whether the trace recorded allocator events (what every figure here is made of)."""
    return bool(trace.has("memory") and trace.count("memory"))


def step_peaks(trace: Trace) -> dict[str, Any]:
    """Each device's per-step rows (``memory_report``'s "steps": peak allocated and reserved bytes,
    phase), without what holds the peak: finding each block's site is most of ``memory_report``'s
    cost, and a comparison of two runs needs only the peaks.  ``{"trace", "steps_from", "devices":
    [{"device", "label", "steps"}]}``; raises like ``memory_report``."""
    table, steps, windows = _allocator_and_steps(trace, steady=False)
    at_driver = is_driver_level(trace)
    devices = []
    for device, rows in table.groupby("device", sort=True):
        ev = _device_events(int(device), rows)
        seen, _ = _recorded_windows(trace, windows, ev)
        devices.append({"device": int(device), "label": device_label(int(device)),
                        "steps": _per_step(ev, seen, at_driver)})
    return {"trace": trace.name, "steps_from": steps.source if steps is not None and steps.found else None,
            "devices": devices}


def device_label(device: int) -> str:
    return "host allocator" if device == HOST else f"GPU {device}"


def _allocator_and_steps(trace: Trace, steady: bool) -> tuple[pd.DataFrame, Any, pd.DataFrame]:
    """The allocator's events in time order, the trace's steps (None for a snapshot) and their windows."""
    if not has_memory(trace):
        hint = {NSYS: "capture with profkit trace --memory, which runs nsys profile --cuda-memory-usage=true",
                SNAPSHOT_SOURCE: "record the history before the run: torch.cuda.memory._record_memory_history(), "
                                 "then torch.cuda.memory._dump_snapshot(PATH)"}.get(trace.meta.source, HOW)
        raise ProfkitError(f"{trace.name} has no allocator events: the trace did not record memory", hint=hint)
    table = trace.table("memory").sort_values("start", kind="stable")
    # A snapshot records the allocator alone: its steps are the step ranges torch.profiler annotated
    # in its history (record_function, ProfilerStep#N), where it ran beside one; else its figures
    # are over the whole history.
    steps = find_steps(trace) if trace.meta.source != SNAPSHOT_SOURCE or trace.has("ranges") else None
    if steps is not None and not steps.found and trace.meta.source == SNAPSHOT_SOURCE:
        steps = None
    if steps is not None and not steps.found and steady:
        raise ProfkitError(f"{trace.name}: no steps to take the steady state from ({steps.message})",
                           hint="see profkit steps")
    windows = _step_windows(steps.steps) if steps is not None and steps.found else \
        pd.DataFrame({"index": [], "phase": [], "start": [], "end": []})
    return table, steps, windows


def _device_events(device: int, rows: pd.DataFrame) -> _Events:
    columns = [rows[c].to_numpy(np.int64) for c in
               ("start", "tid", "addr", "bytes", "total_allocated", "total_reserved")]
    if device == HOST:  # the host allocator reserves nothing: its 0 is "no such figure", not 0 bytes
        columns[-1] = np.full(len(rows), -1, dtype=np.int64)
    return _Events(*columns)


def _step_windows(steps: pd.DataFrame) -> pd.DataFrame:
    """Each step's CPU range (its GPU range where the CPU's is unknown)."""
    cpu_known = (steps["cpu_start_ns"] >= 0) & (steps["cpu_end_ns"] > steps["cpu_start_ns"])
    return pd.DataFrame({
        "index": steps["index"].to_numpy(), "phase": steps["phase"].to_numpy(),
        "start": np.where(cpu_known, steps["cpu_start_ns"], steps["start_ns"]).astype(np.int64),
        "end": np.where(cpu_known, steps["cpu_end_ns"], steps["end_ns"]).astype(np.int64)})


def _recorded_windows(trace: Trace, windows: pd.DataFrame, ev: _Events) -> tuple[pd.DataFrame, list[int]]:
    """The steps a snapshot's history covers on this device, and the indices of those it does not:
    a step that begins after the history's last event or ends before its first (a snapshot dumped
    before torch.profiler's last ProfilerStep#N, a ring buffer that lost the first steps) holds no
    event, and its figures would be the level the history ended at, not the step's.  Only a
    snapshot: its history is its record, while a trace records a step with no allocator event
    as what it is (an nsys --cuda-memory-usage loop calls cudaMalloc only at start-up)."""
    if trace.meta.source != SNAPSHOT_SOURCE or not len(windows) or not len(ev.start):
        return windows, []
    covered = (windows["start"].to_numpy() <= ev.start[-1]) & (windows["end"].to_numpy() >= ev.start[0])
    return windows[covered].reset_index(drop=True), [int(i) for i in windows["index"].to_numpy()[~covered]]


def _scope(trace: Trace, ev: _Events, windows: pd.DataFrame, steady: bool, at_driver: bool
           ) -> tuple[list[dict[str, Any]], np.ndarray]:
    """The per-step rows and which events count (the steady steps' with ``steady``)."""
    per_step = _per_step(ev, windows, at_driver)
    if steady and not any(s["phase"] == STEADY for s in per_step):
        raise ProfkitError(f"{trace.name}: no steady-state steps (see profkit steps)")
    in_scope = _in_windows(ev.start, windows[windows["phase"] == STEADY]) if steady else np.ones(len(ev.start), bool)
    return per_step, in_scope


def _device_report(trace: Trace, device: int, ev: _Events, windows: pd.DataFrame, steady: bool,
                   recorded: pd.DataFrame | None, stacks: pd.Series | None) -> dict[str, Any]:
    per_step, in_scope = _scope(trace, ev, windows, steady, at_driver=False)
    peak_at = _peak_event(ev.allocated, in_scope)
    peak = {"allocated_bytes": int(ev.allocated[peak_at]), "reserved_bytes": _known(ev.reserved[peak_at]),
            "time_ns": int(ev.start[peak_at]), "step": _step_of(ev.start[peak_at], windows)}
    reserved_peak = int(ev.reserved[in_scope].max()) if (ev.reserved[in_scope] >= 0).any() else None
    live = _live_at(ev, peak_at)
    sites = _sites(trace, ev, live, recorded)
    holders = _by_site(sites, ev.size[live])
    before = peak["allocated_bytes"] - int(ev.size[live].sum())
    by_phase = _by_phase(sites, ev.size[live], before)
    kinds = categories.block_categories(_origins(trace, ev, stacks), ev.size,
                                        categories.free_positions(ev.addr, ev.size), live)
    by_category = _parts(kinds, ev.size[live], {BEFORE_TRACE: before})
    fragmentation = None if peak["reserved_bytes"] in (None, 0) else peak["reserved_bytes"] - peak["allocated_bytes"]
    return {
        "device": device,
        "label": device_label(device),
        "steps": per_step,
        "peak": peak,
        "peak_reserved_bytes": reserved_peak,
        "held_by_site": holders[:TOP_SITES],
        "held_by_phase": by_phase,
        "held_by_category": by_category,
        "fragmentation_bytes": fragmentation,
        "headroom": _headroom(trace, device, reserved_peak),
        "largest_free_block_bytes": None,
        "growth": _growth(trace, ev, per_step, windows, recorded),
    }


def _known(value: int) -> int | None:
    return None if value < 0 else int(value)


def _per_step(ev: _Events, windows: pd.DataFrame, at_driver: bool = False) -> list[dict[str, Any]]:
    """Each step's peaks and allocated bytes at its start and end; a driver-level trace knows only
    the held (reserved) bytes, so its allocated figures are None."""
    start, end = windows["start"].to_numpy(), windows["end"].to_numpy()
    begin_alloc = ev.level_before(start, ev.allocated)
    end_alloc = ev.level_before(end, ev.allocated)
    begin_res = ev.level_before(start, ev.reserved)
    lo, hi = np.searchsorted(ev.start, start, "left"), np.searchsorted(ev.start, end, "left")
    out = []
    for i in range(len(windows)):
        inside_alloc = ev.allocated[lo[i]:hi[i]]
        inside_res = ev.reserved[lo[i]:hi[i]]
        peak_res = max(int(begin_res[i]), int(inside_res.max()) if len(inside_res) else -1)
        out.append({
            "index": int(windows["index"].iat[i]), "phase": str(windows["phase"].iat[i]),
            "peak_allocated_bytes": max(int(begin_alloc[i]), int(inside_alloc.max()) if len(inside_alloc) else 0),
            "peak_reserved_bytes": _known(peak_res),
            "start_allocated_bytes": int(begin_alloc[i]), "end_allocated_bytes": int(end_alloc[i]),
            "growth_bytes": int(end_alloc[i] - begin_alloc[i]),
        })
    if at_driver:
        for row in out:
            row.update(peak_allocated_bytes=None, start_allocated_bytes=None, end_allocated_bytes=None,
                       growth_bytes=None)
    return out


def _in_windows(t: np.ndarray, windows: pd.DataFrame) -> np.ndarray:
    inside = np.zeros(len(t), dtype=bool)
    for s, e in zip(windows["start"].to_numpy(), windows["end"].to_numpy()):
        inside |= (t >= s) & (t < e)
    return inside


def _peak_event(values: np.ndarray, in_scope: np.ndarray) -> int:
    """The first event at which ``values`` (allocated, or held bytes) reached their highest in scope."""
    candidates = np.flatnonzero(in_scope)
    if not len(candidates):
        candidates = np.arange(len(values))
    return int(candidates[np.argmax(values[candidates])])


def _step_of(t: int, windows: pd.DataFrame) -> int | None:
    hit = windows[(windows["start"] <= t) & (windows["end"] > t)]
    return None if hit.empty else int(hit["index"].iat[0])


def _live_at(ev: _Events, at: int) -> np.ndarray:
    """Indices of the allocations made up to event ``at`` (inclusive) whose block was not freed
    by then: an allocation is live until the next free of its address."""
    return _unfreed(ev, np.arange(at + 1))


def _unfreed(ev: _Events, upto: np.ndarray) -> np.ndarray:
    """Allocations among events ``upto`` that no later event in ``upto`` frees."""
    size, addr = ev.size[upto], ev.addr[upto]
    alloc = np.flatnonzero(size > 0)
    frees = np.flatnonzero(size < 0)
    if not len(alloc):
        return upto[:0]
    # for each allocation, is there a free of the same address after it?  Sort frees by
    # (addr, position) and look up the first free of that address after the allocation.
    order = np.lexsort((frees, addr[frees]))
    free_addr, free_pos = addr[frees][order], frees[order]
    key = np.searchsorted(free_addr, addr[alloc], side="left")
    freed = np.zeros(len(alloc), dtype=bool)
    # walk forward over the frees of each address until one comes after the allocation
    # (an address is reused: alloc, free, alloc, free ... -- at most a few frees per address here)
    pending = np.flatnonzero(key < len(free_addr))
    while len(pending):
        k = key[pending]
        same = free_addr[k] == addr[alloc[pending]]
        after = same & (free_pos[k] > alloc[pending])
        freed[pending[after]] = True
        advance = same & ~after
        key[pending[advance]] += 1
        pending = pending[advance][key[pending[advance]] < len(free_addr)]
    return upto[alloc[~freed]]


SITE_COLUMNS = ["site", "function", "file", "line", "operator", "phase"]
# Blocks attributed one by one (the largest ones); a trace of a big model can hold a million blocks
# alive at its peak, and the rest, each smaller than these, are summed as one row.
MAX_ATTRIBUTED = 2000
SMALLER_BLOCKS = "smaller blocks (not attributed one by one)"


def _sites(trace: Trace, ev: _Events, index: np.ndarray, recorded: pd.DataFrame | None) -> pd.DataFrame:
    """Where each allocation in ``index`` was made (one row each, in ``index``'s order): the
    Python frame the event recorded itself (snapshots: function, file:line), else the innermost
    Python frame and framework operator open on its thread at that instant; and the phase of the
    step it fell in.  Past ``MAX_ATTRIBUTED`` blocks only the largest are attributed."""
    if len(index) <= MAX_ATTRIBUTED:
        return _attributed_sites(trace, ev, index, recorded)
    order = np.argsort(-ev.size[index], kind="stable")
    big = np.sort(order[:MAX_ATTRIBUTED])
    rows = pd.DataFrame({c: [None] * len(index) for c in SITE_COLUMNS})
    rows["site"], rows["phase"] = SMALLER_BLOCKS, OTHER
    attributed = _attributed_sites(trace, ev, index[big], recorded)
    rows.iloc[big] = attributed[SITE_COLUMNS].to_numpy(object)
    return rows


def _attributed_sites(trace: Trace, ev: _Events, index: np.ndarray, recorded: pd.DataFrame | None) -> pd.DataFrame:
    if recorded is not None:
        frame = recorded.iloc[index]
        functions, files = frame["function"].astype(str).to_numpy(), frame["file"].astype(str).to_numpy()
        lines = frame["line"].to_numpy()
        ranges = trace.table("ranges", ["start", "end", "name"]) if trace.has("ranges") else None
        rows = [{"site": f"{fn} ({Path(fl).name}:{ln})" if fl else NO_PYTHON_FRAME, "function": fn or None,
                 "file": fl or None, "line": int(ln) if fl else None, "operator": None,
                 "phase": _phase(ranges, None, int(t), -1, None)}
                for fn, fl, ln, t in zip(functions, files, lines, ev.start[index])]
        return pd.DataFrame(rows, columns=SITE_COLUMNS)
    t, tid = ev.start[index], ev.tid[index]
    frames = trace.table("python_frames", ["start", "end", "tid", "depth", "function", "file", "line", "call_line"]) \
        if trace.has("python_frames") else None
    ops = trace.table("cpu_ops", ["start", "end", "tid", "name"]) if trace.has("cpu_ops") else None
    ranges = trace.table("ranges", ["start", "end", "name"]) if trace.has("ranges") else None
    frame = _innermost(frames, t, tid, by="depth")
    op = _innermost(ops, t, tid, by="span")
    rows = []
    for i in range(len(index)):
        f = frame[i]
        # a line only where it is the allocating call's (a frame's first line names no allocation)
        line = int(f["line"]) if f is not None and f["call_line"] and f["line"] >= 0 else None
        where = None if f is None else f"{f['function']} ({f['file']}{'' if line is None else f':{line}'})"
        operator = str(op[i]["name"]) if op[i] is not None else None
        site = " in ".join(x for x in (operator, where) if x) or "unknown"
        rows.append({"site": site, "function": None if f is None else str(f["function"]),
                     "file": None if f is None else str(f["file"]), "line": line,
                     "operator": operator, "phase": _phase(ranges, ops, t[i], tid[i], operator)})
    return pd.DataFrame(rows, columns=SITE_COLUMNS)


def _innermost(table: pd.DataFrame | None, t: np.ndarray, tid: np.ndarray, by: str) -> list[Any]:
    """The innermost row of ``table`` open at each (time, thread): the deepest (``by='depth'``) or
    the shortest (``by='span'``) that contains it; None where nothing does."""
    out: list[Any] = [None] * len(t)
    if table is None or table.empty:
        return out
    for thread in np.unique(tid):
        rows = table[table["tid"] == thread]
        if rows.empty:
            continue
        start, end = rows["start"].to_numpy(), rows["end"].to_numpy()
        rank = rows["depth"].to_numpy() if by == "depth" else -(end - start)
        for i in np.flatnonzero(tid == thread):
            hit = np.flatnonzero((start <= t[i]) & (end > t[i]))
            if len(hit):
                out[i] = rows.iloc[hit[np.argmax(rank[hit])]]
    return out


def _phase(ranges: pd.DataFrame | None, ops: pd.DataFrame | None, t: int, tid: int, operator: str | None) -> str:
    """forward / backward / optimizer step / other, from the framework's own records around it."""
    if ranges is not None and not ranges.empty:
        inside = ranges[(ranges["start"] <= t) & (ranges["end"] > t)]["name"].astype(str)
        if inside.str.startswith("Optimizer.step").any():
            return OPTIMIZER
    if ops is not None and not ops.empty:
        around = ops[(ops["tid"] == tid) & (ops["start"] <= t) & (ops["end"] > t)]["name"].astype(str)
        if around.str.contains("Optimizer.step", regex=False).any():
            return OPTIMIZER
        # autograd runs backward ops as "autograd::engine::evaluate_function: XBackward0"
        if around.str.contains("Backward", regex=False).any() or around.str.startswith("autograd::").any():
            return BACKWARD
        if around.str.startswith("nn.Module:").any() or around.str.startswith("aten::").any():
            return FORWARD
    return OTHER


def _by_site(sites: pd.DataFrame, size: np.ndarray) -> list[dict[str, Any]]:
    if sites.empty:
        return []
    frame = sites.assign(bytes=size)
    grouped = frame.groupby("site", sort=False).agg(bytes=("bytes", "sum"), count=("bytes", "size"),
                                                     function=("function", "first"), file=("file", "first"),
                                                     line=("line", "first"), operator=("operator", "first"))
    grouped = grouped.sort_values(["bytes", "count"], ascending=False).reset_index()
    return [{"site": r["site"], "bytes": int(r["bytes"]), "count": int(r["count"]), "function": r["function"],
             "file": r["file"], "line": None if pd.isna(r["line"]) else int(r["line"]), "operator": r["operator"]}
            for r in grouped.to_dict("records")]


def _origins(trace: Trace, ev: _Events, stacks: pd.Series | None) -> np.ndarray:
    """Each event's origin (``categories``): from its own stack where the source recorded one,
    else from the ranges, operators and Python frames open around it; '' for frees."""
    alloc = np.flatnonzero(ev.size > 0)
    out = np.full(len(ev.size), "", dtype=object)
    if stacks is not None:
        out[alloc] = _stack_origins(stacks.iloc[alloc])
        return out
    ranges = trace.table("ranges", ["start", "end", "name"]) if trace.has("ranges") else None
    ops = trace.table("cpu_ops", ["start", "end", "tid", "name"]) if trace.has("cpu_ops") else None
    frames = trace.table("python_frames", ["start", "end", "tid", "function", "file"]) \
        if trace.has("python_frames") else None
    out[alloc] = categories.context_origins(ev.start[alloc], ev.tid[alloc], ranges, ops, frames)
    return out


def _stack_origins(stacks: pd.Series) -> np.ndarray:
    """``categories.stack_origin`` of each stack, worked out once per distinct stack."""
    codes = pd.Categorical(stacks.astype(str))
    per_stack = np.array([categories.stack_origin(c) for c in codes.categories], dtype=object)
    return per_stack[codes.codes]


def _parts(labels: np.ndarray, size: np.ndarray, extra: dict[str, int]) -> list[dict[str, Any]]:
    """Bytes and blocks per label, biggest first, with ``extra`` parts (no blocks counted) added."""
    parts: dict[str, list[int]] = {k: [v, 0] for k, v in extra.items()}
    for label, n in zip(labels, size):
        part = parts.setdefault(str(label), [0, 0])
        part[0] += int(n)
        part[1] += 1
    return [{"category": k, "bytes": v[0], "count": v[1]}
            for k, v in sorted(parts.items(), key=lambda kv: -kv[1][0]) if v[0]]


def _driver_device_report(trace: Trace, device: int, ev: _Events, rows: pd.DataFrame, windows: pd.DataFrame,
                          steady: bool, snapshot: Trace | None) -> dict[str, Any]:
    """A driver-level device (nsys): the bytes the process held, what held them at the peak by the
    call that allocated them, and, with a snapshot of the run, whose they were (``driver``)."""
    per_step, in_scope = _scope(trace, ev, windows, steady, at_driver=True)
    peak_at = _peak_event(ev.reserved, in_scope)
    held = int(ev.reserved[peak_at])
    live = _live_at(ev, peak_at)
    calls = rows["stack"].astype(str).to_numpy()[live]
    threads = ev.tid[live]
    sites = [f"{call} (thread {tid})" if tid >= 0 else call for call, tid in zip(calls, threads)]
    segments = snapshot.meta.extra.get("segment_ranges") if snapshot is not None else None
    owners = driver.owners(ev.addr[live], ev.size[live], calls, device, segments)
    return {
        "device": device, "label": device_label(device), "level": driver.LEVEL, "steps": per_step,
        "peak": {"allocated_bytes": None, "reserved_bytes": held, "time_ns": int(ev.start[peak_at]),
                 "step": _step_of(ev.start[peak_at], windows)},
        "peak_reserved_bytes": int(ev.reserved[in_scope].max()) if in_scope.any() else held,
        "held_by_site": [{"site": r["category"], "bytes": r["bytes"], "count": r["count"], "function": None,
                          "file": None, "operator": None}
                         for r in _parts(np.array(sites, dtype=object), ev.size[live], {})][:TOP_SITES],
        "held_by_phase": [],
        "held_by_category": _parts(owners, ev.size[live], {}),
        "snapshot": snapshot.name if segments is not None else None,
        "fragmentation_bytes": None, "headroom": _headroom(trace, device, held), "largest_free_block_bytes": None,
        "growth": {"steady_steps": sum(s["phase"] == STEADY for s in per_step), "end_allocated_bytes": [],
                   "growth_per_step_bytes": None, "leaking": False, "sites": []},
    }


def _by_phase(sites: pd.DataFrame, size: np.ndarray, before: int) -> list[dict[str, Any]]:
    parts = {BEFORE_TRACE: before}
    if not sites.empty:
        for phase, total in sites.assign(bytes=size).groupby("phase", sort=False)["bytes"].sum().items():
            parts[str(phase)] = parts.get(str(phase), 0) + int(total)
    return [{"part": k, "bytes": v} for k, v in sorted(parts.items(), key=lambda kv: -kv[1]) if v]


def _headroom(trace: Trace, device: int, reserved_peak: int | None) -> dict[str, Any] | None:
    if device == HOST or reserved_peak is None:
        return None
    devices = trace.table("devices", ["device", "memory_total_bytes"])
    total = devices.loc[devices["device"] == device, "memory_total_bytes"]
    if total.empty or int(total.iat[0]) <= 0:
        return None
    capacity = int(total.iat[0])
    return {"device_bytes": capacity, "peak_reserved_bytes": reserved_peak,
            "free_at_peak_bytes": capacity - reserved_peak, "used_pct": 100.0 * reserved_peak / capacity}


def _growth(trace: Trace, ev: _Events, per_step: list[dict[str, Any]], windows: pd.DataFrame,
            recorded: pd.DataFrame | None) -> dict[str, Any]:
    steady = [s for s in per_step if s["phase"] == STEADY]
    ends = np.array([s["end_allocated_bytes"] for s in steady], dtype=np.int64)
    deltas = np.diff(ends)
    grows = int(np.count_nonzero(deltas > 0))
    leaking = len(deltas) >= 2 and grows >= len(deltas) - LEAK_TOLERATED_FLAT_STEPS and int(ends[-1] - ends[0]) > 0
    out: dict[str, Any] = {"steady_steps": len(steady), "end_allocated_bytes": ends.tolist(),
                           "growth_per_step_bytes": int(np.median(deltas)) if len(deltas) else 0,
                           "leaking": bool(leaking), "sites": []}
    if not steady:
        return out
    steady_windows = windows[windows["phase"] == STEADY]
    kept = _unfreed(ev, np.arange(len(ev.start)))
    kept = kept[_in_windows(ev.start[kept], steady_windows)]
    if not len(kept):
        out["leaking"] = False
        return out
    step_of = np.array([_step_of(int(t), steady_windows) for t in ev.start[kept]])
    sites = _sites(trace, ev, kept, recorded).assign(bytes=ev.size[kept], step=step_of)
    needed = max(len(steady) - LEAK_TOLERATED_FLAT_STEPS, 2)
    leaks = []
    for site, rows in sites.groupby("site", sort=False):
        per_step_bytes = rows.groupby("step")["bytes"].sum()
        if len(per_step_bytes) >= needed:
            line = rows["line"].iat[0]
            leaks.append({"site": site, "function": rows["function"].iat[0], "file": rows["file"].iat[0],
                          "line": None if line is None or pd.isna(line) else int(line),
                          "operator": rows["operator"].iat[0], "steps": int(len(per_step_bytes)),
                          "bytes_per_step": int(per_step_bytes.median()), "bytes": int(rows["bytes"].sum())})
    leaks.sort(key=lambda r: -r["bytes"])
    out["sites"] = leaks if leaking else []
    out["leaking"] = bool(leaking and leaks)
    return out


def _ooms(trace: Trace, table: pd.DataFrame) -> list[dict[str, Any]]:
    """Each out-of-memory the history recorded: the request, what was allocated and reserved, and
    whether the allocator's free cached bytes could have held the request (fragmentation) or not
    (real use); the line that asked and the top site alive at that moment."""
    out = []
    for oom in trace.meta.extra.get("oom") or ():
        rows = table[(table["device"] == oom["device"]) & (table["start"] <= oom["time_ns"])]
        ev = _Events(*(rows[c].to_numpy(np.int64) for c in
                       ("start", "tid", "addr", "bytes", "total_allocated", "total_reserved")))
        live = _unfreed(ev, np.arange(len(rows))) if len(rows) else np.empty(0, dtype=np.int64)
        recorded = rows[["function", "file", "line"]].reset_index(drop=True)
        top = _by_site(_sites(trace, ev, live, recorded), ev.size[live])[:TOP_SITES] if len(live) else []
        cached_free = oom["reserved_bytes"] - oom["allocated_bytes"]
        cause = "fragmentation" if cached_free >= oom["requested_bytes"] else "real use"
        out.append({**oom, "cached_free_bytes": cached_free, "cause": cause, "held_by_site": top,
                    "phase": _OOM_PHASE.get(categories.stack_origin(oom.get("stack") or ""), OTHER),
                    "optimizer_steps_before": _optimizer_steps(rows),
                    "site": f"{oom['function']} ({Path(oom['file']).name}:{oom['line']})" if oom["file"] else None})
    return out


# the part of a step an out-of-memory request was made in, from its own stack
_OOM_PHASE = {categories.FORWARD: FORWARD, categories.BACKWARD: BACKWARD, categories.OPTIMIZER: OPTIMIZER,
              categories.OPTIMIZER_INIT: OPTIMIZER}


def _optimizer_steps(rows: pd.DataFrame) -> int | None:
    """How many optimizer steps the recorded history holds before its end: runs of allocations made
    by torch.optim (each step allocates its update's temporaries; the first also its state), told
    apart by allocations of any other origin between them.  None where no allocation recorded a
    stack.  (A history ring that lost its oldest events holds fewer than the program made.)"""
    stacks = rows.loc[rows["bytes"].to_numpy() > 0, "stack"].astype(str)
    if not (stacks != "").any():
        return None
    in_optimizer = np.isin(_stack_origins(stacks), [categories.OPTIMIZER, categories.OPTIMIZER_INIT])
    return int(np.count_nonzero(in_optimizer[1:] & ~in_optimizer[:-1]) + (1 if len(in_optimizer) and
                                                                          in_optimizer[0] else 0))


def findings(report: dict[str, Any]) -> list[str]:
    """The report in plain sentences, one per device and fact."""
    lines = []
    for d in report["devices"]:
        peak = d["peak"]
        where = f" in step {peak['step']}" if peak["step"] is not None else ""
        if d.get("level") == driver.LEVEL:
            lines.append(_driver_sentence(d, where))
            continue
        held = d["held_by_site"][0] if d["held_by_site"] else None
        top = f"; the most by {held['site']} ({size(held['bytes'])} in {held['count']} blocks)" if held else ""
        before = sum(p["bytes"] for p in d["held_by_phase"] if p["part"] == BEFORE_TRACE)
        earlier = f" ({size(before)} of it allocated before the trace began)" if before else ""
        lines.append(f"Memory ({d['label']}): peak {size(peak['allocated_bytes'])} allocated{where}{earlier}{top}.")
        kinds = [p for p in d.get("held_by_category") or () if p["category"] != BEFORE_TRACE]
        if kinds:
            lines.append(f"Memory ({d['label']}): what the peak holds: "
                         + ", ".join(f"{p['category']} {size(p['bytes'])}" for p in kinds) + ".")
        if d["fragmentation_bytes"]:
            lines.append(f"Memory ({d['label']}): {size(d['fragmentation_bytes'])} reserved but not allocated at the peak "
                         "(the caching allocator's cached blocks).")
        if d["headroom"]:
            h = d["headroom"]
            lines.append(f"Memory ({d['label']}): the peak reserved {size(h['peak_reserved_bytes'])} is "
                         f"{h['used_pct']:.0f}% of the device's {size(h['device_bytes'])}.")
        if d.get("largest_free_block_bytes"):
            lines.append(f"Memory ({d['label']}): the largest free block the allocator held at the dump was "
                         f"{size(d['largest_free_block_bytes'])}.")
        if d.get("unrecorded_steps"):
            steps = d["unrecorded_steps"]
            lines.append(f"Memory ({d['label']}): step{'s' if len(steps) > 1 else ''} "
                         f"{', '.join(map(str, steps))} lie{'' if len(steps) > 1 else 's'} outside the allocator's "
                         "record (no event in it): left out of the figures.")
        growth = d["growth"]
        if growth["leaking"]:
            site = growth["sites"][0]
            lines.append(f"Memory ({d['label']}): leaking: every steady step ends {size(growth['growth_per_step_bytes'])} "
                         f"higher; {site['site']} keeps {size(site['bytes_per_step'])} per step that is never freed.")
    return lines + oom_findings(report)


def _driver_sentence(d: dict[str, Any], where: str) -> str:
    parts = "; ".join(f"{size(p['bytes'])} {p['category']}" for p in d["held_by_category"])
    split = "" if d.get("snapshot") else \
        " (a snapshot of the same run tells the caching allocator's bytes apart: profkit memory TRACE --snapshot PICKLE)"
    return (f"Memory ({d['label']}): the process held {size(d['peak']['reserved_bytes'])} of device memory at its "
            f"peak{where} (nsys saw the driver's allocations, not the tensors in them): {parts}{split}.")


def oom_findings(report: dict[str, Any]) -> list[str]:
    """One sentence per out-of-memory error: the request, what was allocated, fragmentation or real
    use, and the site that held the most."""
    lines = []
    for oom in report.get("oom") or ():
        why = (f"fragmentation: the allocator held {size(oom['cached_free_bytes'])} free in its segments, "
               "enough for the request, but in no block big enough" if oom["cause"] == "fragmentation" else
               f"real use: only {size(oom['cached_free_bytes'])} of the reserved memory was free")
        where = f" at {oom['site']}" if oom["site"] else ""
        top = oom["held_by_site"][0] if oom["held_by_site"] else None
        held = f"; the most was held by {top['site']} ({size(top['bytes'])})" if top else ""
        steps = oom.get("optimizer_steps_before")
        when = (f", during the {oom['phase']}" if oom.get("phase") and oom["phase"] != OTHER else "") + \
            (f", after {steps} optimizer step{'' if steps == 1 else 's'}" if steps is not None else "")
        lines.append(f"Out of memory on GPU {oom['device']}{where}{when}: a request of {size(oom['requested_bytes'])} "
                     f"failed with {size(oom['allocated_bytes'])} allocated and {size(oom['reserved_bytes'])} "
                     f"reserved ({why}){held}.")
    return lines


def oom_sentences(trace: Trace) -> list[str]:
    """``oom_findings`` of a trace (a snapshot dumped at an out-of-memory error)."""
    return oom_findings(memory_report(trace))


def size(n: int) -> str:
    """Bytes in binary units, as PyTorch's memory tools print them."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"


__all__ = ["BEFORE_TRACE", "HOST", "device_label", "findings", "has_memory", "is_driver_level", "memory_report", "size",
           "step_peaks"]
