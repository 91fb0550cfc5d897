"""Sync stalls: every CPU-GPU synchronization, its Python line, and what it cost.

``analyze_stalls(export)`` reads the streams of ``profkit.nsys.sync`` and
hands them to the pure functions below, which take plain data (``ApiCall``,
``NvtxRange``, lists of ``(start, end)``) and never print.

Definitions (all times in ns, on the export's clock):

- **sync event**: one blocking CUDA call (see ``profkit.nsys.sync``), or a
  host<->device copy immediately followed, on the same thread, by a sync
  call -- PyTorch's ``.item()`` is ``cudaMemcpyAsync`` (DtoH, pinned) then
  ``cudaStreamSynchronize``; the pair is one event, its ``api`` reads
  ``"cudaMemcpyAsync + cudaStreamSynchronize"``.
- **CPU time blocked**: the time the thread spent inside the event's calls
  that wait for the GPU (the sync call; a copy only when it blocks itself,
  e.g. into pageable memory).  An async copy to pinned memory costs its
  launch time only and is not counted.
- **GPU idle time caused**: on the event's device, let ``R`` be when the
  event returned, ``F`` the latest end of any kernel/memcpy/memset that
  started before ``R`` (the GPU's busy frontier) and ``N`` the first start
  of GPU activity at or after ``R``.  The GPU had nothing queued from
  ``max(F, event start)`` to ``N``, because the CPU was waiting and only
  then queued more work: that interval is the idle time caused.  It starts
  no earlier than the event (idle time before the call is the CPU being
  slow, not the sync), is 0 when ``N`` does not exist (nothing ran after)
  or the GPU was still busy past ``N``, and when several events fall in the
  same idle interval each nanosecond goes to the latest event that started
  before it, so nothing is counted twice.  An event whose device is unknown
  (cudaDeviceSynchronize has no activity row) is priced on the device with
  the latest busy frontier.
- **source**: the innermost ``profkit.sync`` NVTX range on the same thread
  that contains the event's last call (written by
  ``profkit.capture.sync_hook``); without one the event is "source unknown"
  and grouped by API and enclosing NVTX range.
- **steps**: the NVTX ranges named by ``step_range`` ("step" also matches
  "step 7"); by default the most frequent top-level push/pop range name
  that occurs at least twice (numbers in names count as one name).  The
  step time without syncs is estimated as the step's duration minus the
  sync-caused GPU idle time inside it: an estimate, since a launch-bound
  loop would not shrink that much.
"""

from __future__ import annotations

import bisect
import linecache
import math
import os
import re
import statistics
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from profkit.capture import sync_hook
from profkit.errors import ProfkitError
from profkit.nsys import queries
from profkit.nsys import sync as sql
from profkit.nsys.reader import GLOBAL_PID_MASK, NsysExport, decode_global_tid
from profkit.nsys.sync import ApiCall, NvtxRange

# cause labels
CAUSES = {
    sync_hook.ITEM: ".item()", sync_hook.CPU: ".cpu()", sync_hook.TOLIST: ".tolist()",
    sync_hook.FORMAT: "print/format", sync_hook.TRUTH: "truthiness",
    sync_hook.SYNCHRONIZE: "torch.cuda.synchronize()",
}
BLOCKING_COPY = "blocking copy"
API_CAUSES = {"device": "device synchronize", "stream": "stream synchronize",
              "event": "event synchronize", "stream wait": "stream wait event"}
NO_RANGE = "(no NVTX range)"


