"""CUDA calls that can block the CPU, and annotated ranges, as small records.

What the stall analysis (``profkit.analysis.sync.events``) consumes: the few
API calls that may synchronize (``ApiCall``, with what their memcpy, memset
or synchronization activity says) and the CPU-side ranges (``NvtxRange``).
``profkit.analysis.sync.inputs`` builds them from any ``Trace``.

Which calls block the CPU (the CUDA runtime's "API synchronization
behavior" notes; nsys's own expert rules cuda_api_sync, cuda_memcpy_sync,
cuda_memcpy_async and cuda_memset_sync flag the same calls):

- stream/device/event synchronize; cudaStreamWaitEvent is a sync too, but
  it makes a stream wait, not the CPU (its CPU time blocked is 0);
- cudaMemcpy* without "Async", except device-to-device copies (no host sync);
- cudaMemcpy*Async from or to pageable host memory (nsys's cuda_memcpy_async
  rule): the driver stages the data through a pinned buffer with the CPU,
  so the call returns only after the data moved, and into pageable memory
  only after the work queued before it on the stream;
- cudaMemset* without "Async" on pinned host or managed memory (others are
  asynchronous with respect to the host).

Copy and memory kinds are CUPTI's enum values (``profkit.model.cuda_labels``'s
``COPY_KIND_LABELS``, ``MEM_KIND_LABELS``: the labels nsys's ENUM tables and Kineto's event names
use too).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields

import numpy as np

from profkit.model.cuda_labels import normalize_api_name

# base API name -> what it synchronizes
SYNC_APIS: dict[str, str] = {
    "cudaDeviceSynchronize": "device", "cudaThreadSynchronize": "device", "cuCtxSynchronize": "device",
    "cudaStreamSynchronize": "stream", "cuStreamSynchronize": "stream",
    "cudaEventSynchronize": "event", "cuEventSynchronize": "event",
    "cudaStreamWaitEvent": "stream wait", "cuStreamWaitEvent": "stream wait",
    # AMD ROCm: HIP mirrors the CUDA runtime call for call
    "hipDeviceSynchronize": "device", "hipStreamSynchronize": "stream", "hipEventSynchronize": "event",
    "hipStreamWaitEvent": "stream wait",
}

PAGEABLE, PINNED, MANAGED = 0, 1, 4
DEVICE_TO_DEVICE, PEER_TO_PEER = 8, 10
HOST_MEM_KINDS = (PAGEABLE, PINNED)
# copyKind values that never touch host memory (array/device/peer/unified device-to-device)
DEVICE_SIDE_COPIES = (5, 6, 7, DEVICE_TO_DEVICE, PEER_TO_PEER, 13)
# copyKind values that write host memory (device/array/unified device-to-host)
TO_HOST_COPIES = (2, 4, 12)

_SUFFIX = re.compile(r"(_v\d+|_ptsz|_ptds|_spt)$")


def base_api_name(name: str) -> str:
    """``cudaMemcpyAsync_ptsz_v7000`` -> ``cudaMemcpyAsync``; ``cuMemcpyDtoH_v2`` -> ``cuMemcpyDtoH``."""
    name = normalize_api_name(name)
    while (stripped := _SUFFIX.sub("", name)) != name:
        name = stripped
    return name


@functools.lru_cache(maxsize=1024)  # called per row with a handful of distinct names
def api_role(base: str) -> str | None:
    """"sync", "copy", "memset" for the calls that can block the CPU; None for the rest."""
    if base in SYNC_APIS:
        return "sync"
    if base.startswith(("cudaMemcpy", "cuMemcpy", "hipMemcpy")):
        return "copy"
    if base.startswith(("cudaMemset", "cuMemset", "hipMemset")) and "Async" not in base:
        return "memset"
    return None


@dataclass(frozen=True, slots=True)
class ApiCall:
    """One CUDA API call that may block, with what CUPTI recorded for it.

    ``copy_kind``/``src_kind``/``dst_kind`` are CUPTI enum values of the
    copy's MEMCPY row, ``mem_kind`` the memset's; ``device`` comes from the
    memcpy, memset or synchronization row (None when none names it, e.g.
    cudaDeviceSynchronize).  ``global_tid`` packs the thread as nsys's
    globalTid does (``pid << 24 | tid``, ``thread_key``); a synchronization
    row without an API call has thread bits 0.
    """

    global_tid: int
    start: int
    end: int
    name: str  # base name, e.g. "cudaStreamSynchronize"
    correlation_id: int | None = None
    device: int | None = None
    stream: int | None = None
    copy_kind: int | None = None
    src_kind: int | None = None
    dst_kind: int | None = None
    bytes: int | None = None
    mem_kind: int | None = None
    sync_type: str | None = None  # label of the CUPTI synchronization row, if any

    @property
    def role(self) -> str | None:
        return api_role(self.name) or ("sync" if self.sync_type is not None else None)

    @property
    def is_async(self) -> bool:
        return "Async" in self.name

    @property
    def host_copy(self) -> bool:
        """A copy between host and device (the kind a sync afterwards waits to read or write)."""
        if self.role != "copy":
            return False
        if self.copy_kind is not None:
            return self.copy_kind not in DEVICE_SIDE_COPIES
        return self.src_kind in HOST_MEM_KINDS or self.dst_kind in HOST_MEM_KINDS

    @property
    def blocks_cpu(self) -> bool:
        """True when the call itself waits for the GPU (see the module docstring)."""
        role = self.role
        if role == "sync":  # a stream wait orders GPU work; the CPU goes on
            return SYNC_APIS.get(self.name) != "stream wait" and "wait" not in (self.sync_type or "").lower()
        if role == "copy":
            if self.is_async:
                return PAGEABLE in (self.src_kind, self.dst_kind)
            return self.copy_kind not in (DEVICE_TO_DEVICE, PEER_TO_PEER)
        if role == "memset":
            return self.mem_kind in (PINNED, MANAGED)
        return False


# role codes of CallColumns.roles
NO_ROLE, SYNC, COPY, MEMSET = 0, 1, 2, 3
_ROLE_CODES = {None: NO_ROLE, "sync": SYNC, "copy": COPY, "memset": MEMSET}
# CallColumns' integer columns, as ApiCall names them (-1: None)
_INT_FIELDS = ("global_tid", "start", "end", "correlation_id", "device", "stream", "copy_kind", "src_kind",
               "dst_kind", "bytes", "mem_kind")


@dataclass
class CallColumns:
    """Candidate calls as columns, one row per call, in the order the event detection walks
    them (thread, start, correlation).  The same facts as ``ApiCall``, whose properties
    (role, blocks_cpu, host_copy) have vectorized twins here; -1 stands for None in the
    integer columns.  Columns, because a big trace has tens of thousands of candidate
    copies and syncs and only the calls of actual sync events become ``ApiCall`` records
    (``record``)."""

    names: list[str]  # base names; ``name`` indexes it
    name: np.ndarray
    global_tid: np.ndarray
    start: np.ndarray
    end: np.ndarray
    correlation_id: np.ndarray
    device: np.ndarray
    stream: np.ndarray
    copy_kind: np.ndarray
    src_kind: np.ndarray
    dst_kind: np.ndarray
    bytes: np.ndarray
    mem_kind: np.ndarray
    sync_types: list[str]  # labels; ``sync_type`` indexes it
    sync_type: np.ndarray
    # per call, how many calls on its thread that launched a kernel or a graph replay started at or
    # before it (``inputs.launches_through``); None: unknown (hand-built calls), nothing parts a pair
    launches_through: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.start)

    @classmethod
    def from_records(cls, calls: Iterable[ApiCall]) -> CallColumns:
        calls = list(calls)
        names: dict[str, int] = {}
        sync_types: dict[str, int] = {}
        columns = {f: np.array([-1 if getattr(c, f) is None else getattr(c, f) for c in calls], dtype=np.int64)
                   for f in _INT_FIELDS}
        name = np.array([names.setdefault(c.name, len(names)) for c in calls], dtype=np.int64)
        sync_type = np.array([-1 if c.sync_type is None else sync_types.setdefault(c.sync_type, len(sync_types))
                              for c in calls], dtype=np.int64)
        return cls(names=list(names), name=name, sync_types=list(sync_types), sync_type=sync_type, **columns)

    def take(self, rows: np.ndarray) -> CallColumns:
        """The given rows, in the given order."""
        return CallColumns(**{f.name: (getattr(self, f.name) if f.name in ("names", "sync_types")
                                       or getattr(self, f.name) is None else getattr(self, f.name)[rows])
                              for f in fields(self)})

    def records(self, rows: np.ndarray) -> list[ApiCall]:
        """The given rows as ``ApiCall`` records (only the calls of sync events become objects)."""
        values = [[None if v == -1 else v for v in getattr(self, f)[rows].tolist()] for f in _INT_FIELDS[3:]]
        names = [self.names[c] for c in self.name[rows].tolist()]
        types = [self.sync_types[c] if c >= 0 else None for c in self.sync_type[rows].tolist()]
        return [ApiCall(tid, start, end, name, *optional, sync_type=sync_type)
                for tid, start, end, name, sync_type, *optional in zip(
                    self.global_tid[rows].tolist(), self.start[rows].tolist(), self.end[rows].tolist(),
                    names, types, *values)]

    def _per_name(self, values: Sequence[object], dtype: type) -> np.ndarray:
        return np.asarray(values, dtype=dtype)[self.name] if len(self.names) else np.zeros(len(self), dtype=dtype)

    def roles(self) -> np.ndarray:
        """``ApiCall.role`` as codes (SYNC, COPY, MEMSET, NO_ROLE)."""
        role = self._per_name([_ROLE_CODES[api_role(n)] for n in self.names], np.int8)
        return np.where((role == NO_ROLE) & (self.sync_type >= 0), SYNC, role).astype(np.int8)

    def host_copies(self, roles: np.ndarray) -> np.ndarray:
        """``ApiCall.host_copy`` of every row."""
        known = self.copy_kind != -1
        by_kind = ~np.isin(self.copy_kind, DEVICE_SIDE_COPIES)
        by_memory = np.isin(self.src_kind, HOST_MEM_KINDS) | np.isin(self.dst_kind, HOST_MEM_KINDS)
        return (roles == COPY) & np.where(known, by_kind, by_memory)

    def blocks_cpu(self, roles: np.ndarray) -> np.ndarray:
        """``ApiCall.blocks_cpu`` of every row (see the module docstring)."""
        stream_wait = self._per_name([SYNC_APIS.get(n) == "stream wait" for n in self.names], bool)
        is_async = self._per_name(["Async" in n for n in self.names], bool)
        pageable = (self.src_kind == PAGEABLE) | (self.dst_kind == PAGEABLE)
        copy_blocks = np.where(is_async, pageable, ~np.isin(self.copy_kind, (DEVICE_TO_DEVICE, PEER_TO_PEER)))
        return (((roles == SYNC) & ~stream_wait) | ((roles == COPY) & copy_blocks)
                | ((roles == MEMSET) & np.isin(self.mem_kind, (PINNED, MANAGED))))


@dataclass(frozen=True, slots=True)
class NvtxRange:
    """An NVTX push/pop or start/end range on one thread."""

    global_tid: int
    start: int
    end: int
    text: str | None
    domain: str | None
    push_pop: bool

    @property
    def name(self) -> str:
        """nsys's spelling: "domain:text" in a named domain, else the text."""
        text = self.text or ""
        return f"{self.domain}:{text}" if self.domain else text


def kind_values(labels: dict[int, str]) -> dict[str, int]:
    """label -> CUPTI enum value (the inverse of a *_LABELS table)."""
    return {label: value for value, label in labels.items()}


# nsys's globalTid layout: bits 0-23 the thread, 24-47 the process.
TID_BITS = 24
PID_MASK = ~((1 << TID_BITS) - 1)


def thread_key(pid: int, tid: int) -> int:
    """One int for a thread, laid out as nsys's globalTid (``decode_thread`` reverses it)."""
    return (pid << TID_BITS) | tid


def decode_thread(key: int) -> tuple[int, int]:
    """(pid, tid) of a ``thread_key`` (or of an nsys globalTid)."""
    return (key >> TID_BITS) & 0xFFFFFF, key & 0xFFFFFF
