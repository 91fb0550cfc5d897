"""`profkit roofline`: each profiled kernel's binding roof and how far below it it runs."""

from __future__ import annotations

import json
from pathlib import Path

import click

from profkit.output import Column, emit_rows, format_option, wide_option
from profkit.terminal import echo

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
    Column("l1_bytes", "L1 bytes"), Column("l2_bytes", "L2 bytes"), Column("l1_intensity", "FLOP/L1 B")]


@click.command()
@click.argument("source", type=click.Path(exists=True, path_type=Path))
@wide_option()
@format_option()
def roofline(source: Path, wide: bool, fmt: str) -> None:
    """Which roof bounds each profiled kernel, and how far below it it runs.

    SOURCE is an ncu CSV (raw or details page) or a `profkit trace --ncu-top N`
    run folder.  Peaks come from the capture (peak_sustained x measured clock).

    \b
      profkit roofline profkit-runs/train-*/
      profkit roofline ncu_raw.csv --format json
    """
    from profkit.analysis.roofline import roofline as analyze
    from profkit.readers.ncu import read_launches

    result = analyze(read_launches(source))
    launches = [dict(r.as_dict(), level="launch") for r in result.launches]
    kernels = [dict(r.as_dict(), level="kernel") for r in result.kernels]
    if fmt == "json":
        click.echo(json.dumps({"launches": launches, "kernels": kernels, "hint": result.hint}, indent=2))
        return
    if fmt == "csv":
        emit_rows(launches + kernels, CSV_COLUMNS, fmt)
    else:
        emit_rows(launches, COLUMNS, fmt, title=f"Roofline per launch ({source.name})", wide=wide)
        emit_rows(kernels, COLUMNS, fmt, title="Roofline per kernel name", wide=wide)
    if result.hint:
        echo(f"note: {result.hint}", err=fmt == "csv") if fmt == "table" else click.echo(f"note: {result.hint}",
                                                                                          err=fmt == "csv")
