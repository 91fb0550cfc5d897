"""The SQL behind each summary, one query per report, next to the tables it needs.

Each query mirrors the nsys ``reports/*.py`` script named in its docstring
(nsys 2023.4; the 2025.3 oracles in tests/data/nsys check the newer schema).
Each query is a ``ColumnsQuery``: the group key columns, then one integer
value (a duration in ns or a size in bytes); ``profkit.nsys.stats`` computes
the statistics.  Only this module and
reader.py hold SQL for nsys tables.
"""

from __future__ import annotations

from dataclasses import dataclass

from profkit.nsys.reader import NsysExport
from profkit.nsys.stats import ColumnsQuery

# NVTX_EVENTS.eventType values (nsys's kernel_helper.py / nvtx_sum.py).
NVTX_PUSHPOP_RANGE = 59
NVTX_STARTEND_RANGE = 60
NVTXT_PUSHPOP_RANGE = 70
NVTXT_STARTEND_RANGE = 71
NVTX_DOMAIN_CREATE = 75
NVTX_RANGE_TYPES = (NVTX_PUSHPOP_RANGE, NVTX_STARTEND_RANGE, NVTXT_PUSHPOP_RANGE, NVTXT_STARTEND_RANGE)


@dataclass(frozen=True)
class Requirement:
    """A table a query needs, what it holds, and the ``nsys profile -t`` option that records it."""

    table: str
    what: str
    trace_flag: str | None


KERNELS = Requirement("CUPTI_ACTIVITY_KIND_KERNEL", "CUDA kernel data", "cuda")
RUNTIME = Requirement("CUPTI_ACTIVITY_KIND_RUNTIME", "CUDA API trace data", "cuda")
NVTX = Requirement("NVTX_EVENTS", "NVTX data", "nvtx")
STRINGS = Requirement("StringIds", "string table (StringIds)", None)
MEMCPY = Requirement("CUPTI_ACTIVITY_KIND_MEMCPY", "CUDA memcpy data", "cuda")
MEMSET = Requirement("CUPTI_ACTIVITY_KIND_MEMSET", "CUDA memset data", "cuda")


def check(export: NsysExport, *requirements: Requirement) -> None:
    for req in requirements:
        export.require(req.table, req.what, req.trace_flag)


# -- cuda_gpu_kern_sum -------------------------------------------------------
# Needs: CUPTI_ACTIVITY_KIND_KERNEL(start, end, demangledName), StringIds.
# nsys groups by the demangled name string; StringIds holds each string
# once, so grouping by the id is the same grouping and needs no join.
def kernel_durations(export: NsysExport) -> ColumnsQuery:
    check(export, KERNELS, STRINGS)
    export.require_columns(KERNELS.table, ("start", "end", "demangledName"), "the kernel summary")
    return ColumnsQuery(KERNELS.table, KERNELS.table, ("demangledName", '"end" - start'))


# -- cuda_api_sum ------------------------------------------------------------
# Needs: CUPTI_ACTIVITY_KIND_RUNTIME(start, end, nameId), StringIds.
# nsys groups by nameId and only then strips the "_v7000" suffix for display,
# so cudaLaunchKernel and cudaLaunchKernel_v7000 stay two rows, as in nsys.
def api_durations(export: NsysExport) -> ColumnsQuery:
    check(export, RUNTIME, STRINGS)
    export.require_columns(RUNTIME.table, ("start", "end", "nameId"), "the CUDA API summary")
    return ColumnsQuery(RUNTIME.table, RUNTIME.table, ("nameId", '"end" - start'))


