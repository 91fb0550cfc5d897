"""`profkit export TRACE --to perfetto -o out.json.gz`: the trace as Chrome trace-event JSON.

Thin: parse the options, open each rank (``profkit.readers.job``), write each with
``profkit.api.export_file`` (``profkit.export.perfetto``), as the Python API does.
Perfetto (https://ui.perfetto.dev, in any browser, the file stays local)
and chrome://tracing open the result.
"""

from __future__ import annotations

from pathlib import Path

import click

from profkit.api import parse_steps, parse_window
from profkit.cli.per_rank import rank_option
from profkit.errors import ProfkitError

__all__ = ["export", "parse_steps", "parse_window"]

FORMATS = ("perfetto",)


@click.command()
@click.argument("trace_path", metavar="TRACE", type=click.Path(path_type=Path))
@click.option("--to", "fmt", default="perfetto", show_default=True, metavar="FORMAT",
              help="Output format: perfetto (Chrome trace-event JSON, which Perfetto and chrome://tracing open).")
@click.option("-o", "--output", type=click.Path(path_type=Path), default=None, metavar="OUT.json[.gz]",
              help="File to write; gzip-compressed when it ends in .gz (default: TRACE's name + .perfetto.json.gz "
                   "in the current folder).")
@click.option("--window", default=None, metavar="START:END",
              help="Only events overlapping this window, both ends included, in seconds from the session "
                   "start: the clock of every time profkit prints (the report's idle stretches and timelines, "
                   "`profkit steps`, `profkit breakdown`): a time copied from them can be pasted here.")
@click.option("--steps", "step_range", default=None, metavar="A:B",
              help="Only steps A to B (both included, numbered as by `profkit steps`).")
@rank_option
def export(trace_path: Path, rank: int | None, fmt: str, output: Path | None, window: str | None,
           step_range: str | None) -> None:
    """Write a trace (nsys export or PyTorch profiler trace) as a Perfetto/Chrome trace.

    \b
    Examples:
      profkit export run.sqlite -o run.json.gz          # then open it in ui.perfetto.dev
      profkit export run.sqlite -o part.json --window 2.5:2.8
      profkit export trace.json.gz -o steps.json.gz --steps 10:12

    GPU streams with kernels, copies and sets; CPU threads with CUDA calls and
    NVTX/record_function ranges; arrows from each launch to its kernel;
    Python sync sites by file:line; the training steps; GPU busy % over time.
    Written to a temporary file and renamed when complete.

    Times (--window, and every time profkit prints): seconds from the session
    start.  For an nsys export that is its time 0, the session's start
    (`profkit info`: session_start_utc; the capture itself may begin later,
    as the report's Capture section says); for a PyTorch profiler trace, the
    start of the profiler's span.

    A multi-rank input (an export of a whole job, a folder of rank traces, a
    torchrun run folder) is written one file per rank, OUT with ".rankN"
    after its stem (run.rank1.json.gz); --rank N writes rank N's to OUT.
    """
    if fmt not in FORMATS:
        raise ProfkitError(f"unknown export format {fmt!r}", hint=f"--to takes: {', '.join(FORMATS)}")
    from profkit.api import export_file
    from profkit.readers.job import open_job

    out = output if output is not None else Path(f"{trace_path.name.split('.')[0]}.perfetto.json.gz")
    with open_job(trace_path, rank) as job:
        for trace in job.each():
            done = export_file(trace, out, job.multi_rank and rank is None, window=window, steps=step_range)
            label = f"rank {trace.meta.rank}: " if job.multi_rank else ""
            click.echo(f"{label}{done['path']}: {done['events']:,} events ({done['kernels']:,} kernels, "
                       f"{done['flows']:,} launch arrows); open it at https://ui.perfetto.dev")
