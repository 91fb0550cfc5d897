"""Occupancy applied to real nsys exports (schema 3.7 from nsys 2023.4, 3.20 from 2025.3) through
the trace model (launch configurations and GPU limits are columns of ``trace.kernels`` / ``trace.devices``)."""

from __future__ import annotations

import csv
import json
import sqlite3
from collections import defaultdict

import pytest
from click.testing import CliRunner

from profkit.analysis.occupancy import device_from_info, device_limits_of, launch_configs, trace_occupancy
from profkit.cli import cli
from profkit.errors import ProfkitError
from profkit.readers import open_trace
from profkit.readers.nsys import open_export
from profkit.readers.nsys.launches import gpu_info
from tests.conftest import nsys_fixture, nsys_fixture_names, oracle_csv

EXPORTS = nsys_fixture_names()
pytestmark = pytest.mark.skipif(not EXPORTS, reason="nsys fixtures not unpacked")


@pytest.mark.parametrize("name", EXPORTS)
def test_launch_configs_add_up_to_nsys_stats(name):
    """Grouping per launch configuration loses nothing: per kernel name, the
    launch counts and GPU time add up to `nsys stats --report cuda_gpu_kern_sum`."""
    with open_trace(nsys_fixture(name)) as trace:
        rows = launch_configs(trace)
    per_name: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for r in rows:
        per_name[r["name"]][0] += r["launches"]
        per_name[r["name"]][1] += r["total_time_ns"]
    with open(oracle_csv(name, "cuda_gpu_kern_sum"), newline="") as fh:
        oracle = {row["Name"]: [int(row["Instances"]), int(row["Total Time (ns)"])] for row in csv.DictReader(fh)}
    assert dict(per_name) == oracle


@pytest.mark.parametrize("name", EXPORTS)
def test_launch_configs_match_the_raw_rows(name):
    """The grouping of the model's columns against a plain Python grouping of every kernel row, read directly."""
    path = nsys_fixture(name)
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    raw = conn.execute(
        'SELECT s.value, gridX*gridY*gridZ, blockX*blockY*blockZ, registersPerThread, staticSharedMemory, '
        'dynamicSharedMemory, localMemoryPerThread, sharedMemoryExecuted, "end" - start '
        "FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.demangledName").fetchall()
    expected: dict[tuple, list[int]] = defaultdict(lambda: [0, 0])
    for *key, duration in raw:
        expected[tuple(key)][0] += 1
        expected[tuple(key)][1] += duration
    conn.close()
    with open_trace(path) as trace:
        rows = launch_configs(trace)
    # the model keeps grid shapes apart ((256,1,1) vs (128,2,1)); both count under one grid size here
    got: dict[tuple, list[int]] = defaultdict(lambda: [0, 0])
    for r in rows:
        key = (r["name"], r["grid_size"], r["block_size"], r["registers_per_thread"], r["static_smem_bytes"],
               r["dynamic_smem_bytes"], r["local_mem_per_thread"], r["smem_config_bytes"])
        got[key][0] += r["launches"]
        got[key][1] += r["total_time_ns"]
    assert dict(got) == dict(expected)
    assert [r["total_time_ns"] for r in rows] == sorted((r["total_time_ns"] for r in rows), reverse=True)


@pytest.mark.parametrize("name", ["nsys2023_vector_add", "nsys2025_bad"])
def test_gpu_limits_from_both_schemas(name):
    with open_export(nsys_fixture(name)) as ex:
        info = gpu_info(ex)
    with open_trace(nsys_fixture(name)) as trace:
        from_model = device_limits_of(trace)
    assert list(info) == [0] == list(from_model)
    for dev in (device_from_info(info[0]), from_model[0]):
        assert (dev.cc_major, dev.cc_minor, dev.sm_count, dev.name) == (9, 0, 132, "NVIDIA H200")
        assert (dev.smem_per_sm, dev.smem_per_block_optin, dev.smem_per_block) == (233472, 232448, 49152)
        assert (dev.max_warps_per_sm, dev.max_blocks_per_sm, dev.regs_per_sm, dev.regs_per_block) == (
            64, 32, 65536, 65536)
    assert from_model[0] == device_from_info(info[0])


def test_register_heavy_kernels_are_register_limited_with_advice():
    with open_trace(nsys_fixture("nsys2025_bad")) as trace:
        rows = {r["short_name"]: r for r in trace_occupancy(trace)}
    cuda = rows["register_heavy_kernel"]
    # 80 registers x 32 = 2560 per warp: 6 warps per sub-partition, 24 per SM, 3 blocks of 8 warps
    assert (cuda["registers_per_thread"], cuda["block_size"], cuda["blocks_per_sm"]) == (80, 256, 3)
    assert cuda["limiter"] == "registers" and cuda["theoretical_occupancy_pct"] == 37.5
    assert cuda["advice"].startswith("at 80 registers occupancy is 37.5%; at 64 it would be 50%")
    assert cuda["waves"] == pytest.approx(16384 / (132 * 3))
    triton = rows["gelu_register_heavy_kernel"]
    # one warp per block at 64 registers: 8 warps per sub-partition = 32 blocks, also the block limit
    assert (triton["registers_per_thread"], triton["block_size"], triton["blocks_per_sm"]) == (64, 32, 32)
    assert triton["limiter"] == "registers, blocks"
    assert "64 registers is the most that keeps 50%; at 65 it would be 43.75%" in triton["advice"]
    # the driver sized the carveout for 32 blocks of 1 KiB: a tie with the real limits, not a cause
    assert triton["block_limit_shared_mem"] == 32 and "shared_memory" not in triton["limiter"]


