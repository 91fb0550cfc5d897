"""The calculator against hand-derived values from cuda_occupancy.h's rules.

Each expected value is worked out in the comment next to it from the header's
formulas; the real-device checks (cudaOccupancy* and ncu) are in
test_occupancy_truth.py.
"""

from __future__ import annotations

import pytest

from profkit.analysis.occupancy import (
    advice,
    block_size_table,
    carveout_steps,
    device_limits,
    occupancy,
    parse_arch,
    register_steps,
    shared_memory_step,
    waves,
)
from profkit.errors import ProfkitError

H100 = device_limits("sm_90", sm_count=132)
KIB = 1024


def test_registers_are_allocated_per_warp_in_256_register_units():
    # 72 regs x 32 = 2304 per warp; 16384 per sub-partition // 2304 = 7 warps; x4 = 28 warps; // 8 = 3 blocks
    occ = occupancy(H100, 256, 72)
    assert occ.blocks_per_sm == 3
    assert occ.active_warps_per_sm == 24
    assert occ.theoretical_occupancy_pct == 37.5
    assert occ.limiters == ("registers",)
    assert occ.allocated_registers_per_block == 2304 * 8
    # 65 registers round up to the same 2304 per warp as 72; 64 registers are 2048 per warp.
    assert occupancy(H100, 256, 65).blocks_per_sm == 3
    assert occupancy(H100, 256, 64).blocks_per_sm == 4


def test_register_limit_is_per_sub_partition_not_per_sm():
    # 168 regs: 5376 per warp. Per SM 65536 // 5376 = 12 warps, per sub-partition 16384 // 5376 = 3 (x4 = 12):
    # equal here; 200 regs: 6400 per warp -> SM-wide 10 warps, per sub-partition 2 x 4 = 8 warps.
    assert occupancy(H100, 32, 200).blocks_per_sm == 8
    assert occupancy(H100, 64, 200).blocks_per_sm == 4


def test_hardware_register_check_rounds_warps_up_to_sub_partitions():
    # 736 threads = 23 warps at 88 regs (2816/warp): 23 x 2816 = 64768 fits the 65536 per block,
    # but the hardware check assumes 24 warps: 67584 > 65536, so the launch cannot run.
    occ = occupancy(H100, 736, 88)
    assert occ.block_limit_registers == 0
    assert occ.blocks_per_sm == 0
    assert "registers" in occ.limiters
    assert occupancy(H100, 768, 80).blocks_per_sm == 1  # 24 x 2560 = 61440 fits


def test_warp_and_block_limits():
    assert occupancy(H100, 1024, 32).block_limit_warps == 2
    assert occupancy(H100, 1056, 16).blocks_per_sm == 0  # over maxThreadsPerBlock
    # 32-thread blocks: 32 blocks per SM on sm_90 = 32 of 64 warps
    occ = occupancy(H100, 32, 16)
    assert (occ.blocks_per_sm, occ.theoretical_occupancy_pct, occ.limiters) == (32, 50.0, ("blocks",))
    assert occupancy(device_limits("sm_89"), 32, 16).theoretical_occupancy_pct == 50.0  # 24 of 48 warps
    assert occupancy(device_limits("sm_86"), 32, 16).blocks_per_sm == 16  # 16 of 48 warps
    assert occupancy(device_limits("sm_75"), 1024, 16).blocks_per_sm == 1  # Turing: 32 warps per SM
    # 96-thread blocks (3 warps): 64 // 3 = 21 blocks, 63 warps
    occ = occupancy(H100, 96, 32)
    assert (occ.blocks_per_sm, occ.active_warps_per_sm) == (21, 63)
    assert set(occ.limiters) == {"warps", "registers"}  # 32 regs: 16 warps/sub-partition x 4 // 3 = 21 too


def test_shared_memory_reserve_and_granularity():
    # cc >= 8: 1 KiB reserved per block, 128-byte granularity
    assert occupancy(H100, 128, 32, static_smem=1).allocated_smem_per_block == 1024 + 128
    assert occupancy(H100, 128, 32, dynamic_smem=48 * KIB).allocated_smem_per_block == 49 * KIB
    # 228 KiB per SM // 49 KiB = 4 blocks on sm_90; 164 KiB // 49 KiB = 3 on sm_80
    occ = occupancy(H100, 128, 32, dynamic_smem=48 * KIB)
    assert occ.blocks_per_sm == 4 and occ.limiters == ("shared_memory",)
    assert occupancy(device_limits("sm_80"), 128, 32, dynamic_smem=48 * KIB).blocks_per_sm == 3
    # cc 7.0: no reserve, 256-byte granularity, 96 KiB per SM
    v100 = device_limits("sm_70")
    assert occupancy(v100, 128, 32, static_smem=1).allocated_smem_per_block == 256
    assert occupancy(v100, 128, 32, dynamic_smem=32 * KIB).blocks_per_sm == 3


