"""`profkit occupancy`: theoretical occupancy, directly, per kernel of a trace, or next to ncu."""

from __future__ import annotations

import re

import click

from profkit.cli.per_rank import rank_columns, rank_option, titled, with_rank
from profkit.errors import ProfkitError
from profkit.output import json_text
from profkit.output import Column, emit_rows, format_option, wide_option
from profkit.terminal import echo

SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(k|kb|kib|m|mb|mib|b)?\s*$", re.IGNORECASE)

# A narrow terminal keeps each kernel's occupancy, its limiter and the advice; the launch
# shape and its figures go first (Column.drop: the highest first).
DIRECT_COLUMNS = [
    Column("block_size", "Block", "int"), Column("blocks_per_sm", "Blocks/SM", "int"),
    Column("active_warps_per_sm", "Warps/SM", "int"), Column("theoretical_occupancy_pct", "Occupancy %", "pct"),
    Column("limiter", "Limiter", fit="wrap"), Column("block_limit_registers", "Lim regs", "int"),
    Column("block_limit_shared_mem", "Lim smem", "int"), Column("block_limit_warps", "Lim warps", "int"),
    Column("block_limit_blocks", "Lim blocks", "int"),
]
TRACE_COLUMNS = [
    Column("name", "Kernel", "kernel"), Column("origin", "Code", drop=8), Column("launches", "Launches", "int", drop=7),
    Column("total_time_ns", "GPU time (ns)", "ns", drop=5),
    Column("grid_size", "Grid", "int", drop=10), Column("block_size", "Block", "int", drop=3),
    Column("registers_per_thread", "Regs", "int", drop=2), Column("shared_mem_bytes", "Smem", "bytes", drop=4),
    Column("local_mem_per_thread", "Local B/thr", "int", drop=12), Column("blocks_per_sm", "Blocks/SM", "int", drop=6),
    Column("theoretical_occupancy_pct", "Occupancy %", "pct", drop=-1), Column("limiter", "Limiter", fit="wrap"),
    Column("waves", "Waves", "float", drop=9), Column("tail_effect", "Tail", drop=11),
    Column("advice", "Advice", fit="wrap", drop=-1),
]
TRACE_NCU_COLUMNS = [
    Column("ncu_launches", "ncu launches", "int", drop=13),
    Column("ncu_theoretical_occupancy_pct", "ncu theor. %", "pct", drop=11),
    Column("ncu_achieved_occupancy_pct", "ncu achieved %", "pct", drop=1),
]
NCU_COLUMNS = [
    Column("id", "ID", "int"), Column("name", "Kernel", "kernel"), Column("block_size", "Block", "int", drop=3),
    Column("grid_size", "Grid", "int", drop=4), Column("registers_per_thread", "Regs", "int", drop=3),
    Column("shared_mem_bytes", "Smem", "bytes", drop=3), Column("smem_config_bytes", "Carveout", "bytes", drop=4),
    Column("ncu_achieved_occupancy_pct", "ncu achieved %", "pct"),
    Column("ncu_theoretical_occupancy_pct", "ncu theor. %", "pct"),
    Column("theoretical_occupancy_pct", "profkit %", "pct"), Column("limiter", "Limiter", drop=1),
    Column("block_limit_registers", "Lim regs", "int", drop=2), Column("ncu_block_limit_registers", "ncu", "int", drop=2),
    Column("block_limit_shared_mem", "Lim smem", "int", drop=2), Column("ncu_block_limit_shared_mem", "ncu", "int", drop=2),
    Column("block_limit_warps", "Lim warps", "int", drop=2), Column("ncu_block_limit_warps", "ncu", "int", drop=2),
    Column("block_limit_sm", "Lim SM", "int", drop=2), Column("ncu_block_limit_sm", "ncu", "int", drop=2),
    Column("differences", "Differences", fit="wrap", drop=-1),
]


def parse_size(text: str | None) -> int:
    """'48K' / '48KiB' / '1.5M' / '49152' -> bytes (K = 1024)."""
    if text is None or text == "":
        return 0
    m = SIZE.match(text)
    if not m:
        raise ProfkitError(f"cannot read size {text!r}", "write bytes or e.g. 48K, 100KiB")
    unit = (m.group(2) or "b").lower()
    factor = 1024 if unit.startswith("k") else 1024 * 1024 if unit.startswith("m") else 1
    return int(float(m.group(1)) * factor)


@click.command()
@click.argument("export", required=False, type=click.Path())
@rank_option
@click.option("--arch", help="GPU architecture for the direct form: sm_90, 9.0, 90 (or overrides the export's).")
@click.option("--block", type=int, help="Threads per block (1 to 1024).")
@click.option("--regs", type=int, help="Registers per thread.")
@click.option("--smem", default="0", help="Static shared memory per block (bytes, or 48K).")
@click.option("--dyn-smem", default="0", help="Dynamic shared memory per block (bytes, or 48K).")
@click.option("--carveout", type=click.IntRange(-1, 100), default=-1, show_default=True,
              help="Preferred shared-memory carveout in percent; -1 leaves it to the driver.")
