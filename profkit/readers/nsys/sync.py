"""The SQL behind sync-stall detection: blocking CUDA calls, GPU activity, NVTX ranges.

Everything here streams ordered rows (``NsysExport.iter_rows``) or queries
one window at a time, so memory stays bounded on million-kernel traces; the
analysis (``profkit.analysis.stalls``) consumes the streams.

Tables and columns used (all optional except the runtime table):

- ``CUPTI_ACTIVITY_KIND_RUNTIME(globalTid, start, end, nameId, correlationId)``
  and ``StringIds`` -- the CUDA API calls, names with version suffixes
  (``cudaStreamSynchronize_v3020``, ``cudaMemcpyAsync_ptsz_v7000``);
- ``CUPTI_ACTIVITY_KIND_MEMCPY(correlationId, globalPid, deviceId, streamId,
  copyKind, srcKind, dstKind, bytes, start, end)`` with the labels of
  ``ENUM_CUDA_MEMCPY_OPER`` and ``ENUM_CUDA_MEM_KIND``;
- ``CUPTI_ACTIVITY_KIND_MEMSET(correlationId, globalPid, deviceId, memKind, bytes)``;
- ``CUPTI_ACTIVITY_KIND_SYNCHRONIZATION(correlationId, globalPid, deviceId,
  streamId, syncType, start, end)`` -- one row per stream/event/context sync.
  Schema 3.7 (nsys 2023.4) labels ``syncType`` with ``ENUM_CUPTI_SYNC_TYPE``
  (3 = "Stream sync" for cudaStreamSynchronize).  Schema 3.20 (nsys 2025.3)
  adds ``deprecatedSyncType`` (always NULL) and records cudaStreamSynchronize
  as ``syncType`` 2, which that same enum table labels "Stream wait sync": the
  labels no longer fit the column, so for such exports the API name (joined
  on correlationId) says what the sync was and a row without an API call is
  shown as "CUPTI sync type <n>";
- ``CUPTI_ACTIVITY_KIND_KERNEL/MEMCPY/MEMSET(deviceId, start, end)`` -- GPU
  activity for the idle-gap computation;
- ``NVTX_EVENTS(globalTid, endGlobalTid, start, end, eventType, domainId,
  text|textId)`` -- push/pop and start/end ranges, and domain names.

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
"""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

from profkit.readers.nsys import queries
from profkit.readers.nsys.reader import GLOBAL_PID_MASK, NsysExport, normalize_api_name

# SQLite reads a decimal literal above 2**63 as a REAL, which turns "&" into
# nonsense; a hex literal is a 64-bit two's-complement integer, as intended.
PID_MASK_SQL = f"0x{GLOBAL_PID_MASK:016X}"

RUNTIME = queries.RUNTIME.table
MEMCPY = queries.MEMCPY.table
MEMSET = queries.MEMSET.table
KERNEL = queries.KERNELS.table
SYNC = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
NVTX = queries.NVTX.table

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
    cudaDeviceSynchronize).  ``global_tid`` is a globalPid (thread bits 0)
    for a synchronization row without an API call.
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


def _labels(export: NsysExport, table: str, fallback: dict[int, str]) -> dict[int, str]:
    if not {"id", "label"} <= export.columns(table):
        return dict(fallback)
    return {int(i): str(label) for i, label in export.rows(f'SELECT id, label FROM "{table}"')}


def mem_kind_labels(export: NsysExport) -> dict[int, str]:
    return _labels(export, "ENUM_CUDA_MEM_KIND", MEM_KIND_LABELS)


def copy_kind_labels(export: NsysExport) -> dict[int, str]:
    return _labels(export, "ENUM_CUDA_MEMCPY_OPER", COPY_KIND_LABELS)


def _sync_type_labels(export: NsysExport) -> dict[int, str] | None:
    """Labels for syncType, or None where they do not fit the column (schema 3.20, see above)."""
    if export.has_column(SYNC, "deprecatedSyncType"):
        return None
    return _labels(export, "ENUM_CUPTI_SYNC_TYPE", SYNC_TYPE_LABELS)


def candidate_names(export: NsysExport) -> dict[int, str]:
    """StringIds key -> base name of every API name that may block (one StringIds scan)."""
    export.require(queries.STRINGS.table, queries.STRINGS.what)
    rows = export.rows(
        "SELECT id, value FROM StringIds WHERE value GLOB 'cu*' AND (value GLOB '*Synchronize*' "
        "OR value GLOB '*WaitEvent*' OR value GLOB '*Memcpy*' OR value GLOB '*Memset*')")
    out = {}
    for key, value in rows:
        base = base_api_name(str(value))
        if api_role(base) is not None:
            out[int(key)] = base
    return out


