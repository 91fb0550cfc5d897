"""`profkit trace --bare-run`: the program once without a profiler, to say what the capture cost.

Both runs go through the launch shim with ``launch.StepClock`` on (PROFKIT_STEP_TIMES), so
each writes when its optimizer steps ended, or, without an optimizer, when each outermost
module forward began (a decode token).  A step is the time between two of those; the first
``SKIP`` are warm-up.  The slowdown is the traced run's median step over the bare run's;
the bare run's own spread (its interquartile range over its median) is the noise, and a
slowdown beyond it is reported as inflated.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from profkit.capture.launch import LAUNCH_MODULE, STEP_TIMES_ENV
from profkit.capture.options import DEFAULT_SKIP, TraceOptions, launcher_env

# Below this a slowdown is not worth a warning, whatever the noise (timer and scheduling).
MIN_INFLATION = 0.02
# A windowed capture's comparison needs this many untraced steps, this alike (IQR over median).
MIN_UNTRACED = 5
MAX_NOISE = 0.25


def bare_argv(options: TraceOptions) -> list[str]:
    entry = ["-m", options.target] if options.module else [options.target]
    return [options.python, "-m", LAUNCH_MODULE, *entry, *options.args]


def run_bare(options: TraceOptions, base_env: Mapping[str, str], times_path: Path) -> int:
    """Run the program without a profiler (and without the sync hook); its exit status."""
    env = launcher_env(base_env)
    env[STEP_TIMES_ENV] = str(times_path)
    env["PROFKIT_SYNC_SITES"] = "0"
    done = subprocess.run(bare_argv(options), env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL)
    return done.returncode


def step_durations(path: Path, skip: int = DEFAULT_SKIP) -> tuple[np.ndarray, str] | None:
    """The steps after ``skip`` of warm-up (ns) and what ended them ("optimizer" or "forward")."""
    try:
        times = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    for kind in ("optimizer", "forward"):
        marks = np.asarray(times.get(f"{kind}_ns", []), dtype=np.int64)
        if len(marks) >= skip + 3:
            return np.diff(marks)[skip:], kind
    return None


def compare(bare_path: Path, traced_path: Path) -> dict[str, Any]:
    """The slowdown of the traced steps against the bare ones, and whether it is beyond noise."""
    bare, traced = step_durations(bare_path), step_durations(traced_path)
    if bare is None or traced is None or bare[1] != traced[1]:
        return {"skipped": "too few optimizer steps or forward calls in one run to compare "
                           f"(needs {DEFAULT_SKIP + 3}; the native or unhooked program records none)"}
    b, t = bare[0], traced[0]
    median, noise = _median_and_noise(b)
    slowdown, inflated = _slowdown(median, noise, t)
    return {"steps_by": bare[1], "bare_step_ns": median, "traced_step_ns": float(np.median(t)),
            "slowdown": round(slowdown, 3), "noise": round(noise, 3), "inflated": bool(inflated),
            "sentence": sentence(slowdown, noise, inflated, len(b), len(t))}


def _median_and_noise(reference: np.ndarray) -> tuple[float, float]:
    """The reference steps' median and their run-to-run noise (interquartile range over the median)."""
    median = float(np.median(reference))
    return median, float(np.subtract(*np.percentile(reference, [75, 25]))) / median if median else 0.0


def _slowdown(median: float, noise: float, traced: np.ndarray) -> tuple[float, bool]:
    """The traced steps' median over the reference's, and whether that is beyond the noise."""
    slowdown = float(np.median(traced)) / median if median else float("nan")
    return slowdown, bool(slowdown - 1 > max(noise, MIN_INFLATION))


def sentence(slowdown: float, noise: float, inflated: bool, bare_steps: int, traced_steps: int) -> str:
    change = (f"slowed the steps by {100 * (slowdown - 1):.0f}%" if slowdown >= 1 else
              f"left the steps {100 * (1 - slowdown):.0f}% faster than bare, within what the load lets one measure")
    text = (f"the capture {change} (median of {traced_steps} traced steps vs {bare_steps} bare; "
            f"run-to-run noise {100 * noise:.0f}%)")
    if inflated:
        text += ": the step times in this trace are inflated beyond noise; read them as upper bounds"
    return text


def compare_window(times_path: Path, skip: int = DEFAULT_SKIP) -> dict[str, Any]:
    """A windowed nsys capture (--steps / --window): the steps nsys traced against the steps of the
    same run it did not (the StepClock's marks and the capture range's open and close times, in
    ``times_path``).  A step that the range opened or closed inside is neither; the first ``skip``
    steps are warm-up.  The slowdown is the traced steps' median over the untraced ones'."""
    try:
        times = json.loads(times_path.read_text())
        start, stop = times.get("capture_range_ns") or (None, None)
    except (OSError, ValueError, TypeError):
        return {"skipped": "the launcher wrote no step times"}
    if not isinstance(start, int):
        return {"skipped": "the capture window never opened"}
    stop = stop if isinstance(stop, int) else np.iinfo(np.int64).max
    for kind in ("optimizer", "forward"):
        marks = np.asarray(times.get(f"{kind}_ns", []), dtype=np.int64)
        if len(marks) < skip + 3:
            continue
        begin, end = marks[skip:-1], marks[skip + 1:]
        traced = (end - begin)[(begin >= start) & (end <= stop)]
        untraced = (end - begin)[(end <= start) | (begin >= stop)]
        if len(traced) < 2 or len(untraced) < MIN_UNTRACED:
            return {"steps_by": kind, "skipped": f"{len(traced)} traced and {len(untraced)} untraced steps after "
                    f"{skip} of warm-up: too few to compare (a longer run, or a window with steps after it)"}
        median, noise = _median_and_noise(untraced)
        if noise > MAX_NOISE:  # untraced "steps" that are no steps alike (compilation, calls of unlike length)
            return {"steps_by": kind, "skipped": f"the {len(untraced)} untraced steps vary too much to compare with "
                    f"(interquartile range {100 * noise:.0f}% of their median)"}
        slowdown, inflated = _slowdown(median, noise, traced)
        change = f"slowed them by {100 * (slowdown - 1):.0f}%" if slowdown >= 1 else \
            f"left them {100 * (1 - slowdown):.0f}% faster, within what the load lets one measure"
        text = (f"nsys traced a window of the run: its {len(traced)} traced steps took a median "
                f"{median * slowdown / 1e6:.3g} ms, the run's {len(untraced)} untraced ones {median / 1e6:.3g} ms "
                f"(the capture {change}; run-to-run noise {100 * noise:.0f}%)")
        if inflated:
            text += ": the traced step times are inflated beyond noise; read them as upper bounds"
        return {"steps_by": kind, "untraced_step_ns": median, "traced_step_ns": float(np.median(traced)),
                "traced_steps": int(len(traced)), "untraced_steps": int(len(untraced)),
                "slowdown": round(slowdown, 3), "noise": round(noise, 3), "inflated": bool(inflated),
                "sentence": text}
    return {"skipped": "too few optimizer steps or forward calls to compare"}
