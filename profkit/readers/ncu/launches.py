"""One dataclass per profiled kernel launch, from either CSV page.

The details page names metrics by their display name ("Registers Per
Thread"), the raw page by metric id (``launch__registers_per_thread``);
``FIELDS`` maps both to one field.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from profkit.errors import ProfkitError
from profkit.model.quantity import Quantity
from profkit.readers.ncu.csv_reader import NcuCsv, RawLaunch, RuleRow, read_csv_file
from profkit.readers.run_folder import NCU_CSV, NCU_RAW_GLOB
from profkit.readers.ncu.units import exact_bytes, parse_value

# field -> (details display names, raw metric ids, kind); kind: int | float | size
# ("size": a shared-memory size, snapped back to whole bytes from a rounded print)
FIELDS: dict[str, tuple[tuple[str, ...], tuple[str, ...], str]] = {
    "duration_ns": (("Duration",), ("gpu__time_duration.sum",), "float"),
    "dram_throughput_pct": (("DRAM Throughput",),
                            ("gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",), "float"),
    "memory_throughput_pct": (("Memory Throughput",),
                              ("gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",), "float"),
    "compute_throughput_pct": (("Compute (SM) Throughput",),
                               ("sm__throughput.avg.pct_of_peak_sustained_elapsed",), "float"),
    "dram_bytes_read": (("dram__bytes_read.sum",), ("dram__bytes_read.sum",), "int"),
    "dram_bytes_write": (("dram__bytes_write.sum",), ("dram__bytes_write.sum",), "int"),
    "block_size": (("Block Size",), ("launch__block_size",), "int"),
    "grid_size": (("Grid Size",), ("launch__grid_size",), "int"),
    "threads": (("Threads",), ("launch__thread_count",), "int"),
    "registers_per_thread": (("Registers Per Thread",), ("launch__registers_per_thread",), "int"),
    "registers_allocated": ((), ("launch__registers_per_thread_allocated",), "int"),
    "barrier_count": ((), ("launch__barrier_count",), "int"),
    "smem_allocated_bytes": ((), ("launch__shared_mem_per_block_allocated",), "size"),
    "static_smem_bytes": (("Static Shared Memory Per Block",), ("launch__shared_mem_per_block_static",), "size"),
    "dynamic_smem_bytes": (("Dynamic Shared Memory Per Block",), ("launch__shared_mem_per_block_dynamic",), "size"),
    "driver_smem_bytes": (("Driver Shared Memory Per Block",), ("launch__shared_mem_per_block_driver",), "size"),
    "smem_config_bytes": (("Shared Memory Configuration Size",), ("launch__shared_mem_config_size",), "size"),
    "sm_count": (("# SMs",), ("launch__sm_count", "device__attribute_multiprocessor_count"), "int"),
    "waves_per_sm": (("Waves Per SM",), ("launch__waves_per_multiprocessor",), "float"),
    "cluster_size": (("Cluster Size",), ("launch__cluster_size",), "int"),
    "theoretical_occupancy_pct": (("Theoretical Occupancy",), ("sm__maximum_warps_per_active_cycle_pct",), "float"),
    "theoretical_warps_per_sm": (("Theoretical Active Warps per SM",),
                                 ("sm__maximum_warps_avg_per_active_cycle",), "float"),
    "achieved_occupancy_pct": (("Achieved Occupancy",), ("sm__warps_active.avg.pct_of_peak_sustained_active",),
                               "float"),
    "achieved_warps_per_sm": (("Achieved Active Warps Per SM",), ("sm__warps_active.avg.per_cycle_active",),
                              "float"),
    "block_limit_sm": (("Block Limit SM",), ("launch__occupancy_limit_blocks",), "int"),
    "block_limit_registers": (("Block Limit Registers",), ("launch__occupancy_limit_registers",), "int"),
    "block_limit_shared_mem": (("Block Limit Shared Mem",), ("launch__occupancy_limit_shared_mem",), "int"),
    "block_limit_warps": (("Block Limit Warps",), ("launch__occupancy_limit_warps",), "int"),
    "block_limit_barriers": (("Block Limit Barriers",), ("launch__occupancy_limit_barriers",), "int"),
}


@dataclass
class NcuLaunch:
    """A profiled kernel launch.  Sizes in bytes, times in ns, percentages 0-100;
    None where the capture lacks the metric."""

    id: int
    kernel_name: str
    process_id: int | None = None
    process_name: str = ""
    device: int | None = None
    cc: str = ""  # "9.0"
    stream: int | None = None
    block: tuple[int, int, int] | None = None
    grid: tuple[int, int, int] | None = None
    duration_ns: float | None = None
    dram_throughput_pct: float | None = None
    memory_throughput_pct: float | None = None
    compute_throughput_pct: float | None = None
    dram_bytes_read: int | None = None
    dram_bytes_write: int | None = None
    block_size: int | None = None
    grid_size: int | None = None
    threads: int | None = None
    registers_per_thread: int | None = None  # the cubin's count (ptxas -v says the same)
    registers_allocated: int | None = None  # rounded up to the allocation unit (raw page only)
    barrier_count: int | None = None  # barriers per block (raw page only)
    smem_allocated_bytes: int | None = None  # per block, with the driver's reserve, rounded (raw page only)
    static_smem_bytes: int | None = None
    dynamic_smem_bytes: int | None = None
    driver_smem_bytes: int | None = None
    smem_config_bytes: int | None = None
    sm_count: int | None = None
    waves_per_sm: float | None = None
    cluster_size: int | None = None
    theoretical_occupancy_pct: float | None = None
    theoretical_warps_per_sm: float | None = None
    achieved_occupancy_pct: float | None = None
    achieved_warps_per_sm: float | None = None
    block_limit_sm: int | None = None
    block_limit_registers: int | None = None
    block_limit_shared_mem: int | None = None
    block_limit_warps: int | None = None
    block_limit_barriers: int | None = None
    metrics: dict[str, Quantity | str] = field(default_factory=dict, repr=False)
    rules: list[RuleRow] = field(default_factory=list, repr=False)

    def as_dict(self) -> dict[str, Any]:
        """Flat row without the metric and rule lists (for tables and JSON)."""
        row = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("metrics", "rules")}
        for axis, key in (("block", "block"), ("grid", "grid")):
            shape = row.pop(axis)
            if shape:
                row.update({f"{key}_{d}": v for d, v in zip("xyz", shape)})
        return row


def read_ncu_csv(path: str | os.PathLike[str]) -> list[NcuLaunch]:
    """Every kernel launch in an ncu CSV (details or raw page, live or imported)."""
    return launches_from_csv(read_csv_file(path))


def ncu_inputs(path: str | os.PathLike[str]) -> list[Path]:
    """The CSVs to read for a path: the file itself, or in a `profkit trace` run folder its
    raw pages (every metric, full precision) where present, else its ncu.csv."""
    p = Path(path)
    if not p.is_dir():
        return [p]
    raw = sorted(p.glob(NCU_RAW_GLOB))
    if raw:
        return raw
    if (p / NCU_CSV).is_file():
        return [p / NCU_CSV]
    raise ProfkitError(f"{p} holds no ncu CSV ({NCU_CSV} or {NCU_RAW_GLOB})",
                       hint="capture one with profkit trace --ncu-top N, or pass the CSV")


def read_launches(path: str | os.PathLike[str]) -> list[NcuLaunch]:
    """The launches of a CSV, or of a run folder's (``ncu_inputs``), numbered across files."""
    launches: list[NcuLaunch] = []
    for csv_path in ncu_inputs(path):
        for launch in read_ncu_csv(csv_path):
            launch.id = len(launches)  # several files each count from 0
            launches.append(launch)
    return launches


