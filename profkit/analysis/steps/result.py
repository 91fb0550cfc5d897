"""``StepResult``: the steps as a frame, the phases of the run, and the summary.

Definitions (ns, on the trace's clock):

- A step's **start** is when its first GPU operation starts (the first
  kernel, copy or memset launched inside it) -- except for a step range that
  opens while the GPU has nothing left of the work before it: that step
  starts when its range does (or when that earlier work ends, if later), so
  the host time it opens with (waiting for a batch, a sleep, the loop's own
  work) is its own, not its predecessor's.  Pattern steps, which have no
  range, start at their first GPU operation.  Two kinds of operation do not
  start a step early: one whose launch the trace did not record (launched
  before the recording began, and run by the GPU inside the step's range: it
  belongs to an earlier, unrecorded step), and one that runs at once on a
  side stream while the step before still runs on the main stream (the
  stream most of the process's GPU time runs on): a step starts no earlier
  than the main stream is done with the steps before it, where a program's
  own per-step CUDA events begin.  Steps **tile** the loop: a
  step ends where the next one starts, so whatever happens between two
  steps that is no step's (an eval pass that is not a step) belongs to the
  step before it, and the median step time is the loop's period.  The last step ends when its last GPU operation ends (or
  its range ends, if later).  A step that launched nothing keeps its range's
  CPU times.
- **gpu_busy_ns**: time inside the step when at least one kernel, copy or
  memset ran (any stream, any device: the union).
- **Phases**: start-up is everything before the first step; warm-up is the
  first steps that differ from the steady state (they launch a different
  sequence of GPU operations -- compilation, autotuning, cudnn benchmark,
  optimizer state creation -- or take more than 1.5 times the steady median);
  steady state is every step after them; teardown is everything after the
  last step.  A last step that ends at its last GPU operation (no range end
  after it) is cut off: the host time that would take it to a next step is
  missing, so its time is no period.  It is teardown (phase 'teardown'),
  where at least one other step is steady.  The summary's figures are over
  steady-state steps only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from profkit.analysis.cpu_only import CPU_ONLY
from profkit.model.unread import describe_unread

WARMUP = "warmup"
STEADY = "steady"
TEARDOWN = "teardown"
WARMUP_SLOWER = 1.5

STEP_COLUMNS = ("index", "start_ns", "end_ns", "duration_ns", "gpu_busy_ns", "phase",
                "cpu_start_ns", "cpu_end_ns", "launches", "name")


@dataclass
class StepResult:
    """What ``find_steps`` found.

    ``steps`` columns: ``index`` (0-based, in time order), ``start_ns``,
    ``end_ns``, ``duration_ns``, ``gpu_busy_ns``, ``phase`` ('warmup',
    'steady', or 'teardown' for a cut-off last step), ``cpu_start_ns``/``cpu_end_ns`` (the step range on the CPU;
    for pattern steps the launch of the first and last operation; -1 when
    unknown), ``launches`` (GPU operations launched in the step) and ``name``
    (the step range's own text, e.g. "step 7" or "ProfilerStep#12"; "step N"
    for pattern steps).  ``startup``/``teardown``: (start_ns, end_ns) before
    the first / after the last step, None without steps.  ``message`` says
    why nothing was found.  ``pid``/``tid``: the process (and, for ranges, the
    thread) the steps were found in.
    """

    source: str | None
    name: str | None
    steps: pd.DataFrame
    startup: tuple[int, int] | None
    teardown: tuple[int, int] | None
    summary: dict[str, Any]
    message: str | None = None
    evidence: dict[str, Any] = field(default_factory=dict)
    pid: int | None = None
    tid: int | None = None

    @property
    def found(self) -> bool:
        return self.source is not None and not self.steps.empty

    @property
    def steady(self) -> pd.DataFrame:
        """The steady-state steps."""
        return self.steps[self.steps["phase"] == STEADY]

    @property
    def steady_window(self) -> tuple[int, int] | None:
        """(start_ns, end_ns) from the first to the end of the last steady-state step; None without steps."""
        steady = self.steady
        if steady.empty:
            return None
        return int(steady["start_ns"].iloc[0]), int(steady["end_ns"].iloc[-1])

    @property
    def warmup_window(self) -> tuple[int, int] | None:
        warm = self.steps[self.steps["phase"] == WARMUP]
        if warm.empty:
            return None
        return int(warm["start_ns"].iloc[0]), int(warm["end_ns"].iloc[-1])

    def steps_around_median(self, n: int = 3) -> pd.DataFrame:
        """``n`` consecutive steady-state steps centred on the one whose time is closest to the
        steady median (the earliest such): typical steps to show, not the warm-up's or an outlier's."""
        steady = self.steady
        if steady.empty:
            return steady
        duration = steady["duration_ns"].to_numpy()
        middle = int(np.argmin(np.abs(duration - np.median(duration))))
        first = min(max(middle - (n - 1) // 2, 0), max(len(steady) - n, 0))
        return steady.iloc[first:first + n]

    def to_dict(self, with_steps: bool = True) -> dict[str, Any]:
        """The JSON form: ``summary`` and ``steps`` (as the issue specifies), plus phases and the message;
        ``with_steps=False`` leaves the steps out (the report's JSON sums them up)."""
        out: dict[str, Any] = {"summary": self.summary}
        if with_steps:
            out["steps"] = [{k: (v if isinstance(v, str) else int(v)) for k, v in row.items()}
                            for row in self.steps.to_dict(orient="records")]
        return {
            **out,
            "startup": _span(self.startup),
            "teardown": _span(self.teardown),
            "evidence": self.evidence,
            "message": self.message,
        }


def _span(span: tuple[int, int] | None) -> dict[str, int] | None:
    if span is None:
        return None
    return {"start_ns": int(span[0]), "end_ns": int(span[1]), "duration_ns": int(span[1] - span[0])}


def empty_steps() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=object if c in ("phase", "name") else np.int64) for c in STEP_COLUMNS})