def _join(export: NsysExport, table: str, alias: str, columns: dict[str, str]) -> tuple[str, list[str]]:
    """A LEFT JOIN of an activity table on (correlationId, process), and its select list.

    Missing tables or columns give NULLs, so both export versions read the same way.
    """
    present = export.columns(table)
    if not {"correlationId", "globalPid"} <= present:
        return "", [f"NULL AS {name}" for name in columns]
    select = [f"{alias}.{col} AS {name}" if col in present else f"NULL AS {name}" for name, col in columns.items()]
    join = (f'LEFT JOIN "{table}" AS {alias} ON {alias}.correlationId = r.correlationId '
            f"AND {alias}.globalPid = (r.globalTid & {PID_MASK_SQL})")
    return join, select


def iter_api_calls(export: NsysExport) -> Iterator[ApiCall]:
    """The calls that may block, ordered by thread then start; memcpy/memset/sync rows joined.

    A call with several activity rows (a copy CUPTI split in two) comes once,
    its bytes summed.
    """
    export.require(queries.RUNTIME.table, queries.RUNTIME.what, queries.RUNTIME.trace_flag)
    export.require_columns(RUNTIME, ("globalTid", "start", "end", "nameId", "correlationId"), "sync detection")
    names = candidate_names(export)
    if not names:
        return
    sync_labels = _sync_type_labels(export)
    joins, select = [], []
    for table, alias, columns in (
        (MEMCPY, "m", {"m_device": "deviceId", "m_stream": "streamId", "copy_kind": "copyKind",
                       "src_kind": "srcKind", "dst_kind": "dstKind", "m_bytes": "bytes"}),
        (MEMSET, "ms", {"ms_device": "deviceId", "ms_stream": "streamId", "mem_kind": "memKind",
                        "ms_bytes": "bytes"}),
        (SYNC, "s", {"s_device": "deviceId", "s_stream": "streamId", "sync_type": "syncType"}),
    ):
        join, cols = _join(export, table, alias, columns)
        joins.append(join)
        select += cols
    id_list = ",".join(str(i) for i in sorted(names))
    sql = f"""SELECT r.globalTid, r.start, r."end", r.nameId, r.correlationId, {', '.join(select)}
        FROM "{RUNTIME}" AS r {' '.join(joins)}
        WHERE r.nameId IN ({id_list})
        ORDER BY r.globalTid, r.start, r.correlationId"""
    pending: ApiCall | None = None
    for (tid, start, end, name_id, corr, m_dev, m_stream, copy_kind, src_kind, dst_kind, m_bytes,
         ms_dev, ms_stream, mem_kind, ms_bytes, s_dev, s_stream, sync_type) in export.iter_rows(sql):
        call = ApiCall(
            global_tid=tid, start=start, end=end, name=names[name_id], correlation_id=corr,
            device=_first(m_dev, ms_dev, s_dev), stream=_first(m_stream, ms_stream, s_stream),
            copy_kind=copy_kind, src_kind=src_kind, dst_kind=dst_kind, bytes=_first(m_bytes, ms_bytes),
            mem_kind=mem_kind, sync_type=_sync_label(sync_type, sync_labels))
        if pending is not None and (pending.global_tid, pending.correlation_id, pending.start) == (
                tid, corr, start):
            # one call, several activity rows: keep one call, sum the bytes
            pending = replace(pending, bytes=(pending.bytes or 0) + (call.bytes or 0))
            continue
        if pending is not None:
            yield pending
        pending = call
    if pending is not None:
        yield pending


def iter_unmatched_sync_rows(export: NsysExport) -> Iterator[ApiCall]:
    """Synchronization rows whose API call is not in the trace, ordered by start.

    Their thread is unknown: ``global_tid`` is the row's globalPid.
    """
    if not {"correlationId", "globalPid", "start", "end"} <= export.columns(SYNC):
        return
    sync_labels = _sync_type_labels(export)
    type_col = "s.syncType" if export.has_column(SYNC, "syncType") else "NULL"
    device_col = "s.deviceId" if export.has_column(SYNC, "deviceId") else "NULL"
    stream_col = "s.streamId" if export.has_column(SYNC, "streamId") else "NULL"
    if export.has_table(RUNTIME):
        match = f"""NOT EXISTS (SELECT 1 FROM "{RUNTIME}" AS r WHERE r.correlationId = s.correlationId
                    AND (r.globalTid & {PID_MASK_SQL}) = s.globalPid)"""
    else:
        match = "1"
    sql = f"""SELECT s.globalPid, s.start, s."end", s.correlationId, {device_col}, {stream_col}, {type_col}
        FROM "{SYNC}" AS s WHERE {match} ORDER BY s.start"""
    for gpid, start, end, corr, device, stream, sync_type in export.iter_rows(sql):
        label = _sync_label(sync_type, sync_labels) or "CUPTI sync"
        yield ApiCall(global_tid=gpid, start=start, end=end, name=f"CUPTI synchronization ({label})",
                      correlation_id=corr, device=device, stream=stream, sync_type=label)


