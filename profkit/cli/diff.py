"""`profkit diff BASE NEW`: what a change did to a run, with a verdict you can gate CI on.

Exit codes: 0; 1 with ``--fail-on-regression PCT`` when the step time is
"slower" by at least PCT percent, with ``--fail-on-kernel-regression PCT`` when the
GPU kernel time per step is, and with ``--fail-on-memory-growth SIZE`` when
NEW's median per-step peak of allocated memory exceeds BASE's by more than SIZE
on a device (each gate that fired names itself in one line on stderr); 2 bad
input (one line), a SIZE profkit cannot read among them, and a gate on traces
that cannot answer it (too few steady steps for an interval; for memory, either
lacks allocator events, or steps).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from profkit.cli.kernel_code_options import kernel_target_options
from profkit.output import json_text
from profkit.output import Column, emit_rows, short_kernel_names, terminal_safe, top_option, wide_option
from profkit.terminal import echo, shorten, terminal_width

# "label": the kernel's short name (or its full name with --wide), as the summary above names it.
KERNEL_DIFF_COLUMNS = [
    Column("status", "Status"),
    Column("base_ns_per_step", "Base / step (ns)", "ns", drop=1),
    Column("new_ns_per_step", "New / step (ns)", "ns", drop=1),
    Column("delta_ns_per_step", "Δ / step (ns)", "ns"),
    Column("delta_pct", "Δ %", "pct", missing="—", drop=2),
    Column("registers", "Regs", "int", drop=3),
    Column("vector_grade", "Vectorized (128-bit share)", drop=4),
    Column("label", "Kernel", drop=-1),
]

CSV_COLUMNS = [Column(k, k) for k in ("kind", "status", "name", "api", "base", "new", "delta", "delta_pct", "unit")]


@click.command()
@click.argument("base", type=click.Path(path_type=Path))
@click.argument("new", type=click.Path(path_type=Path))
@click.option("--format", "fmt", type=click.Choice(["table", "json", "md", "csv"]), default="table", show_default=True,
              help="table: the verdict, its causes (syncs and sync sites, kernel time, the biggest changes) and "
                   "the kernels that changed most, fitted to the terminal; json: everything; md: a "
                   "pull-request comment; csv: one row per step time, kernel and sync site (kind, status, "
                   "name, api, base, new, delta, delta_pct, unit).")
@click.option("--fail-on-regression", "fail_pct", type=click.FloatRange(min=0), default=None, metavar="PCT",
              help="Exit 1 when NEW's step time is \"slower\" (the interval excludes 0) by at least PCT percent. "
                   "The interval is over each run's steps: on a shared machine two runs of one host-bound "
                   "program can differ by more, so gate a kernel change on --fail-on-kernel-regression.")
@click.option("--fail-on-kernel-regression", "fail_kernel_pct", type=click.FloatRange(min=0), default=None,
              metavar="PCT", help="Exit 1 when NEW's GPU kernel time per steady step is \"slower\" by at least PCT "
                                  "percent (measured on the device: little moved by a busy host).")
@click.option("--fail-on-memory-growth", "fail_size", default=None, metavar="SIZE",
              help="Exit 1 when NEW's median per-step peak of allocated memory exceeds BASE's by more than SIZE "
                   "(bytes, or e.g. 2GiB, 512MiB, 100MB); both traces must record the allocator "
                   "(torch.profiler's profile_memory=True).")
@click.option("--min-effect", "min_effect", type=click.FloatRange(min=0), default=None, metavar="PCT",
              help="Smallest step-time change that counts (default 2%).")
@click.option("--inductor", "code_dirs", multiple=True, type=click.Path(file_okay=False, path_type=Path),
              metavar="DIR", help="Inductor/Triton caches: add the machine code (registers, spills, "
                                  "vectorization) of the Triton kernels that changed (repeatable).")
@kernel_target_options
@click.option("--rank", "rank", type=click.IntRange(min=0), default=None, metavar="N",
              help="Of a multi-rank input (an export of a whole job, a folder of rank traces, a torchrun run "
                   "folder): compare rank N of each side; such an input needs it (a diff compares one rank).")
@click.option("--force", is_flag=True, help="Compare even when BASE and NEW share under half their kernel names "
                                            "(they look like different programs).")
@top_option(10, "table: list the N kernels whose time per step changed most (0: all).  json, csv and md "
                "list every kernel.", minimum=0)
@wide_option()
def diff(base: Path, new: Path, fmt: str, fail_pct: float | None, fail_kernel_pct: float | None,
         fail_size: str | None, min_effect: float | None,
         code_dirs: tuple[Path, ...], kernel_targets: Any, rank: int | None, force: bool, top: int,
         wide: bool) -> None:
    """Compare two traces of the same program: step time, kernels, sync sites, registers, breakdown.

    \b
    BASE and NEW are nsys exports or PyTorch profiler traces, in any mix.
    Examples:
      profkit diff before.sqlite after.sqlite
      profkit diff base.json.gz new.json.gz --format md >> "$GITHUB_STEP_SUMMARY"
      profkit diff base.sqlite new.sqlite --fail-on-regression 5
      profkit diff base.json.gz new.json.gz --fail-on-memory-growth 256MiB
      profkit diff whole_base.sqlite whole_new.sqlite --rank 1   # exports of a whole multi-GPU job

    An export of a whole multi-GPU job (one process per GPU) holds several
    ranks; --rank N compares its rank N (a file of one rank must be that rank, or
    record none and be asked for rank 0).

    \b
    Step time: the steady-state step durations' medians; the verdict is
      "slower"/"faster" only when the 95% bootstrap interval of the median's
      change excludes 0 and the change is at least --min-effect (2%), else
      "no change" (`report --baseline`, `stalls --compare` and `history`
      use the same model).
    Kernels: GPU time per steady step, by name across profilers (nsys and
      torch.profiler spell one kernel alike): new, gone, slower, faster,
      same, or changed (only its template arguments did; base_name in JSON).
    Peak memory: where both traces recorded the allocator (torch.profiler's
      profile_memory=True), each steady step's peak allocated (and reserved)
      bytes on the GPU (else the host allocator), compared by their medians
      as step time is: "higher"/"lower" when the interval excludes 0 and the
      change is at least 1 MiB or 1%, whichever is smaller; where every step
      of both runs peaks alike, the difference is exact and needs no interval.
    Two traces sharing under half their kernel names are refused (exit 2;
      --force compares them).  When the two sides come from different
      profilers, the first line says so and which side ran under
      torch.profiler's overhead (with_stack, record_shapes).
    """
    from profkit.analysis.compare.diff import regression_pct
    from profkit.analysis.compare.memory import growth_over
    from profkit.api import diff_json
    from profkit.output import parse_bytes
    from profkit.report.diff import change_rows, render_markdown

    max_growth = None if fail_size is None else parse_bytes(fail_size, "--fail-on-memory-growth")
    result = diff_json(base, new, rank=rank, force=force, min_effect_pct=min_effect, code_dirs=code_dirs,
                       kernel_targets=kernel_targets)
    if fmt == "json":
        click.echo(json_text(result, indent=2, default=float))
    elif fmt == "md":
        click.echo(render_markdown(result), nl=False)
    elif fmt == "csv":
        emit_rows(change_rows(result), CSV_COLUMNS, "csv")
    else:
        _print_table(result, top, wide)
    failed = []
    for figure, limit, what in (("step", fail_pct, "step time"), ("kernel_time", fail_kernel_pct,
                                                                  "GPU kernel time per step")):
        pct = None if limit is None else regression_pct(result, figure)
        if limit is not None and pct is not None and pct >= limit:
            failed.append(f"profkit: {what} regressed {pct:.1f}% (>= {limit:g}%)")
    grew = None if max_growth is None else growth_over(result["memory"], max_growth)
    if grew:
        failed.append(f"profkit: {grew}")
    if failed:
        click.echo("\n".join(failed), err=True)
        sys.exit(1)


def _print_table(result: dict[str, Any], top: int, wide: bool) -> None:
    """The verdict and its causes in a few lines, then the kernels that changed most."""
    from profkit.report.diff import render_text

    changed = sorted((k for k in result["kernels"] if k["status"] != "same"),
                     key=lambda k: -abs(k["delta_ns_per_step"] or 0))
    # one short name per kernel, the same in the summary and the table (--wide: the full names)
    # a kernel whose template arguments changed is told apart from its BASE spelling
    names = [k["name"] for k in changed] + [k["base_name"] for k in changed if k["status"] == "changed"]
    labels = dict(zip(names, names if wide else short_kernel_names(names)))
    room = max(24, terminal_width() // 2)  # a name takes at most half a summary line; the table shows more
    said = {n: label if wide else shorten(label, room) for n, label in labels.items()}
    for line in terminal_safe(render_text(result, said), lines=True).split("\n"):
        indent = "  - " if line.startswith("  - ") else ""
        echo(line[len(indent):], indent=indent, subsequent="    " if indent else "")
    if not changed:
        return
    shown = changed if top == 0 else changed[:top]
    columns = [c for c in KERNEL_DIFF_COLUMNS
               if c.key not in ("registers", "vector_grade") or any(k.get(c.key) is not None for k in shown)]
    emit_rows([{**k, "label": labels[k["name"]]} for k in shown], columns, "table",
              title="Kernels that changed (time per step)", wide=wide)
    if len(shown) < len(changed):
        echo(f"({len(changed) - len(shown)} more kernels changed: --top 0 lists them; --format csv lists every "
             "kernel)")
