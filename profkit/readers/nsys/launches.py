"""Per-launch configuration of every kernel in an nsys export, and the GPU's limits.

Tables and columns read (both schema 3.7 / nsys 2023.4 and 3.20 / nsys 2025.3):

* ``CUPTI_ACTIVITY_KIND_KERNEL``: start, end, deviceId, demangledName,
  shortName, gridX/Y/Z, blockX/Y/Z, registersPerThread, staticSharedMemory,
  dynamicSharedMemory, localMemoryPerThread, and where present
  sharedMemoryExecuted (the carveout the driver configured for the launch),
  sharedMemoryLimitConfig (both schemas have them; older ones may not);
* ``TARGET_INFO_GPU`` and, in newer exports, ``TARGET_INFO_CUDA_DEVICE``:
  compute capability, SM count and the per-SM/per-block limits.  Column
  names moved between the two tables across versions, so each value is
  looked up under all of its known names.

Launches are grouped in SQLite per kernel name and launch configuration.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from profkit.errors import ProfkitError

KERNEL_TABLE = "CUPTI_ACTIVITY_KIND_KERNEL"
REQUIRED_COLUMNS = ("start", "end", "deviceId", "gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ",
                    "registersPerThread", "staticSharedMemory", "dynamicSharedMemory")
# optional column -> output key (NULL where the schema lacks it)
OPTIONAL_COLUMNS = {
    "localMemoryPerThread": "local_mem_per_thread",
    "sharedMemoryExecuted": "smem_config_bytes",
    "sharedMemoryLimitConfig": "smem_limit_config",
}

LAUNCH_CONFIG_SQL = """
WITH configs AS (
    SELECT
        {name_expr} AS nameId,
        {short_expr} AS shortId,
        deviceId,
        gridX, gridY, gridZ, blockX, blockY, blockZ,
        registersPerThread, staticSharedMemory, dynamicSharedMemory,
        {optional},
        count(*) AS launches,
        sum("end" - start) AS total,
        min("end" - start) AS shortest,
        max("end" - start) AS longest
    FROM CUPTI_ACTIVITY_KIND_KERNEL
    GROUP BY nameId, deviceId, gridX, gridY, gridZ, blockX, blockY, blockZ, registersPerThread,
             staticSharedMemory, dynamicSharedMemory, {optional_keys}
)
SELECT
    coalesce(n.value, '<unknown kernel>') AS name,
    coalesce(s.value, n.value, '<unknown kernel>') AS short_name,
    deviceId AS device_id,
    gridX AS grid_x, gridY AS grid_y, gridZ AS grid_z,
    blockX AS block_x, blockY AS block_y, blockZ AS block_z,
    gridX * gridY * gridZ AS grid_size,
    blockX * blockY * blockZ AS block_size,
    registersPerThread AS registers_per_thread,
    staticSharedMemory AS static_smem_bytes,
    dynamicSharedMemory AS dynamic_smem_bytes,
    {optional_out},
    launches,
    total AS total_time_ns,
    shortest AS min_time_ns,
    longest AS max_time_ns
FROM configs
LEFT JOIN StringIds AS n ON n.id = configs.nameId
LEFT JOIN StringIds AS s ON s.id = configs.shortId
ORDER BY total DESC, launches DESC, name
"""


class _Db:
    """The few NsysExport methods used here, over a plain sqlite3 connection."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table','view')")}

    def has_table(self, name: str) -> bool:
        return name in self.tables

    def columns(self, table: str) -> set[str]:
        if table not in self.tables:
            return set()
        return {r[1] for r in self.conn.execute(f'PRAGMA table_info("{table}")')}

    def rows(self, sql: str, params: Any = ()) -> list[tuple]:
        try:
            return self.conn.execute(sql, params).fetchall()
        except sqlite3.DatabaseError as exc:
            raise ProfkitError(f"cannot read the export ({exc})") from None


def _db(export: Any) -> Any:
    return _Db(export) if isinstance(export, sqlite3.Connection) else export


