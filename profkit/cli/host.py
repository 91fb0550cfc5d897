"""`profkit host TRACE`: host time per Python function per step, and the part during GPU idle.

Thin command: each rank's ``profkit.api.host_json`` (profkit.analysis.host.host_time and its verdict),
rendered with profkit.output.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from profkit.analysis.host.verdict import idle_text
from profkit.api import host_json, per_rank
from profkit.cli.per_rank import heading, rank_columns, rank_option, with_rank
from profkit.output import json_text
from profkit.output import Column, emit_rows, format_option, top_option, wide_option
from profkit.terminal import echo_for

TABLE = [Column("function", "Function"), Column("site", "File:line", fit="left"),
         Column("self_ns_per_step", "Self / step (ns)", "ns"),
         Column("inclusive_ns_per_step", "Inclusive / step (ns)", "ns"),
         Column("gpu_idle_ns_per_step", "GPU idle / step (ns)", "ns")]
CSV = [Column(k, k) for k in ("function", "file", "line", "self_ns_per_step", "inclusive_ns_per_step",
                              "gpu_idle_ns_per_step")]


@click.command()
@click.argument("trace_path", metavar="TRACE", type=click.Path(path_type=Path))
@rank_option
@click.option("--steady/--all-steps", default=True, show_default=True,
              help="The steady-state steps, as the report and `profkit steps` take them, or every step, warm-up "
                   "too (whose one-time work, such as library loading, can then outweigh what bounds a step).")
@top_option(25, "table/md: show the N functions with the most host time (0: all).  json/csv list every one.",
            minimum=0, old_names=("--limit",))
@wide_option()
@format_option()
def host(trace_path: Path, rank: int | None, steady: bool, top: int, wide: bool, fmt: str) -> None:
    """Host time per Python function per step, and the part of it during which the GPU was idle.

    \b
    Examples:
      profkit host trace.json.gz                   # torch.profiler with_stack=True
      profkit host trace.json.gz --all-steps       # warm-up steps too
      profkit host run.sqlite --format json        # nsys --python-sampling=true, exported with blobs

    Each instant of a step counts for the innermost Python frame then open on
    the main thread (the one holding the step ranges); GPU idle is the step
    minus the union of all GPU work, as in profkit steps.  A multi-rank input
    (an export of a whole job, a folder of rank traces, a torchrun run folder)
    gives each rank's (json: a list of these objects with rank; --rank N only
    rank N's).
    """
    answers = per_rank(trace_path, rank, lambda trace: host_json(trace, steady=steady))
    if fmt == "json":
        click.echo(json_text(answers.json(), indent=2))
        return
    if fmt == "csv":
        emit_rows(with_rank(answers, _function_rows), rank_columns(answers, CSV), fmt)
        return
    say = echo_for(fmt)
    for answer in answers.items:
        label = heading(answers, answer)
        out, s = answer.value, answer.value["summary"]
        said = out["verdict"]
        rows = _function_rows(out)
        say(f"{trace_path.name}{', ' + label if label else ''}: {said['sentence']}")
        # the median is the steps' one; idle is a mean (a total over the steps), so it is said as a share
        say(f"{s['steps']} {'steady-state ' if s['steady_only'] else ''}steps (steady median "
            f"{s['step_median_ns'] / 1e6:.2f} ms), {idle_text(s, said['idle_pct'])}")
        shown = rows if top == 0 else rows[:top]
        emit_rows(shown, TABLE, fmt, wide=wide)
        if len(shown) < len(rows):
            say(f"({len(rows) - len(shown)} more functions: --top 0 shows all)")
        if out["other_threads"]:
            click.echo("Other threads:")
            emit_rows(_function_rows({"functions": out["other_threads"][:top or None]}),
                      [Column("tid", "Thread", "int"), *TABLE], fmt, wide=wide)


def _function_rows(out: dict[str, Any]) -> list[dict[str, Any]]:
    return [{**r, "site": f"{Path(r['file']).name}:{r['line']}"} for r in out["functions"]]