@dataclass
class SyncEvent:
    """One synchronization; the fields after ``calls`` are filled by the attach_* steps."""

    global_tid: int
    calls: tuple[ApiCall, ...]
    copy: str | None = None  # "Device-to-Host 4 B to Pinned"
    copy_pattern: str | None = None  # the same without the size: groups unknown-source events
    gpu_idle_ns: int = 0
    idle_start: int | None = None
    idle_end: int | None = None
    device: int | None = None
    nvtx: tuple[NvtxRange, ...] = ()  # enclosing ranges, outermost first (no profkit.sync ones)
    kind: str | None = None  # the sync hook's kind
    source: str | None = None  # "file.py:LINE"
    code: str | None = None
    step: int | None = None

    def __post_init__(self) -> None:
        if self.device is None:
            self.device = next((c.device for c in self.calls if c.device is not None), None)

    @property
    def start(self) -> int:
        return self.calls[0].start

    @property
    def end(self) -> int:
        return self.calls[-1].end

    @property
    def anchor(self) -> ApiCall:
        """The call that waited: the Python range and the step are found around it."""
        return self.calls[-1]

    @property
    def api(self) -> str:
        return " + ".join(c.name for c in self.calls)

    @property
    def cpu_blocked_ns(self) -> int:
        return sum(c.end - c.start for c in self.calls if c.blocks_cpu)

    @property
    def cause(self) -> str:
        if self.kind is not None:
            return CAUSES.get(self.kind, self.kind)
        if any(c.role in ("copy", "memset") for c in self.calls):
            return BLOCKING_COPY
        what = sql.SYNC_APIS.get(self.anchor.name)
        return API_CAUSES.get(what, "CUPTI synchronization") if what else "CUPTI synchronization"

    @property
    def pid(self) -> int:
        return decode_global_tid(self.global_tid)[0]

    @property
    def tid(self) -> int:
        return decode_global_tid(self.global_tid)[1]


# -- detection ------------------------------------------------------------------
def build_events(calls: Iterable[ApiCall], copy_labels: dict[int, str] | None = None,
                 mem_labels: dict[int, str] | None = None) -> list[SyncEvent]:
    """Sync events from candidate calls ordered by thread, then start.

    A host<->device copy directly followed (next candidate call on its
    thread) by a sync call joins it as one event; any other blocking call is
    an event alone; copies that do not block and are not followed by a sync
    are not events.
    """
    copy_labels = copy_labels if copy_labels is not None else sql.COPY_KIND_LABELS
    mem_labels = mem_labels if mem_labels is not None else sql.MEM_KIND_LABELS
    events: list[SyncEvent] = []
    held: ApiCall | None = None  # a host copy waiting to see whether a sync follows

    def emit(*group: ApiCall) -> None:
        copies = [c for c in group if c.role == "copy"]
        event = SyncEvent(group[0].global_tid, tuple(group))
        if copies:
            event.copy = _describe_copy(copies[0], copy_labels, mem_labels, with_size=True)
            event.copy_pattern = _describe_copy(copies[0], copy_labels, mem_labels, with_size=False)
        events.append(event)

    def release() -> None:
        nonlocal held
        if held is not None and held.blocks_cpu:
            emit(held)
        held = None

    for call in calls:
        if held is not None and held.global_tid != call.global_tid:
            release()
        role = call.role
        if role == "sync":
            if held is not None:
                emit(held, call)
                held = None
            else:
                emit(call)
        elif role == "copy" and call.host_copy:
            release()
            held = call
        elif call.blocks_cpu:
            release()
            emit(call)
    release()
    return events


def _describe_copy(call: ApiCall, copy_labels: dict[int, str], mem_labels: dict[int, str], with_size: bool) -> str:
    direction = copy_labels.get(call.copy_kind, "copy") if call.copy_kind is not None else "copy"
    size = f" {call.bytes:,} B" if call.bytes is not None and with_size else ""
    host_kind = call.dst_kind if call.copy_kind in (2, 4, 12) else call.src_kind
    host = mem_labels.get(host_kind) if host_kind is not None else None
    prep = "to" if call.copy_kind in (2, 4, 12) else "from"
    return f"{direction}{size}" + (f" {prep} {host}" if host and host != "Device" else "")


# -- GPU idle ---------------------------------------------------------------------
ActivitySource = Callable[[int], Iterable[Sequence[tuple[int, int]]]]


