"""`profkit occupancy` direct form (no files needed)."""

from __future__ import annotations

import json

from click.testing import CliRunner

from profkit.cli import cli


def run(*args):
    return CliRunner().invoke(cli, ["occupancy", *args])


def test_direct_json_is_one_object_with_the_calculator_keys():
    result = run("--arch", "sm_90", "--block", "256", "--regs", "72", "--smem", "8K", "--grid", "1000",
                 "--format", "json")
    assert result.exit_code == 0, result.output
    obj = json.loads(result.output)
    assert obj["block_size"] == 256 and obj["registers_per_thread"] == 72
    assert obj["shared_mem_bytes"] == 8192 and obj["grid_size"] == 1000
    # 72 regs: 3 blocks of 8 warps; 9 KiB per block does not limit
    assert (obj["blocks_per_sm"], obj["theoretical_occupancy_pct"], obj["limiter"]) == (3, 37.5, "registers")
    assert obj["waves"] == 1000 / (3 * 132)
    assert obj["advice"] == ["at 72 registers occupancy is 37.5%; at 64 it would be 50%"]
    assert [row["block_size"] for row in obj["table"]] == list(range(32, 1025, 32))


def test_direct_table_prints_summary_advice_and_block_sizes():
    result = run("--arch", "9.0", "--block", "128", "--regs", "32", "--dyn-smem", "48K", "--format", "md")
    assert result.exit_code == 0, result.output
    assert "| 128 | 4 | 16 | 25.0 | shared_memory |" in result.output


def test_direct_table_mode_mentions_the_step():
    result = run("--arch", "sm_90", "--block", "256", "--regs", "72")
    assert result.exit_code == 0, result.output
    assert "at 72 registers occupancy is 37.5%; at 64 it would be 50%" in result.output
    assert "up to 80 registers per thread keep this occupancy" in result.output


def test_direct_form_errors_are_one_line():
    for args in (["--block", "256"], ["--arch", "sm_61", "--block", "256", "--regs", "32"],
                 ["--arch", "sm_90", "--block", "256", "--regs", "32", "--smem", "lots"]):
        result = run(*args)
        assert result.exit_code == 2, result.output
        assert result.output.startswith("profkit: error:") or "Error:" in result.output
        assert "Traceback" not in result.output


def test_a_block_over_1024_threads_is_one_line_and_exit_2():
    from click.testing import CliRunner

    from profkit.cli import cli

    result = CliRunner().invoke(cli, ["occupancy", "--arch", "sm_90", "--block", "2000", "--regs", "32"])
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.splitlines() == ["profkit: error: --block 2000: a block has 1 to 1024 threads on sm_90"]
    assert CliRunner().invoke(cli, ["occupancy", "--arch", "sm_90", "--block", "1024", "--regs", "32"]).exit_code == 0
