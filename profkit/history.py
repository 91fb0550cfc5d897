"""Run history: a SQLite database of run summaries, and regressions across commits.

``add`` stores one run: its step summary and per-step samples (step time and
GPU kernel time per step), and the time
per step of its kernels (with per-step samples of the ``SAMPLED_KERNELS``
biggest).  ``trend`` reads one metric over the runs in the order they were
added and flags each run against a rolling baseline: the pooled samples of
the previous ``window`` runs that were not themselves flagged (a regression
must not become the baseline that hides the next one), compared with the
same noise model as `profkit diff` (``profkit.analysis.compare.noise``).

The database is written through sqlite-utils (tables ``runs`` and
``kernels``), so it is also easy to query by hand.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from profkit.analysis.compare import noise
from profkit.errors import ProfkitError
from profkit.model import Trace

SAMPLED_KERNELS = 50
DEFAULT_WINDOW = 3
STEP_MEDIAN = "step_median"
# GPU kernel time per steady step: what a kernel change moves, and immune to
# the host's run-to-run noise.  On the committed history fixtures (a
# launch-bound MLP loop on an H100) step medians of five runs of one program
# were 3.18, 2.24, 2.20, 3.38 and 3.25 ms — the host, not the program, moved
# them — while GPU time per step was 0.207 ms in every run but the one with a
# slowed kernel (1.218 ms).  So it is the default metric.
GPU_TIME = "gpu_time"
METRICS = f"{GPU_TIME}, {STEP_MEDIAN} or kernel:NAME"


@dataclass(frozen=True)
class TrendPoint:
    run_id: int
    label: str | None
    commit: str | None
    added_utc: str
    value_ns: float | None
    baseline_ns: float | None
    delta_pct: float | None
    verdict: str          # slower / faster / no change / baseline / missing
    regression: bool


def _db(path: Path):
    import sqlite_utils

    try:
        db = sqlite_utils.Database(path)
        db.execute("PRAGMA user_version").fetchall()
    except Exception as exc:  # sqlite3.DatabaseError for a file that is not SQLite
        raise ProfkitError(f"{path}: not a profkit history database ({exc})") from None
    return db


def run_summary(trace: Trace) -> dict[str, Any]:
    """What ``add`` stores of a trace: step figures and kernel time per steady step."""
    from profkit.analysis.compare.diff import kernel_step_table, step_samples

    result, durations, windows = step_samples(trace)
    kernels = kernel_step_table(trace, windows)  # by canonical name: nsys and Kineto runs line up
    display = kernels.attrs["display"]
    steps = max(len(windows), 1)
    per_key = kernels.groupby("name")["ns"].sum().sort_values(ascending=False) / steps
    gpu_per_step = _padded(kernels.groupby("step")["ns"].sum().to_numpy(), steps)
    sampled = set(per_key.index[:SAMPLED_KERNELS])
    samples = {key: _padded(group["ns"].to_numpy(), steps) for key, group in kernels.groupby("name")
               if key in sampled}
    return {
        "trace": trace.name, "source": trace.meta.source, "step_source": result.source,
        "steps": int(durations.size),
        "step_median_ns": float(np.median(durations)) if durations.size else None,
        "step_mean_ns": float(durations.mean()) if durations.size else None,
        "step_samples": durations.tolist(),
        "gpu_samples": gpu_per_step,
        # the name as the trace spells it, and the canonical key runs are matched on
        "kernels": [{"name": display.get(k, k), "key": k, "ns_per_step": float(v), "samples": samples.get(k)}
                    for k, v in per_key.items()],
    }


def _padded(values: np.ndarray, steps: int) -> list[float]:
    out = np.zeros(steps)
    out[: values.size] = values
    return out.tolist()


def git_head(folder: Path) -> str | None:
    """The commit checked out in ``folder``, when it is a git work tree."""
    try:
        done = subprocess.run(["git", "-C", str(folder), "rev-parse", "--verify", "--quiet", "HEAD"],
                              capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() or None if done.returncode == 0 else None


def add_run(db_path: Path, summary: dict[str, Any], *, label: str | None = None,
            commit: str | None = None, force: bool = False) -> int:
    """Store a run; refused when it looks like another program than the history's last run
    (``profkit.analysis.compare.same_program``) unless ``force``."""
    db = _db(db_path)
    check_against_last(db, summary, force=force)
    row = {"label": label, "commit": commit, "added_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
           "trace": summary["trace"], "source": summary["source"], "step_source": summary["step_source"],
           "steps": summary["steps"], "step_median_ns": summary["step_median_ns"],
           "step_mean_ns": summary["step_mean_ns"], "step_samples": json.dumps(summary["step_samples"]),
           "gpu_samples": json.dumps(summary["gpu_samples"])}
    runs = db["runs"]
    runs.insert(row, pk="id", alter=True)
    run_id = int(runs.last_pk)
    db["kernels"].insert_all(
        ({"run_id": run_id, "name": k["name"], "key": k["key"], "ns_per_step": k["ns_per_step"],
          "samples": json.dumps(k["samples"]) if k["samples"] is not None else None} for k in summary["kernels"]),
        alter=True, foreign_keys=[("run_id", "runs", "id")])
    db["kernels"].create_index(["run_id", "name"], if_not_exists=True)
    return run_id


def check_against_last(db: Any, summary: dict[str, Any], *, force: bool = False) -> None:
    """Refuse a run whose kernels look like another program than the last run's."""
    from profkit.analysis.compare.same_program import check_same_program

    if "runs" not in db.table_names() or "kernels" not in db.table_names():
        return
    last = list(db.query("SELECT id, trace FROM runs ORDER BY id DESC LIMIT 1"))
    if not last:
        return
    keys = _run_keys(db, last[0]["id"])
    if keys:
        check_same_program(summary["trace"], {k["key"] for k in summary["kernels"]},
                           f"the history's last run ({last[0]['trace']})", keys, force=force)


