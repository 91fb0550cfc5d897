"""SQL for nsys tables, next to the tables it needs (requirements, capture facts, NVTX labels).

The summaries are computed from the trace model (``model_source.py`` reads
the columns); what stays here mirrors nsys ``reports/*.py`` scripts where a
query is still needed (nvtx_sum's labels for the timeline) and reads the
capture's metadata.  Only the modules of ``profkit/readers/nsys`` hold SQL.
"""

from __future__ import annotations

from dataclasses import dataclass

from profkit.readers.nsys.reader import NsysExport
from profkit.readers.nsys.stats import ColumnsQuery

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
OSRT = Requirement("OSRT_API", "OS runtime trace data", "osrt")
# OSRT_API.eventClass of a call (osrt_sum.py counts only these); 31 and 32 mark
# the start and finish of OS runtime tracing.
OSRT_CALL_EVENT_CLASS = 27


def check(export: NsysExport, *requirements: Requirement) -> None:
    for req in requirements:
        export.require(req.table, req.what, req.trace_flag)


# -- kernel mangled names (to match ncu's kernels) -------------------------------
# Needs: CUPTI_ACTIVITY_KIND_KERNEL(demangledName, mangledName), StringIds.
MANGLED_NAMES_SQL = """
SELECT DISTINCT d.value, m.value
FROM CUPTI_ACTIVITY_KIND_KERNEL AS k
JOIN StringIds AS d ON d.id = k.demangledName
JOIN StringIds AS m ON m.id = k.mangledName
"""


def mangled_names(export: NsysExport) -> dict[str, str]:
    """{demangled name: mangled name} of the export's kernels; empty when the schema lacks mangledName.

    ncu prints demangled template arguments differently from nsys
    ("<4, ...>" where nsys says "<(int)4, ...>"), so only the mangled name
    matches a kernel exactly in both tools.
    """
    table = KERNELS.table
    if not {"demangledName", "mangledName"} <= export.columns(table) or not export.has_table("StringIds"):
        return {}
    names: dict[str, str] = {}
    for demangled, mangled in export.rows(MANGLED_NAMES_SQL):
        names.setdefault(demangled, mangled)
    return names


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
    if export.nvtx_default_domain_prefix:
        # nsys 2025.3: "domain:text", and ":text" in the default domain.
        return f"coalesce({domain}.name, '') || ':' || {text}"
    # nsys 2023.4: "domain:text", and plain "text" in the default domain.
    return f"CASE WHEN {domain}.name IS NOT NULL THEN {domain}.name || ':' || {text} ELSE {text} END"


def _nvtx_style_sql(event: str) -> str:
    return (f"CASE {event}.eventType "
            f"WHEN {NVTX_PUSHPOP_RANGE} THEN 'PushPop' WHEN {NVTXT_PUSHPOP_RANGE} THEN 'PushPop' "
            f"WHEN {NVTX_STARTEND_RANGE} THEN 'StartEnd' WHEN {NVTXT_STARTEND_RANGE} THEN 'StartEnd' "
            f"ELSE 'Unknown' END")


# -- the capture (for `profkit info` and the report header) -------------------
# Needs nothing; reads whichever of these exist:
#   META_DATA_EXPORT, TARGET_INFO_GPU, ANALYSIS_DETAILS, TARGET_INFO_SESSION_START_TIME,
#   PROCESSES, META_DATA_CAPTURE (only PROCESS_<n>:COMMAND/ARGUMENT_<k> and
#   CAPTURE_EVENT_TYPE rows: the same table holds PROCESS_<n>:ENVIRONMENT_VARIABLE
#   rows with the profiled process's environment), StringIds (library paths).
# Never TARGET_INFO_SYSTEM_ENV: it holds the profiled process's environment.
GPU_COLUMNS = {
    "id": "id", "name": "name", "chip": "chipName", "sm_count": "smCount",
    "memory_bandwidth": "memoryBandwidth", "total_memory": "totalMemory", "clock_rate": "clockRate",
    "l2_cache_size": "l2CacheSize", "compute_major": "computeMajor", "compute_minor": "computeMinor",
    "bus_location": "busLocation", "max_warps_per_sm": "maxWarpsPerSm",
}


def gpus(export: NsysExport) -> list[dict]:
    if not export.has_table("TARGET_INFO_GPU"):
        return []
    present = {key: col for key, col in GPU_COLUMNS.items() if export.has_column("TARGET_INFO_GPU", col)}
    if not present:
        return []
    cols = ", ".join(f'"{col}"' for col in present.values())
    return [dict(zip(present, row)) for row in export.rows(f"SELECT {cols} FROM TARGET_INFO_GPU ORDER BY id")]


def analysis_window(export: NsysExport) -> tuple[int, int, int] | None:
    """(start, stop, duration) of the capture in ns, from ANALYSIS_DETAILS."""
    if not export.has_table("ANALYSIS_DETAILS") or not {"startTime", "stopTime", "duration"} <= export.columns(
        "ANALYSIS_DETAILS"
    ):
        return None
    row = export.rows("SELECT min(startTime), max(stopTime), max(duration) FROM ANALYSIS_DETAILS")
    # None also when a value is not an integer (text in a damaged file): the window is unknown
    return row[0] if row and all(isinstance(v, int) for v in row[0][:2]) else None


def session_start_utc(export: NsysExport) -> str | None:
    if not export.has_column("TARGET_INFO_SESSION_START_TIME", "utcTime"):
        return None
    return export.scalar("SELECT utcTime FROM TARGET_INFO_SESSION_START_TIME LIMIT 1")


_SAFE_CAPTURE_KEY = r"""(name = 'CAPTURE_EVENT_TYPE' OR name GLOB 'PROCESS_[0-9]*:COMMAND'
    OR name GLOB 'PROCESS_[0-9]*:ARGUMENT_[0-9]*')"""


def capture_settings(export: NsysExport) -> list[tuple[str, str]]:
    """Traced event types and launched command lines; never the environment rows."""
    if not {"name", "value"} <= export.columns("META_DATA_CAPTURE"):
        return []
    return export.rows(f"SELECT name, value FROM META_DATA_CAPTURE WHERE {_SAFE_CAPTURE_KEY} ORDER BY rowid")


def library_paths(export: NsysExport) -> list[str]:
    """Loaded libcuda/libcudart paths that backtraces recorded in StringIds (carry versions)."""
    if not export.has_table("StringIds"):
        return []
    return [r[0] for r in export.rows(
        "SELECT value FROM StringIds WHERE value GLOB '*/libcuda.so.*' OR value GLOB '*/libcudart.so.*' LIMIT 50")]
