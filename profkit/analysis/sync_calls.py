"""CUDA calls that can block the CPU, and annotated ranges, as small records.

What the stall analysis (``profkit.analysis.sync_events``) consumes: the few
API calls that may synchronize (``ApiCall``, with what their memcpy, memset
or synchronization activity says) and the CPU-side ranges (``NvtxRange``).
``profkit.analysis.sync_inputs`` builds them from any ``Trace``.

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

Copy and memory kinds are CUPTI's enum values (``COPY_KIND_LABELS``,
``MEM_KIND_LABELS``: the labels nsys's ENUM tables and Kineto's event names
use too).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

# base API name -> what it synchronizes
SYNC_APIS: dict[str, str] = {
    "cudaDeviceSynchronize": "device", "cudaThreadSynchronize": "device", "cuCtxSynchronize": "device",
    "cudaStreamSynchronize": "stream", "cuStreamSynchronize": "stream",
    "cudaEventSynchronize": "event", "cuEventSynchronize": "event",
    "cudaStreamWaitEvent": "stream wait", "cuStreamWaitEvent": "stream wait",
}

# CUPTI enum values (cupti_activity.h), used when an export lacks the ENUM_* tables.
MEM_KIND_LABELS = {0: "Pageable", 1: "Pinned", 2: "Device", 3: "Array", 4: "Managed",
                   5: "Device Static", 6: "Managed Static", 7: "Unknown"}
COPY_KIND_LABELS = {0: "Unknown", 1: "Host-to-Device", 2: "Device-to-Host", 3: "Host-to-Array",
                    4: "Array-to-Host", 5: "Array-to-Array", 6: "Array-to-Device", 7: "Device-to-Array",
                    8: "Device-to-Device", 9: "Host-to-Host", 10: "Peer-to-Peer", 11: "Unified Host-to-Device",
                    12: "Unified Device-to-Host", 13: "Unified Device-to-Device"}
SYNC_TYPE_LABELS = {0: "Unknown", 1: "Event sync", 2: "Stream wait sync", 3: "Stream sync", 4: "Context sync"}
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
    if base.startswith(("cudaMemcpy", "cuMemcpy")):
        return "copy"
    if base.startswith(("cudaMemset", "cuMemset")) and "Async" not in base:
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
        if role == "sync":
            return SYNC_APIS.get(self.name) != "stream wait"  # orders GPU work; the CPU goes on
        if role == "copy":
            if self.is_async:
                return PAGEABLE in (self.src_kind, self.dst_kind)
            return self.copy_kind not in (DEVICE_TO_DEVICE, PEER_TO_PEER)
        if role == "memset":
            return self.mem_kind in (PINNED, MANAGED)
        return False


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


def normalize_api_name(name: str) -> str:
    """Drop a CUDA API version suffix: ``cudaLaunchKernel_v7000`` -> ``cudaLaunchKernel``.

    Same rule as nsys's cuda_api_sum.py: the suffix is exactly ``_v`` and
    four more characters (``substr(value, -6, 2) == '_v'``)."""
    if len(name) >= 6 and name[-6:-4] == "_v":
        return name[:-6]
    return name


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