def _sync_label(sync_type: int | None, labels: dict[int, str] | None) -> str | None:
    if sync_type is None:
        return None
    if labels is None:
        return f"CUPTI sync type {sync_type}"
    return labels.get(int(sync_type), f"CUPTI sync type {sync_type}")


def _first(*values: Any) -> Any:
    return next((v for v in values if v is not None), None)


# -- GPU activity -------------------------------------------------------------
_ACTIVITY = ((KERNEL, "kernel"), (MEMCPY, "memcpy"), (MEMSET, "memset"))


def _activity_tables(export: NsysExport) -> list[tuple[str, str]]:
    return [(t, kind) for t, kind in _ACTIVITY if {"deviceId", "start", "end"} <= export.columns(t)]


def gpu_devices(export: NsysExport) -> list[int]:
    """Devices that ran any kernel, memcpy or memset."""
    parts = [f'SELECT DISTINCT deviceId FROM "{t}"' for t, _ in _activity_tables(export)]
    if not parts:
        return []
    return sorted(r[0] for r in export.rows(" UNION ".join(parts)) if r[0] is not None)


def iter_gpu_activity(export: NsysExport, device: int, batch: int = 65536) -> Iterator[list[tuple[int, int]]]:
    """(start, end) of every kernel, memcpy and memset on a device, ordered by start, in batches."""
    parts = [f'SELECT start, "end" FROM "{t}" WHERE deviceId = {int(device)}' for t, _ in _activity_tables(export)]
    if not parts:
        return
    rows = export.iter_rows(" UNION ALL ".join(parts) + " ORDER BY 1, 2", batch=batch)
    while chunk := list(itertools.islice(rows, batch)):
        yield chunk


def gpu_activity_window(export: NsysExport, device: int, start: int, end: int) -> list[tuple[str, int, int]]:
    """(kind, start, end) of the GPU activity on a device that overlaps [start, end], by start."""
    parts = [f"""SELECT '{kind}', start, "end" FROM "{t}"
                 WHERE deviceId = {int(device)} AND "end" > {int(start)} AND start < {int(end)}"""
             for t, kind in _activity_tables(export)]
    if not parts:
        return []
    return export.rows(" UNION ALL ".join(parts) + " ORDER BY 2, 3")


# -- NVTX -------------------------------------------------------------------------
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


def nvtx_domains(export: NsysExport) -> dict[tuple[int, int], str]:
    """(process bits of globalTid, domainId) -> domain name, from the domain-create events."""
    if not {"domainId", "eventType", "globalTid"} <= export.columns(NVTX):
        return {}
    rows = export.rows(f"""SELECT globalTid & {PID_MASK_SQL}, domainId, {export.nvtx_text_sql('ne')}
        FROM NVTX_EVENTS AS ne WHERE eventType = {queries.NVTX_DOMAIN_CREATE} ORDER BY start""")
    out: dict[tuple[int, int], str] = {}
    for gpid, domain_id, name in rows:
        out.setdefault((gpid, domain_id), name)  # the first creation wins, as in nvtx_sum.py
    return out


def iter_nvtx_ranges(export: NsysExport) -> Iterator[NvtxRange]:
    """Every range that began and ended on one thread, ordered by thread, start, longest first.

    A range that never ended lasts until the last range timestamp (as in
    nvtx_kern_sum.py); ranges ended on another thread are left out.
    """
    cols = export.columns(NVTX)
    if not {"start", "end", "eventType", "globalTid"} <= cols:
        return
    domains = nvtx_domains(export)
    types = ", ".join(map(str, queries.NVTX_RANGE_TYPES))
    same_thread = "AND (ne.endGlobalTid IS NULL OR ne.endGlobalTid = ne.globalTid)" if "endGlobalTid" in cols else ""
    domain_col = "ne.domainId" if "domainId" in cols else "NULL"
    push_pop = (queries.NVTX_PUSHPOP_RANGE, queries.NVTXT_PUSHPOP_RANGE)
    sql = f"""WITH maxts AS (SELECT max(max(start), max("end")) AS m FROM NVTX_EVENTS WHERE eventType IN ({types}))
        SELECT ne.globalTid, ne.start, coalesce(ne."end", (SELECT m FROM maxts)), ne.eventType, {domain_col},
               {export.nvtx_text_sql('ne')}
        FROM NVTX_EVENTS AS ne
        WHERE ne.eventType IN ({types}) AND ne.globalTid IS NOT NULL {same_thread}
        ORDER BY ne.globalTid, ne.start, 3 DESC"""
    for tid, start, end, event_type, domain_id, text in export.iter_rows(sql):
        domain = domains.get((tid & GLOBAL_PID_MASK, domain_id)) if domain_id else None
        yield NvtxRange(tid, start, end, text, domain, event_type in push_pop)
