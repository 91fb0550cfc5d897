"""Labels of the nsys enum columns the trace model reads, and NVTX domain names.

The stall analysis runs on the trace model (``profkit.analysis.sync.inputs``);
what stays here is the SQL that names nsys's enum values and NVTX domains
for ``model_source``:

- ``ENUM_CUDA_MEMCPY_OPER`` / ``ENUM_CUDA_MEM_KIND`` labels (CUPTI's values
  as fallback when an export lacks the table);
- ``ENUM_CUPTI_SYNC_TYPE`` labels for ``CUPTI_ACTIVITY_KIND_SYNCHRONIZATION.syncType``.
  Schema 3.7 (nsys 2023.4) labels ``syncType`` with that table (3 = "Stream
  sync").  Schema 3.20 (nsys 2025.3) adds ``deprecatedSyncType`` (always
  NULL) and records cudaStreamSynchronize as ``syncType`` 2, which that same
  enum table labels "Stream wait sync": the labels no longer fit the column,
  so such rows read "CUPTI sync type <n>" and the API call joined on
  correlationId says what the sync was;
- NVTX domain names from the domain-create events (the first creation wins,
  as in nvtx_sum.py).
"""

from __future__ import annotations

from profkit.model.cuda_labels import COPY_KIND_LABELS, MEM_KIND_LABELS, SYNC_TYPE_LABELS
from profkit.readers.nsys import queries
from profkit.readers.nsys.reader import GLOBAL_PID_MASK, NsysExport

# SQLite reads a decimal literal above 2**63 as a REAL, which turns "&" into
# nonsense; a hex literal is a 64-bit two's-complement integer, as intended.
PID_MASK_SQL = f"0x{GLOBAL_PID_MASK:016X}"

SYNC = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
NVTX = queries.NVTX.table


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