def _run_keys(db: Any, run_id: int) -> set[str]:
    """A stored run's canonical kernel names (worked out from the names in a history
    written before keys were stored)."""
    from profkit.analysis.kernels.names import canonical_kernel_name

    has_key = "key" in db["kernels"].columns_dict
    rows = db.query(f"SELECT name{', key' if has_key else ''} FROM kernels WHERE run_id = ?", [run_id])
    return {r.get("key") or canonical_kernel_name(r["name"]) for r in rows}


def trend(db_path: Path, metric: str = GPU_TIME, window: int = DEFAULT_WINDOW,
          min_effect_pct: float = noise.MIN_EFFECT_PCT) -> list[TrendPoint]:
    """The metric over all runs, oldest first, each flagged against its rolling baseline."""
    if not db_path.exists():
        raise ProfkitError(f"{db_path}: no history yet", hint="add runs with: profkit history add RUN")
    db = _db(db_path)
    if "runs" not in db.table_names():
        raise ProfkitError(f"{db_path}: no runs in this history", hint="add runs with: profkit history add RUN")
    runs = list(db.query("SELECT * FROM runs ORDER BY id"))
    if metric.startswith("kernel:"):
        metric = "kernel:" + resolve_kernel(db, metric[len("kernel:"):])
    samples = [_samples(db, run, metric) for run in runs]
    points: list[TrendPoint] = []
    clean: list[int] = []  # indexes of earlier runs not flagged
    for i, run in enumerate(runs):
        values = samples[i]
        value = float(np.median(values)) if values is not None and len(values) else None
        base_runs = clean[-window:]
        if value is None:
            points.append(TrendPoint(run["id"], run["label"], run["commit"], run["added_utc"], None, None, None,
                                     "missing", False))
            continue
        if not base_runs:
            points.append(TrendPoint(run["id"], run["label"], run["commit"], run["added_utc"], value, None, None,
                                     "baseline", False))
            clean.append(i)
            continue
        pooled = np.concatenate([samples[j] for j in base_runs])
        change = noise.compare(pooled, values, min_effect_pct=min_effect_pct)
        flagged = change.verdict == noise.SLOWER
        points.append(TrendPoint(run["id"], run["label"], run["commit"], run["added_utc"], value,
                                 change.base_median, change.delta_pct, change.verdict, flagged))
        if not flagged:
            clean.append(i)
    return points


CANDIDATES_SHOWN = 8


