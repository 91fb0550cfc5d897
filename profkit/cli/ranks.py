"""`profkit ranks TRACES...`: one row per rank of a multi-GPU job, read in parallel on Dask.

Exit codes: 0 every rank read; 3 (``PARTIAL_EXIT``) some rank files could
not be read (they are named on stderr and in the JSON's ``failed``; the other
ranks are reported); 2 nothing usable (one line on stderr).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from profkit.cli.per_rank import rank_option
from profkit.output import Column, emit_rows, format_option, wide_option

PARTIAL_EXIT = 3

RANK_COLUMNS = [
    Column("rank", "Rank", "int"),
    Column("straggler", "Straggler"),
    Column("wait_per_step_ns", "Waits for it / step (ns)", "ns", drop=1),
    Column("comm_per_step_ns", "Comm / step (ns)", "ns", drop=1),
    Column("steps", "Steps", "int"),
    Column("step_median_ns", "Step median (ns)", "ns"),
    Column("kernel_ns", "Kernel time (ns)", "ns"),
    Column("compute_kernel_ns", "Compute kernels (ns)", "ns"),
    Column("comm_kernel_ns", "Comm kernels (ns)", "ns"),
    Column("memory_ns", "Memory (ns)", "ns"),
    Column("idle_ns", "Idle (ns)", "ns"),
    Column("comm_comp_overlap_pct", "Comm/comp overlap %", "pct"),
    Column("rank_source", "Rank from", drop=1),
    Column("file", "File", fit="left", drop=2),
]
# CSV and Markdown carry the sentence naming the straggler and its cause; the table prints it below.
EVIDENCE_COLUMN = Column("straggler_evidence", "Why it is the straggler", fit="wrap")

traces_argument = click.argument("traces", nargs=-1, required=True, type=click.Path(path_type=Path))
scheduler_option = click.option(
    "--scheduler", default=None, metavar="threads|processes|tcp://HOST:PORT",
    help="Where ranks are read: a local Dask cluster by default, or an existing dask.distributed scheduler.")
workers_option = click.option("--workers", type=click.IntRange(min=1), default=None,
                              help="Local workers (default: one per core, at most one per rank).")
job_rank_option = rank_option  # the one --rank of every command (cli/per_rank.py), by its older name
rank_from_option = click.option("--rank-from", "rank_from", default=None, metavar="REGEX",
                                help="Regex whose first group is the rank in each file name.")


def read_ranks(traces: tuple[Path, ...], scheduler: str | None, workers: int | None,
               rank_from: str | None) -> list[dict[str, Any]]:
    """Per-rank summaries, with their progress on stderr: a bar on a terminal (and a
    line per rank file not read), else one line per rank."""
    from profkit.api import ranks_json
    from profkit.terminal import ProgressBar

    done = 0
    bar = ProgressBar("reading ranks", total=len(traces))

    def progress(inp: Any, result: dict[str, Any], total: int) -> None:
        nonlocal done
        done += 1
        status = f"error: {result['error']}" if "error" in result else f"rank {result.get('rank')}"
        if "error" not in result and inp.job_rank is not None:  # one rank of a whole-job export
            status += f" (rank from: {result.get('rank_source')})"
        line = f"profkit: [{done}/{total}] {inp.path.name}: {status}"
        if bar.shown:
            bar.advance(total=total)
            if "error" in result:
                bar.print(line)
        else:
            click.echo(line, err=True)

    skipped: list[Path] = []
    try:
        return ranks_json(traces, scheduler=scheduler, workers=workers, rank_from=rank_from, on_done=progress,
                          skipped=skipped)
    finally:
        bar.close()
        if skipped:
            click.echo(f"profkit: skipped {len(skipped)} file{'s' if len(skipped) > 1 else ''} that hold no trace: "
                       f"{', '.join(str(p) for p in skipped)}", err=True)


def exit_for(summaries: list[dict[str, Any]]) -> int:
    from profkit.api import require_some_rank

    require_some_rank(summaries)
    return PARTIAL_EXIT if any("error" in s for s in summaries) else 0


@click.command()
@traces_argument
@format_option()
@wide_option()
@scheduler_option
@workers_option
@rank_from_option
def ranks(traces: tuple[Path, ...], fmt: str, wide: bool, scheduler: str | None, workers: int | None,
          rank_from: str | None) -> None:
    """One row per rank: the straggler, steps, kernel time by class, idle, comm/comp overlap.

    \b
    Straggler: the rank the others wait for, the one with the least time in
    NCCL kernels per steady step; "Waits for it": each other rank's extra
    NCCL time per step (means over the job's steady steps).  The sentence
    under the table names what makes it late: a kernel only it runs (or runs
    longer), or a Python line, sync site, data-loading function or OS call of
    its host.

    \b
    Kernel time: the sum of the rank's kernel durations (overlapping kernels
    counted each), as `nsys stats` totals it; Compute kernels and Comm
    kernels split it by HTA's kernel class.  Not `profkit breakdown`'s "GPU
    span" (first to last GPU operation) nor its "Compute %" (the time in
    which a computation kernel runs, overlaps counted once).  Memory: the
    durations of copies and sets.  Idle: HTA's idle time (breakdown's).

    \b
    TRACES are nsys exports and/or PyTorch profiler traces (one per rank), or
    folders of them, or one export of the whole job (`nsys profile torchrun
    ...`: one process per GPU), which is split into its ranks (the rank from
    NCCL's NVTX payloads where exported, else the device index, else the
    process order; "Rank from" says which).  Exit code 3 when some ranks could
    not be read.
    Examples:
      profkit ranks run/rank0.sqlite run/rank1.sqlite
      profkit ranks whole_job.sqlite
      profkit ranks traces/ --scheduler tcp://10.0.0.5:8786 --format json
    """
    from profkit.analysis.ranks.cross_rank import failed_ranks, straggler
    from profkit.api import rank_table_json
    from profkit.report.ranks import straggler_sentence
    from profkit.terminal import echo_for

    summaries = read_ranks(traces, scheduler, workers, rank_from)
    code = exit_for(summaries)
    rows = rank_table_json(summaries)  # the ranks, then a row per file not read
    if fmt == "json":
        emit_rows(rows, RANK_COLUMNS, fmt)
    else:
        readable = [r for r in rows if "error" not in r]
        columns = RANK_COLUMNS if fmt == "table" else [*RANK_COLUMNS, EVIDENCE_COLUMN]
        emit_rows(readable, columns, fmt, title="Ranks", wide=wide)
        sentence = straggler_sentence(straggler(summaries), len(readable)) if fmt == "table" else None
        if sentence:
            echo_for(fmt)(sentence)
    for f in failed_ranks(summaries):
        click.echo(f"profkit: rank file {f['file']} not read: {f['error']}", err=True)
    if code:
        sys.exit(code)
