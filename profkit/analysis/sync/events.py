"""Sync events from plain data: detection, GPU idle gaps, Python sites, steps.

The functions take what ``profkit.analysis.sync.inputs`` builds from a trace
(``ApiCall``, ``NvtxRange``, batches of ``(start, end)``) or hand-built lists of the same,
fill ``SyncEvent``/``Step`` records and never print;
``profkit.analysis.sync.stalls`` aggregates them.

Definitions (all times in ns, on the trace's clock):

- **sync event**: one blocking CUDA call (see ``profkit.analysis.sync.calls``), or a
  host<->device copy immediately followed, on the same thread, by a sync
  call -- PyTorch's ``.item()`` is ``cudaMemcpyAsync`` (DtoH, pinned) then
  ``cudaStreamSynchronize``; the pair is one event, its ``api`` reads
  ``"cudaMemcpyAsync + cudaStreamSynchronize"``.
- **CPU time blocked**: the time the thread spent inside the event's calls
  that wait for the GPU (the sync call; a copy only when it blocks itself,
  e.g. from or to pageable memory; never cudaStreamWaitEvent).  An async copy to pinned memory costs its
  launch time only and is not counted.
- **GPU idle time caused**: on the event's device, let ``R`` be when the
  event returned, ``F`` the latest end of any kernel/memcpy/memset that
  started before ``R`` (the GPU's busy frontier) and ``N`` the first start
  of GPU activity at or after ``R``.  The GPU had nothing queued from
  ``max(F, event start)`` to ``N``, because the CPU was waiting and only
  then queued more work: that interval is the idle time caused.  It starts
  no earlier than the event (idle time before the call is the CPU being
  slow, not the sync), is 0 when ``N`` does not exist (nothing ran after)
  or the GPU was still busy past ``N``.  Idle time before the device's first
  kernel is not counted: the GPU had no work yet to be kept from (start-up
  host-to-device copies and their syncs used to be priced with the seconds
  until the model first ran).  When the next sync's own gap on
  the device begins before this one ends (two syncs with no GPU work
  between them), this gap ends where the next begins, so no nanosecond is
  counted twice.  An event whose device is unknown (cudaDeviceSynchronize
  has no activity row) is priced on the device with the latest busy
  frontier.  The gap also ends where the device first had work launched
  and waiting to start (``timeline.queued``: from a launch call's return to
  its operation's start): from then on the GPU waited on its own side,
  not on the blocked host.
- **source**: the innermost ``profkit.sync`` NVTX range on the same thread
  that contains the event's last call (written by
  ``profkit.capture.sync_hook``); without one the event is "source unknown"
  and grouped by API and enclosing NVTX range.
- **steps**: those of ``profkit.analysis.steps.find_steps`` (the user's step
  ranges, else the repeating launch pattern).  A sync belongs to the step
  whose CPU window holds its call: the step range, or for pattern steps from
  the step's first launch to the next step's.  A step's duration is the
  finder's (first GPU operation to the next step's): its GPU window.  The
  idle a step holds is the sync-caused idle inside its GPU window, and only
  that part of an event's idle which lies inside steady steps' GPU windows
  (``steady_idle_ns``) is a per-step cost: a program's last
  ``torch.cuda.synchronize()`` after its loop is called inside the last
  step's CPU window, but its idle lies after the last step's GPU work.  The
  step time without syncs is estimated as the step's duration minus the
  sync-caused GPU idle time inside it: an estimate, since a launch-bound loop
  would not shrink that much.
"""

from __future__ import annotations

import bisect
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from profkit.analysis.sync.calls import (
    PID_MASK,
    SYNC_APIS,
    TO_HOST_COPIES,
    COPY,
    SYNC,
    ApiCall,
    CallColumns,
    NvtxRange,
    decode_thread,
)
from profkit.analysis.sync.ranges import RangeColumns, enclosing
from profkit.model.cuda_labels import COPY_KIND_LABELS, MEM_KIND_LABELS
from profkit.model import sync_sites

# cause labels
CAUSES = sync_sites.CALL_LABELS
BLOCKING_COPY = "blocking copy"
BLOCKING_MEMSET = "blocking memset"
API_CAUSES = {"device": "device synchronize", "stream": "stream synchronize",
              "event": "event synchronize", "stream wait": "stream wait event"}
NO_RANGE = "(no NVTX range)"