def test_shared_memory_over_the_opt_in_limit_cannot_launch():
    # 227 KiB opt-in + 1 KiB reserve = 228 KiB: fits exactly once
    assert occupancy(H100, 128, 32, dynamic_smem=227 * KIB).blocks_per_sm == 1
    occ = occupancy(H100, 128, 32, dynamic_smem=227 * KIB + 1)
    assert occ.blocks_per_sm == 0 and occ.limiters == ("shared_memory",)
    # a function whose MaxDynamicSharedMemorySize stayed at the 48 KiB default
    assert occupancy(H100, 128, 32, dynamic_smem=49 * KIB, max_dynamic_smem=48 * KIB).blocks_per_sm == 0


def test_carveout_preference_is_rounded_up_to_a_supported_size():
    assert carveout_steps(H100) == tuple(k * KIB for k in (0, 8, 16, 32, 64, 100, 132, 164, 196, 228))
    assert carveout_steps(device_limits("sm_80"))[-1] == 164 * KIB
    assert carveout_steps(device_limits("sm_86"))[-1] == 100 * KIB
    assert carveout_steps(device_limits("sm_75")) == (32 * KIB, 64 * KIB)
    # carveout 0: preference 0 KiB < one block, so the driver takes the smallest size that fits (8 KiB)
    occ = occupancy(H100, 128, 16, carveout=0)
    assert (occ.smem_per_sm_bytes, occ.block_limit_shared_mem) == (8 * KIB, 8)
    # carveout 50: 50% of 228 KiB = 114 KiB -> 132 KiB
    assert occupancy(H100, 128, 16, carveout=50).smem_per_sm_bytes == 132 * KIB
    # 100 KiB per block at carveout 50: 101 KiB fits in 132 KiB once
    assert occupancy(H100, 128, 16, dynamic_smem=100 * KIB, carveout=50).blocks_per_sm == 1
    # 140 KiB per block does not fit the 132 KiB preference: the driver takes 164 KiB
    occ = occupancy(H100, 128, 16, dynamic_smem=140 * KIB, carveout=50)
    assert (occ.smem_per_sm_bytes, occ.blocks_per_sm) == (164 * KIB, 1)
    with pytest.raises(ProfkitError):
        occupancy(H100, 128, 16, carveout=101)


def test_executed_carveout_replaces_the_preference():
    # The driver configured 32 KiB for a launch of 1 KiB blocks: 32 blocks by shared memory.
    occ = occupancy(H100, 64, 16, smem_config_bytes=32 * KIB)
    assert occ.block_limit_shared_mem == 32
    assert occupancy(H100, 64, 16).block_limit_shared_mem == 228


def test_barriers_limit_on_blackwell_consumer_parts():
    # sm_120: 24 blocks and 24 barriers per SM; one barrier per block -> both limit
    occ = occupancy(device_limits("sm_120"), 32, 16)
    assert occ.blocks_per_sm == 24
    assert occ.limiters == ("blocks", "barriers")
    # sm_90: 2 barriers per block slot -> 64, never the limiter with one barrier per block;
    # shown capped at the block limit, as ncu shows it ("Block Limit Barriers 32")
    occ = occupancy(H100, 32, 16)
    assert occ.block_limit_barriers == 32 and "barriers" not in occ.limiters
    occ = occupancy(H100, 32, 16, block_barriers=3)  # 64 // 3
    assert (occ.blocks_per_sm, occ.block_limit_barriers, occ.limiters) == (21, 21, ("barriers",))
    assert occupancy(H100, 32, 16, block_barriers=0).block_limit_barriers == 32
    assert occupancy(device_limits("sm_80"), 32, 16).block_limit_barriers is None  # before Hopper: none


def test_register_advice_names_the_next_step():
    occ = occupancy(H100, 256, 72)
    step, headroom = register_steps(occ, H100)
    assert step is not None and (step.value, step.pct) == (64, 50.0)
    assert step.text == "at 72 registers occupancy is 37.5%; at 64 it would be 50%"
    assert headroom == 80  # 80 x 32 = 2560: 6 warps/sub-partition = 24 warps = 3 blocks still; 81 -> 2816 -> 5
    assert advice(occ, H100) == ["at 72 registers occupancy is 37.5%; at 64 it would be 50%"]
    # not register-limited: no register advice
    assert register_steps(occupancy(H100, 256, 32), H100)[0] is None


