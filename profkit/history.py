"""Run history: a SQLite database of run summaries, and regressions across commits.

``add`` stores one run: its step summary and per-step samples (step time and
GPU kernel time per step), the time
per step of its kernels (with per-step samples of the ``SAMPLED_KERNELS``
biggest), and, where the trace recorded the allocator, its peak memory: each
steady step's peak of allocated and reserved bytes and their medians (the GPU
whose median peak is highest, else the host allocator).  ``trend`` reads one
metric over the runs in the order they were added and flags each run against
a rolling baseline: the pooled samples of the previous ``window`` runs that
were not themselves flagged (a regression must not become the baseline that
hides the next one), compared with the same noise model as `profkit diff`
(``profkit.analysis.compare.noise``; for peak memory, the same rules in bytes:
``profkit.analysis.compare.memory``).

The database is written through sqlite-utils (tables ``runs`` and
``kernels``), so it is also easy to query by hand.  It is input like a
trace (a history may come from CI or a colleague): it is opened through
``profkit.readers.sqlite_input`` (no view or trigger runs, a time budget, a
stop on signals), a file profkit did not write is refused (its
``application_id``), and every value read back is checked (types, and sample
lists: flat, finite, at most ``PROFKIT_MAX_SAMPLES``).
"""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from profkit.analysis.compare import noise
from profkit.errors import ProfkitError
from profkit.limits import VARIABLES, LimitExceeded
from profkit.limits import current as current_limits
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
# Peak memory per steady step: the median of the steps' peaks of allocated (reserved) bytes.
PEAK_MEMORY = "peak_memory"
PEAK_RESERVED = "peak_reserved"
MEMORY_METRICS = {PEAK_MEMORY: "peak_allocated_samples", PEAK_RESERVED: "peak_reserved_samples"}
METRICS = f"{GPU_TIME}, {STEP_MEDIAN}, {PEAK_MEMORY}, {PEAK_RESERVED} or kernel:NAME"


@dataclass(frozen=True)
class TrendPoint:
    run_id: int
    label: str | None
    commit: str | None
    added_utc: str
    # the metric's median and its baseline's: in ns for a time metric, in bytes for peak memory
    # (the other pair is None)
    value_ns: float | None
    baseline_ns: float | None
    value_bytes: float | None
    baseline_bytes: float | None
    delta_pct: float | None
    verdict: str          # slower / faster (higher / lower for memory) / no change / baseline / missing
    regression: bool
    peak_allocated_bytes: float | None  # the run's median per-step peaks, whatever the metric
    peak_reserved_bytes: float | None

    @property
    def value(self) -> float | None:
        return self.value_ns if self.value_bytes is None else self.value_bytes


# -- the database: opened like a trace, and checked as it is read ----------------------------------------
# PRAGMA application_id of a history profkit wrote ("pkHi"); a file with another one, or with a view
# or trigger, is not one, and is refused before any of its rows is read.
APPLICATION_ID = 0x706B4869
# Tables of a history; sqlite_sequence is SQLite's own.  A history written before the mark (id 0)
# is taken when it holds nothing else.
HISTORY_TABLES = {"runs", "kernels"}
_NOT_HISTORY_HINT = "give --db a file that `profkit history add` made"


class HistoryDb:
    """An open history database: a guarded connection (``profkit.readers.sqlite_input``) and
    ``query``/``write``, which turn any SQLite failure into one line."""

    def __init__(self, path: Path, conn: Any) -> None:
        self.path = path
        self.conn = conn

    def tables(self) -> set[str]:
        return {str(r[0]) for r in self.query("SELECT name FROM sqlite_master WHERE type = 'table'")}

    def columns(self, table: str) -> set[str]:
        return {str(r[1]) for r in self.query(f"PRAGMA table_info({table})")}

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
        from profkit.readers.sqlite_input import restart_budget

        restart_budget(self.conn)
        try:
            return self.conn.execute(sql, params).fetchall()
        except (sqlite3.Error, UnicodeDecodeError) as exc:
            raise self.failure(exc) from None

    def failure(self, exc: BaseException) -> ProfkitError:
        from profkit.readers.sqlite_input import is_interrupted, stopped_query

        if is_interrupted(exc):
            return stopped_query(self.conn, self.path)
        if isinstance(exc, UnicodeDecodeError):
            return ProfkitError(f"{self.path}: text that is not UTF-8 in the history")
        # the guard denied a view or trigger that the check at open did not see
        if "not authorized" in str(exc) or "prohibited" in str(exc):
            return ProfkitError(f"{self.path}: not a profkit history database (it runs its own SQL)",
                                hint=_NOT_HISTORY_HINT)
        return ProfkitError(f"{self.path}: damaged or not a profkit history database ({exc})",
                            hint=_NOT_HISTORY_HINT)

    def close(self) -> None:
        self.conn.close()