def attach_gpu_idle(events: Sequence[SyncEvent], devices: Sequence[int], activity: ActivitySource) -> None:
    """Fill gpu_idle_ns/idle_start/idle_end (see the module docstring).

    ``activity(device)`` yields batches of (start, end) of that device's
    kernels/memcpys/memsets ordered by start; one pass per device.
    """
    frontier: dict[tuple[int, int], tuple[int | None, int | None]] = {}  # (event index, device) -> (F, N)
    for device in devices:
        wanted = [i for i, e in enumerate(events) if e.device in (device, None)]
        if wanted:
            for i, fn in zip(wanted, _frontier_and_next(activity(device), [events[i].end for i in wanted])):
                frontier[(i, device)] = fn
    gaps: dict[int, list[tuple[int, int, SyncEvent]]] = defaultdict(list)
    for i, event in enumerate(events):
        if event.device is None:  # price it where the GPU was busy last
            options = [(f, d) for d in devices if (f := frontier.get((i, d), (None, None))[0]) is not None]
            if not options:
                continue
            event.device = max(options)[1]
        busy_until, next_start = frontier.get((i, event.device), (None, None))
        if next_start is None:
            continue
        gap_start = max(busy_until if busy_until is not None else event.start, event.start)
        gaps[event.device].append((gap_start, next_start, event))
    for device_gaps in gaps.values():
        device_gaps.sort(key=lambda g: (g[0], g[2].start))
        for k, (gap_start, gap_end, event) in enumerate(device_gaps):
            if k + 1 < len(device_gaps):
                gap_end = min(gap_end, max(device_gaps[k + 1][0], gap_start))
            event.idle_start, event.idle_end = gap_start, max(gap_end, gap_start)
            event.gpu_idle_ns = event.idle_end - event.idle_start


def _frontier_and_next(batches: Iterable[Sequence[tuple[int, int]]],
                       returns: Sequence[int]) -> list[tuple[int | None, int | None]]:
    """For each return time R: (latest end of activity started before R, first start at or after R)."""
    order = np.argsort(np.asarray(returns, dtype=np.int64), kind="stable")
    r_sorted = np.asarray(returns, dtype=np.int64)[order]
    out: list[tuple[int | None, int | None]] = [(None, None)] * len(returns)
    carry: int | None = None
    k = 0
    for batch in batches:
        if not len(batch):
            continue
        arr = np.asarray(batch, dtype=np.int64)
        starts, busy = arr[:, 0], np.maximum.accumulate(arr[:, 1])
        if carry is not None:
            busy = np.maximum(busy, carry)
        upto = int(np.searchsorted(r_sorted, starts[-1], side="right"))
        if upto > k:
            idx = np.searchsorted(starts, r_sorted[k:upto], side="left")
            for j, at in zip(range(k, upto), idx):
                before = int(busy[at - 1]) if at > 0 else carry
                out[order[j]] = (before, int(starts[at]))
            k = upto
        carry = int(busy[-1])
    for j in range(k, len(r_sorted)):
        out[order[j]] = (carry, None)
    return out


# -- NVTX: Python sites, enclosing ranges, steps -------------------------------
def decode_site(text: str | None) -> tuple[str, str, str] | None:
    """(kind, "file:line", code) of a profkit.sync range text, else None.

    The current sync_hook decodes first; texts it no longer accepts but that
    follow the recorded format "profkit.sync|kind|file:line|code" (the
    committed fixtures) still decode.
    """
    if not text:
        return None
    decoded = sync_hook.decode_site(text)
    if not (isinstance(decoded, tuple) and len(decoded) == 3):
        decoded = None
    if decoded is None and text.startswith("profkit.sync|"):
        parts = text[len("profkit.sync|"):].split("|", 2)
        decoded = tuple(parts) if len(parts) == 3 else None  # type: ignore[assignment]
    if decoded is None:
        return None
    kind, where, code = decoded
    return kind, where, code.replace("¦", "|")  # the hook escapes "|" in code


def _group_text(text: str) -> str:
    return re.sub(r"\d+", "N", text)


