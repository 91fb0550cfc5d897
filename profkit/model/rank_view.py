"""A whole multi-GPU job in one trace, seen as its ranks.

``nsys profile torchrun --nproc-per-node N train.py`` writes one export with
one process per GPU.  Read as one trace, its GPUs' kernels are summed and
their launch sequences interleave, so steps and stragglers mean nothing.
``job_layout(trace)`` finds the ranks in it and ``rank_view(trace, layout, r)``
is a ``Trace`` of rank ``r`` alone, which every single-rank analysis takes
unchanged.

Which processes are ranks.  A GPU process is one with GPU work (a row in
``schema.GPU_WORK_TABLES``).  Processes that share a device belong to the same
rank (a helper process copying to rank 3's GPU is rank 3's), so the ranks are
the groups of GPU processes connected by shared devices; one group is one rank
(a single process driving several GPUs stays one trace, as before).  When the
trace records NCCL ranks for every GPU process (one communicator, each process
one distinct rank), each process is its own rank even where devices are shared.
Every rank is analysed as a trace of its own, so a trace that splits into more
than ``PROFKIT_MAX_RANKS`` ranks (``limits``) is refused with one line.

Which rank is which, from what the trace recorded, never from the recorded
environment, in this order (``RankLayout.source`` says which was used):
1. ``"NCCL payload"``: NCCL's init payload (``source.nccl_ranks()``, nsys
   exports made with ``--include-blobs=true``);
2. ``"device index"``: when every rank drives one device, the ranks in device
   order (torchrun on one node: LOCAL_RANK = device);
3. ``"process order"``: otherwise by process id.

The view.  ``RankSource`` is a ``TraceSource`` over the parent ``Trace``: a
column is loaded once, by the parent, and each view takes its rows out of it
with an index array computed once per table for all ranks (rows keep the
parent's order).  Every table with a ``pid`` column is cut by pid, ``devices``
by the devices the rank's GPU work used, any other table is shared whole; all
generic over ``schema.TABLES``, so a new table is covered without code here.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from profkit import limits
from profkit.errors import ProfkitError
from profkit.model import schema
from profkit.model.trace import DURATION, Coded, Trace

NCCL = "NCCL payload"
DEVICE_INDEX = "device index"
PROCESS_ORDER = "process order"


@dataclass(frozen=True)
class RankPlan:
    rank: int
    pids: tuple[int, ...]
    devices: tuple[int, ...]


@dataclass(frozen=True)
class RankLayout:
    """The ranks in one trace.  ``ranks`` is empty when the trace is one rank (as read before)."""

    ranks: tuple[RankPlan, ...]
    source: str | None            # NCCL, DEVICE_INDEX or PROCESS_ORDER; None for one rank
    world_size: int | None = None  # NCCL's "No. of ranks" where recorded, else len(ranks)

    @property
    def is_job(self) -> bool:
        return len(self.ranks) > 1

    def plan(self, rank: int) -> RankPlan:
        for p in self.ranks:
            if p.rank == rank:
                return p
        have = ", ".join(str(p.rank) for p in self.ranks)
        raise ProfkitError(f"there is no rank {rank} in this trace (it holds ranks {have})")


def _gpu_work(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """(pid, device) of every row of GPU work, all tables together."""
    pids, devices = [], []
    for table in schema.GPU_WORK_TABLES:
        if trace.has(table):
            pids.append(trace.array(table, "pid").astype(np.int64, copy=False))
            devices.append(trace.array(table, "device").astype(np.int64, copy=False))
    if not pids:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate(pids), np.concatenate(devices)


def _device_groups(devices_of: dict[int, set[int]]) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """Processes joined when they share a device: [(pids, devices)] (union-find over pids)."""
    parent = {p: p for p in devices_of}

    def root(p: int) -> int:
        while parent[p] != p:
            parent[p] = parent[parent[p]]
            p = parent[p]
        return p

    owner: dict[int, int] = {}
    for pid in sorted(devices_of):
        for device in devices_of[pid]:
            if device in owner:
                parent[root(pid)] = root(owner[device])
            else:
                owner[device] = pid
    groups: dict[int, list[int]] = {}
    for pid in sorted(devices_of):
        groups.setdefault(root(pid), []).append(pid)
    return [(tuple(ps), tuple(sorted(set().union(*(devices_of[p] for p in ps))))) for ps in groups.values()]


def _nccl_layout(trace: Trace, devices_of: dict[int, set[int]]) -> RankLayout | None:
    """Ranks from NCCL's payloads when they name one distinct rank for every GPU process
    in one communicator (the one with the most ranks: the world group)."""
    recorder = getattr(trace.source, "nccl_ranks", None)
    records = recorder() if recorder is not None else []
    if not records:
        return None
    by_comm: dict[int, dict[int, set[tuple[int, int]]]] = {}
    for r in records:
        by_comm.setdefault(r.comm, {}).setdefault(r.pid, set()).add((r.rank, r.nranks))
    comm = max(by_comm, key=lambda c: (max(n for ranks in by_comm[c].values() for _, n in ranks), len(by_comm[c])))
    members = by_comm[comm]
    if not set(devices_of) <= set(members) or any(len(v) != 1 for v in members.values()):
        return None  # a GPU process outside it, or a process with two ranks (one process, several GPUs)
    rank_of = {pid: next(iter(v)) for pid, v in members.items() if pid in devices_of}
    ranks = [r for r, _ in rank_of.values()]
    if len(set(ranks)) != len(ranks):
        return None
    world = max(n for _, n in rank_of.values())
    plans = sorted((RankPlan(rank_of[p][0], (p,), tuple(sorted(devices_of[p]))) for p in devices_of),
                   key=lambda p: p.rank)
    return RankLayout(tuple(plans), NCCL, world)


def job_layout(trace: Trace) -> RankLayout:
    """The ranks of a trace (see the module docstring); no ranks when it is one rank.

    Computed once per trace and kept on it (it reads the GPU tables' pid and device)."""
    cached = getattr(trace, "_rank_layout", None)
    if cached is not None:
        return cached
    layout = _layout(trace)
    trace._rank_layout = layout  # type: ignore[attr-defined]
    return layout


def _layout(trace: Trace) -> RankLayout:
    if isinstance(trace.source, RankSource) or trace.meta.rank is not None:
        return RankLayout((), None)  # already one rank (a view, or a trace that names its rank)
    pids, devices = _gpu_work(trace)
    processes = np.unique(pids)
    if len(processes) < 2:
        return RankLayout((), None)
    # the distinct (pid, device) pairs, vectorized: work per row, never per process and row
    known = devices >= 0
    pair_pid, pair_device = pids[known], devices[known]
    order = np.lexsort((pair_device, pair_pid))
    pair_pid, pair_device = pair_pid[order], pair_device[order]
    fresh = np.ones(len(order), dtype=bool)
    fresh[1:] = (pair_pid[1:] != pair_pid[:-1]) | (pair_device[1:] != pair_device[:-1])
    pair_pid, pair_device = pair_pid[fresh], pair_device[fresh]
    most = limits.current().max_ranks
    # processes and devices joined by pairs: a forest has (nodes - edges) components, any graph at least
    # that many, so the ranks by device are at least this; by NCCL they would be one per process
    fewest = len(processes) + len(np.unique(pair_device)) - len(pair_pid)
    if min(fewest, len(processes)) > most and len(np.unique(pair_pid)) == len(processes):
        _too_many(trace, fewest, most)  # refused before any Python object is made per process
    devices_of: dict[int, set[int]] = {pid: set() for pid in processes.tolist()}
    for pid, device in zip(pair_pid.tolist(), pair_device.tolist()):
        devices_of[pid].add(device)
    layout = _split(trace, devices_of)
    if len(layout.ranks) > most:
        _too_many(trace, len(layout.ranks), most)
    return layout


def _too_many(trace: Trace, ranks: int, most: int) -> None:
    raise limits.LimitExceeded(f"{trace.name} splits into {ranks:,} ranks (processes on GPUs of their own), "
                               f"more than the {most:,} allowed in one trace", limits.VARIABLES["max_ranks"])


def _split(trace: Trace, devices_of: dict[int, set[int]]) -> RankLayout:
    """The ranks of the GPU processes ``devices_of`` (at least two)."""
    from_nccl = _nccl_layout(trace, devices_of)
    if from_nccl is not None:
        return from_nccl
    if any(not d for d in devices_of.values()):
        return RankLayout((), None)  # a GPU process on no known device: no sound split
    groups = _device_groups(devices_of)
    if len(groups) < 2:
        return RankLayout((), None)
    if all(len(devs) == 1 for _, devs in groups):
        groups.sort(key=lambda g: g[1][0])
        source = DEVICE_INDEX
    else:
        groups.sort(key=lambda g: g[0][0])
        source = PROCESS_ORDER
    plans = tuple(RankPlan(i, ps, devs) for i, (ps, devs) in enumerate(groups))
    return RankLayout(plans, source, len(plans))


class _RowIndex:
    """Per table, the rows of each rank (index arrays into the parent's columns), computed
    once for all ranks: one stable sort of the rows by rank, then a slice per rank."""

    def __init__(self, parent: Trace, layout: RankLayout) -> None:
        self.parent = parent
        self.layout = layout
        self._rows: dict[str, dict[int, np.ndarray]] = {}
        self._lock = threading.Lock()

    def rows(self, table: str, rank: int) -> np.ndarray | None:
        """The rank's rows of ``table``, or None where the table is shared whole."""
        columns = schema.column_names(table)
        key = "pid" if "pid" in columns else "device" if table == "devices" else None
        if key is None:
            return None
        with self._lock:
            if table not in self._rows:
                self._rows[table] = self._split(table, key)
        return self._rows[table][rank]

    def _split(self, table: str, key: str) -> dict[int, np.ndarray]:
        values = self.parent.array(table, key).astype(np.int64, copy=False)
        owners = {}
        for position, plan in enumerate(self.layout.ranks):
            for v in (plan.pids if key == "pid" else plan.devices):
                owners.setdefault(v, position)
        distinct, inverse = np.unique(values, return_inverse=True)
        label = np.array([owners.get(int(v), len(self.layout.ranks)) for v in distinct], dtype=np.int64)[inverse] \
            if len(values) else np.zeros(0, np.int64)
        order = np.argsort(label, kind="stable")  # stable: each rank's rows stay in the parent's order
        bounds = np.searchsorted(label[order], np.arange(len(self.layout.ranks) + 1))
        return {plan.rank: order[bounds[i]:bounds[i + 1]] for i, plan in enumerate(self.layout.ranks)}


class RankSource:
    """``TraceSource`` of one rank of a parent ``Trace`` (see the module docstring)."""

    # the parent's Trace derives "duration" for any source; the view takes its rows of it
    computes_duration = True

    def __init__(self, parent: Trace, layout: RankLayout, rank: int, index: _RowIndex,
                 owns_parent: bool = False) -> None:
        plan = layout.plan(rank)
        self.parent = parent
        self.plan = plan
        self._index = index
        self._owns_parent = owns_parent
        extra = {**parent.meta.extra, "rank_source": layout.source, "rank_pids": list(plan.pids),
                 "rank_devices": list(plan.devices), "whole_job": str(parent.meta.path)}
        self.meta = dataclasses.replace(parent.meta, rank=plan.rank, world_size=layout.world_size, extra=extra)

    def has(self, table: str) -> bool:
        return self.parent.has(table)

    def require(self, table: str, what: str) -> None:
        self.parent.require(table, what)

    def load(self, table: str, columns: Sequence[str]) -> Any:
        import pandas as pd

        arrays = self.load_arrays(table, columns)
        return pd.DataFrame({c: pd.Categorical.from_codes(v.codes, v.categories, validate=False)
                             if isinstance(v, Coded) else v for c, v in arrays.items()}, copy=False)

    def load_arrays(self, table: str, columns: Sequence[str]) -> dict[str, Any]:
        rows = self._index.rows(table, self.plan.rank)
        out: dict[str, Any] = {}
        for column in columns:
            value = self.parent.codes(table, column) if _is_text(table, column) else self.parent.array(table, column)
            if rows is not None:
                value = Coded(value.codes[rows], value.categories) if isinstance(value, Coded) else value[rows]
            out[column] = value
        for key, value in self.parent.meta.extra.items():  # what the parent's reader noted while loading
            self.meta.extra.setdefault(key, value)
        return out

    @property
    def details(self) -> Any:
        """The parent source's ``details`` (the whole job's capture), where it has one."""
        return getattr(self.parent.source, "details", None)

    def close(self) -> None:
        if self._owns_parent:
            self.parent.close()


def _is_text(table: str, column: str) -> bool:
    return column != DURATION and schema.column_kind(table, column) == schema.CATEGORY


def rank_views(trace: Trace, layout: RankLayout | None = None) -> list[Trace]:
    """A ``Trace`` per rank of a whole-job trace, sharing the parent's loaded columns;
    ``[trace]`` when it is one rank.  Closing a view leaves the parent open."""
    layout = layout or job_layout(trace)
    if not layout.is_job:
        return [trace]
    index = _RowIndex(trace, layout)
    return [Trace(RankSource(trace, layout, p.rank, index), native=trace.native) for p in layout.ranks]


def rank_view(trace: Trace, rank: int, owns_parent: bool = False) -> Trace:
    """Rank ``rank`` of a whole-job trace (a ProfkitError naming the ranks when there is none).
    With ``owns_parent``, closing the view closes the parent (a worker opening one rank)."""
    layout = job_layout(trace)
    if not layout.is_job:
        raise ProfkitError(f"{trace.name} is one rank, not a whole job: --rank does not apply to it")
    return Trace(RankSource(trace, layout, rank, _RowIndex(trace, layout), owns_parent), native=trace.native)


def select_ranks(trace: Trace, rank: int | None = None) -> list[Trace]:
    """What a single-trace command reads: every rank of a whole-job trace (``rank_views``), or
    only ``rank``; a trace that is one rank is itself (``rank`` must not contradict the rank it
    records)."""
    views = rank_views(trace)
    if rank is None:
        return views
    if views == [trace]:
        if trace.meta.rank is not None and trace.meta.rank != rank:
            raise ProfkitError(f"{trace.name} is rank {trace.meta.rank}, not rank {rank}")
        return views
    chosen = [v for v in views if v.meta.rank == rank]
    if not chosen:
        have = ", ".join(str(v.meta.rank) for v in views)
        raise ProfkitError(f"{trace.name} holds ranks {have}: there is no rank {rank}")
    return chosen


def rank_label(trace: Trace) -> str:
    """``"rank 1 (rank from: NCCL payload)"`` for a rank of a whole-job trace, else ``""``."""
    source = trace.meta.extra.get("rank_source") if isinstance(trace.source, RankSource) else None
    return f"rank {trace.meta.rank} (rank from: {source})" if source else ""
