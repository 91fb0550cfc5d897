"""What each NCCL kernel's collective call moved, from NCCL's NVTX payloads in an nsys export.

NCCL (2.28 here) wraps each collective call in an NVTX range named after it
(``ncclAllReduce``, ``ncclAllGather``, ...) with an extended payload whose
schema (``NVTX_PAYLOAD_SCHEMA_ENTRIES``) holds "NCCL communicator ID" and
"Message size [bytes]" (older NCCL: "Bytes" for broadcast).  NCCL computes it
as ``count * ncclTypeSize(datatype)``: the buffer of an all-reduce, broadcast
or reduce, but one rank's share for all-gather and reduce-scatter ("Just pass
the size of one message", src/collectives.cc).  The datatype itself is not in
the payload, so element counts and dtype stay unknown; the bytes go to the
kernels' ``msg_bytes`` column as nccl-tests' size S (``analysis.collectives``):
a share times the communicator's rank count (from NCCL's init payload of the
same communicator ID, ``nccl_payload``), unknown when that count is.

The link range -> kernel: the kernel's launching API call (same correlationId,
same process) starts inside the range on the same thread (on the committed
whole2 export every NCCL kernel is launched by ``cuLaunchKernelEx`` inside its
call's range).  The innermost such range wins.  Payload bytes exist only in
exports made with ``nsys export --include-blobs=true``; without them this
finds nothing and the columns stay unknown.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass

from profkit.readers.nsys import nccl_payload, queries
from profkit.readers.nsys.payloads import read_schemas
from profkit.readers.nsys.reader import GLOBAL_TID_PID_SHIFT, NsysExport

# NCCL's range name -> the collective name torch records ('Collective name' in Kineto).
COLLECTIVES = {
    "ncclAllReduce": "allreduce", "ncclAllGather": "allgather", "ncclReduceScatter": "reduce_scatter",
    "ncclBroadcast": "broadcast", "ncclBcast": "broadcast", "ncclReduce": "reduce", "ncclSend": "send",
    "ncclRecv": "recv", "ncclAlltoAll": "all_to_all", "ncclGather": "gather", "ncclScatter": "scatter",
}
# Collectives whose payload gives one rank's share while nccl-tests' S is the whole array.
_SHARED = {"allgather", "reduce_scatter"}
_SIZE_FIELDS = ("Message size [bytes]", "Bytes")
_COMM_FIELD = "NCCL communicator ID"
# 1 PiB in one call, far past any GPU's memory: a bigger size (2**64 - 1) is no size, and the
# whole array of an all-gather (a share times the ranks) must stay below it too (msg_bytes is int64)
MAX_MESSAGE_BYTES = 1 << 50


@dataclass(frozen=True)
class NcclMessage:
    """One NCCL kernel's call: torch's collective name, nccl-tests' S (-1 unknown), ranks (-1 unknown)."""

    collective: str
    bytes: int
    group_size: int


@dataclass(frozen=True)
class _Call:
    start: int
    end: int
    collective: str
    payload_bytes: int
    comm: int | None


def _calls(export: NsysExport) -> dict[int, list[_Call]]:
    """globalTid -> its NCCL collective ranges that carry a size payload, by start."""
    t = queries.NVTX.table
    if not export.has_table(t) or not {"binaryData", "domainId", "globalTid", "textId"} <= export.columns(t):
        return {}
    schemas = read_schemas(export)
    if not any(e.name in _SIZE_FIELDS for s in schemas.schemas.values() for e in s.entries):
        return {}
    types = ", ".join(map(str, queries.NVTX_RANGE_TYPES))
    names = ", ".join(f"'{n}'" for n in COLLECTIVES)
    out: dict[int, list[_Call]] = {}
    for global_tid, start, end, domain, name, blob in export.rows(
            f'SELECT e.globalTid, e.start, e."end", e.domainId, s.value, e.binaryData FROM "{t}" e '
            "JOIN StringIds s ON s.id = e.textId "
            f"WHERE e.binaryData IS NOT NULL AND e.eventType IN ({types}) "
            f"AND s.value IN ({names}) ORDER BY e.start"):
        if not all(isinstance(v, int) for v in (global_tid, start, end)):
            schemas.skip(f"an NCCL range with globalTid {global_tid!r}, start {start!r}, end {end!r}")
            continue
        for _, values in schemas.decode_or_skip(blob, domain):
            size = next((values[f] for f in _SIZE_FIELDS if isinstance(values.get(f), int)), None)
            if size is not None and size > MAX_MESSAGE_BYTES:
                schemas.skip(f"a message of {size:,} bytes")
                break
            if size is not None:
                comm = values.get(_COMM_FIELD)
                out.setdefault(int(global_tid), []).append(
                    _Call(int(start), int(end), COLLECTIVES[name], int(size), comm if isinstance(comm, int) else None))
                break
    schemas.warn_skipped("NCCL collective payloads")
    return out


def nccl_messages(export: NsysExport,
                  nccl_ranks: Callable[[], list[nccl_payload.NcclRank]] | None = None) -> dict[int, NcclMessage]:
    """Kernel rowid (CUPTI_ACTIVITY_KIND_KERNEL) -> its call, for NCCL kernels launched inside a sized
    NCCL range; {} when the export holds no such payload (no NCCL, or exported without blobs).
    ``nccl_ranks``: the source's (cached) ``nccl_payload.nccl_ranks`` of this export."""
    calls = _calls(export)
    if not calls:
        return {}
    found_ranks = nccl_ranks() if nccl_ranks is not None else nccl_payload.nccl_ranks(export)
    ranks = {r.comm: r.nranks for r in found_ranks}
    starts = {tid: [c.start for c in cs] for tid, cs in calls.items()}
    k, r = queries.KERNELS.table, queries.RUNTIME.table
    found: dict[int, NcclMessage] = {}
    # correlationId is unique per process only: a whole-job export holds several processes.
    for rowid, global_tid, api_start in export.rows(
            f'SELECT k.rowid, r.globalTid, r.start FROM "{k}" k JOIN StringIds s ON s.id = k.demangledName '
            f'JOIN "{r}" r ON r.correlationId = k.correlationId '
            f"AND (r.globalTid >> {GLOBAL_TID_PID_SHIFT}) = (k.globalPid >> {GLOBAL_TID_PID_SHIFT}) "
            "WHERE s.value LIKE 'nccl%'"):
        mine = calls.get(int(global_tid)) if global_tid is not None else None
        if not mine or api_start is None:
            continue
        # innermost enclosing range: the latest-starting one that is still open at the launch
        at = bisect.bisect_right(starts[int(global_tid)], int(api_start)) - 1
        while at >= 0 and mine[at].end < api_start:
            at -= 1
        if at < 0:
            continue
        call = mine[at]
        group = ranks.get(call.comm, -1) if call.comm is not None else -1
        size = call.payload_bytes
        if call.collective in _SHARED:
            size = size * group if 0 < group and size * group <= MAX_MESSAGE_BYTES else -1
        found[int(rowid)] = NcclMessage(call.collective, size, group)
    return found
