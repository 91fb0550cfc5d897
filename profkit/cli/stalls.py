"""`profkit stalls TRACE|RUN_DIR`: every CPU-GPU synchronization, its Python line and its cost.

Thin command: find the trace (an nsys export, a PyTorch profiler trace, or
a `profkit trace` run folder; each rank of a multi-rank input), analyse it with
``profkit.api.stalls_of_trace`` (as the Python API does), render with profkit.output.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import click

from profkit.analysis.sync.stalls import StallReport, compare_steps
from profkit.api import per_rank, stalls_json, stalls_of_trace
from profkit.cli.per_rank import heading, rank_columns, rank_option, with_rank
from profkit.errors import ProfkitError
from profkit.output import json_text
from profkit.output import Column, emit_rows, format_option, md_escape, md_escape_prose, wide_option
from profkit.terminal import echo

# A narrow terminal keeps where (site), why (cause), how often and what it cost; the
# source line, API, CPU time and NVTX range go first, the NVTX range first of all.
SITE_COLUMNS = [
    Column("site", "Site", fit="left"), Column("code", "Code", drop=3), Column("cause", "Cause"),
    Column("api", "API", fit="wrap", drop=4),
    Column("count", "Syncs", "int"), Column("cpu_blocked_ns", "CPU blocked (ns)", "ns", drop=2),
    Column("gpu_idle_ns", "GPU idle (ns)", "ns"), Column("idle_per_step_ns", "Idle/step (ns)", "ns"),
    Column("one_time_gpu_idle_ns", "One-time idle (ns)", "ns", drop=3), Column("nvtx", "NVTX range", drop=5),
]
NVTX_COLUMNS = [
    Column("nvtx", "NVTX range"), Column("count", "Syncs", "int"), Column("sites", "Python sites", "int"),
    Column("source_unknown", "Source unknown", "int", drop=1), Column("cpu_blocked_ns", "CPU blocked (ns)", "ns"),
    Column("gpu_idle_ns", "GPU idle (ns)", "ns"), Column("apis", "APIs", fit="wrap", drop=2),
]
STEP_COLUMNS = [
    Column("run", "Run", fit="left"), Column("step_range", "Step range", drop=3),
    Column("count", "Steps", "int"), Column("median_ns", "Median (ns)", "ns"),
    Column("mean_ns", "Mean (ns)", "ns", drop=2), Column("syncs_per_step", "Syncs/step", "float"),
    Column("sync_gpu_idle_mean_ns", "Sync idle/step (ns)", "ns"),
    Column("estimated_median_without_syncs_ns", "Est. median w/o syncs (ns)", "ns", drop=1),
]


@click.command()
@click.argument("target", metavar="TRACE|RUN_DIR", type=click.Path(path_type=Path))
@rank_option
@click.option("--step-range", metavar="NAME",
              help="NVTX range that marks one step (\"step\" also matches \"step 7\"); "
                   "default: the most frequent top-level range that repeats.")
@click.option("--compare", "other", metavar="OTHER_EXPORT", type=click.Path(path_type=Path),
              help="Another export or run folder of the same program (the baseline): compare step times "
                   "(profkit diff's verdict and interval) and sync sites.")
@click.option("--threshold", type=click.FloatRange(min=0), default=5.0, show_default=True, metavar="PCT",
              help="Report a finding when syncs cost at least PCT % of the step time.")
@click.option("--force", is_flag=True, help="With --compare: compare even when the two runs share under half "
                                            "their kernel names (they look like different programs).")
@wide_option()
@format_option()
def stalls(target: Path, rank: int | None, step_range: str | None, other: Path | None, threshold: float, force: bool,
           wide: bool, fmt: str) -> None:
    """Synchronization stalls: each sync, its Python line, CPU time blocked, GPU idle caused.

    \b
    Examples:
      profkit stalls profkit-runs/train-20261122-143005
      profkit stalls print.sqlite --compare noprint.sqlite
      profkit stalls run.sqlite --format json | jq '.rows[0]'

    Finds cudaStreamSynchronize, cudaDeviceSynchronize, cudaEventSynchronize,
    cudaStreamWaitEvent, blocking copies and memsets, and copies followed by a
    sync; the Python line comes from `profkit trace --python-sync-sites`
    (syncs without one are "source unknown", grouped by API and NVTX range).

    \b
    CPU blocked: the time the thread spent inside the calls that wait for
      the GPU (an async copy to pinned memory costs only its launch).
    GPU idle caused: on the sync's device, from the end of the last GPU work
      started before the sync returned (no earlier than the sync's start)
      to the next GPU work after it: the GPU had nothing queued because
      the CPU was waiting.  None before the device's first kernel (start-up
      copies keep no work waiting); two syncs never count one ns twice.
      Only a call the CPU waited in causes idle (cudaStreamWaitEvent does
      not), and the idle ends where the thread starts to load GPU modules
      (cuLibraryLoadData, cuModuleLoad*) or to compile (torch.compile).
    Idle/step: GPU idle caused inside the steady-state steps (each step's
      GPU window), per steady step; its share is of the steady-state step time.
      Sites are listed by it, then by GPU idle caused in all (the report's
      table: in all).
    One-time idle: the rest, outside the steady steps: start-up, warm-up,
      teardown (a torch.cuda.synchronize() after the loop), never per step.
    --compare: the step-time verdict of `profkit diff` (steady-state medians,
      95% bootstrap interval; slower/faster only when the interval excludes 0
      and the change is at least 2%).

    \b
    JSON, with or without --compare, is one object:
      rows        the sync sites (source, code, api, count, cpu_blocked_ns,
                  gpu_idle_ns, nvtx, kind, cause, thread, per_step, ...)
      findings, by_nvtx, step_stats, step_range
                  the sentences, the syncs per NVTX range, the step times
      comparison  with --compare only: the step times of both runs (a, b),
                  change (profkit diff's verdict), finding, sites_only_in_a,
                  sites_only_in_b, and other_rows (OTHER_EXPORT's sites)
    csv: one line per sync site.  A multi-rank input (an export of a whole
    job, a folder of rank traces, a torchrun run folder): each rank's sites
    and steps (json: a list of these objects with rank; csv: a rank column;
    --rank N only rank N's; --compare takes one rank).
    """
    if other is not None:
        report, other_report = _compared(target, other, rank, step_range, threshold, force)
        comparison = compare_steps(report, other_report)
        if fmt == "json":
            out = {**stalls_json(report), "comparison": {**comparison, "other_rows": other_report.sites}}
            click.echo(json_text(out, indent=2, default=_plain))
        elif fmt == "csv":
            emit_rows(_site_rows(report), SITE_COLUMNS, fmt)
        else:
            _render(report, comparison, fmt, wide)
        return
    answers = per_rank(target, rank, lambda trace: stalls_of_trace(trace, target, step_range, threshold))
    if fmt == "json":
        click.echo(json_text(answers.map(stalls_json).json(), indent=2, default=_plain))
    elif fmt == "csv":
        emit_rows(with_rank(answers, _site_rows), rank_columns(answers, SITE_COLUMNS), fmt)
    else:
        for answer in answers.items:
            _render(answer.value, None, fmt, wide, label=heading(answers, answer))


def _compared(target: Path, other: Path, rank: int | None, step_range: str | None, threshold: float,
              force: bool) -> tuple[StallReport, StallReport]:
    """The stalls of TARGET and OTHER, one rank of each (refused when they look like two programs)."""
    from profkit.analysis.compare.same_program import check_traces
    from profkit.readers.job import open_job

    # each trace opened once: checked against the other, then analysed
    with open_job(target, rank) as a, open_job(other, rank) as b:
        for job, path in ((a, target), (b, other)):
            if job.multi_rank and rank is None:
                raise ProfkitError(f"{path.name} holds ranks {', '.join(map(str, job.ranks))}: "
                                   "--compare compares one rank", hint="pass --rank N")
        check_traces(a.traces[0], b.traces[0], force=force)
        return (stalls_of_trace(a.traces[0], target, step_range, threshold),
                stalls_of_trace(b.traces[0], other, step_range, threshold))


def _site_rows(report: StallReport) -> list[dict[str, Any]]:
    rows = []
    for site in report.sites:
        where = (f"{os.path.basename(site['file'] or '')}:{site['line']}" if site["source"]
                 else "source unknown")
        api = site["api"] + (f" ({site['copy_pattern']})" if site.get("copy_pattern") else "")
        per_step = site["per_step"]
        priced = per_step and (site["in_steps"] or per_step["gpu_idle_ns"])
        rows.append({**site, "site": where, "api": api,
                     "idle_per_step_ns": per_step["gpu_idle_ns"] if priced else None,
                     "one_time_gpu_idle_ns": site.get("one_time_gpu_idle_ns")})
    return rows


def _render(report: StallReport, comparison: dict[str, Any] | None, fmt: str, wide: bool = False,
            label: str = "") -> None:
    title = f"Synchronization stalls: {report.export}" + (f", {label}" if label else "")
    if fmt == "md":
        click.echo(f"## {md_escape(title)}\n")
        for finding in report.findings:  # names from the trace in it; the code stays a code span
            click.echo(f"- {md_escape_prose(finding)}")
        if report.findings:
            click.echo("")
    else:
        echo(title)
        for finding in report.findings:
            echo(finding, indent="  * ")
    if not report.events:
        click.echo("No synchronizations found.")
    else:
        columns = SITE_COLUMNS if report.steps else [c for c in SITE_COLUMNS if c.key != "idle_per_step_ns"]
        emit_rows(_site_rows(report), columns, fmt, title="Sync sites, by GPU idle caused per steady step",
                  wide=wide)
        click.echo("")
        emit_rows(report.by_nvtx, NVTX_COLUMNS, fmt, title="Per NVTX range", wide=wide)
    step_rows = [{"run": report.export, "step_range": report.step_range, **report.step_stats}] \
        if report.step_stats else []
    if comparison is not None:
        step_rows.append({"run": comparison["b"]["export"], **comparison["b"]})
    if step_rows:
        click.echo("")
        emit_rows(step_rows, STEP_COLUMNS, fmt, title="Steps", wide=wide)
    if comparison is not None:
        click.echo("")
        lines = [comparison["finding"]]
        for key, what in (("sites_only_in_a", comparison["a"]["export"]), ("sites_only_in_b", comparison["b"]["export"])):
            if comparison[key]:
                lines.append(f"sync sites only in {what}: " + "; ".join(comparison[key]))
        for line in lines:
            if fmt == "md":
                click.echo(f"- {md_escape_prose(line)}")
            else:
                echo(line, indent="  * ")


def _plain(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"not JSON serializable: {type(value).__name__}")
