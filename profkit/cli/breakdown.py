"""`profkit breakdown TRACE...`: where each rank's GPU time goes (HTA's figures)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from profkit.cli.per_rank import rank_option
from profkit.model.clock import SESSION_START
from profkit.output import Column, emit_rows, format_option, rows_to_json, wide_option
from profkit.terminal import echo_for

# Flat columns: the table shows them, CSV writes them, JSON rows carry them (and more).
# A narrow terminal hides the file name first (the tables below name it), then the
# overlap and the finer waits; the shares of the window and the host wait stay.
RANK_COLUMNS = [
    Column("rank", "Rank", "int"), Column("file", "File", fit="left", drop=6),
    Column("kernel_time_ns", "GPU span (ns)", "ns"), Column("idle_pct", "Idle %", "pct"),
    Column("compute_pct", "Compute %", "pct"), Column("non_compute_pct", "Non-compute %", "pct"),
    Column("comm_comp_overlap_pct", "Comm overlapped %", "pct", drop=5),
    Column("host_wait_ns", "Host wait (ns)", "ns"), Column("kernel_wait_ns", "Kernel wait (ns)", "ns", drop=3),
    Column("other_wait_ns", "Other wait (ns)", "ns", drop=4), Column("launch_bound", "Launch-bound"),
]
CSV_COLUMNS = RANK_COLUMNS[:3] + [
    Column(k, k) for k in (
        "busy_ns", "idle_ns", "compute_ns", "non_compute_ns", "idle_pct", "compute_pct", "non_compute_pct",
        "comm_ns", "comm_comp_overlap_ns", "comm_comp_overlap_pct", "computation_kernel_ns",
        "communication_kernel_ns", "memory_kernel_ns", "other_kernel_ns", "host_wait_ns", "kernel_wait_ns",
        "other_wait_ns", "stream_host_wait_ns", "stream_kernel_wait_ns", "stream_other_wait_ns", "launch_bound",
        "steady")
]
STREAM_COLUMNS = [
    Column("stream", "Stream", "int"), Column("idle_ns", "Idle (ns)", "ns"),
    Column("host_wait_pct", "Host wait %", "pct"), Column("kernel_wait_pct", "Kernel wait %", "pct"),
    Column("other_pct", "Other %", "pct"),
]
IDLE_COLUMNS = [
    Column("duration_ns", "Idle (ns)", "ns"), Column("at", f"At ({SESSION_START})", "s"), Column("cause", "Cause"),
    Column("next_kernel", "Next on GPU", "kernel"), Column("cpu", "CPU meanwhile (launching thread)", fit="wrap"),
]


@click.command()
@click.argument("traces", nargs=-1, required=True, metavar="TRACE...", type=click.Path(path_type=Path))
@click.option("--steady", is_flag=True, help="Count only the steady-state steps (after start-up and warm-up).")
@rank_option
@wide_option()
@format_option()
def breakdown(traces: tuple[Path, ...], steady: bool, rank: int | None, wide: bool, fmt: str) -> None:
    """Where the GPU time goes, per rank, with HTA's definitions.

    \b
    Examples:
      profkit breakdown run.sqlite
      profkit breakdown rank0.json.gz rank1.json.gz --format json
      profkit breakdown trace.json.gz --steady

    Temporal breakdown (idle, compute, non-compute), kernel types and their
    overlaps, communication hidden under computation, idle time per stream
    (host wait / kernel wait / other), the longest GPU idle stretches with
    what the launching CPU thread did meanwhile, and launch statistics with a
    launch-bound verdict.

    \b
    GPU span: HTA's "kernel time", from the first GPU operation's start to the
      last one's end (JSON kernel_time_ns); not a sum of kernel durations
      (that is "Kernel time" in `profkit ranks` and the report).
    Idle %: HTA's idle time, the part of the span with no event on any GPU
      stream; like HTA, a CUDA synchronization record on a stream (the CPU
      waiting on it) counts as an event.
    Compute % / Non-compute %: HTA's: the part of the span in which a
      computation kernel runs (overlapping kernels counted once), and the
      rest of the busy time.  `profkit ranks`' "Compute kernels" is a sum
      of durations instead.
    Host / kernel / other wait: the rank's idle time (no stream busy) by
      the cause of the operation that ends each gap: its launch came after
      the GPU went idle (host), else a gap under 30 us (kernel), else other;
      the three add up to the idle time.  HTA's per-stream figures are in
      "Idle time per stream" (JSON stream_*_wait_ns: their sum over
      streams, which counts a moment once per idle stream).
    Longest GPU idle stretches: times with no kernel, copy or set on the GPU
      (the report's idle stretches, to the ns); At: where each begins, in
      seconds from the session start, which `profkit export --window` takes.

    JSON rows carry rank, kernel_time_ns, idle_ns,
    compute_ns, non_compute_ns, idle_pct, compute_pct, non_compute_pct,
    comm_comp_overlap_pct and the details (kernel_types, idle_by_stream,
    longest_idle, launch, queue).  One row per trace (rank); a multi-rank
    input (an export of a whole multi-GPU job, a folder of rank traces, a
    torchrun run folder) gives a row per rank (--rank N: only rank N's), with
    rank_source saying where its rank came from.
    """
    from profkit.api import breakdown_json

    rows = breakdown_json(traces, steady=steady, rank=rank)
    if fmt == "json":
        click.echo(rows_to_json(rows))
        return
    if fmt == "csv":
        emit_rows(rows, CSV_COLUMNS, fmt)
        return
    title = "Where the GPU time goes" + (" (steady state)" if steady else "")
    emit_rows(rows, RANK_COLUMNS, fmt, title=title, wide=wide)
    say = echo_for(fmt)
    if not steady:
        say("Whole trace, start-up included (HTA's window); --steady counts only the steady-state steps.")
    for row in rows:
        label = f"rank {row['rank']} ({row['file']})"
        emit_rows(row["idle_by_stream"], STREAM_COLUMNS, fmt, title=f"Idle time per stream, {label}", wide=wide)
        if row["longest_idle"]:
            emit_rows(_idle_rows(row), IDLE_COLUMNS, fmt, title=f"Longest GPU idle stretches, {label}", wide=wide)
        say(f"{label}: {row['launch']['verdict']}")


def _idle_rows(row: dict[str, Any]) -> list[dict[str, Any]]:
    from profkit.report.text import cpu_activity

    zero = row["session_start_ns"]
    return [{**gap, "at": gap["start_ns"] - zero, "cpu": cpu_activity(gap)}
            for gap in row["longest_idle"]]