def launches_from_csv(table: NcuCsv) -> list[NcuLaunch]:
    return [_launch(raw, table.page) for raw in table.launches]


def launches_frame(launches: list[NcuLaunch]):  # -> pandas.DataFrame
    """A tidy DataFrame, one row per launch, columns as in ``NcuLaunch.as_dict``."""
    import pandas as pd

    return pd.DataFrame([launch.as_dict() for launch in launches])


def _launch(raw: RawLaunch, page: str) -> NcuLaunch:
    ident = raw.identity
    launch = NcuLaunch(
        id=int(ident["ID"]),
        kernel_name=ident.get("Kernel Name", ""),
        process_id=_int(ident.get("Process ID")),
        process_name=ident.get("Process Name", ""),
        device=_int(ident.get("Device")),
        cc=ident.get("CC", ""),
        stream=_int(ident.get("Stream")),
        block=_shape(ident.get("Block Size", "")),
        grid=_shape(ident.get("Grid Size", "")),
        rules=list(raw.rules),
    )
    by_name: dict[str, Any] = {}
    for key, row in raw.metrics.items():
        parsed = parse_value(row.value, row.unit)
        value: Quantity | str = parsed if parsed is not None else row.value
        launch.metrics[key] = value
        by_name.setdefault(row.name, (value, key))
    for name, (details_names, raw_ids, kind) in FIELDS.items():
        for candidate in (details_names if page == "details" else raw_ids) + raw_ids:
            found = by_name.get(candidate)
            if found is not None and isinstance(found[0], Quantity):
                setattr(launch, name, _convert(found[0], kind))
                break
    if launch.block_size is None and launch.block:
        launch.block_size = launch.block[0] * launch.block[1] * launch.block[2]
    if launch.grid_size is None and launch.grid:
        launch.grid_size = launch.grid[0] * launch.grid[1] * launch.grid[2]
    return launch


def _convert(q: Quantity, kind: str) -> int | float | None:
    if kind == "size":
        return exact_bytes(q)
    if kind == "int":
        return q.as_int()
    return q.value


_SHAPE = re.compile(r"\(\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*\)")


def _shape(text: str) -> tuple[int, int, int] | None:
    m = _SHAPE.search(text or "")
    return (int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else None


def _int(text: str | None) -> int | None:
    try:
        return int(str(text).replace(",", "").strip())
    except (TypeError, ValueError):
        return None


__all__ = ["FIELDS", "NcuLaunch", "launches_frame", "launches_from_csv", "read_ncu_csv"]