def step_matcher(name: str) -> Callable[[NvtxRange], bool]:
    """Whether a range is a step: its text or "domain:text" is ``name``, or ``name`` plus a number."""
    numbered = re.compile(re.escape(name) + r"[\s_:#=-]*\d+")
    grouped = _group_text(name)

    def matches(r: NvtxRange) -> bool:
        for candidate in (r.text or "", r.name):
            if candidate == name or numbered.fullmatch(candidate) or _group_text(candidate) == grouped:
                return True
        return False

    return matches


@dataclass
class NvtxScan:
    """What one pass over the NVTX ranges found besides the events' ranges."""

    top_level: dict[tuple[str | None, str], list[NvtxRange]] = field(default_factory=dict)
    named: list[NvtxRange] = field(default_factory=list)  # ranges matching an explicit step name


def attach_nvtx(events: Sequence[SyncEvent], ranges: Iterable[NvtxRange], step_range: str | None = None) -> NvtxScan:
    """Fill each event's enclosing ranges and Python site; collect step candidates.

    ``ranges`` are ordered by thread, then start (longest first on ties), as
    ``iter_nvtx_ranges`` gives them; events are matched on the same thread.
    """
    scan = NvtxScan()
    matches = step_matcher(step_range) if step_range else None
    by_thread = sorted(events, key=lambda e: (e.global_tid, e.anchor.start))
    k = 0
    thread: int | None = None
    open_ranges: list[NvtxRange] = []
    push_pop_stack: list[NvtxRange] = []

    def attach_before(tid: float, time: float) -> None:
        """Attach the events before (tid, time); those of threads without ranges get none."""
        nonlocal k
        while k < len(by_thread) and (by_thread[k].global_tid, by_thread[k].anchor.start) < (tid, time):
            if by_thread[k].global_tid == thread:
                _enclose(by_thread[k], open_ranges)
            k += 1

    for r in ranges:
        if r.global_tid != thread:
            attach_before(r.global_tid, -math.inf)
            thread, open_ranges, push_pop_stack = r.global_tid, [], []
        attach_before(r.global_tid, r.start)
        open_ranges.append(r)
        is_site = decode_site(r.text) is not None
        if matches is not None and not is_site and matches(r):
            scan.named.append(r)
        if r.push_pop:
            while push_pop_stack and push_pop_stack[-1].end <= r.start:
                push_pop_stack.pop()
            if not push_pop_stack and not is_site:
                scan.top_level.setdefault((r.domain, _group_text(r.text or "")), []).append(r)
            push_pop_stack.append(r)
    attach_before(math.inf, math.inf)
    return scan


def _enclose(event: SyncEvent, open_ranges: list[NvtxRange]) -> None:
    anchor = event.anchor
    open_ranges[:] = [r for r in open_ranges if r.end >= anchor.start]
    enclosing = [r for r in open_ranges if r.start <= anchor.start and anchor.end <= r.end]
    site = None
    for r in reversed(enclosing):
        if (site := decode_site(r.text)) is not None:
            break
    if site is not None:
        event.kind, event.source, event.code = site
    event.nvtx = tuple(r for r in enclosing if decode_site(r.text) is None)


@dataclass
class Step:
    index: int
    name: str
    global_tid: int
    start: int
    end: int
    syncs: int = 0
    cpu_blocked_ns: int = 0
    gpu_idle_ns: int = 0  # sync-caused GPU idle inside the step

    @property
    def duration_ns(self) -> int:
        return self.end - self.start

    @property
    def estimated_without_syncs_ns(self) -> int:
        return max(self.duration_ns - self.gpu_idle_ns, 0)

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "name": self.name, "thread": decode_global_tid(self.global_tid)[1],
                "start": self.start, "end": self.end, "duration_ns": self.duration_ns, "syncs": self.syncs,
                "cpu_blocked_ns": self.cpu_blocked_ns, "gpu_idle_ns": self.gpu_idle_ns,
                "estimated_without_syncs_ns": self.estimated_without_syncs_ns}


