"""`profkit diff BASE NEW`: what a change did to a run, with a verdict you can gate CI on.

Exit codes: 0; 1 with ``--fail-on-regression PCT`` when the step time is
"slower" by at least PCT percent; 2 bad input (one line).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from profkit.cli.kernel_code_options import kernel_target_options
from profkit.cli.ranks import job_rank_option
from profkit.errors import ProfkitError
from profkit.output import Column, emit_rows, terminal_safe

KERNEL_DIFF_COLUMNS = [
    Column("status", "Status"),
    Column("base_ns_per_step", "Base / step (ns)", "ns"),
    Column("new_ns_per_step", "New / step (ns)", "ns"),
    Column("delta_ns_per_step", "Δ / step (ns)", "ns"),
    Column("registers", "Regs", "int"),
    Column("vector_grade", "Vectorized (128-bit share)"),
    Column("name", "Kernel"),
]

CSV_COLUMNS = [Column(k, k) for k in ("kind", "status", "name", "api", "base", "new", "delta", "delta_pct", "unit")]


@click.command()
@click.argument("base", type=click.Path(path_type=Path))
@click.argument("new", type=click.Path(path_type=Path))
@click.option("--format", "fmt", type=click.Choice(["table", "json", "md", "csv"]), default="table", show_default=True,
              help="table: verdict, top changes and the kernels that changed; json: everything; md: a "
                   "pull-request comment; csv: one row per step time, kernel and sync site (kind, status, "
                   "name, api, base, new, delta, delta_pct, unit).")
@click.option("--fail-on-regression", "fail_pct", type=click.FloatRange(min=0), default=None, metavar="PCT",
              help="Exit 1 when NEW's step time is slower than BASE's by at least PCT percent.")
@click.option("--min-effect", "min_effect", type=click.FloatRange(min=0), default=None, metavar="PCT",
              help="Smallest step-time change that counts (default 2%).")
@click.option("--inductor", "code_dirs", multiple=True, type=click.Path(file_okay=False, path_type=Path),
              metavar="DIR", help="Inductor/Triton caches: add the machine code (registers, spills, "
                                  "vectorization) of the Triton kernels that changed (repeatable).")
@kernel_target_options
@job_rank_option
@click.option("--force", is_flag=True, help="Compare even when BASE and NEW share under half their kernel names "
                                            "(they look like different programs).")
def diff(base: Path, new: Path, fmt: str, fail_pct: float | None, min_effect: float | None,
         code_dirs: tuple[Path, ...], kernel_targets: Any, rank: int | None, force: bool) -> None:
    """Compare two traces of the same program: step time, kernels, sync sites, registers, breakdown.

    \b
    BASE and NEW are nsys exports or PyTorch profiler traces, in any mix.
    Examples:
      profkit diff before.sqlite after.sqlite
      profkit diff base.json.gz new.json.gz --format md >> "$GITHUB_STEP_SUMMARY"
      profkit diff base.sqlite new.sqlite --fail-on-regression 5
      profkit diff whole_base.sqlite whole_new.sqlite --rank 1   # exports of a whole multi-GPU job

    An export of a whole multi-GPU job (one process per GPU) holds several
    ranks; --rank N compares its rank N (with a file of one rank: that file).
    """
    from contextlib import ExitStack

    from profkit.analysis import noise
    from profkit.analysis.diff import check_comparable, diff_traces, regression_pct
    from profkit.model.rank_view import select_ranks
    from profkit.readers import open_trace
    from profkit.report.diff import change_rows, render_markdown, render_text

    with ExitStack() as stack:
        base_trace = _one_rank(select_ranks(stack.enter_context(open_trace(base)), rank), base)
        new_trace = _one_rank(select_ranks(stack.enter_context(open_trace(new)), rank), new)
        shared = check_comparable(base_trace, new_trace, force=force)
        result = diff_traces(base_trace, new_trace,
                             min_effect_pct=noise.MIN_EFFECT_PCT if min_effect is None else min_effect)
        result["kernel_names_shared_pct"] = 100.0 * shared
        if code_dirs or kernel_targets:
            from profkit.analysis.kernel_code import attach_code, launch_shapes
            from profkit.analysis.kernel_targets import code_for_trace

            # the variant that ran is told by NEW's launches (BASE's for a kernel that is gone);
            # --kernels compiles for NEW's GPU, for the block sizes NEW launched
            shapes = {**launch_shapes(base_trace), **launch_shapes(new_trace)}
            code, _ = code_for_trace(new_trace, [k["name"] for k in result["kernels"]], code_dirs, kernel_targets)
            result["kernels"] = attach_code(result["kernels"], code, shapes)
    if fmt == "json":
        click.echo(json.dumps(result, indent=2, default=float))
    elif fmt == "md":
        click.echo(render_markdown(result), nl=False)
    elif fmt == "csv":
        emit_rows(change_rows(result), CSV_COLUMNS, "csv")
    else:
        click.echo(terminal_safe(render_text(result), lines=True))
        changed = [k for k in result["kernels"] if k["status"] != "same"]
        if changed:
            emit_rows(changed[:30], KERNEL_DIFF_COLUMNS, "table", title="Kernels that changed (time per step)")
    pct = regression_pct(result)
    if fail_pct is not None and pct is not None and pct >= fail_pct:
        click.echo(f"profkit: step time regressed {pct:.1f}% (>= {fail_pct:g}%)", err=True)
        sys.exit(1)


def _one_rank(traces: list[Any], path: Path) -> Any:
    """The one trace to compare; a whole-job export needs --rank (a diff compares one rank)."""
    if len(traces) > 1:
        source = traces[0].meta.extra.get("rank_source")
        raise ProfkitError(f"{path.name} holds {len(traces)} ranks (rank from: {source}): "
                           "pass --rank N to compare one of them")
    return traces[0]
