"""profkit's occupancy against NVIDIA's own answers, captured on an H200:

* cudaOccupancyMaxActiveBlocksPerMultiprocessor over 9 register variants x 14
  block sizes x 9 dynamic shared-memory sizes x 4 carveouts
  (tests/data/ncu/occupancy_api.json, from scripts/occupancy_probe.cu);
* ncu's theoretical occupancy and block limits for every kernel in every
  capture (the probe grid, cuBLAS/CUTLASS GEMMs with up to 227 KiB of dynamic
  shared memory, live runs of the sample programs), from the inputs ncu shows.
"""

from __future__ import annotations

import json
import lzma
import re
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from profkit.analysis.occupancy import compare_ncu, device_limits, occupancy
from profkit.cli import cli
from profkit.readers.ncu import read_ncu_csv
from tests.conftest import NCU_DATA

API_JSON = NCU_DATA / "occupancy_api.json.xz"
PTXAS = NCU_DATA / "probe_ptxas.txt"


def ncu_captures() -> list[Path]:
    """Every committed ncu CSV (a plain .csv next to its .xz is a local decompressed copy)."""
    files = sorted(NCU_DATA.glob("*.csv.xz")) + sorted(NCU_DATA.glob("*.csv"))
    packed = {p.name[:-3] for p in files if p.suffix == ".xz"}
    return [p for p in files if p.suffix == ".xz" or p.name not in packed]


CAPTURES = ncu_captures()
needs_captures = pytest.mark.skipif(not CAPTURES or not API_JSON.exists(), reason="ncu fixtures not unpacked")


def api_table() -> dict:
    with lzma.open(API_JSON, "rt") as fh:
        return json.load(fh)


@needs_captures
def test_calculator_equals_cuda_occupancy_api_on_every_recorded_launch():
    table = api_table()
    assert (table["device"], table["cc"], table["sm_count"]) == ("NVIDIA H200", "9.0", 132)
    device = device_limits(table["cc"], sm_count=table["sm_count"])
    rows = table["rows"]
    # the grid covers registers 20..255, 4 carveouts and dynamic shared memory up to 160,000 B
    # (232,448 B plus the 16 B of static shared memory is over the opt-in limit, so the probe skips it)
    assert len(rows) == 4032 and all(r["error"] == "" for r in rows)
    assert {r["registers"] for r in rows} == {20, 40, 56, 72, 128, 168, 255}
    assert {r["carveout"] for r in rows} == {-1, 0, 50, 100}
    assert max(r["dynamic_smem"] for r in rows) == 160000
    mismatches = []
    for r in rows:
        ours = occupancy(device, r["block_size"], r["registers"], r["static_smem"], r["dynamic_smem"],
                         carveout=r["carveout"]).blocks_per_sm
        if ours != r["blocks_per_sm"]:
            mismatches.append((r["kernel"], r["block_size"], r["dynamic_smem"], r["carveout"], ours, r["blocks_per_sm"]))
    assert mismatches == []
    # and the answers are not all alike: every limiter and zero-block launches occur
    answers = Counter(r["blocks_per_sm"] for r in rows)
    assert answers[0] > 0 and len(answers) > 15