def resolve_kernel(db: Any, name: str) -> str:
    """The stored kernel that ``kernel:NAME`` names: NAME itself (or its canonical
    name), else the one kernel whose short name or base name (as tables show it) is
    NAME, else the one whose short, base or full name starts with NAME.  Several
    kernels -> ProfkitError listing them; none -> ProfkitError."""
    from profkit.analysis.kernels.names import canonical_kernel_name
    from profkit.output import kernel_base_name, short_kernel_names

    if "kernels" not in db.table_names():
        return name
    has_key = "key" in db["kernels"].columns_dict
    stored = list(db.query(f"SELECT DISTINCT name{', key' if has_key else ''} FROM kernels ORDER BY name"))
    key_of = {r["name"]: r.get("key") or canonical_kernel_name(r["name"]) for r in stored}
    if name in key_of or canonical_kernel_name(name) in key_of.values():
        return name
    names = list(key_of)
    short = dict(zip(names, short_kernel_names(names)))
    tiers = (lambda n: name in (short[n], kernel_base_name(n)),
             lambda n: any(s.startswith(name) for s in (short[n], kernel_base_name(n), n)))
    for matches in tiers:
        found = [n for n in names if matches(n)]
        if len({key_of[n] for n in found}) == 1:  # one kernel, whichever profiler spelled it
            return found[0]
        if found:
            labels = sorted({short[n] for n in found})
            shown = ", ".join(labels[:CANDIDATES_SHOWN]) + (", …" if len(labels) > CANDIDATES_SHOWN else "")
            raise ProfkitError(f"kernel:{name} matches {len(labels)} kernels: {shown}",
                               hint="give one of these names, or more of the name")
    raise ProfkitError(f"no kernel {name!r} in the history",
                       hint="kernel:NAME takes a name as `profkit kernels` shows it, or its start")


def _samples(db: Any, run: dict[str, Any], metric: str) -> np.ndarray | None:
    if metric == STEP_MEDIAN:
        return np.asarray(json.loads(run["step_samples"] or "[]"), dtype=np.float64)
    if metric == GPU_TIME:
        return np.asarray(json.loads(run.get("gpu_samples") or "[]"), dtype=np.float64)
    if metric.startswith("kernel:"):
        from profkit.analysis.kernels.names import canonical_kernel_name

        # by canonical name: a kernel is found whichever profiler's spelling NAME and each run use
        name = metric[len("kernel:"):]
        if "key" in db["kernels"].columns_dict:  # rows of an older profkit have no key: their name
            rows = list(db.query("SELECT ns_per_step, samples FROM kernels WHERE run_id = ? AND "
                                 "(key = ? OR (key IS NULL AND name = ?))",
                                 [run["id"], canonical_kernel_name(name), name]))
        else:
            rows = list(db.query("SELECT ns_per_step, samples FROM kernels WHERE run_id = ? AND name = ?",
                                 [run["id"], name]))
        if not rows:
            return None
        if rows[0]["samples"]:
            return np.asarray(json.loads(rows[0]["samples"]), dtype=np.float64)
        return np.asarray([rows[0]["ns_per_step"]], dtype=np.float64)
    raise ProfkitError(f"unknown metric {metric!r}: use {METRICS}")


def trend_png(points: list[TrendPoint], metric: str) -> bytes:
    from profkit.report.figures import plt, png_bytes

    xs = list(range(1, len(points) + 1))
    ys = [p.value_ns / 1e6 if p.value_ns is not None else np.nan for p in points]
    fig, ax = plt.subplots(figsize=(9, 3.2), dpi=100)
    ax.plot(xs, ys, marker="o", color="#1f6fb4")
    bad = [(x, y) for x, y, p in zip(xs, ys, points) if p.regression]
    if bad:
        ax.scatter([b[0] for b in bad], [b[1] for b in bad], color="#d1495b", zorder=3, s=60, label="regression")
        ax.legend(loc="upper left")
    ax.set_xticks(xs, [(p.label or (p.commit or "")[:8] or str(p.run_id)) for p in points], rotation=30,
                  fontsize=8)
    ax.set_ylabel("ms")
    ax.set_title(metric, fontsize=9)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return png_bytes(fig)