def nothing_found(message: str, trace_span: tuple[int, int] | None) -> StepResult:
    return StepResult(None, None, empty_steps(), None, None, summarize(empty_steps(), None, None, trace_span),
                      message)


def warmup_count(duration: np.ndarray, signature: np.ndarray) -> int:
    """How many leading steps differ from the steady state (see the module docstring).

    The steady state is the most common launch sequence (when one repeats)
    and the median duration of the steps that have it.  At least one step
    is always steady."""
    n = len(duration)
    if n <= 1:
        return 0
    values, counts = np.unique(signature, return_counts=True)
    mode = values[np.argmax(counts)] if counts.max() >= 2 else None
    typical = signature == mode if mode is not None else np.ones(n, dtype=bool)
    reference = float(np.median(duration[typical]))
    k = 0
    while k < n - 1:
        differs = mode is not None and signature[k] != mode
        # with two steps "slower than the typical one" means nothing: the last step has no
        # next one to run up to and is often the shorter
        slower = n >= 3 and reference > 0 and duration[k] > WARMUP_SLOWER * reference
        if not (differs or slower):
            break
        k += 1
    return k


def summarize(steps: pd.DataFrame, source: str | None, name: str | None,
              trace_span: tuple[int, int] | None) -> dict[str, Any]:
    """The issue's summary (over steady-state steps) plus the phases' lengths."""
    steady = steps[steps["phase"] == STEADY] if not steps.empty else steps
    d = steady["duration_ns"].to_numpy(np.int64) if not steady.empty else np.empty(0, np.int64)
    busy = int(steady["gpu_busy_ns"].sum()) if not steady.empty else 0
    out: dict[str, Any] = {
        "count": len(steps),
        "steady_count": len(steady),
        "warmup_count": int((steps["phase"] == WARMUP).sum()) if not steps.empty else 0,
        # a last step cut off by the end of the recording (phase 'teardown'): counted, never in the figures
        "cut_off_count": int((steps["phase"] == TEARDOWN).sum()) if not steps.empty else 0,
        "median_ns": float(np.median(d)) if len(d) else None,
        "mean_ns": float(d.mean()) if len(d) else None,
        "p90_ns": float(np.percentile(d, 90)) if len(d) else None,
        "min_ns": int(d.min()) if len(d) else None,
        "max_ns": int(d.max()) if len(d) else None,
        "source": source,
        "name": name,
        "steady_gpu_busy_pct": round(100.0 * busy / float(d.sum()), 2) if len(d) and d.sum() > 0 else None,
    }
    if trace_span is not None and not steps.empty:
        out["startup_ns"] = int(max(0, steps["start_ns"].iloc[0] - trace_span[0]))
        out["teardown_ns"] = int(max(0, trace_span[1] - teardown_start(steps)))
    return out


