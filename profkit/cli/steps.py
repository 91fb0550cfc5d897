"""`profkit steps TRACE`: the iterations of a run, its phases and the steady-state step time.

Thin command: take each rank's steps from ``profkit.api`` (as the Python API
does), render with profkit.output.
"""

from __future__ import annotations

from pathlib import Path

import click

from profkit.analysis.steps import headline
from profkit.analysis.steps.result import StepResult
from profkit.api import per_rank, steps_json, steps_of
from profkit.cli.per_rank import heading, rank_option
from profkit.model.clock import SESSION_START, session_zero
from profkit.output import Column, emit_rows, format_option, json_text, top_option, wide_option
from profkit.errors import ProfkitError
from profkit.readers.run_folder import RUN_JSON, read_run_record
from profkit.terminal import echo_for

STEP_TABLE = [
    Column("index", "Step", "int"), Column("phase", "Phase"), Column("start", f"Start ({SESSION_START})", "s"),
    Column("duration_ns", "Duration (ns)", "ns"), Column("gpu_busy_ns", "GPU busy (ns)", "ns"),
    Column("gpu_busy_pct", "GPU busy %", "pct"), Column("launches", "GPU ops", "int"),
]
STEP_CSV = [Column(k, k) for k in ("index", "start_ns", "end_ns", "duration_ns", "gpu_busy_ns", "phase",
                                   "cpu_start_ns", "cpu_end_ns", "launches", "name")]


@click.command()
@click.argument("trace_path", metavar="TRACE", type=click.Path(path_type=Path))
@click.option("--step-range", metavar="NAME", help="The range that marks one step (\"step\" also matches "
              "\"step 7\"); default: chosen among the ranges that repeat, else the launch pattern.")
@click.option("--no-ranges", is_flag=True, help="Ignore annotations: find steps from the repeating launch pattern.")
@top_option(50, "table/md: show the first N steps (0: all).  json/csv list every step.", minimum=0,
            old_names=("--limit",))
@rank_option
@wide_option()
@format_option()
def steps(trace_path: Path, step_range: str | None, no_ranges: bool, top: int, rank: int | None, wide: bool,
          fmt: str) -> None:
    """Steps: what one iteration is, its phases (start-up, warm-up, steady state, teardown), step times.

    \b
    Examples:
      profkit steps run.sqlite
      profkit steps trace.json.gz --format json | jq .summary
      profkit steps run.sqlite --no-ranges      # from the launch pattern only

    Steps come from the user's step ranges (NVTX or record_function names
    such as step/iter/batch, or torch.profiler's ProfilerStep#N; never a
    library's range such as NCCL: or CCCL:), otherwise from the repeating
    sequence of launched kernels, which needs no annotation.  Step times run
    from a step's first GPU operation to the next step's; the summary is over
    the steady state only.  Start: in seconds from the session start, the
    clock of every time profkit prints and `profkit export --window` takes.

    A multi-rank input (an export of a whole multi-GPU job, a folder of rank
    traces, a torchrun run folder) gives each rank's steps (json: a list,
    one object per rank; csv: a rank column); --rank N only rank N's.
    """
    answers = per_rank(trace_path, rank, lambda t: (steps_of(t, use_ranges=not no_ranges, step_range=step_range),
                                                    session_zero(t)))
    if fmt == "json":
        click.echo(json_text(answers.map(lambda v: steps_json(v[0])).json(), indent=2))
        return
    for answer in answers.items:
        result, zero = answer.value
        _emit(trace_path, answer.rank if answers.multi_rank else None, heading(answers, answer), result, top, fmt,
              zero, wide)


def _bare_run_sentence(path: Path) -> str | None:
    """A run folder's measured slowdown (``profkit trace --bare-run``), from its run.json."""
    if not (path.is_dir() and (path / RUN_JSON).is_file()):
        return None
    try:
        return read_run_record(path).get("recorded", {}).get("bare_run", {}).get("sentence")
    except (ProfkitError, AttributeError):
        return None


def _emit(trace_path: Path, rank: int | None, label: str, result: StepResult, limit: int, fmt: str,
          zero: int, wide: bool = False) -> None:
    rows = result.steps.to_dict(orient="records")
    for row in rows:
        row["start"] = row["start_ns"] - zero
        row["gpu_busy_pct"] = 100.0 * row["gpu_busy_ns"] / row["duration_ns"] if row["duration_ns"] else None
    if fmt == "csv":
        if rank is not None:
            for row in rows:
                row["rank"] = rank
        emit_rows(rows, ([Column("rank", "rank")] if rank is not None else []) + STEP_CSV, fmt)
        return
    say = echo_for(fmt)
    say(f"{trace_path.name}{', ' + label if label else ''}: {headline(result)}")
    measured = _bare_run_sentence(trace_path)
    if measured:
        say(f"Measured with --bare-run: {measured}.")
    if not rows:
        return
    shown = rows if limit == 0 or len(rows) <= limit else rows[:limit]
    emit_rows(shown, STEP_TABLE, fmt, wide=wide)
    if len(shown) < len(rows):
        say(f"({len(rows) - len(shown)} more steps: --top 0 shows all, --format csv lists them)")