def select_steps(scan: NvtxScan, step_range: str | None) -> tuple[str | None, list[Step]]:
    """The step ranges (sorted by start) and their label."""
    if step_range:
        chosen, label = scan.named, step_range
        if not chosen:
            seen = sorted({_label_of(key) for key in scan.top_level})
            raise ProfkitError(f"no NVTX range named {step_range!r} in this export",
                               hint="top-level ranges: " + (", ".join(seen[:10]) or "none"))
    else:
        repeated = [(len(rs), sum(r.end - r.start for r in rs), key) for key, rs in scan.top_level.items()
                    if len(rs) >= 2]
        if not repeated:
            return None, []
        _, _, key = max(repeated, key=lambda t: (t[0], t[1]))
        chosen, label = scan.top_level[key], _label_of(key)
    ordered = sorted(chosen, key=lambda r: (r.start, r.global_tid))
    return label, [Step(i, r.name, r.global_tid, r.start, r.end) for i, r in enumerate(ordered)]


def _label_of(key: tuple[str | None, str]) -> str:
    domain, text = key
    return f"{domain}:{text}" if domain else text


def attach_steps(events: Sequence[SyncEvent], steps: Sequence[Step]) -> None:
    """Set each event's step (the step of its process containing its anchor call) and each step's totals.

    A step's ``gpu_idle_ns`` sums the sync-caused idle intervals clipped to
    the step, whichever step's sync caused them.
    """
    by_pid: dict[int, list[Step]] = defaultdict(list)
    for s in steps:
        by_pid[s.global_tid & GLOBAL_PID_MASK].append(s)
    starts = {pid: [s.start for s in ss] for pid, ss in by_pid.items()}
    for event in events:
        pid = event.global_tid & GLOBAL_PID_MASK
        ss = by_pid.get(pid)
        if not ss:
            continue
        t = event.anchor.start
        j = bisect.bisect_right(starts[pid], t) - 1
        if j >= 0 and t <= ss[j].end:
            step = ss[j]
            event.step = step.index
            step.syncs += 1
            step.cpu_blocked_ns += event.cpu_blocked_ns
        if event.idle_start is not None and event.gpu_idle_ns > 0:
            j = max(bisect.bisect_right(starts[pid], event.idle_start) - 1, 0)
            while j < len(ss) and ss[j].start < event.idle_end:
                overlap = min(ss[j].end, event.idle_end) - max(ss[j].start, event.idle_start)
                if overlap > 0:
                    ss[j].gpu_idle_ns += overlap
                j += 1


# -- source lines -----------------------------------------------------------------
def local_source_line(source: str, roots: Sequence[Path] = ()) -> tuple[str | None, str | None]:
    """(path found here, its line) for a recorded "file:line", or (None, None).

    The hook records paths relative to the profiled program's working folder
    (often "../../x/y.py"); the file is looked up as given, under each root,
    then by ever shorter tails of the path under each root.
    """
    path, _, line = source.rpartition(":")
    if not path or not line.isdigit():
        return None, None
    parts = [p for p in Path(path).parts if p not in ("..", ".")]
    candidates = [Path(path)] if Path(path).is_absolute() else []
    for root in [*roots, Path.cwd()]:
        candidates.append(Path(os.path.normpath(root / path)))
        candidates += [root.joinpath(*parts[i:]) for i in range(len(parts)) if parts[i:]]
    for candidate in candidates:
        if candidate.is_file():
            text = linecache.getline(str(candidate), int(line))
            return str(candidate), (" ".join(text.split()) or None)
    return None, None


# -- aggregation ------------------------------------------------------------------
def nvtx_label(event: SyncEvent, is_step: Callable[[NvtxRange], bool] | None, step_label: str | None) -> str:
    """The innermost enclosing range's name; a step range reads as the step label ("step" for "step 7")."""
    if not event.nvtx:
        return NO_RANGE
    innermost = event.nvtx[-1]
    if is_step is not None and step_label and is_step(innermost):
        return step_label
    return innermost.name


