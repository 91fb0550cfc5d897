"""`profkit memory TRACE`: what holds the memory at each step's peak, what grows, what leaks
(profkit.analysis.memory).

Thin command: each rank's ``memory_report`` (``profkit.api.per_rank``) through ``profkit.api.memory_json`` (as the
Python API does), render with profkit.output.
"""

from __future__ import annotations

from pathlib import Path

import click

from profkit.analysis.memory import findings
from profkit.api import memory_json, per_rank
from profkit.cli.per_rank import heading, rank_option
from profkit.output import json_text
from profkit.output import Column, emit_rows, format_option, wide_option
from profkit.terminal import echo_for

STEP_COLUMNS = [
    Column("index", "Step", "int"), Column("phase", "Phase"),
    Column("peak_allocated_bytes", "Peak allocated", "bytes"), Column("peak_reserved_bytes", "Peak reserved", "bytes"),
    Column("end_allocated_bytes", "Allocated at end", "bytes"), Column("growth_bytes", "Growth", "bytes"),
]
# a driver-level trace (nsys --cuda-memory-usage) knows only the device memory the process held
DRIVER_STEP_COLUMNS = [Column("index", "Step", "int"), Column("phase", "Phase"),
                       Column("peak_reserved_bytes", "Peak device memory held", "bytes")]
SITE_COLUMNS = [Column("site", "Allocated at"), Column("bytes", "Live at the peak", "bytes"),
                Column("count", "Blocks", "int")]
CATEGORY_COLUMNS = [Column("category", "What it is"), Column("bytes", "Live at the peak", "bytes"),
                    Column("count", "Blocks", "int")]
LEAK_COLUMNS = [Column("site", "Allocated at"), Column("bytes_per_step", "Never freed, per step", "bytes"),
                Column("steps", "Steps", "int"), Column("bytes", "Total", "bytes")]


@click.command()
@click.argument("trace_path", metavar="TRACE", type=click.Path(path_type=Path))
@rank_option
@click.option("--steady", is_flag=True, help="The peak over the steady-state steps only.")
@click.option("--snapshot", "snapshot", type=click.Path(path_type=Path), default=None,
              help="A memory snapshot of the same run: splits an nsys --cuda-memory-usage trace's device memory "
                   "into PyTorch's caching allocator's and the libraries' (a profkit trace --memory run folder's "
                   "own snapshot is used by default).")
@wide_option()
@format_option()
def memory(trace_path: Path, rank: int | None, steady: bool, snapshot: Path | None, wide: bool, fmt: str) -> None:
    """Memory: each step's peak of allocated and reserved bytes, what holds the peak (allocation
    sites, and the forward / backward / optimizer step that allocated it), fragmentation, headroom,
    and the growth from step to step that makes a leak, with the sites that never free.

    \b
    Examples:
      profkit memory trace.json.gz              # torch.profiler(profile_memory=True)
      profkit memory trace.json.gz --steady --format json
      profkit memory memory_snapshot.pickle     # torch.cuda.memory._dump_snapshot
      profkit memory trace.sqlite --snapshot memory_snapshot.pickle   # nsys --cuda-memory-usage=true

    JSON: devices (one per allocator: "host" is device -1), each with steps, peak, held_by_site
    (site, bytes, count), held_by_phase (part, bytes: they add up to the peak), held_by_category
    (category, bytes, count: parameters, optimizer state, gradients, activations, ...; they add up
    to the peak), fragmentation_bytes,
    headroom and growth (leaking, growth_per_step_bytes, sites).  Sizes in bytes.
    Definitions: profkit.analysis.memory.
    """
    answers = per_rank(trace_path, rank, lambda trace: memory_json(trace, steady=steady, snapshot=snapshot))
    if fmt == "json":
        click.echo(json_text(answers.json(), indent=2))
        return
    say = echo_for(fmt)
    for answer in answers.items:
        report, label = answer.value, heading(answers, answer)
        if fmt != "csv":
            if label:
                say(f"{trace_path.name}, {label}:")
            for line in findings(report):
                say(line)
        for device in report["devices"]:
            where = f"{device['label']}, {label}" if label else device["label"]
            columns = DRIVER_STEP_COLUMNS if device.get("level") else STEP_COLUMNS
            if device["steps"] or fmt == "csv":
                emit_rows(device["steps"], columns, fmt, title=f"Memory per step ({where})", wide=wide)
            if fmt == "csv":
                continue
            emit_rows(device["held_by_category"], CATEGORY_COLUMNS, fmt, title=f"What the peak holds ({where})",
                      wide=wide)
            emit_rows(device["held_by_site"], SITE_COLUMNS, fmt, title=f"Where it was allocated ({where})", wide=wide)
            if device["growth"]["sites"]:
                emit_rows(device["growth"]["sites"], LEAK_COLUMNS, fmt, title=f"Leaking sites ({where})", wide=wide)