def test_shared_memory_advice_names_the_next_step():
    occ = occupancy(H100, 128, 32, dynamic_smem=48 * KIB)
    step = shared_memory_step(occ, H100)
    # 5 blocks need <= 233472 // 5 = 46694 -> 46592 (x128) allocated -> 45568 B of the kernel's own
    assert step is not None and step.value == 45568 and step.pct == 5 * 4 / 64 * 100
    assert step.text == "at 48 KiB shared memory per block occupancy is 25%; at 44.5 KiB it would be 31.25%"
    assert occupancy(H100, 128, 32, dynamic_smem=45568).blocks_per_sm == 5
    assert occupancy(H100, 128, 32, dynamic_smem=45568 + 1).blocks_per_sm == 4


def test_block_limited_advice():
    lines = advice(occupancy(H100, 32, 16), H100)
    assert lines == ["at most 32 blocks fit on an SM: blocks of 32 threads reach 50%; use at least 64 threads per "
                     "block (100%)"]
    assert occupancy(H100, 64, 16).theoretical_occupancy_pct == 100


def test_no_bigger_block_advice_where_registers_cap_it_too():
    """32 threads and 64 registers: blocks and registers both allow 32 blocks (50%); at 64 threads
    registers still allow 32 warps, so "use at least 64 threads per block" would change nothing."""
    occ = occupancy(H100, 32, 64)
    assert occ.theoretical_occupancy_pct == occupancy(H100, 64, 64).theoretical_occupancy_pct == 50
    lines = advice(occ, H100)
    assert not any("use at least" in line for line in lines)
    assert "bigger blocks alone would not raise it: registers cap it there too" in lines[-1]


@pytest.mark.parametrize("args, said", [
    (["--block", "128", "--regs", "300"], "--regs 300: a thread has 0 to 255 registers"),
    (["--block", "128", "--regs", "32", "--smem", "300K"], "static shared memory is at most 48 KiB"),
    (["--block", "128", "--regs", "32", "--dyn-smem", "300K"], "sm_90 allows at most 227 KiB"),
])
def test_a_launch_that_cannot_exist_is_refused(args, said):
    from click.testing import CliRunner

    from profkit.cli import cli

    result = CliRunner().invoke(cli, ["occupancy", "--arch", "sm_90", *args])
    assert result.exit_code == 2 and said in result.output and "Traceback" not in result.output


def test_block_size_table_covers_every_warp_multiple():
    table = block_size_table(H100, 64)
    assert [o.block_size for o in table] == list(range(32, 1025, 32))
    by_size = {o.block_size: o for o in table}
    # 64 regs = 2048 per warp: 8 warps per sub-partition, 32 per SM, whatever the block size
    assert by_size[256].theoretical_occupancy_pct == 50.0
    assert by_size[1024].blocks_per_sm == 1  # 32 warps x 2048 = 65536: one block
    assert by_size[96].blocks_per_sm == 10  # 32 // 3
    assert {o.block_size for o in block_size_table(H100, 32) if o.theoretical_occupancy_pct == 100.0} == {
        64, 128, 256, 512, 1024}


def test_waves_and_tail_effect():
    w = waves(132 * 4 + 10, 4, 132)  # one full wave of 528 blocks and 10 more
    assert w is not None
    assert w.full_waves == 1 and w.tail_effect
    assert round(w.last_wave_fill_pct, 2) == round(1000 / 528, 2)
    assert not waves(528 * 3, 4, 132).tail_effect  # exact waves
    assert not waves(100, 4, 132).tail_effect  # less than one wave: underfilled, not a tail
    assert waves(528 + 400, 4, 132).tail_effect is False  # last wave 76% full
    assert waves(10, 0, 132) is None


def test_parse_arch():
    assert parse_arch("sm_90") == (9, 0)
    assert parse_arch("sm_90a") == (9, 0)
    assert parse_arch("9.0") == (9, 0)
    assert parse_arch("100") == (10, 0)
    assert parse_arch("compute_120") == (12, 0)
    with pytest.raises(ProfkitError):
        parse_arch("hopper")
    with pytest.raises(ProfkitError):
        device_limits("sm_60")


def test_register_steps_equal_a_one_by_one_search():
    # register_steps tries multiples of 8 only; a search over every count must agree
    for block in (64, 96, 256):
        for regs in range(0, 256, 3):
            occ = occupancy(H100, block, regs)
            step, headroom = register_steps(occ, H100)
            lower = next((r for r in range(regs - 1, -1, -1)
                          if occupancy(H100, block, r).blocks_per_sm > occ.blocks_per_sm), None)
            upper = regs
            while upper < 255 and occupancy(H100, block, upper + 1).blocks_per_sm == occ.blocks_per_sm:
                upper += 1
            assert (step.value if step else None, headroom) == (lower, upper), (block, regs)