def aggregate_sites(events: Sequence[SyncEvent], n_steps: int, label: Callable[[SyncEvent], str],
                    roots: Sequence[Path] = ()) -> list[dict[str, Any]]:
    """One row per call site (known source) or per (API, NVTX range) (source unknown), by cost."""
    groups: dict[tuple, list[SyncEvent]] = defaultdict(list)
    for e in events:
        key = ("source", e.source, e.kind) if e.source is not None else ("api", e.api, e.copy_pattern, label(e))
        groups[key].append(e)
    rows = []
    for key, es in groups.items():
        first = es[0]
        in_steps = [e for e in es if e.step is not None]
        path, local = local_source_line(first.source, roots) if first.source else (None, None)
        file, _, line = (first.source or "").rpartition(":")
        rows.append({
            "source": first.source,
            "file": file or None,
            "line": int(line) if line.isdigit() else None,
            "code": first.code or local,
            "local_path": path,
            "local_code": local,
            "kind": first.kind,
            "cause": _most_common(e.cause for e in es),
            "api": _most_common(e.api for e in es),
            "copy": _most_common(e.copy for e in es if e.copy),
            "copy_pattern": _most_common(e.copy_pattern for e in es if e.copy_pattern),
            "count": len(es),
            "cpu_blocked_ns": sum(e.cpu_blocked_ns for e in es),
            "gpu_idle_ns": sum(e.gpu_idle_ns for e in es),
            "max_cpu_blocked_ns": max(e.cpu_blocked_ns for e in es),
            "nvtx": _most_common(label(e) for e in es),
            "thread": _most_common(e.tid for e in es),
            "pid": first.pid,
            "device": _most_common(e.device for e in es if e.device is not None),
            "in_steps": len(in_steps),
            "per_step": {
                "syncs": len(in_steps) / n_steps,
                "cpu_blocked_ns": sum(e.cpu_blocked_ns for e in in_steps) / n_steps,
                "gpu_idle_ns": sum(e.gpu_idle_ns for e in in_steps) / n_steps,
                "steps_with_sync": len({e.step for e in in_steps}),
            } if n_steps else None,
        })
    # Cost inside steps first: a long idle gap after start-up copies is real
    # but is not what slows the loop down.
    rows.sort(key=lambda r: (-(r["per_step"] or {}).get("gpu_idle_ns", 0), -r["gpu_idle_ns"], -r["cpu_blocked_ns"],
                             -r["count"], r["source"] or "", r["api"]))
    return rows


def aggregate_by_nvtx(events: Sequence[SyncEvent], label: Callable[[SyncEvent], str]) -> list[dict[str, Any]]:
    groups: dict[str, list[SyncEvent]] = defaultdict(list)
    for e in events:
        groups[label(e)].append(e)
    rows = [{
        "nvtx": name,
        "count": len(es),
        "cpu_blocked_ns": sum(e.cpu_blocked_ns for e in es),
        "gpu_idle_ns": sum(e.gpu_idle_ns for e in es),
        "sites": len({e.source for e in es if e.source}),
        "source_unknown": sum(1 for e in es if e.source is None),
        "apis": ", ".join(f"{api} x{n}" for api, n in Counter(e.api for e in es).most_common()),
    } for name, es in groups.items()]
    rows.sort(key=lambda r: (-r["gpu_idle_ns"], -r["cpu_blocked_ns"], r["nvtx"]))
    return rows


def _most_common(values: Iterable[Any]) -> Any:
    counts = Counter(values)
    return counts.most_common(1)[0][0] if counts else None


# -- findings ---------------------------------------------------------------------
def step_statistics(steps: Sequence[Step]) -> dict[str, Any] | None:
    if not steps:
        return None
    durations = [s.duration_ns for s in steps]
    estimates = [s.estimated_without_syncs_ns for s in steps]
    return {
        "count": len(steps),
        "total_ns": sum(durations),
        "mean_ns": statistics.fmean(durations),
        "median_ns": statistics.median(durations),
        "min_ns": min(durations),
        "max_ns": max(durations),
        "sync_gpu_idle_mean_ns": statistics.fmean(s.gpu_idle_ns for s in steps),
        "sync_cpu_blocked_mean_ns": statistics.fmean(s.cpu_blocked_ns for s in steps),
        "syncs_per_step": statistics.fmean(s.syncs for s in steps),
        "estimated_mean_without_syncs_ns": statistics.fmean(estimates),
        "estimated_median_without_syncs_ns": statistics.median(estimates),
    }


