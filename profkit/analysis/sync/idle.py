"""The GPU idle time each sync event caused (the definition: ``profkit.analysis.sync.events``).

``attach_gpu_idle`` puts the events' times into arrays once and finds, per
device and per batch of that device's GPU work, each event's busy frontier
and the next start after it with numpy; Python touches each event only to
set its three fields.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

ActivitySource = Callable[[int], Iterable[Sequence[tuple[int, int]]]]


class IdleTarget(Protocol):
    """What ``attach_gpu_idle`` reads and fills of an event (``events.SyncEvent`` is one);
    named here so that this module needs nothing of the module that imports it."""

    device: int | None
    gpu_idle_ns: int
    idle_start: int | None
    idle_end: int | None

    @property
    def start(self) -> int: ...

    @property
    def end(self) -> int: ...


def attach_gpu_idle(events: Sequence[IdleTarget], devices: Sequence[int], activity: ActivitySource,
                    first_kernel: Callable[[int], int | None] | None = None) -> None:
    """Fill gpu_idle_ns/idle_start/idle_end (the definition: ``events``'s module docstring).

    ``activity(device)`` yields batches of (start, end) of that device's
    kernels/memcpys/memsets ordered by start; one pass per device.  The
    events' times go into arrays once; the work per event is numpy's.
    ``first_kernel(device)``: when the device's first kernel started (None: no kernel); idle
    time before it is not counted.
    """
    if not events or not devices:
        return
    device = np.array([-1 if e.device is None else e.device for e in events], dtype=np.int64)
    start = np.array([e.start for e in events], dtype=np.int64)
    end = np.array([e.end for e in events], dtype=np.int64)
    # busy frontier F and next start N of each event on each device (known: *_known)
    shape = (len(events), len(devices))
    busy, busy_known = np.zeros(shape, dtype=np.int64), np.zeros(shape, dtype=bool)
    nxt, nxt_known = np.zeros(shape, dtype=np.int64), np.zeros(shape, dtype=bool)
    for j, d in enumerate(devices):
        wanted = np.flatnonzero((device == d) | (device == -1))
        if len(wanted):
            f, fk, n, nk = _frontier_and_next(activity(d), end[wanted])
            busy[wanted, j], busy_known[wanted, j], nxt[wanted, j], nxt_known[wanted, j] = f, fk, n, nk
    column = {d: j for j, d in enumerate(devices)}
    col = np.array([column.get(d, -1) for d in device.tolist()], dtype=np.int64)
    # an event of no known device is priced where the GPU was busy last (the larger device on ties)
    unknown = np.flatnonzero((device == -1) & busy_known.any(axis=1))
    if len(unknown):
        masked = np.where(busy_known[unknown], busy[unknown], np.iinfo(np.int64).min)
        latest = masked == masked.max(axis=1)[:, None]
        col[unknown] = np.argmax(np.where(latest, np.asarray(devices, dtype=np.int64), np.iinfo(np.int64).min), axis=1)
        for i, j in zip(unknown.tolist(), col[unknown].tolist()):
            events[i].device = devices[j]
    rows = np.flatnonzero(col >= 0)
    rows = rows[nxt_known[rows, col[rows]]]
    gap_start = np.maximum(np.where(busy_known[rows, col[rows]], busy[rows, col[rows]], start[rows]), start[rows])
    gap_end = nxt[rows, col[rows]]
    if first_kernel is not None:
        # Before the first kernel the GPU had no work to be kept from: start-up copies and their
        # syncs (8 on the MLP capture) were priced with the seconds until the model first ran.
        firsts = np.array([(lambda f: np.iinfo(np.int64).min if f is None else f)(first_kernel(d))
                           for d in devices], dtype=np.int64)
        gap_start = np.maximum(gap_start, firsts[col[rows]])
    # per device, by gap start: a gap ends where the next one begins (no nanosecond counted twice)
    order = np.lexsort((rows, start[rows], gap_start, col[rows]))
    rows, gap_start, gap_end, dev = rows[order], gap_start[order], gap_end[order], col[rows][order]
    same = np.zeros(len(rows), dtype=bool)
    same[:-1] = dev[1:] == dev[:-1]
    following = np.zeros(len(rows), dtype=np.int64)
    following[:-1] = gap_start[1:]
    gap_end = np.where(same, np.minimum(gap_end, np.maximum(following, gap_start)), gap_end)
    gap_end = np.maximum(gap_end, gap_start)
    for i, a, b in zip(rows.tolist(), gap_start.tolist(), gap_end.tolist()):
        event = events[i]
        event.idle_start, event.idle_end, event.gpu_idle_ns = a, b, b - a


def _frontier_and_next(batches: Iterable[Sequence[tuple[int, int]]], returns: np.ndarray
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """For each return time R: the latest end of activity started before R, the first
    start at or after R, and whether each is known: (F, F known, N, N known)."""
    order = np.argsort(returns, kind="stable")
    r_sorted = returns[order]
    n = len(returns)
    busy_out, busy_known = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=bool)
    next_out, next_known = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=bool)
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
            at = np.searchsorted(starts, r_sorted[k:upto], side="left")
            chosen = order[k:upto]
            inside = at > 0
            busy_out[chosen[inside]], busy_known[chosen[inside]] = busy[at[inside] - 1], True
            if carry is not None:
                busy_out[chosen[~inside]], busy_known[chosen[~inside]] = carry, True
            next_out[chosen], next_known[chosen] = starts[at], True
            k = upto
        carry = int(busy[-1])
    if carry is not None:
        busy_out[order[k:]], busy_known[order[k:]] = carry, True
    return busy_out, busy_known, next_out, next_known


# -- queued work that ends a sync's idle ----------------------------------------------------
def cut_idle_at_queued_work(events: Sequence[IdleTarget],
                            queued: Callable[[int], tuple[np.ndarray, np.ndarray]]) -> None:
    """End each event's idle where its device had work launched and waiting to start
    (``queued(device)``: sorted, disjoint stretches, ``timeline.queued``).  From then on the GPU
    waited on its own side (another stream, an event, a graph's upload), not on the blocked host:
    a 4-byte ``.item()`` was charged 2.4 ms the GPU spent before starting a graph launched 85 us
    into the gap."""
    by_device: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for event in events:
        if event.idle_start is None or event.idle_end is None or event.gpu_idle_ns <= 0 or event.device is None:
            continue
        if event.device not in by_device:
            by_device[event.device] = queued(event.device)
        starts, ends = by_device[event.device]
        at = int(np.searchsorted(ends, event.idle_start, side="right"))  # the first stretch ending after it
        if at < len(starts) and starts[at] < event.idle_end:
            cut = max(int(starts[at]), event.idle_start)
            event.idle_end, event.gpu_idle_ns = cut, cut - event.idle_start


# -- host work that ends a sync's idle ------------------------------------------------------
@dataclass
class HostWork:
    """Stretches a thread spent loading GPU code or compiling, per thread (``global_tid``):
    (starts, running maximum of the ends) ordered by start; ``totals_ns`` the wall time
    of each kind ("compile", "module_load")."""

    by_thread: dict[int, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    totals_ns: dict[str, int] = field(default_factory=dict)

    def totals(self) -> dict[str, int]:
        """Wall time per kind, "<kind>_ns" (overlapping stretches counted once; 0 for a
        kind the trace shows none of)."""
        return {"compile_ns": 0, "module_load_ns": 0, **{f"{k}_ns": v for k, v in self.totals_ns.items()}}


class _Located(IdleTarget, Protocol):
    global_tid: int


def cut_idle_at_host_work(events: Sequence[_Located], work: HostWork) -> None:
    """End each event's idle where its thread began to load modules or compile.

    After a sync returns, the GPU waits for the thread to queue more work; when
    the thread then loads a module (cuBLAS's first call: cuLibraryLoadData) or
    compiles (torch.compile's Dynamo and Inductor), that wait is the loading
    or the compile, not the sync: a 7 us ``.item()`` before Inductor's first
    compile was charged 6.76 s.  An event whose idle begins inside such a
    stretch caused none.
    """
    for event in events:
        if event.idle_start is None or event.idle_end is None or event.gpu_idle_ns <= 0:
            continue
        found = work.by_thread.get(event.global_tid)
        if found is None:
            continue
        starts, ends_max = found
        at = int(np.searchsorted(starts, event.idle_start, side="right"))
        if at > 0 and ends_max[at - 1] > event.idle_start:  # a stretch open when the idle began
            cut = event.idle_start
        elif at < len(starts) and starts[at] < event.idle_end:
            cut = int(starts[at])
        else:
            continue
        event.idle_end, event.gpu_idle_ns = cut, cut - event.idle_start
