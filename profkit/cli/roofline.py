"""`profkit roofline`: each profiled kernel's binding roof and how far below it it runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from profkit.cli.kernel_code_options import kernel_target_options
from profkit.output import json_text
from profkit.output import Column, emit_rows, format_option, wide_option
from profkit.terminal import echo_for

# A narrow terminal keeps which roof binds, how far below it and the verdict; the
# figures behind them go first (Column.drop: the highest first).
COLUMNS = [
    Column("kernel", "Kernel", "kernel"), Column("launches", "Launches", "int", drop=6),
    Column("duration_ns", "Duration (ns)", "ns", drop=1), Column("flops", "FLOP", "si", "—", drop=4),
    Column("dram_bytes", "DRAM bytes", "si", "—", drop=5),
    Column("arithmetic_intensity", "FLOP/DRAM B", "float", "—", drop=2),
    Column("l2_intensity", "FLOP/L2 B", "float", "—", drop=7),
    Column("achieved_flops_per_s", "FLOP/s", "si", "—", drop=3),
    Column("achieved_dram_bytes_per_s", "DRAM B/s", "si", "—", drop=3), Column("roof", "Roof", "text", "—"),
    Column("bound", "Bound", "text", "—", drop=-1), Column("pct_of_roof", "% of roof", "pct", "—", drop=-1),
    Column("verdict", "Verdict", fit="wrap", drop=-1),
]
CSV_COLUMNS = [Column("level", "Level"), Column("id", "ID", "int")] + COLUMNS + [
    Column("l1_bytes", "L1 bytes"), Column("l2_bytes", "L2 bytes"), Column("l1_intensity", "FLOP/L1 B"),
    Column("vector_grade", "Vectorized"), Column("code_source", "Code from")]


@click.command()
@click.argument("source", type=click.Path(exists=True, path_type=Path))
@click.option("--inductor", "code_dirs", multiple=True, type=click.Path(file_okay=False, path_type=Path),
              metavar="DIR", help="Inductor/Triton caches: join each kernel's machine code (scalar global loads "
                                  "in a memory-bound kernel are a lead) (repeatable).")
@kernel_target_options
@wide_option()
@format_option()
def roofline(source: Path, code_dirs: tuple[Path, ...], kernel_targets: Any, wide: bool, fmt: str) -> None:
    """Which roof bounds each profiled kernel, and how far below it it runs.

    SOURCE is an ncu CSV (raw or details page) or a `profkit trace --ncu-top N`
    run folder.  Peaks come from the capture (peak_sustained x measured clock).
    Where a kernel's code is known (a run folder's kernel caches, --inductor,
    or --kernels compiled now), a memory-bound kernel below its roof whose
    code has scalar global loads says so in its verdict.

    \b
      profkit roofline profkit-runs/train-*/
      profkit roofline ncu_raw.csv --format json
      profkit roofline ncu_raw.csv --kernels sample_kernels/csrc/gelu.cu
    """
    from profkit.api import roofline_json

    out, notes = roofline_json(source, code_dirs=code_dirs, kernel_targets=kernel_targets)
    launches, kernels = out["launches"], out["kernels"]
    if fmt == "json":
        click.echo(json_text(out, indent=2))
        return
    if fmt == "csv":
        emit_rows(launches + kernels, CSV_COLUMNS, fmt)
    else:
        emit_rows(launches, COLUMNS, fmt, title=f"Roofline per launch ({source.name})", wide=wide)
        emit_rows(kernels, COLUMNS, fmt, title="Roofline per kernel name", wide=wide)
    say = echo_for(fmt)
    if out["hint"]:
        say(f"note: {out['hint']}", err=fmt == "csv")
    if fmt in ("table", "md"):  # JSON and CSV stay rows only, for machines
        for note in notes:
            say(note, err=True)