def write_findings(sites: Sequence[dict[str, Any]], step_stats: dict[str, Any] | None, step_label: str | None,
                   run_ns: int | None, threshold_pct: float) -> list[str]:
    """Plain-language findings for syncs that cost at least ``threshold_pct`` of the step (or run) time.

    A cost is the sync-caused GPU idle time.  Per step it is the mean over
    all steps (a site that syncs every other step costs half its idle per
    step), compared with the median step time (the typical step: the first
    one often carries seconds of warm-up).
    """
    out = []
    if step_stats:
        typical = step_stats["median_ns"]
        for site in sites:
            per = site["per_step"]
            if not per or not site["in_steps"] or typical <= 0:
                continue
            pct = 100.0 * per["gpu_idle_ns"] / typical
            if pct < threshold_pct:
                continue
            out.append(f"{_site_name(site)} synchronizes {site['in_steps']} times, {_num(per['syncs'])} per step, "
                       f"costing {_ms(per['gpu_idle_ns'])} ms per step ({pct:.0f}% of the median "
                       f"{step_label} time, {_ms(typical)} ms) in GPU idle time")
        total_pct = 100.0 * step_stats["sync_gpu_idle_mean_ns"] / typical if typical > 0 else 0.0
        if total_pct >= threshold_pct:
            out.append(f"Synchronizations leave the GPU idle {_ms(step_stats['sync_gpu_idle_mean_ns'])} ms per "
                       f"{step_label} ({total_pct:.0f}%); estimated median {step_label} time without them: "
                       f"{_ms(step_stats['estimated_median_without_syncs_ns'])} ms instead of {_ms(typical)} ms "
                       f"(an estimate: a launch-bound loop gains less)")
    elif run_ns:
        for site in sites:
            pct = 100.0 * site["gpu_idle_ns"] / run_ns
            if pct >= threshold_pct:
                out.append(f"{_site_name(site)} synchronizes {site['count']} times, costing "
                           f"{_ms(site['gpu_idle_ns'])} ms of GPU idle time ({pct:.0f}% of the run)")
    return out


def _site_name(site: dict[str, Any]) -> str:
    if site["source"]:
        file = os.path.basename(site["file"] or "") or site["file"]
        code = f" `{site['code']}`" if site["code"] else ""
        return f"{file}:{site['line']}{code}"
    where = f" in {site['nvtx']}" if site["nvtx"] != NO_RANGE else ""
    copy = f" ({site['copy_pattern']})" if site.get("copy_pattern") else ""
    return f"{site['api']}{copy} (source unknown){where}"


def _ms(ns: float) -> str:
    return f"{ns / 1e6:.3g}" if ns < 1e7 else f"{ns / 1e6:,.1f}"


def _num(x: float) -> str:
    return f"{x:.0f}" if abs(x - round(x)) < 0.05 else f"{x:.1f}"


# -- the facade -----------------------------------------------------------------
@dataclass
class StallReport:
    """Everything ``profkit stalls`` and the report show; ``to_dict`` is the JSON form."""

    export: str
    step_range: str | None
    threshold_pct: float
    sites: list[dict[str, Any]]
    by_nvtx: list[dict[str, Any]]
    events: list[SyncEvent]
    steps: list[Step]
    step_stats: dict[str, Any] | None
    findings: list[str]
    run_ns: int | None = None

    def event_dicts(self) -> list[dict[str, Any]]:
        return [{
            "start": e.start, "end": e.end, "api": e.api, "cause": e.cause, "kind": e.kind,
            "source": e.source, "code": e.code, "thread": e.tid, "pid": e.pid, "device": e.device,
            "cpu_blocked_ns": e.cpu_blocked_ns, "gpu_idle_ns": e.gpu_idle_ns,
            "idle_start": e.idle_start, "idle_end": e.idle_end, "copy": e.copy,
            "nvtx": [r.name for r in e.nvtx], "step": e.step,
        } for e in self.events]

    def to_dict(self) -> dict[str, Any]:
        return {
            "export": self.export, "step_range": self.step_range, "threshold_pct": self.threshold_pct,
            "run_ns": self.run_ns, "findings": self.findings, "sites": self.sites, "by_nvtx": self.by_nvtx,
            "step_stats": self.step_stats, "steps": [s.to_dict() for s in self.steps],
            "events": self.event_dicts(),
        }