@dataclass(slots=True)
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
    cpu_blocked_ns: int = -1  # -1: worked out from the calls
    steady_idle_ns: int = 0  # the part of gpu_idle_ns inside steady steps' GPU windows (attach_steps)

    def __post_init__(self) -> None:
        if self.device is None:
            self.device = next((c.device for c in self.calls if c.device is not None), None)
        if self.cpu_blocked_ns == -1:
            self.cpu_blocked_ns = sum(c.end - c.start for c in self.calls if c.blocks_cpu)

    @property
    def start(self) -> int:
        return self.calls[0].start

    @property
    def end(self) -> int:
        return self.calls[-1].end

    @property
    def blocks_cpu(self) -> bool:
        """Whether one of its calls made the CPU wait: only then can it cause GPU idle time
        (a cudaStreamWaitEvent orders GPU work and returns at once)."""
        return any(c.blocks_cpu for c in self.calls)

    @property
    def anchor(self) -> ApiCall:
        """The call that waited: the Python range and the step are found around it."""
        return self.calls[-1]

    @property
    def api(self) -> str:
        return " + ".join(c.name for c in self.calls)

    @property
    def cause(self) -> str:
        if self.kind is not None:
            return CAUSES.get(self.kind, self.kind)
        if any(c.role == "copy" for c in self.calls):
            return BLOCKING_COPY
        if any(c.role == "memset" for c in self.calls):
            return BLOCKING_MEMSET
        return API_CAUSES.get(SYNC_APIS.get(self.anchor.name, ""), "CUPTI synchronization")

    @property
    def pid(self) -> int:
        return decode_thread(self.global_tid)[0]

    @property
    def tid(self) -> int:
        return decode_thread(self.global_tid)[1]


# -- detection ------------------------------------------------------------------
def build_events(calls: Iterable[ApiCall] | CallColumns, copy_labels: dict[int, str] | None = None,
                 mem_labels: dict[int, str] | None = None) -> list[SyncEvent]:
    """Sync events from candidate calls ordered by thread, then start.

    A host<->device copy directly followed (next candidate call on its
    thread, with no kernel or graph launched between them) by a sync call that
    blocks the CPU joins it as one event; any
    other blocking call or sync is an event alone; copies that do not block
    and are not followed by a sync are not events.  Calls that are none of
    these (a copy between device buffers that does not block, a memset
    that does not) pass unseen: they neither start nor part a pair.
    """
    copy_labels = copy_labels if copy_labels is not None else COPY_KIND_LABELS
    mem_labels = mem_labels if mem_labels is not None else MEM_KIND_LABELS
    columns = calls if isinstance(calls, CallColumns) else CallColumns.from_records(calls)
    first, second, blocked = event_calls(columns)
    if not len(first):
        return []
    paired = second >= 0
    records = columns.records(np.concatenate([first, second[paired]]))
    heads, tails = records[:len(first)], iter(records[len(first):])
    devices = np.where(columns.device[first] != -1, columns.device[first],
                       np.where(paired, columns.device[np.maximum(second, 0)], -1)).tolist()
    is_copy = (columns.roles()[first] == COPY).tolist()
    described: dict[tuple, tuple[str, str]] = {}
    events = []
    for head, pair, copy, device, cpu in zip(heads, paired.tolist(), is_copy, devices, blocked.tolist()):
        event = SyncEvent(head.global_tid, (head, next(tails)) if pair else (head,),
                          device=None if device == -1 else device, cpu_blocked_ns=cpu)
        if copy:  # a pair's head is its copy; a lone call is a blocking copy or none
            key = (head.copy_kind, head.src_kind, head.dst_kind, head.bytes)  # what the text says
            if key not in described:
                described[key] = (_describe_copy(head, copy_labels, mem_labels, with_size=True),
                                  _describe_copy(head, copy_labels, mem_labels, with_size=False))
            event.copy, event.copy_pattern = described[key]
        events.append(event)
    return events