def test_rows_are_sorted_by_gpu_time_and_json_keys_are_ints():
    result = CliRunner().invoke(cli, ["occupancy", str(nsys_fixture("nsys2025_gelu")), "--format", "json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert [r["total_time_ns"] for r in rows] == sorted((r["total_time_ns"] for r in rows), reverse=True)
    for r in rows:
        for key in ("block_size", "grid_size", "registers_per_thread", "shared_mem_bytes", "blocks_per_sm"):
            assert type(r[key]) is int, key
        assert r["block_size"] == r["block_x"] * r["block_y"] * r["block_z"]
        assert r["grid_size"] == r["grid_x"] * r["grid_y"] * r["grid_z"]
        assert isinstance(r["theoretical_occupancy_pct"], float) and isinstance(r["limiter"], str)
        assert r["waves"] == pytest.approx(r["grid_size"] / (132 * r["blocks_per_sm"]))
    # the 1024-thread hand-written GELU: 2 blocks of 32 warps fill the SM
    gelu = next(r for r in rows if r["name"].startswith("gelu_kernel(") and r["block_size"] == 1024)
    assert (gelu["blocks_per_sm"], gelu["theoretical_occupancy_pct"], gelu["limiter"]) == (2, 100.0, "warps")


def test_markdown_table_for_a_report():
    result = CliRunner().invoke(cli, ["occupancy", str(nsys_fixture("nsys2025_bad")), "--format", "md"])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("### Occupancy and registers")
    lines = result.output.splitlines()
    first = next(line for line in lines if line.startswith("| register_heavy_kernel("))
    cells = [c.strip() for c in first.strip("|").split(" | ")]
    assert cells[0] == r"register_heavy_kernel(const float \*, float \*, int, int)"  # no italics on GitHub
    assert "37.5" in cells and "registers" in cells
    assert sum(1 for line in lines if line.startswith("| ")) == 2 + len(trace_rows("nsys2025_bad"))


def trace_rows(name):
    with open_trace(nsys_fixture(name)) as trace:
        return trace_occupancy(trace)


def test_export_without_kernels_is_a_one_line_error(tmp_path):
    # hand-built bad input: an nsys-like file with no CUDA kernel table
    path = tmp_path / "nokernels.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL)")
    conn.execute("CREATE TABLE META_DATA_EXPORT (name TEXT, value TEXT)")
    conn.commit()
    conn.close()
    with pytest.raises(ProfkitError, match="no CUDA kernel data"), open_trace(path) as trace:
        trace_occupancy(trace)
    result = CliRunner().invoke(cli, ["occupancy", str(path)])
    assert result.exit_code == 2 and result.output.startswith("profkit: error:")
    assert "-t cuda" in result.output


def test_trace_rows_with_ncu_achieved_occupancy():
    """nsys and ncu runs of the same program: ncu's launches find their trace rows
    despite the two tools spelling kernel names differently, and only launches of the same shape."""
    from profkit.analysis.occupancy import attach_ncu, kernel_key
    from profkit.readers.ncu import read_ncu_csv
    from tests.conftest import NCU_DATA

    ncu_path = NCU_DATA / "bad_live_raw.csv"
    if not ncu_path.exists():
        pytest.skip("ncu fixtures not unpacked")
    launches = read_ncu_csv(ncu_path)
    assert kernel_key("void at::native::vectorized_elementwise_kernel<(int)4, at::native::AbsFunctor<float>, "
                      "std::array<char *, (unsigned long)2>>(int, T2, T3)") == kernel_key(
        "void at::vectorized_elementwise_kernel<4, at::AbsFunctor<float>, std::array<char *, 2>>(int, T2, T3)")
    rows = attach_ncu(trace_rows("nsys2025_bad"), launches)
    # scripts/make_fixtures.sh ran ncu on bad_kernels.py --n 1048576 and nsys on --n 4194304: the
    # elementwise kernels' grids differ 4-fold, and ncu's achieved occupancy of a 1,024-block grid
    # is not that of the trace's 4,096-block one.  A launch matches only where a trace launch of its
    # kernel has its grid (the export's own rows: gridX * gridY * gridZ).
    import sqlite3

    with sqlite3.connect(nsys_fixture("nsys2025_bad")) as db:
        grids = {(kernel_key(name), grid) for name, grid in db.execute(
            "SELECT s.value, k.gridX * k.gridY * k.gridZ FROM CUPTI_ACTIVITY_KIND_KERNEL k "
            "JOIN StringIds s ON s.id = k.demangledName")}
    same_grid = sum((kernel_key(m.kernel_name), m.grid_size) in grids for m in launches)
    assert len(launches) == 20 and 0 < same_grid < 20
    assert sum(r["ncu_launches"] for r in rows) == same_grid
    for r in rows:
        if r["ncu_launches"]:
            assert r["ncu_theoretical_occupancy_pct"] == r["theoretical_occupancy_pct"]
            assert 0 < r["ncu_achieved_occupancy_pct"] <= r["theoretical_occupancy_pct"]
    result = CliRunner().invoke(cli, ["occupancy", str(nsys_fixture("nsys2025_bad")), "--ncu", str(ncu_path),
                                      "--format", "json"])
    assert result.exit_code == 0, result.output
    assert sum(r["ncu_launches"] for r in json.loads(result.output)) == same_grid