# -- nvtx_sum ----------------------------------------------------------------
# Needs: NVTX_EVENTS(start, end, eventType, domainId, globalTid, text|textId), StringIds.
# A range without an end (never popped/ended) lasts until the last NVTX
# timestamp of the capture, as in nvtx_sum.py.  A range in a named domain is
# shown as "domain:text".
def nvtx_durations(export: NsysExport) -> ColumnsQuery:
    check(export, NVTX, STRINGS)
    export.require_columns(NVTX.table, ("start", "end", "eventType"), "the NVTX summary")
    return ColumnsQuery(
        table=NVTX.table,
        with_clause=f"""WITH
            domains AS ({_nvtx_domains_sql(export)}),
            maxts AS (SELECT max(max(start), max("end")) AS m FROM NVTX_EVENTS)""",
        source=f"""NVTX_EVENTS AS ne LEFT JOIN domains AS d
            ON ne.domainId = d.id AND {_pid_bits('ne.globalTid')} = {_pid_bits('d.globalTid')}""",
        text_columns=(_nvtx_tag_sql(export, "ne", "d"), _nvtx_style_sql("ne")),
        int_columns=('coalesce(ne."end", (SELECT m FROM maxts)) - ne.start',),
        where=f"ne.eventType IN ({', '.join(map(str, NVTX_RANGE_TYPES))})",
        rowid="ne.rowid",
    )


def _pid_bits(column: str) -> str:
    # nvtx_sum.py matches domains to events of the same process this way.
    return f"({column} & 0x0000FFFFFF000000)"


def _nvtx_domains_sql(export: NsysExport) -> str:
    """Domain names per (domainId, process); the first creation wins, as in nvtx_sum.py."""
    if "domainId" not in export.columns("NVTX_EVENTS"):
        return "SELECT NULL AS id, NULL AS globalTid, NULL AS name WHERE 0"
    return f"""
        SELECT min(start), domainId AS id, globalTid AS globalTid, {export.nvtx_text_sql('dc')} AS name
        FROM NVTX_EVENTS AS dc
        WHERE eventType = {NVTX_DOMAIN_CREATE}
        GROUP BY 2, 3"""


def _nvtx_tag_sql(export: NsysExport, event: str, domain: str) -> str:
    text = export.nvtx_text_sql(event)
    return f"CASE WHEN {domain}.name IS NOT NULL THEN {domain}.name || ':' || {text} ELSE {text} END"


def _nvtx_style_sql(event: str) -> str:
    return (f"CASE {event}.eventType "
            f"WHEN {NVTX_PUSHPOP_RANGE} THEN 'PushPop' WHEN {NVTXT_PUSHPOP_RANGE} THEN 'PushPop' "
            f"WHEN {NVTX_STARTEND_RANGE} THEN 'StartEnd' WHEN {NVTXT_STARTEND_RANGE} THEN 'StartEnd' "
            f"ELSE 'Unknown' END")


# -- cuda_gpu_mem_time_sum / cuda_gpu_mem_size_sum -----------------------------
# Needs: CUPTI_ACTIVITY_KIND_MEMCPY(start, end, bytes, copyKind) with
# ENUM_CUDA_MEMCPY_OPER(id, label), and/or CUPTI_ACTIVITY_KIND_MEMSET(start, end, bytes).
# Returns (operation, duration) and (operation, bytes) queries over the same rows.
def memory_ops(export: NsysExport) -> list[tuple[ColumnsQuery, ColumnsQuery]]:
    """One (time, size) query pair per memory table present; empty when there is none."""
    pairs = []
    if export.has_table(MEMCPY.table):
        export.require("ENUM_CUDA_MEMCPY_OPER", "memcpy kind labels (ENUM_CUDA_MEMCPY_OPER)", None)
        source = """CUPTI_ACTIVITY_KIND_MEMCPY AS mcpy
            JOIN ENUM_CUDA_MEMCPY_OPER AS mos ON mos.id = mcpy.copyKind"""
        name = ("'[CUDA memcpy ' || mos.label || ']'",)
        pairs.append((
            ColumnsQuery(MEMCPY.table, source, ('mcpy."end" - mcpy.start',), name, rowid="mcpy.rowid"),
            ColumnsQuery(MEMCPY.table, source, ("mcpy.bytes",), name, rowid="mcpy.rowid"),
        ))
    if export.has_table(MEMSET.table):
        name = ("'[CUDA memset]'",)
        pairs.append((
            ColumnsQuery(MEMSET.table, MEMSET.table, ('"end" - start',), name),
            ColumnsQuery(MEMSET.table, MEMSET.table, ("bytes",), name),
        ))
    return pairs
