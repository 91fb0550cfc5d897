"""`profkit export TRACE --to perfetto -o out.json.gz`: the trace as Chrome trace-event JSON.

Thin: parse the options, open each rank (``profkit.readers.job``), call ``profkit.export.perfetto``.
Perfetto (https://ui.perfetto.dev, in any browser, the file stays local)
and chrome://tracing open the result.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from profkit.cli.per_rank import rank_option
from profkit.errors import ProfkitError
from profkit.model.clock import parse_seconds

FORMATS = ("perfetto",)


def parse_window(text: str) -> tuple[int | None, int | None]:
    """'1.5:2.25' -> (1_500_000_000, 2_250_000_000) ns from the session start, exactly (as
    decimals: a time pasted from the report with its nine decimals is that nanosecond);
    either side may be left empty."""
    start, sep, end = text.partition(":")
    try:
        if not sep:
            raise ValueError
        return (parse_seconds(start) if start.strip() else None, parse_seconds(end) if end.strip() else None)
    except ValueError:
        raise ProfkitError(f"--window takes START:END in seconds from the session start, e.g. 1.5:2.0 "
                           f"(got {text!r})") from None


def parse_steps(text: str) -> tuple[int, int]:
    """'3:5' -> (3, 5), both included; '4' -> (4, 4)."""
    first, sep, last = text.partition(":")
    try:
        return (int(first), int(last if sep else first))
    except ValueError:
        raise ProfkitError(f"--steps takes A:B, step indices as `profkit steps` numbers them (got {text!r})") from None


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
def export(trace_path: Path, rank: int | None, fmt: str, output: Path | None, window: str | None, step_range: str | None) -> None:
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
    if window is not None and step_range is not None:
        raise ProfkitError("--window and --steps both cut the trace: give one of them")
    bounds = parse_window(window) if window is not None else None
    steps_wanted = parse_steps(step_range) if step_range is not None else None
    from profkit.readers.job import open_job

    out = output if output is not None else Path(f"{trace_path.name.split('.')[0]}.perfetto.json.gz")
    with open_job(trace_path, rank) as job:
        for trace in job.traces:
            target = out if rank is not None or not job.multi_rank else rank_file(out, trace.meta.rank)
            result = _export_one(trace, target, bounds, steps_wanted)
            label = f"rank {trace.meta.rank}: " if job.multi_rank else ""
            click.echo(f"{label}{result.path}: {result.events:,} events ({result.kernels:,} kernels, "
                       f"{result.flows:,} launch arrows); open it at https://ui.perfetto.dev")


def rank_file(out: Path, rank: int | None) -> Path:
    """OUT for one rank of several: ".rankN" after its stem (run.json.gz -> run.rank1.json.gz)."""
    stem, dot, suffixes = out.name.partition(".")
    return out.with_name(f"{stem}.rank{rank}{dot}{suffixes}")


def _export_one(trace: Any, out: Path, bounds: tuple[int | None, int | None] | None,
                steps_wanted: tuple[int, int] | None) -> Any:
    from profkit.export.perfetto import export_perfetto
    from profkit.export.tracks import step_table, steps_window, trace_span
    from profkit.model.clock import session_zero

    steps = step_table(trace)
    window_ns = None
    if bounds is not None:
        span = trace_span(trace)
        if span is not None:
            zero = session_zero(trace)
            # both ends included: the window of an idle stretch holds the operations on each side of it
            lo = span[0] if bounds[0] is None else zero + bounds[0]
            hi = span[1] + 1 if bounds[1] is None else zero + bounds[1] + 1
            window_ns = (lo, hi)
    elif steps_wanted is not None:
        window_ns = steps_window(steps, *steps_wanted)
    return export_perfetto(trace, out, window_ns=window_ns, steps=steps)
