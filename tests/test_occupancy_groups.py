"""Launch configurations grouped a chunk of kernels at a time (occupancy.trace._launch_groups,
with model.keys.encode_rows).

Oracle: SQLite's own GROUP BY over every kernel row of the real exports (count,
sum, min and max of end - start per name, device and configuration), with the
chunk size and the key limit made small so that every path runs on small
fixtures: groups spanning chunks, columns too wide for the packed key, and a
key renumbered mid-row.
"""

from __future__ import annotations

import sqlite3

import pytest

from profkit.analysis.occupancy import launch_configs
from profkit.analysis.occupancy import trace as occupancy_trace
from profkit.model import keys
from profkit.readers import open_trace
from tests.conftest import nsys_fixture

CONFIG_SQL = ("deviceId, gridX, gridY, gridZ, blockX, blockY, blockZ, registersPerThread, staticSharedMemory, "
              "dynamicSharedMemory, localMemoryPerThread, sharedMemoryExecuted")
ROW_KEYS = ("device_id", "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z", "registers_per_thread",
            "static_smem_bytes", "dynamic_smem_bytes", "local_mem_per_thread", "smem_config_bytes")


def oracle(name: str) -> dict[tuple, tuple[int, int, int, int]]:
    with sqlite3.connect(f"file:{nsys_fixture(name)}?mode=ro&immutable=1", uri=True) as conn:
        rows = conn.execute(f"""SELECT s.value, {CONFIG_SQL}, count(*), sum("end" - start), min("end" - start),
                max("end" - start) FROM CUPTI_ACTIVITY_KIND_KERNEL AS k JOIN StringIds AS s ON s.id = k.demangledName
            GROUP BY s.value, {CONFIG_SQL}""").fetchall()
    return {tuple(r[:13]): tuple(r[13:]) for r in rows}


@pytest.mark.parametrize("name", ["nsys2025_train_print", "nsys2023_sync_apis", "nsys2025_gelu"])
@pytest.mark.parametrize(("chunk", "limit"), [(1 << 16, 1 << 62), (7, 1 << 62), (50, 1 << 12), (1, 2)])
def test_groups_equal_sqlite_group_by(name: str, chunk: int, limit: int, monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setattr(occupancy_trace, "_CHUNK_ROWS", chunk)
    monkeypatch.setattr(keys, "_KEY_LIMIT", limit)
    with open_trace(nsys_fixture(name)) as trace:
        rows = launch_configs(trace)
    got = {(r["name"], *(r[k] for k in ROW_KEYS)): (r["launches"], r["total_time_ns"], r["min_time_ns"],
                                                     r["max_time_ns"]) for r in rows}
    assert len(got) == len(rows)
    assert got == oracle(name)