def launch_configs(export: Any) -> list[dict[str, Any]]:
    """One row per (kernel name, device, grid, block, registers, shared memory,
    local memory, carveout) with launch count and total GPU time, busiest first."""
    db = _db(export)
    if not db.has_table(KERNEL_TABLE):
        raise ProfkitError("the export has no CUDA kernel data (table CUPTI_ACTIVITY_KIND_KERNEL is missing)",
                           hint="re-run nsys profile with -t cuda")
    cols = db.columns(KERNEL_TABLE)
    missing = [c for c in REQUIRED_COLUMNS if c not in cols]
    if missing:
        raise ProfkitError(f"{KERNEL_TABLE} lacks {', '.join(missing)}: the export is too old for occupancy",
                           hint="export it again with a recent nsys")
    name_col = next((c for c in ("demangledName", "shortName", "mangledName") if c in cols), None)
    if name_col is None:
        raise ProfkitError(f"{KERNEL_TABLE} has no kernel name column", hint="export it again with a recent nsys")
    present = {c: key for c, key in OPTIONAL_COLUMNS.items() if c in cols}
    sql = LAUNCH_CONFIG_SQL.format(
        name_expr=name_col,
        short_expr="shortName" if "shortName" in cols else name_col,
        optional=", ".join(f"{c} AS {c}" if c in present else f"NULL AS {c}" for c in OPTIONAL_COLUMNS),
        optional_keys=", ".join(OPTIONAL_COLUMNS),
        optional_out=", ".join(f"{c} AS {key}" for c, key in OPTIONAL_COLUMNS.items()),
    )
    names = [d for d in ("name", "short_name", "device_id", "grid_x", "grid_y", "grid_z", "block_x", "block_y",
                         "block_z", "grid_size", "block_size", "registers_per_thread", "static_smem_bytes",
                         "dynamic_smem_bytes", *OPTIONAL_COLUMNS.values(), "launches", "total_time_ns",
                         "min_time_ns", "max_time_ns")]
    return [dict(zip(names, row)) for row in db.rows(sql)]


# Device properties: output key -> column names across schema versions and tables.
GPU_COLUMNS: dict[str, tuple[str, ...]] = {
    "name": ("name", "deviceName"),
    "cc_major": ("computeMajor", "computeCapabilityMajor", "ccMajor"),
    "cc_minor": ("computeMinor", "computeCapabilityMinor", "ccMinor"),
    "sm_count": ("smCount", "numMultiprocessors", "multiProcessorCount", "numSms"),
    "max_threads_per_block": ("maxThreadsPerBlock",),
    "max_warps_per_sm": ("maxWarpsPerSm",),
    "max_threads_per_sm": ("maxThreadsPerSm", "maxThreadsPerMultiprocessor"),
    "max_blocks_per_sm": ("maxBlocksPerSm",),
    "warp_size": ("threadsPerWarp", "warpSize"),
    "regs_per_block": ("maxRegistersPerBlock",),
    "regs_per_sm": ("maxRegistersPerSm",),
    "smem_per_block": ("maxShmemPerBlock",),
    "smem_per_block_optin": ("maxShmemPerBlockOptin",),
    "smem_per_sm": ("maxShmemPerSm",),
    "reserved_smem_per_block": ("reservedShmemPerBlock", "reservedSharedMemPerBlock"),
}
# table -> the column kernels' deviceId refers to (nsys's cuda_gpu_trace.py joins gpu.id == kern.deviceId).
# Schema 3.7 and 3.20 both keep the limits in TARGET_INFO_GPU; 3.20's
# TARGET_INFO_CUDA_DEVICE only maps (gpuId, cudaId, pid) and holds no limits.
GPU_TABLES = {"TARGET_INFO_GPU": ("id", "cuDevice")}


def gpu_info(export: Any) -> dict[int, dict[str, Any]]:
    """Device limits per CUDA device id, merged from the TARGET_INFO tables
    (values missing from the export are absent from the dict)."""
    db = _db(export)
    devices: dict[int, dict[str, Any]] = {}
    for table, id_columns in GPU_TABLES.items():
        cols = db.columns(table)
        id_column = next((c for c in id_columns if c in cols), None)
        if id_column is None:
            continue
        picked = {"device_id": id_column}
        for key, names in GPU_COLUMNS.items():
            found = next((c for c in names if c in cols), None)
            if found:
                picked[key] = found
        select = ", ".join(f'"{c}"' for c in picked.values())
        for values in db.rows(f'SELECT {select} FROM "{table}"'):
            row = {k: v for k, v in zip(picked, values) if v is not None and v != ""}
            dev = devices.setdefault(int(row["device_id"]), {})
            for k, v in row.items():
                dev.setdefault(k, v)
    return devices