def event_calls(columns: CallColumns) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(first call, second call or -1, CPU time blocked) of each sync event, in call order.

    The walk of ``build_events``'s docstring, vectorized: each call is a host
    copy (H), a sync (S), another call that blocks (B) or passes unseen.  An H
    whose next seen call on its thread is an S that blocks, with no kernel or
    graph launched on the thread between them, pairs with it (``.item()``: the copy, then
    at once the sync; a copy, four kernel launches and a sync 8.6 ms later are two
    acts, not one); an
    H that pairs with nothing is an event when it blocks by itself; every
    unpaired S and every B is an event alone."""
    empty = np.zeros(0, dtype=np.int64)
    if not len(columns):
        return empty, empty, empty
    roles = columns.roles()
    blocks = columns.blocks_cpu(roles)
    host = columns.host_copies(roles)
    is_sync = roles == SYNC
    seen = np.flatnonzero(is_sync | host | blocks)
    # any change of thread between two seen calls parts them (the calls come grouped by thread)
    run = np.concatenate([[0], np.cumsum(columns.global_tid[1:] != columns.global_tid[:-1])])[seen]
    h, s, b = host[seen], is_sync[seen], blocks[seen]
    pair = np.zeros(len(seen), dtype=bool)
    pair[:-1] = h[:-1] & (run[1:] == run[:-1]) & s[1:] & b[1:]
    if columns.launches_through is not None:
        through = columns.launches_through[seen]
        pair[:-1] &= through[1:] == through[:-1]
    taken = np.zeros(len(seen), dtype=bool)
    taken[1:] = pair[:-1]
    heads = np.flatnonzero(pair | (~taken & (s | b)))
    first = seen[heads]
    second = np.where(pair[heads], seen[np.minimum(heads + 1, len(seen) - 1)], -1)
    waited = np.where(blocks, columns.end - columns.start, 0)
    blocked = waited[first] + np.where(second >= 0, waited[np.maximum(second, 0)], 0)
    return first, second, blocked


def _describe_copy(call: ApiCall, copy_labels: dict[int, str], mem_labels: dict[int, str], with_size: bool) -> str:
    direction = copy_labels.get(call.copy_kind, "copy") if call.copy_kind is not None else "copy"
    size = f" {call.bytes:,} B" if call.bytes is not None and with_size else ""
    to_host = call.copy_kind in TO_HOST_COPIES
    host_kind = call.dst_kind if to_host else call.src_kind
    host = mem_labels.get(host_kind) if host_kind is not None else None
    prep = "to" if to_host else "from"
    return f"{direction}{size}" + (f" {prep} {host}" if host and host != "Device" else "")


# -- NVTX: Python sites, enclosing ranges, steps -------------------------------
def decode_site(text: str | None) -> tuple[str, str, str] | None:
    """(kind, "file:line", code) of a profkit.sync range text, else None; the code with the
    "|" the hook escaped (``model.sync_sites.decode_site`` keeps it escaped) restored."""
    decoded = sync_sites.decode_site(text) if text else None
    if decoded is None:
        return None
    kind, where, code = decoded
    return kind, where, code.replace("¦", "|")


def group_text(text: str) -> str:
    return re.sub(r"\d+", "N", text)


def step_matcher(name: str) -> Callable[[NvtxRange], bool]:
    """Whether a range is a step: its text or "domain:text" is ``name``, or ``name`` plus a number."""
    numbered = re.compile(re.escape(name) + r"[\s_:#=-]*\d+")
    grouped = group_text(name)

    def matches(r: NvtxRange) -> bool:
        for candidate in (r.text or "", r.name):
            if candidate == name or numbered.fullmatch(candidate) or group_text(candidate) == grouped:
                return True
        return False

    return matches


@dataclass
class NvtxScan:
    """What one pass over the NVTX ranges found besides the events' ranges: the
    (domain, text with numbers as N) of each top-level push/pop range (no other
    push/pop range of its thread open around it; sync-hook ranges left out)."""

    top_level: set[tuple[str | None, str]] = field(default_factory=set)


def attach_nvtx(events: Sequence[SyncEvent], ranges: Iterable[NvtxRange] | RangeColumns) -> NvtxScan:
    """Fill each event's enclosing ranges and Python site; collect the top-level range names.

    ``ranges`` are ordered by thread, then start (longest first on ties), as
    ``inputs.cpu_ranges`` gives them; events are matched on the same
    thread.  A range encloses an event when it began at or before the
    event's waiting call and ended at or after it; the innermost enclosing
    sync-hook range gives the event its Python site, the others are its
    ``nvtx`` ranges, outermost first.
    """
    columns = ranges if isinstance(ranges, RangeColumns) else RangeColumns.from_records(ranges)
    sites = [decode_site(text) for text in columns.texts]  # per distinct text
    is_site = np.array([site is not None for site in sites], dtype=bool)[columns.text]
    top = columns.top_level(is_site)
    pairs = sorted({(int(columns.domain[i]), int(columns.text[i])) for i in top.tolist()})
    scan = NvtxScan({(columns.domains[d], group_text(columns.texts[t] or "")) for d, t in pairs})
    if not events or not len(columns):
        return scan
    anchors = [e.anchor for e in events]
    event_of, row_of = enclosing(columns, np.array([e.global_tid for e in events], dtype=np.int64),
                                 np.array([a.start for a in anchors], dtype=np.int64),
                                 np.array([a.end for a in anchors], dtype=np.int64))
    if not len(event_of):
        return scan
    kept = ~is_site[row_of]
    records = columns.records(np.unique(row_of[kept]))
    texts, rows, keep = columns.text[row_of].tolist(), row_of.tolist(), kept.tolist()
    owners = event_of.tolist()
    bounds = np.flatnonzero(np.diff(event_of)) + 1
    for a, b in zip(np.concatenate([[0], bounds]).tolist(), np.concatenate([bounds, [len(event_of)]]).tolist()):
        event = events[owners[a]]
        for j in range(b - 1, a - 1, -1):  # the innermost hook range
            if not keep[j]:
                event.kind, event.source, event.code = sites[texts[j]]
                break
        event.nvtx = tuple(records[rows[j]] for j in range(a, b) if keep[j])
    return scan


@dataclass(slots=True)
class Step:
    """A step of ``find_steps`` as the stall analysis uses it: ``start``/``end`` is the
    CPU window its syncs are counted in, ``duration`` the finder's step time."""

    index: int
    name: str
    global_tid: int
    start: int
    end: int
    syncs: int = 0
    cpu_blocked_ns: int = 0
    gpu_idle_ns: int = 0  # sync-caused GPU idle inside the step
    duration: int | None = None  # the finder's step time; None: the CPU window's length
    phase: str = "steady"
    gpu_start: int | None = None  # the finder's step start (first GPU operation); None: ``start``

    @property
    def gpu_window(self) -> tuple[int, int]:
        """[start, end) of the step on the GPU: the finder's start and duration (the CPU window
        where the step has no GPU start)."""
        if self.gpu_start is None:
            return self.start, self.end
        return self.gpu_start, self.gpu_start + self.duration_ns

    @property
    def duration_ns(self) -> int:
        return self.duration if self.duration is not None else self.end - self.start

    @property
    def estimated_without_syncs_ns(self) -> int:
        return max(self.duration_ns - self.gpu_idle_ns, 0)

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "name": self.name, "thread": decode_thread(self.global_tid)[1],
                "start": self.start, "end": self.end, "duration_ns": self.duration_ns, "syncs": self.syncs,
                "cpu_blocked_ns": self.cpu_blocked_ns, "gpu_idle_ns": self.gpu_idle_ns,
                "estimated_without_syncs_ns": self.estimated_without_syncs_ns, "phase": self.phase,
                "gpu_start": self.gpu_window[0], "gpu_end": self.gpu_window[1]}


