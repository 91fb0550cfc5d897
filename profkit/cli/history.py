"""`profkit history add|show`: keep run summaries in a SQLite database and watch the trend."""

from __future__ import annotations

from pathlib import Path

import click

from profkit.output import json_text
from profkit.output import Column, deprecated_alias, emit_rows, format_option, wide_option
from profkit.terminal import echo

DEFAULT_DB = Path("profkit-history.db")
db_option = click.option("--db", "db_path", type=click.Path(dir_okay=False, path_type=Path), default=DEFAULT_DB,
                         show_default=True, help="The history database (SQLite, created on first add).")

TREND_COLUMNS = [
    Column("run_id", "Run", "int"),
    Column("label", "Label"),
    Column("commit", "Commit", drop=2),
    Column("value_ns", "Value (ns)", "ns"),
    Column("baseline_ns", "Baseline (ns)", "ns", drop=1),
    Column("value_bytes", "Value (bytes)", "int"),
    Column("baseline_bytes", "Baseline (bytes)", "int", drop=1),
    Column("delta_pct", "Δ %", "pct"),
    Column("verdict", "Verdict"),
    Column("regression", "Regression"),
    # the run's median per-step peaks, whatever the metric (shown where some run recorded memory)
    Column("peak_allocated_bytes", "Peak allocated", "bytes", drop=3),
    Column("peak_reserved_bytes", "Peak reserved", "bytes", drop=3),
]


@click.group()
def history() -> None:
    """Run history: `add` a run after each commit, `show` the trend and its regressions."""


@history.command()
@click.argument("run", type=click.Path(path_type=Path))
@click.option("--label", default=None, help="A name for this run (default: the commit or the file name).")
@click.option("--commit", default=None, metavar="SHA", help="The commit the run was made from "
              "(default: run.json's, else the current folder's git HEAD).")
@click.option("--force", is_flag=True, help="Add the run even when it shares under half its kernel names with "
                                            "the history's last run (it looks like another program).")
@db_option
def add(run: Path, label: str | None, commit: str | None, force: bool, db_path: Path) -> None:
    """Store RUN (a trace, or a `profkit trace` run folder) in the history."""
    from profkit.history import add_run, git_head, run_summary
    from profkit.readers import open_trace

    trace_path, run_info = _resolve_run(run)
    with open_trace(trace_path) as trace:
        summary = run_summary(trace)
    commit = commit or _recorded_commit(run_info) or git_head(Path.cwd())
    run_id = add_run(db_path, summary, label=label or (commit[:12] if commit else trace_path.name), commit=commit,
                     force=force)
    from profkit.analysis.memory import size

    said = f"run {run_id}: {summary['steps']} steps, median " \
        f"{summary['step_median_ns'] / 1e6:.3f} ms" if summary["step_median_ns"] else f"run {run_id}: no steps"
    if summary["peak_allocated_bytes"] is not None:
        reserved = summary["peak_reserved_bytes"]
        said += f", peak memory {size(int(summary['peak_allocated_bytes']))} allocated" + (
            f", {size(int(reserved))} reserved" if reserved is not None else "") + " (median per step)"
    click.echo(said)


@history.command()
@click.option("--metric", default="gpu_time", show_default=True,
              metavar="gpu_time|step_median|peak_memory|peak_reserved|kernel:NAME",
              help="gpu_time: GPU kernel time per steady step (immune to host noise); step_median: step time; "
                   "peak_memory / peak_reserved: each steady step's peak of allocated / reserved bytes (runs "
                   "recorded with profile_memory=True; a run is flagged when its peak is higher); "
                   "kernel:NAME: one kernel's time per step (NAME as `profkit kernels` shows it, its full "
                   "name, or the start of either, if only one kernel matches).")
@click.option("--last", "last", type=click.IntRange(min=1), default=3, show_default=True, metavar="N",
              help="Compare each run with the N runs before it (the rolling baseline; flagged runs left out).")
@deprecated_alias("--window", "--last", "last", click.IntRange(min=1))
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Where to write the trend plot (default: next to the database).")
@format_option()
@wide_option()
@db_option
def show(metric: str, last: int, plot_path: Path | None, fmt: str, wide: bool, db_path: Path) -> None:
    """The metric over the runs, each flagged against the runs before it."""
    from dataclasses import asdict

    from profkit.atomic import write_bytes
    from profkit.history import MEMORY_METRICS, trend, trend_png

    points = trend(db_path, metric, last)
    rows = [asdict(p) for p in points]
    plot_path = plot_path or db_path.with_suffix(".png")
    write_bytes(plot_path, trend_png(points, metric))
    if fmt == "json":
        click.echo(json_text({"metric": metric, "plot": str(plot_path), "runs": rows}, indent=2))
        return
    # the value in the metric's unit; each run's peaks where some run recorded them
    hidden = {"value_ns", "baseline_ns"} if metric in MEMORY_METRICS else {"value_bytes", "baseline_bytes"}
    hidden |= {k for k in ("peak_allocated_bytes", "peak_reserved_bytes") if all(r[k] is None for r in rows)}
    shown = [c for c in TREND_COLUMNS if c.key not in hidden]
    emit_rows([{**r, "regression": "yes" if r["regression"] else "no"} for r in rows], shown, fmt,
              title=f"{metric} over {len(rows)} runs", wide=wide)
    flagged = [p for p in points if p.regression]
    echo(f"{len(flagged)} regression(s)" + (": " + ", ".join(f"run {p.run_id} ({p.label})" for p in flagged)
                                            if flagged else "") + f"; plot: {plot_path}", err=True)


def _recorded_commit(run_info: dict | None) -> str | None:
    """run.json's commit as text: a hash of digits only may have been written as a JSON number."""
    from profkit.errors import ProfkitError

    value = (run_info or {}).get("commit")
    if value is None or value == "":
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise ProfkitError(f"run.json's commit is {type(value).__name__}, not a commit hash",
                           hint="give it with --commit SHA")
    text = value if isinstance(value, str) else str(value) if abs(value) < 10 ** 64 else ""
    if not text or len(text) > 64:
        raise ProfkitError("run.json's commit is too long for a commit hash", hint="give it with --commit SHA")
    return text


def _resolve_run(run: Path) -> tuple[Path, dict | None]:
    """A run folder's trace and run.json, or the trace itself."""
    from profkit.readers.run_folder import read_run_record, run_folder_trace

    trace = run_folder_trace(run) if run.is_dir() else None
    if trace is None:
        return run, None
    info = read_run_record(run)
    return trace, info if isinstance(info, dict) else None