@click.option("--grid", type=int, help="Blocks per grid, for waves (direct form).")
@click.option("--sms", type=int, help="SM count, for waves (default: the architecture's flagship).")
@click.option("--ncu", "ncu_csv", type=click.Path(dir_okay=False),
              help="ncu CSV (details or raw page): show ncu's occupancy and block limits next to profkit's.")
@wide_option()
@format_option()
def occupancy(export: str | None, rank: int | None, arch: str | None, block: int | None, regs: int | None, smem: str,
              dyn_smem: str, carveout: int, grid: int | None, sms: int | None, ncu_csv: str | None,
              wide: bool, fmt: str) -> None:
    """Theoretical occupancy, its limiter, and the next step.

    \b
      profkit occupancy --arch sm_90 --block 256 --regs 72 --smem 48K
      profkit occupancy run.sqlite                   every kernel of a trace (nsys or Kineto)
      profkit occupancy --ncu report.csv             next to ncu's figures
      profkit occupancy run.sqlite --ncu report.csv  ncu's achieved occupancy per trace kernel
    """
    from profkit.analysis import occupancy as occ

    launches = None
    if ncu_csv:
        from profkit.readers.ncu import read_ncu_csv

        launches = read_ncu_csv(ncu_csv)
        if not export:
            rows = [occ.compare_ncu(launch) for launch in launches]
            emit_rows(rows, NCU_COLUMNS, fmt, title=f"Occupancy: profkit vs ncu ({ncu_csv})", wide=wide)
            return
    if export:
        from profkit.api import occupancy_json, per_rank

        answers = per_rank(export, rank, lambda trace: occupancy_json(trace, arch=arch, sms=sms, launches=launches))
        columns = TRACE_COLUMNS
        if launches is not None:
            columns = TRACE_COLUMNS[:-1] + TRACE_NCU_COLUMNS + TRACE_COLUMNS[-1:]
        if fmt in ("json", "csv"):
            emit_rows(answers.json() if fmt == "json" else with_rank(answers), rank_columns(answers, columns), fmt)
            return
        for answer in answers.items:
            emit_rows(answer.value, columns, fmt, title=titled("Occupancy and registers", answers, answer), wide=wide)
        return
    if block is None or regs is None or arch is None:
        raise ProfkitError("give an export, --ncu FILE, or --arch, --block and --regs",
                           "e.g. profkit occupancy --arch sm_90 --block 256 --regs 64")
    _direct(occ, arch, block, regs, parse_size(smem), parse_size(dyn_smem), carveout, grid, sms, fmt)


# Flagship SM counts, for waves when --sms is not given.
FLAGSHIP_SMS = {(8, 0): 108, (8, 6): 84, (8, 9): 128, (9, 0): 132, (10, 0): 148, (12, 0): 170}


def _direct(occ, arch: str, block: int, regs: int, static: int, dynamic: int, carveout: int,
            grid: int | None, sms: int | None, fmt: str) -> None:
    major_minor = occ.parse_arch(arch)
    device = occ.device_limits(major_minor, sm_count=sms or FLAGSHIP_SMS.get(major_minor))
    occ.check_launch(device, block, regs, static, dynamic)
    launch = {"carveout": carveout}
    result = occ.occupancy(device, block, regs, static, dynamic, **launch)
    table = occ.block_size_table(device, regs, static, dynamic, **launch)
    step, headroom = occ.register_steps(result, device, **launch)
    summary = result.as_dict()
    summary.update(grid_size=grid, sm_count=device.sm_count, registers_headroom=headroom,
                   registers_next_step=step.value if step else None,
                   advice=occ.advice(result, device, **launch))
    w = occ.waves(grid, result.blocks_per_sm, device.sm_count or 0) if grid else None
    summary.update(waves=w.waves if w else None, tail_effect=bool(w and w.tail_effect))
    rows = [t.as_dict() for t in table]
    if fmt == "json":
        summary["table"] = rows
        click.echo(json_text(summary, indent=2))
        return
    if fmt == "table":
        echo(f"{device.arch}: {block} threads, {regs} registers, {static + dynamic:,} B shared memory "
             f"-> {result.blocks_per_sm} blocks/SM, {result.active_warps_per_sm}/{device.max_warps_per_sm} "
             f"warps, {result.theoretical_occupancy_pct:.1f}% ({result.limiter or 'no limit'})")
        for line in summary["advice"]:
            echo(line, indent="  ")
        if headroom > regs:
            echo(f"up to {headroom} registers per thread keep this occupancy", indent="  ")
        if w:
            echo(f"{w.waves:.2f} waves on {device.sm_count} SMs" + (
                f", last wave {w.last_wave_fill_pct:.0f}% full (tail effect)" if w.tail_effect else ""), indent="  ")
    emit_rows(rows, DIRECT_COLUMNS, fmt, title="Occupancy over block sizes")