def analyze_stalls(export: NsysExport, *, step_range: str | None = None, threshold_pct: float = 5.0,
                   source_roots: Sequence[Path] = ()) -> StallReport:
    """Find, price and attribute every synchronization of an export (see the module docstring).

    ``source_roots``: folders to look for the recorded source files in (the
    profiled program's working folder, when known).
    """
    events = build_events(sql.iter_api_calls(export), sql.copy_kind_labels(export), sql.mem_kind_labels(export))
    events += [SyncEvent(c.global_tid, (c,)) for c in sql.iter_unmatched_sync_rows(export)]
    events.sort(key=lambda e: (e.start, e.global_tid))
    devices = sql.gpu_devices(export)
    attach_gpu_idle(events, devices, lambda device: sql.iter_gpu_activity(export, device))
    scan = attach_nvtx(events, sql.iter_nvtx_ranges(export), step_range)
    label, steps = select_steps(scan, step_range)
    attach_steps(events, steps)
    is_step = step_matcher(step_range) if step_range else _key_matcher(label, scan)
    roots = [*source_roots, export.path.parent]

    def range_label(e: SyncEvent) -> str:
        return nvtx_label(e, is_step, label)

    sites = aggregate_sites(events, len(steps), range_label, roots)
    stats = step_statistics(steps)
    window = _run_ns(export)
    return StallReport(
        export=export.path.name, step_range=label, threshold_pct=threshold_pct, sites=sites,
        by_nvtx=aggregate_by_nvtx(events, range_label), events=events, steps=steps, step_stats=stats,
        findings=write_findings(sites, stats, label, window, threshold_pct), run_ns=window)


def _key_matcher(label: str | None, scan: NvtxScan) -> Callable[[NvtxRange], bool] | None:
    keys = {key for key in scan.top_level if _label_of(key) == label}
    return (lambda r: (r.domain, _group_text(r.text or "")) in keys) if keys else None


def _run_ns(export: NsysExport) -> int | None:
    window = queries.analysis_window(export)
    return int(window[2]) if window and window[2] else None


def compare_steps(report_a: StallReport, report_b: StallReport) -> dict[str, Any]:
    """Step times of two runs (e.g. with and without a print) from their NVTX step ranges.

    Medians are the headline (the first step carries warm-up); means and the
    estimate of run A without its syncs are given too.
    """
    a, b = report_a.step_stats, report_b.step_stats
    if not a or not b:
        missing = report_a.export if not a else report_b.export
        raise ProfkitError(f"{missing} has no NVTX step ranges to compare",
                           hint="name them with --step-range, or wrap each step in an NVTX range")
    diff_median = a["median_ns"] - b["median_ns"]
    diff_mean = a["mean_ns"] - b["mean_ns"]
    pct = 100.0 * diff_median / b["median_ns"] if b["median_ns"] else None
    word = "slower" if diff_median > 0 else "faster"
    finding = (f"{report_a.export}: median {report_a.step_range} {_ms(a['median_ns'])} ms vs "
               f"{report_b.export}: {_ms(b['median_ns'])} ms -- {_ms(abs(diff_median))} ms {word}"
               + (f" ({abs(pct):.0f}%)" if pct is not None else "")
               + f" per step; the sync-idle estimate for {report_a.export} without its syncs is "
               f"{_ms(a['estimated_median_without_syncs_ns'])} ms")
    return {
        "a": {"export": report_a.export, "step_range": report_a.step_range, **a},
        "b": {"export": report_b.export, "step_range": report_b.step_range, **b},
        "median_difference_ns": diff_median,
        "mean_difference_ns": diff_mean,
        "median_difference_pct": pct,
        "finding": finding,
    }