def _db(path: Path, *, write: bool = False) -> HistoryDb:
    """Open the history at ``path`` (``write``: created when missing) and check that profkit wrote it."""
    from profkit.readers.sqlite_input import SQLITE_MAGIC, code_objects, connect

    try:
        with open(path, "rb") as fh:
            header = fh.read(len(SQLITE_MAGIC))
    except FileNotFoundError:
        header = None
    except IsADirectoryError:
        raise ProfkitError(f"{path} is a directory, not a history database") from None
    except OSError as exc:
        raise ProfkitError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if header is None and not write:
        raise ProfkitError(f"{path}: no history yet", hint="add runs with: profkit history add RUN")
    if header and header != SQLITE_MAGIC:
        raise ProfkitError(f"{path} is not an SQLite database", hint=_NOT_HISTORY_HINT)
    try:
        db = HistoryDb(path, connect(path, read_only=not write))
    except sqlite3.Error as exc:
        raise ProfkitError(f"{path}: cannot open ({exc})") from None
    try:
        code = code_objects(db.conn)
        (app_id,) = db.query("PRAGMA application_id")[0]
    except (sqlite3.Error, ProfkitError) as exc:
        db.close()
        raise exc if isinstance(exc, ProfkitError) else db.failure(exc) from None
    if code:
        db.close()
        kinds = ", ".join(f"{kind} {name!r}" for kind, name in code[:3])
        raise ProfkitError(f"{path}: not a profkit history database (it holds {kinds}; profkit writes "
                           "tables only)", hint=_NOT_HISTORY_HINT)
    tables = db.tables() - {"sqlite_sequence"}
    legacy = app_id == 0 and tables <= HISTORY_TABLES and (not tables or "runs" in tables)
    if app_id != APPLICATION_ID and not legacy:
        db.close()
        raise ProfkitError(f"{path}: not a profkit history database (application_id {app_id}, tables "
                           f"{', '.join(sorted(tables)) or 'none'})", hint=_NOT_HISTORY_HINT)
    return db


def _sqlite_utils(db: HistoryDb) -> Any:
    import sqlite_utils

    return sqlite_utils.Database(db.conn)


# What one run row holds, column by column: the types a value read back may have.
_TEXT, _REAL = (str, type(None)), (float, type(None))
RUN_COLUMNS = {"id": (int,), "label": _TEXT, "commit": _TEXT, "added_utc": _TEXT, "trace": _TEXT,
               "source": _TEXT, "step_source": _TEXT, "steps": (int, type(None)), "step_median_ns": _REAL,
               "step_mean_ns": _REAL, "step_samples": _TEXT, "gpu_samples": _TEXT,
               "peak_allocated_bytes": _REAL, "peak_reserved_bytes": _REAL, "peak_allocated_samples": _TEXT,
               "peak_reserved_samples": _TEXT}
SAMPLE_COLUMNS = ("step_samples", "gpu_samples", "peak_allocated_samples", "peak_reserved_samples")
# A stored list of samples is a flat JSON list of numbers, as add_run writes it: checked with this
# pattern before it is parsed, so no nesting or object reaches the JSON parser.
_FLAT_NUMBERS = re.compile(r"\s*\[[-+0-9.eE,\s]*\]\s*")
# Characters of one sample as json.dumps writes a float ("-1.2345678901234567e-300, ").
SAMPLE_CHARS = 32


def _checked_run(db: HistoryDb, row: tuple, names: Sequence[str]) -> dict[str, Any]:
    from profkit.readers.sqlite_input import typed

    out: dict[str, Any] = {}
    limit = current_limits().max_string
    for name, value in zip(names, row):
        kinds = RUN_COLUMNS.get(name)
        if kinds is None:
            continue
        out[name] = value = typed(value, kinds, f"{db.path.name}: runs.{name}")
        if isinstance(value, str) and name not in SAMPLE_COLUMNS and len(value) > limit:
            raise LimitExceeded(f"{db.path.name}: runs.{name} holds {len(value):,} characters, more than "
                                f"the {limit:,} allowed", VARIABLES["max_string"])
    for name in RUN_COLUMNS:
        out.setdefault(name, None)
    return out