@needs_captures
@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: p.name)
def test_theoretical_occupancy_and_block_limits_equal_ncu(path):
    launches = read_ncu_csv(path)
    assert launches
    raw_page = "raw" in path.name
    for launch in launches:
        # ncu's own figures were read (a missing one would make the comparison vacuous)
        for key in ("theoretical_occupancy_pct", "block_limit_sm", "block_limit_registers",
                    "block_limit_shared_mem", "block_limit_warps", "block_limit_barriers", "smem_config_bytes",
                    "registers_per_thread", "block_size", "grid_size", "waves_per_sm"):
            assert getattr(launch, key) is not None, (launch.id, key)
        if raw_page:
            assert launch.barrier_count is not None and launch.registers_allocated is not None
        row = compare_ncu(launch)
        assert row["agrees"], (launch.id, launch.kernel_name, row["differences"])
        assert row["theoretical_occupancy_pct"] == pytest.approx(launch.theoretical_occupancy_pct, abs=0.006)
        assert row["blocks_per_sm"] * -(-launch.block_size // 32) == launch.theoretical_warps_per_sm


@needs_captures
def test_captures_cover_every_limiter_and_large_dynamic_shared_memory():
    rows = [compare_ncu(launch) for path in CAPTURES for launch in read_ncu_csv(path)]
    limiters = {name for r in rows for name in r["limiter"].split(", ")}
    assert {"registers", "shared_memory", "warps"} <= limiters
    assert max(r["shared_mem_bytes"] for r in rows) > 200 * 1024  # CUTLASS GEMMs near the 227 KiB opt-in
    assert {r["smem_config_bytes"] for r in rows} >= {16384, 32768, 65536, 167936, 233472}
    assert min(r["theoretical_occupancy_pct"] for r in rows) < 10  # one 384-thread block per SM


@needs_captures
def test_barrier_limit_matches_ncu_for_multi_barrier_gemms():
    # cuBLAS sm90 kernels use 3 barriers per block: 64 // 3 = 21 blocks (raw page only has the count)
    launches = read_ncu_csv(NCU_DATA / "matmul_raw_import.csv")
    three = [launch for launch in launches if launch.barrier_count == 3]
    assert three and all(launch.block_limit_barriers == 21 for launch in three)
    assert all(compare_ncu(launch)["block_limit_barriers"] == 21 for launch in three)


def ptxas_registers() -> dict[tuple[int, int], int]:
    """probe_kernel<ACC, STATIC> -> registers, from `nvcc -Xptxas -v` output."""
    out, current = {}, None
    for line in PTXAS.read_text().splitlines():
        m = re.search(r"Compiling entry function '_Z12probe_kernelILi(\d+)ELi(\d+)E", line)
        if m:
            current = (int(m.group(1)), int(m.group(2)))
        m = re.search(r"Used (\d+) registers", line)
        if m and current:
            out[current] = int(m.group(1))
            current = None
    return out


@needs_captures
def test_ncu_registers_are_the_cubins_and_allocation_rounds_them():
    exact = ptxas_registers()
    assert len(exact) == 9
    api = {tuple(int(x) for x in re.findall(r"\d+", r["kernel"])): r["registers"] for r in api_table()["rows"]}
    assert api == exact  # cudaFuncGetAttributes agrees with ptxas
    notes = Counter()
    for launch in read_ncu_csv(NCU_DATA / "probe_raw_import.csv.xz"):
        variant = tuple(int(x) for x in re.search(r"probe_kernel<(\d+), (\d+)>", launch.kernel_name).groups())
        # "Registers Per Thread" is the exact count; launch__registers_per_thread_allocated is rounded to 8
        assert launch.registers_per_thread == exact[variant]
        assert launch.registers_allocated == -(-exact[variant] // 8) * 8
        row = compare_ncu(launch, exact_registers=exact[variant])
        assert row["registers_allocated"] == launch.registers_allocated
        notes[row["notes"]] += 1
    # 20 -> 24 and 255 -> 256 are the variants whose count is not a multiple of 8
    assert set(notes) == {"", "20 registers per thread are allocated as 24",
                          "255 registers per thread are allocated as 256"}


@needs_captures
def test_cli_shows_ncu_next_to_profkit():
    path = NCU_DATA / "matmul_details_import.csv.xz"
    result = CliRunner().invoke(cli, ["occupancy", "--ncu", str(path), "--format", "json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert len(rows) == len(read_ncu_csv(path))
    assert all(r["agrees"] and r["differences"] == "" for r in rows)
    gemm = next(r for r in rows if r["smem_config_bytes"] == 233472 and r["blocks_per_sm"] == 1)
    assert gemm["ncu_achieved_occupancy_pct"] < gemm["ncu_theoretical_occupancy_pct"] + 1e-9
    md = CliRunner().invoke(cli, ["occupancy", "--ncu", str(path), "--format", "md"])
    assert md.exit_code == 0 and "| ncu achieved % |" in md.output
