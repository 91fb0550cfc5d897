"""Each process's NCCL rank, from NCCL's own NVTX payloads in an nsys export.

NCCL (2.28 here) annotates ``ncclCommInitRank``/``ncclCommInitRankConfig``
with an NVTX extended payload whose schema (``NVTX_PAYLOAD_SCHEMA_ENTRIES``)
names its fields: "NCCL communicator ID", "No. of ranks", "Rank", "CUDA
device".  nsys keeps the payload bytes in ``NVTX_EVENTS.binaryData`` only
when the report was exported with ``nsys export --include-blobs=true``;
otherwise the column is NULL and this finds nothing (the caller falls back
to the device order).

The payloads are decoded by ``payloads`` (the one bounded decoder of NVTX
payloads; checked on tests/data/ddp/whole2: 56-byte blobs, a 24-byte payload
at offset 32).  A record whose rank is outside ``0 <= rank < nranks``, or whose
rank count is past ``MAX_NCCL_RANKS``, is no rank (a count no job has: a
crafted one must not size anything); a blob that does not decode is skipped, and all
those skipped are one warning.

This is what the trace recorded, not the recorded environment (``RANK=`` in
TARGET_INFO_SYSTEM_ENV), which profkit never reads.
"""

from __future__ import annotations

from dataclasses import dataclass

from profkit.readers.nsys.payloads import read_schemas
from profkit.readers.nsys.reader import GLOBAL_TID_ID_MASK, GLOBAL_TID_PID_SHIFT, NsysExport

NVTX = "NVTX_EVENTS"
# Far past any job NCCL runs (the largest are ~10^5 GPUs); the trace's own ranks are bounded
# separately (limits.max_ranks): a rank-0 trace of a 4,096-GPU job records nranks = 4,096.
MAX_NCCL_RANKS = 1 << 20
_FIELDS = {"NCCL communicator ID": "comm", "No. of ranks": "nranks", "Rank": "rank", "CUDA device": "device"}


@dataclass(frozen=True)
class NcclRank:
    """One process's place in one NCCL communicator."""

    pid: int
    comm: int
    rank: int
    nranks: int
    device: int | None


def nccl_ranks(export: NsysExport) -> list[NcclRank]:
    """Every (process, communicator, rank) the export's NCCL init payloads record; [] when
    the export holds none (no NCCL, no payload schemas, or exported without blobs)."""
    if not {"binaryData", "domainId", "globalTid"} <= export.columns(NVTX):
        return []
    schemas = read_schemas(export)
    wanted = {k for k, s in schemas.schemas.items()
              if k not in schemas.invalid and {"comm", "rank", "nranks"} <= {_FIELDS.get(e.name) for e in s.entries}}
    if not wanted:
        return []
    found: list[NcclRank] = []
    domains = ",".join(str(int(d)) for d in sorted({d for d, _ in wanted}))
    for global_tid, domain, blob in export.rows(
            f'SELECT globalTid, domainId, binaryData FROM "{NVTX}" '
            f"WHERE binaryData IS NOT NULL AND domainId IN ({domains}) ORDER BY start"):
        if not isinstance(global_tid, int):
            schemas.skip(f"a globalTid of {global_tid!r}")
            continue
        for schema, values in schemas.decode_or_skip(blob, domain):
            if (schema.domain, schema.schema_id) not in wanted:
                continue
            record = {_FIELDS[k]: v for k, v in values.items() if k in _FIELDS and isinstance(v, int)}
            comm, rank, nranks = record.get("comm"), record.get("rank"), record.get("nranks")
            if comm is None or rank is None or nranks is None or not 0 <= rank < nranks:
                continue
            if nranks > MAX_NCCL_RANKS:
                schemas.skip(f"a communicator of {nranks:,} ranks")
                continue
            pid = (global_tid >> GLOBAL_TID_PID_SHIFT) & GLOBAL_TID_ID_MASK
            found.append(NcclRank(pid, comm, rank, nranks, record.get("device")))
    schemas.warn_skipped("NCCL payloads")
    return found
