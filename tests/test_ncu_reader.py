"""The ncu CSV reader on real captures (ncu 2025.3, H200): both pages, live and imported."""

from __future__ import annotations

import pytest

from profkit.readers.ncu import launches_frame, read_csv_file, read_ncu_csv
from tests.conftest import NCU_DATA

PROBE_DETAILS = NCU_DATA / "probe_details_import.csv.xz"
PROBE_RAW = NCU_DATA / "probe_raw_import.csv.xz"
MATMUL_DETAILS = NCU_DATA / "matmul_details_import.csv.xz"
MATMUL_RAW = NCU_DATA / "matmul_raw_import.csv"
GELU_LIVE = NCU_DATA / "gelu_live_details.csv.xz"
BAD_LIVE_RAW = NCU_DATA / "bad_live_raw.csv"

pytestmark = pytest.mark.skipif(not PROBE_DETAILS.exists(), reason="ncu fixtures not unpacked")


def test_live_details_skip_tool_and_program_lines():
    table = read_csv_file(GELU_LIVE)
    assert table.page == "details"
    # 1 ==WARNING==, 2 ==PROF== and 4 benchmark lines of the program precede the table
    assert table.skipped_lines == 7
    launches = read_ncu_csv(GELU_LIVE)
    assert [launch.id for launch in launches] == list(range(40))  # ncu -c 40
    assert all(launch.process_name == "python3.12" and launch.cc == "9.0" for launch in launches)


def test_live_raw_page_with_program_output_first():
    table = read_csv_file(BAD_LIVE_RAW)
    assert (table.page, len(table.launches), table.skipped_lines) == ("raw", 20, 7)
    first = read_ncu_csv(BAD_LIVE_RAW)[0]
    assert first.kernel_name.startswith("void at::<unnamed>::distribution_elementwise_grid_stride_kernel<float, 4,")
    assert (first.block, first.grid, first.registers_per_thread, first.registers_allocated) == (
        (256, 1, 1), (1056, 1, 1), 44, 48)


def test_kernel_names_with_commas_and_templates_survive():
    names = {launch.kernel_name for launch in read_ncu_csv(PROBE_DETAILS)}
    assert "void probe_kernel<4, 0>(const float *, float *, int, int)" in names
    assert "void probe_kernel<40, 8192>(const float *, float *, int, int)" in names
    assert len(names) == 9


def test_ragged_rule_rows_are_rules_not_metrics():
    launches = read_ncu_csv(PROBE_DETAILS)
    first = launches[0]
    assert {rule.name for rule in first.rules} >= {"SOLBottleneck", "AchievedOccupancy"}
    achieved = next(rule for rule in first.rules if rule.name == "AchievedOccupancy")
    assert achieved.type == "OPT" and achieved.speedup_type == "local" and achieved.speedup == "86.69"
    assert "theoretical (98.4%)" in achieved.description
    assert all(not key.endswith("/") for launch in launches for key in launch.metrics)


def test_thousands_separators_and_scaled_units():
    for launch in read_ncu_csv(PROBE_DETAILS):
        assert launch.threads == launch.block_size * launch.grid_size  # "38,688"
    first = read_ncu_csv(PROBE_DETAILS)[0]
    assert first.duration_ns == 2880.0  # "2.88 us"
    assert first.smem_config_bytes == 65536  # "65.54 Kbyte"
    assert first.driver_smem_bytes == 1024  # "1.02 Kbyte/block"
    assert first.dram_bytes_read == 1090000  # "1.09 Mbyte": a counter, not snapped (the raw page has 1.089536)


def _by_id(path):
    return {launch.id: launch for launch in read_ncu_csv(path)}


@pytest.mark.parametrize("details, raw", [(PROBE_DETAILS, PROBE_RAW), (MATMUL_DETAILS, MATMUL_RAW)],
                         ids=["probe", "matmul"])
def test_details_and_raw_pages_of_one_report_agree(details, raw):
    d, r = _by_id(details), _by_id(raw)
    assert d.keys() == r.keys() and len(d) > 50
    exact = ("kernel_name", "block", "grid", "block_size", "grid_size", "threads", "registers_per_thread",
             "static_smem_bytes", "driver_smem_bytes", "smem_config_bytes", "sm_count",
             "block_limit_sm", "block_limit_registers", "block_limit_shared_mem", "block_limit_warps",
             "block_limit_barriers", "theoretical_warps_per_sm")
    for i in d:
        for key in exact:
            assert getattr(d[i], key) == getattr(r[i], key), (i, key)
        # the details page rounds to 2 decimals (3 significant digits for scaled units)
        half = 0.005 + 1e-9
        assert d[i].theoretical_occupancy_pct == pytest.approx(r[i].theoretical_occupancy_pct, abs=half)
        assert d[i].achieved_occupancy_pct == pytest.approx(r[i].achieved_occupancy_pct, abs=half)
        assert d[i].duration_ns == pytest.approx(r[i].duration_ns, rel=0.005)
        assert d[i].dram_throughput_pct == pytest.approx(r[i].dram_throughput_pct, abs=half)
        # sizes: within the printed resolution, and the same 128-byte allocation granule
        assert abs(d[i].dynamic_smem_bytes - r[i].dynamic_smem_bytes) <= 5
        assert -(-d[i].dynamic_smem_bytes // 128) == -(-r[i].dynamic_smem_bytes // 128)


def test_large_dynamic_shared_memory_from_both_pages():
    # CUTLASS kernels: "Dynamic Shared Memory Per Block 214.27 Kbyte/block" on the details page;
    # the raw page's 6 decimals give the exact bytes (e.g. 164,308, not a multiple of 8), the details
    # page only +-5 bytes of it: the same 128-byte allocation, so the same occupancy.
    d, r = _by_id(MATMUL_DETAILS), _by_id(MATMUL_RAW)
    big = [i for i in r if (r[i].dynamic_smem_bytes or 0) > 160_000]
    assert len(big) >= 10
    assert 164308 in {r[i].dynamic_smem_bytes for i in big}
    for i in big:
        assert r[i].smem_allocated_bytes == -(-(r[i].dynamic_smem_bytes + 1024) // 128) * 128
        assert -(-(d[i].dynamic_smem_bytes + 1024) // 128) * 128 == r[i].smem_allocated_bytes


def test_tidy_frame():
    launches = read_ncu_csv(MATMUL_RAW)
    frame = launches_frame(launches)
    assert len(frame) == len(launches)
    for column in ("id", "kernel_name", "block_x", "grid_y", "registers_per_thread", "duration_ns",
                   "dram_throughput_pct", "achieved_occupancy_pct", "theoretical_occupancy_pct",
                   "block_limit_registers", "block_limit_shared_mem", "block_limit_warps", "block_limit_sm"):
        assert column in frame.columns
    assert frame["duration_ns"].gt(0).all()
