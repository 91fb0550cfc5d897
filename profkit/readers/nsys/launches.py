"""The GPU's limits as an nsys export records them (for ``trace.devices``).

Tables and columns read (both schema 3.7 / nsys 2023.4 and 3.20 / nsys 2025.3):
``TARGET_INFO_GPU`` and, in newer exports, ``TARGET_INFO_CUDA_DEVICE``:
compute capability, SM count and the per-SM/per-block limits.  Column
names moved between the two tables across versions, so each value is
looked up under all of its known names.

Launch configurations (grid, block, registers, shared memory) are columns
of ``trace.kernels``; ``profkit.analysis.occupancy.launch_configs`` groups them.
"""

from __future__ import annotations

from typing import Any

from profkit.readers.nsys.reader import NsysExport

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


def gpu_info(export: NsysExport) -> dict[int, dict[str, Any]]:
    """Device limits per CUDA device id, merged from the TARGET_INFO tables
    (values missing from the export are absent from the dict)."""
    devices: dict[int, dict[str, Any]] = {}
    for table, id_columns in GPU_TABLES.items():
        cols = export.columns(table)
        id_column = next((c for c in id_columns if c in cols), None)
        if id_column is None:
            continue
        picked = {"device_id": id_column}
        for key, names in GPU_COLUMNS.items():
            found = next((c for c in names if c in cols), None)
            if found:
                picked[key] = found
        select = ", ".join(f'"{c}"' for c in picked.values())
        for values in export.rows(f'SELECT {select} FROM "{table}"'):
            row = {k: v for k, v in zip(picked, values) if v is not None and v != ""}
            try:
                device_id = int(row["device_id"])
            except (KeyError, TypeError, ValueError):  # a damaged export: a GPU row without an integer id
                continue
            dev = devices.setdefault(device_id, {})
            for k, v in row.items():
                dev.setdefault(k, v)
    return devices