def teardown_start(steps: pd.DataFrame) -> int:
    """Where teardown begins: at a cut-off last step (phase 'teardown'), else at the last step's end."""
    cut = steps[steps["phase"] == TEARDOWN]
    return int(cut["start_ns"].iloc[0]) if not cut.empty else int(steps["end_ns"].iloc[-1])


def format_duration(ns: float) -> str:
    """A duration for sentences: "36.2 ms", "812 µs", "5.03 s"."""
    if ns >= 1e9:
        return f"{ns / 1e9:.3g} s"
    if ns >= 1e6:
        return f"{ns / 1e6:.3g} ms"
    if ns >= 1e3:
        return f"{ns / 1e3:.3g} µs"
    return f"{ns:.0f} ns"


# why the last step is in no figure (the counts add up: warm-up + steady + this = all steps)
CUT_OFF = "the last step left out as teardown, since no step after it ends it"

SOURCE_WORDS = {"nvtx": "the {name} ranges", "profiler_step": "torch.profiler's ProfilerStep ranges",
                "kernel_pattern": "the {name}"}


def headline(result: StepResult) -> str:
    """One sentence: how many steps, where from, the steady-state median, and the phases."""
    s = result.summary
    if not result.found:
        return result.message or "no steps found"
    where = SOURCE_WORDS.get(result.source or "", "{name}").format(name=result.name)
    text = (f"{s['count']} steps (from {where}), {format_duration(s['median_ns'])} median over "
            f"{s['steady_count']} steady-state steps (mean {format_duration(s['mean_ns'])}, "
            f"p90 {format_duration(s['p90_ns'])})")
    if s["warmup_count"]:
        text += f"; {s['warmup_count']} warm-up step{'s' if s['warmup_count'] > 1 else ''} before them"
    if s.get("cut_off_count"):
        text += f"; {CUT_OFF}"
    if s.get("startup_ns"):
        text += f"; start-up {format_duration(s['startup_ns'])}"
    if s.get("teardown_ns"):
        text += f", teardown {format_duration(s['teardown_ns'])}"
    if s.get("cpu_only"):
        text += f"; {CPU_ONLY}"
    if s.get("unread_device"):
        text += f"; its device work is {describe_unread(s['unread_device'])}, which profkit does not read: the GPU figures are empty"
    if s.get("profiler_overhead_ns_per_step") is not None:
        text += f"; {capture_cost(s['profiler_overhead_ns_per_step'], s['median_ns'])}"
    return text


def capture_cost(overhead_ns: float, median_ns: float) -> str:
    """The profiler's own work per step (PROFILER_OVERHEAD), as a share of the median step."""
    share = f"{100.0 * overhead_ns / median_ns:.1f}% of the median, " if median_ns else ""
    return f"the profiler's own work: {format_duration(overhead_ns)} per step ({share}the least the capture cost)"