def sample_values(text: Any, what: str) -> np.ndarray:
    """A stored list of samples (JSON text) as an array, checked: text, a flat list of finite
    numbers, at most ``PROFKIT_MAX_SAMPLES`` of them; else one line naming ``what``."""
    from profkit.readers.sqlite_input import typed

    if text is None:
        return np.zeros(0)
    text = typed(text, (str,), what)
    limit = current_limits().max_samples
    if len(text) > SAMPLE_CHARS * limit + 2:  # refused before parsing: parsing is what would cost
        raise LimitExceeded(f"{what} holds {len(text):,} characters of samples, more than {limit:,} "
                            "samples take", VARIABLES["max_samples"])
    if not _FLAT_NUMBERS.fullmatch(text):
        raise ProfkitError(f"{what} is not a list of numbers (it starts {text[:40]!r})", hint=_NOT_HISTORY_HINT)
    if text.count(",") >= limit:
        raise LimitExceeded(f"{what} holds {text.count(',') + 1:,} samples, more than the {limit:,} allowed",
                            VARIABLES["max_samples"])
    try:
        values = json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError):
        raise ProfkitError(f"{what} is not a list of numbers (broken JSON)", hint=_NOT_HISTORY_HINT) from None
    try:
        array = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError, OverflowError):
        raise ProfkitError(f"{what} is not a list of numbers", hint=_NOT_HISTORY_HINT) from None
    if array.ndim != 1 or not np.isfinite(array).all():
        raise ProfkitError(f"{what} is not a list of finite numbers", hint=_NOT_HISTORY_HINT)
    return array


def _no_constant(name: str) -> float:
    raise ValueError(name)


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
        **memory_summary(trace),
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


def memory_summary(trace: Trace) -> dict[str, Any]:
    """A run's peak memory, what ``add`` stores of it: ``peak_allocated_bytes`` and
    ``peak_reserved_bytes`` (medians over the steady steps) and their per-step samples; None
    each where the trace recorded no allocator events (or no reserved bytes: the host's).
    Of several GPUs, the one whose median peak allocated is highest: the first to run out."""
    from profkit.analysis.compare.memory import HELD, run_peaks

    peaks = run_peaks(trace)
    out: dict[str, Any] = {"peak_allocated_bytes": None, "peak_reserved_bytes": None,
                           "peak_allocated_samples": None, "peak_reserved_samples": None}
    if peaks is None or not peaks.devices:
        return out
    device = max(peaks.devices, key=lambda d: float(np.median(d.allocated)))
    if device.figure == HELD:  # nsys --cuda-memory-usage: the device memory held, reserved bytes' kin
        out["peak_reserved_bytes"] = float(np.median(device.allocated))
        out["peak_reserved_samples"] = device.allocated.tolist()
        return out
    out["peak_allocated_bytes"] = float(np.median(device.allocated))
    out["peak_allocated_samples"] = device.allocated.tolist()
    if device.reserved is not None:
        out["peak_reserved_bytes"] = float(np.median(device.reserved))
        out["peak_reserved_samples"] = device.reserved.tolist()
    return out


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
    db = _db(db_path, write=True)
    try:
        check_against_last(db, summary, force=force)
        row = {"label": label, "commit": commit,
               "added_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
               "trace": summary["trace"], "source": summary["source"], "step_source": summary["step_source"],
               "steps": summary["steps"], "step_median_ns": summary["step_median_ns"],
               "step_mean_ns": summary["step_mean_ns"], "step_samples": json.dumps(summary["step_samples"]),
               "gpu_samples": json.dumps(summary["gpu_samples"]),
               "peak_allocated_bytes": summary.get("peak_allocated_bytes"),
               "peak_reserved_bytes": summary.get("peak_reserved_bytes")}
        # memory columns only where the run has a value: sqlite-utils makes a new column from its
        # first value, and one made from NULL is TEXT, whose affinity would store later numbers as text
        row.update({k: json.dumps(summary[k]) for k in ("peak_allocated_samples", "peak_reserved_samples")
                    if summary.get(k) is not None})
        row = {k: v for k, v in row.items() if v is not None or not k.startswith("peak_")}
        with db.conn:  # one transaction: the run and its kernels, or nothing
            tables = _sqlite_utils(db)
            runs = tables["runs"]
            runs.insert(row, pk="id", alter=True)
            run_id = int(runs.last_pk)
            tables["kernels"].insert_all(
                ({"run_id": run_id, "name": k["name"], "key": k["key"], "ns_per_step": k["ns_per_step"],
                  "samples": json.dumps(k["samples"]) if k["samples"] is not None else None}
                 for k in summary["kernels"]),
                alter=True, foreign_keys=[("run_id", "runs", "id")])
            tables["kernels"].create_index(["run_id", "name"], if_not_exists=True)
            db.conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    except (sqlite3.Error, UnicodeDecodeError) as exc:
        raise db.failure(exc) from None
    finally:
        db.close()
    return run_id


