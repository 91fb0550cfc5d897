"""Each process's NCCL rank, from NCCL's own NVTX payloads in an nsys export.

NCCL (2.28 here) annotates ``ncclCommInitRank``/``ncclCommInitRankConfig``
with an NVTX extended payload whose schema (``NVTX_PAYLOAD_SCHEMA_ENTRIES``)
names its fields: "NCCL communicator ID", "No. of ranks", "Rank", "CUDA
device".  nsys keeps the payload bytes in ``NVTX_EVENTS.binaryData`` only
when the report was exported with ``nsys export --include-blobs=true``;
otherwise the column is NULL and this finds nothing (the caller falls back
to the device order).

The blob, as nsys 2025.3 writes it (checked on tests/data/ddp/whole2: 56-byte
blobs, a 24-byte payload at offset 32): a little-endian u64 count of
payloads, then per payload (u64 schema id, u64 size, u64 offset of its bytes
in the blob), then the payloads.  Each field is read at the offset its schema
entry gives, and only for the integer types NCCL uses (an unknown type or a
blob shorter than it says is skipped, never guessed at).

This is what the trace recorded, not the recorded environment (``RANK=`` in
TARGET_INFO_SYSTEM_ENV), which profkit never reads.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from profkit.readers.nsys.reader import GLOBAL_TID_ID_MASK, GLOBAL_TID_PID_SHIFT, NsysExport

SCHEMA_ENTRIES = "NVTX_PAYLOAD_SCHEMA_ENTRIES"
NVTX = "NVTX_EVENTS"
# nvToolsExtPayload.h entry types NCCL's init payload uses: INT (int32 on Linux), UINT64.
_INT = 5
_UINT64 = 18
_FORMATS = {_INT: "<i", _UINT64: "<Q"}
_FIELDS = {"NCCL communicator ID": "comm", "No. of ranks": "nranks", "Rank": "rank", "CUDA device": "device"}


@dataclass(frozen=True)
class NcclRank:
    """One process's place in one NCCL communicator."""

    pid: int
    comm: int
    rank: int
    nranks: int
    device: int | None


def _schemas(export: NsysExport) -> dict[tuple[int, int], dict[str, tuple[int, int]]]:
    """(domainId, schemaId) -> field -> (entry type, offset), for schemas holding a rank."""
    if not export.has_table(SCHEMA_ENTRIES) or not {"schemaId", "name", "type", "offset"} <= \
            export.columns(SCHEMA_ENTRIES):
        return {}
    out: dict[tuple[int, int], dict[str, tuple[int, int]]] = {}
    for domain, schema_id, name, kind, offset in export.rows(
            f'SELECT DISTINCT domainId, schemaId, name, type, "offset" FROM "{SCHEMA_ENTRIES}"'):
        if name in _FIELDS and kind in _FORMATS:
            out.setdefault((domain, schema_id), {})[_FIELDS[name]] = (kind, offset or 0)
    return {k: v for k, v in out.items() if {"comm", "rank", "nranks"} <= v.keys()}


def _payloads(blob: bytes) -> list[tuple[int, bytes]]:
    """(schema id, payload bytes) of each payload in one binaryData blob; [] when it does not parse."""
    if len(blob) < 8:
        return []
    (count,) = struct.unpack_from("<Q", blob, 0)
    if count == 0 or 8 + 24 * count > len(blob):
        return []
    out = []
    for i in range(count):
        schema_id, size, offset = struct.unpack_from("<QQQ", blob, 8 + 24 * i)
        if offset + size > len(blob):
            return []
        out.append((schema_id, blob[offset:offset + size]))
    return out


def _field(payload: bytes, spec: tuple[int, int] | None) -> int | None:
    if spec is None:
        return None
    kind, offset = spec
    fmt = _FORMATS[kind]
    if offset + struct.calcsize(fmt) > len(payload):
        return None
    return struct.unpack_from(fmt, payload, offset)[0]


def nccl_ranks(export: NsysExport) -> list[NcclRank]:
    """Every (process, communicator, rank) the export's NCCL init payloads record; [] when
    the export holds none (no NCCL, no payload schemas, or exported without blobs)."""
    schemas = _schemas(export)
    if not schemas or not {"binaryData", "domainId", "globalTid"} <= export.columns(NVTX):
        return []
    found: list[NcclRank] = []
    for global_tid, domain, blob in export.rows(
            f'SELECT globalTid, domainId, binaryData FROM "{NVTX}" '
            "WHERE binaryData IS NOT NULL AND typeof(binaryData) = 'blob' ORDER BY start"):
        if global_tid is None:
            continue
        for schema_id, payload in _payloads(bytes(blob)):
            fields = schemas.get((domain, schema_id))
            if fields is None:
                continue
            comm, rank, nranks = (_field(payload, fields.get(k)) for k in ("comm", "rank", "nranks"))
            if comm is None or rank is None or nranks is None or not 0 <= rank < nranks:
                continue
            pid = (int(global_tid) >> GLOBAL_TID_PID_SHIFT) & GLOBAL_TID_ID_MASK
            found.append(NcclRank(pid, comm, rank, nranks, _field(payload, fields.get("device"))))
    return found