def label_of(key: tuple[str | None, str]) -> str:
    domain, text = key
    return f"{domain}:{text}" if domain else text


def attach_steps(events: Sequence[SyncEvent], steps: Sequence[Step]) -> None:
    """Set each event's step (the step of its process containing its anchor call) and each step's totals.

    A step's ``gpu_idle_ns`` sums the sync-caused idle intervals clipped to
    the step's GPU window, whichever step's sync of the same phase caused them
    (a sync outside every step charges none); an event's ``steady_idle_ns`` is
    its idle inside the GPU windows of steady steps, where it is in one.
    """
    by_pid: dict[int, list[Step]] = defaultdict(list)
    for s in steps:
        by_pid[s.global_tid & PID_MASK].append(s)
    starts = {pid: [s.start for s in ss] for pid, ss in by_pid.items()}
    windows = {pid: sorted((s.gpu_window, k) for k, s in enumerate(ss)) for pid, ss in by_pid.items()}
    window_starts = {pid: [w[0][0] for w in ws] for pid, ws in windows.items()}
    for event in events:
        pid = event.global_tid & PID_MASK
        ss = by_pid.get(pid)
        event.steady_idle_ns = 0
        if not ss:
            continue
        t = event.anchor.start
        j = bisect.bisect_right(starts[pid], t) - 1
        if j >= 0 and t <= ss[j].end:
            step = ss[j]
            event.step = step.index
            step.syncs += 1
            step.cpu_blocked_ns += event.cpu_blocked_ns
        # The idle a sync leaves runs until the GPU gets work again, into the next step's window where
        # that step's range opened on the drained GPU: the sync's cost, charged to the steps it covers.
        # But only to steps of the sync's own phase (a warm-up sync's drain is no steady step's cost),
        # and a sync called outside every step charges none.
        if event.step is not None and event.idle_start is not None and event.idle_end is not None \
                and event.gpu_idle_ns > 0:
            phase = ss[j].phase  # the step found above, which holds the sync's call
            ws = windows[pid]
            w = max(bisect.bisect_right(window_starts[pid], event.idle_start) - 1, 0)
            while w < len(ws) and ws[w][0][0] < event.idle_end:
                (lo, hi), k = ws[w]
                overlap = min(hi, event.idle_end) - max(lo, event.idle_start)
                if overlap > 0 and ss[k].phase == phase:
                    ss[k].gpu_idle_ns += overlap
                    if phase == "steady":
                        event.steady_idle_ns += overlap
                w += 1