def check_against_last(db: HistoryDb, summary: dict[str, Any], *, force: bool = False) -> None:
    """Refuse a run whose kernels look like another program than the last run's."""
    from profkit.analysis.compare.same_program import check_same_program
    from profkit.readers.sqlite_input import typed

    if not HISTORY_TABLES <= db.tables():
        return
    last = db.query("SELECT id, trace FROM runs ORDER BY id DESC LIMIT 1")
    if not last:
        return
    run_id = typed(last[0][0], (int,), f"{db.path.name}: runs.id")
    trace = typed(last[0][1], _TEXT, f"{db.path.name}: runs.trace")
    keys = _run_keys(db, run_id)
    if keys:
        check_same_program(summary["trace"], {k["key"] for k in summary["kernels"]},
                           f"the history's last run ({trace})", keys, force=force)


def _kernel_names(db: HistoryDb, sql: str, params: Sequence[Any] = ()) -> list[tuple[str, str | None]]:
    """``(name, key)`` rows of the kernels table, typed (key None in a history written before keys)."""
    from profkit.readers.sqlite_input import typed

    has_key = "key" in db.columns("kernels")
    rows = db.query(sql.format(columns="name, key" if has_key else "name, NULL"), params)
    what = f"{db.path.name}: kernels"
    return [(typed(name, (str,), f"{what}.name"), typed(key, _TEXT, f"{what}.key")) for name, key in rows]


def _run_keys(db: HistoryDb, run_id: int) -> set[str]:
    """A stored run's canonical kernel names (worked out from the names in a history
    written before keys were stored)."""
    from profkit.analysis.kernels.names import canonical_kernel_name

    rows = _kernel_names(db, "SELECT {columns} FROM kernels WHERE run_id = ?", [run_id])
    return {key or canonical_kernel_name(name) for name, key in rows}


def trend(db_path: Path, metric: str = GPU_TIME, window: int = DEFAULT_WINDOW,
          min_effect_pct: float = noise.MIN_EFFECT_PCT) -> list[TrendPoint]:
    """The metric over all runs, oldest first, each flagged against its rolling baseline."""
    db = _db(db_path)
    try:
        return _trend(db, metric, window, min_effect_pct)
    finally:
        db.close()


def _trend(db: HistoryDb, metric: str, window: int, min_effect_pct: float) -> list[TrendPoint]:
    if "runs" not in db.tables():
        raise ProfkitError(f"{db.path}: no runs in this history", hint="add runs with: profkit history add RUN")
    stored = [c for c in RUN_COLUMNS if c in db.columns("runs")]
    quoted = ", ".join(f'"{c}"' for c in stored)
    runs = [_checked_run(db, row, stored) for row in db.query(f"SELECT {quoted} FROM runs ORDER BY id")]
    if metric.startswith("kernel:"):
        metric = "kernel:" + resolve_kernel(db, metric[len("kernel:"):])
    samples = [_samples(db, run, metric) for run in runs]
    unit = "bytes" if metric in MEMORY_METRICS else "ns"
    points: list[TrendPoint] = []
    clean: list[int] = []  # indexes of earlier runs not flagged
    for i, run in enumerate(runs):
        values = samples[i]
        value = float(np.median(values)) if values is not None and len(values) else None
        base_runs = clean[-window:]
        point = {"run_id": run["id"], "label": run["label"], "commit": run["commit"], "added_utc": run["added_utc"],
                 "value_ns": None, "baseline_ns": None, "value_bytes": None, "baseline_bytes": None,
                 f"value_{unit}": value, "delta_pct": None,
                 "peak_allocated_bytes": run["peak_allocated_bytes"], "peak_reserved_bytes": run["peak_reserved_bytes"]}
        if value is None:
            points.append(TrendPoint(**point, verdict="missing", regression=False))
            continue
        if not base_runs:
            points.append(TrendPoint(**point, verdict="baseline", regression=False))
            clean.append(i)
            continue
        pooled = np.concatenate([samples[j] for j in base_runs])
        baseline, delta_pct, verdict, flagged = _compared(metric, pooled, values, min_effect_pct)
        points.append(TrendPoint(**{**point, f"baseline_{unit}": baseline, "delta_pct": delta_pct}, verdict=verdict,
                                 regression=flagged))
        if not flagged:
            clean.append(i)
    return points


def _compared(metric: str, base: np.ndarray, new: np.ndarray,
              min_effect_pct: float) -> tuple[float, float | None, str, bool]:
    """(baseline median, change %, verdict, flagged) of a run against its baseline: step time's
    noise model, or for peak memory the same rules in bytes (``compare.memory.peak_change``)."""
    if metric in MEMORY_METRICS:
        from profkit.analysis.compare.memory import HIGHER, peak_change

        change = peak_change(base, new)
        return float(change["base_median_bytes"]), change["delta_pct"], change["verdict"], change["verdict"] == HIGHER
    result = noise.compare(base, new, min_effect_pct=min_effect_pct)
    return result.base_median, result.delta_pct, result.verdict, result.verdict == noise.SLOWER


CANDIDATES_SHOWN = 8


def resolve_kernel(db: Any, name: str) -> str:
    """The stored kernel that ``kernel:NAME`` names: NAME itself (or its canonical
    name), else the one kernel whose short name or base name (as tables show it) is
    NAME, else the one whose short, base or full name starts with NAME.  Several
    kernels -> ProfkitError listing them; none -> ProfkitError."""
    from profkit.analysis.kernels.names import canonical_kernel_name
    from profkit.output import kernel_base_name, short_kernel_names

    if "kernels" not in db.tables():
        return name
    stored = _kernel_names(db, "SELECT DISTINCT {columns} FROM kernels ORDER BY name")
    key_of = {n: key or canonical_kernel_name(n) for n, key in stored}
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


def _samples(db: HistoryDb, run: dict[str, Any], metric: str) -> np.ndarray | None:
    where = f"{db.path.name}: run {run['id']}"
    if metric == STEP_MEDIAN:
        return sample_values(run["step_samples"], f"{where}'s step_samples")
    if metric == GPU_TIME:
        return sample_values(run["gpu_samples"], f"{where}'s gpu_samples")
    if metric in MEMORY_METRICS:  # a run without allocator events has none: "missing"
        return sample_values(run[MEMORY_METRICS[metric]], f"{where}'s {MEMORY_METRICS[metric]}")
    if metric.startswith("kernel:"):
        from profkit.analysis.kernels.names import canonical_kernel_name
        from profkit.readers.sqlite_input import typed

        # by canonical name: a kernel is found whichever profiler's spelling NAME and each run use
        name = metric[len("kernel:"):]
        if "kernels" not in db.tables():
            return None
        if "key" in db.columns("kernels"):  # rows of an older profkit have no key: their name
            rows = db.query("SELECT ns_per_step, samples FROM kernels WHERE run_id = ? AND "
                            "(key = ? OR (key IS NULL AND name = ?)) LIMIT 1",
                            [run["id"], canonical_kernel_name(name), name])
        else:
            rows = db.query("SELECT ns_per_step, samples FROM kernels WHERE run_id = ? AND name = ? LIMIT 1",
                            [run["id"], name])
        if not rows:
            return None
        ns_per_step, samples = rows[0]
        if samples is not None:
            return sample_values(samples, f"{where}'s samples of {name}")
        value = typed(ns_per_step, (float,), f"{where}: kernels.ns_per_step")
        if not np.isfinite(value):
            raise ProfkitError(f"{where}: kernels.ns_per_step is {value}, not a finite number")
        return np.asarray([value], dtype=np.float64)
    raise ProfkitError(f"unknown metric {metric!r}: use {METRICS}")


def trend_png(points: list[TrendPoint], metric: str) -> bytes:
    """The trend plot; labels and commits are drawn as plain text (a "$" in them is a character)."""
    from profkit.report.figures import plain_text

    with plain_text():
        return _trend_png(points, metric)


def _trend_png(points: list[TrendPoint], metric: str) -> bytes:
    from profkit.report.figures import plt, png_bytes

    xs = list(range(1, len(points) + 1))
    unit, scale = ("MiB", 2 ** 20) if metric in MEMORY_METRICS else ("ms", 1e6)
    ys = [p.value / scale if p.value is not None else np.nan for p in points]
    fig, ax = plt.subplots(figsize=(9, 3.2), dpi=100)
    ax.plot(xs, ys, marker="o", color="#1f6fb4")
    bad = [(x, y) for x, y, p in zip(xs, ys, points) if p.regression]
    if bad:
        ax.scatter([b[0] for b in bad], [b[1] for b in bad], color="#d1495b", zorder=3, s=60, label="regression")
        ax.legend(loc="upper left")
    ax.set_xticks(xs, [(p.label or (p.commit or "")[:8] or str(p.run_id)) for p in points], rotation=30,
                  fontsize=8)
    ax.set_ylabel(unit)
    ax.set_title(metric, fontsize=9)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return png_bytes(fig)
