"""Peak memory, base against new: `profkit diff`, `history` and ``--fail-on-memory-growth`` (#33).

The figure compared is each steady step's peak of allocated bytes, and of reserved bytes where
the allocator reports them, on the GPU(s) whose allocator the trace recorded (the host's
allocator where it recorded no GPU's): ``profkit.analysis.memory.step_peaks``, over the steady
steps (every step when none is steady, as for step time).  Traces without allocator events
(torch.profiler without ``profile_memory=True``, nsys exports) have no such figure.

The verdict follows step time's rules (``noise``): "higher" or "lower" only when the 95%
bootstrap interval of the median's change excludes 0 and the change is large enough to count,
else "no change".  Two things differ:

- what counts is ``MIN_EFFECT_BYTES`` or ``MIN_EFFECT_PCT`` of BASE's median, whichever is
  smaller, not step time's 2%: a steady loop's allocator peaks repeat to the byte (the committed
  H100 captures of a GPT loop: six steps, one value), so a much smaller change is the program's,
  not noise (the planted 256 KiB-a-step leak there moves the median peak by 1.7%);
- where every steady step of each run peaks at the same bytes, there is no spread to test: the
  bootstrap interval has zero width and a rank test has nothing to rank (with fewer than
  ``noise.MIN_SAMPLES`` steps it would not even run).  The difference is then exact, and it is a
  change when it reaches what counts; the verdict's ``why`` says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from profkit.analysis.compare import noise
from profkit.analysis.memory import HOST, has_memory, size, step_peaks
from profkit.analysis.steps import STEADY
from profkit.errors import ProfkitError
from profkit.model import Trace

HIGHER, LOWER = "higher", "lower"
MIN_EFFECT_BYTES = 1 << 20  # 1 MiB
MIN_EFFECT_PCT = 1.0
HELD = "device memory held"  # DevicePeaks.figure of a driver-level (nsys) trace
MIN_EXACT_STEPS = 2  # one step per run shows no spread, so it cannot show that there is none
HOW = "record both with torch.profiler.profile(profile_memory=True)"


@dataclass(frozen=True)
class DevicePeaks:
    """One device's per-step peaks over a run's steady steps (bytes)."""

    device: int
    label: str
    allocated: np.ndarray
    reserved: np.ndarray | None  # None where the allocator reports no reserved bytes (the host's)
    # what ``allocated`` holds: the allocator's allocated bytes, or (nsys --cuda-memory-usage, which sees
    # only the driver's allocations) the device memory the process held
    figure: str = "allocated"


@dataclass(frozen=True)
class RunPeaks:
    """A run's steady per-step peaks: the GPU devices', else the host allocator's.  ``missing``
    says why there are none (no steps) where the trace has allocator events but no figure."""

    trace: str
    devices: list[DevicePeaks]
    missing: str | None = None


def run_peaks(trace: Trace) -> RunPeaks | None:
    """The steady per-step peaks of a trace; None when it recorded no allocator events."""
    if not has_memory(trace):
        return None
    report = step_peaks(trace)
    chosen = [d for d in report["devices"] if d["device"] != HOST] or \
        [d for d in report["devices"] if d["device"] == HOST]
    devices = []
    for d in chosen:
        steps = [s for s in d["steps"] if s["phase"] == STEADY] or d["steps"]
        if not steps:
            return RunPeaks(trace.name, [], f"no steps found in {trace.name}")
        reserved = [s["peak_reserved_bytes"] for s in steps]
        allocated = [s["peak_allocated_bytes"] for s in steps]
        if any(a is None for a in allocated):  # nsys: only the device memory held is known; it is compared
            devices.append(DevicePeaks(d["device"], d["label"], np.array(reserved, dtype=np.float64), None,
                                       figure=HELD))
            continue
        devices.append(DevicePeaks(
            d["device"], d["label"], np.array(allocated, dtype=np.float64),
            None if any(r is None for r in reserved) else np.array(reserved, dtype=np.float64)))
    return RunPeaks(trace.name, devices)


def min_effect_bytes(base_median: float) -> int:
    """The smallest change of a median peak that counts: MIN_EFFECT_BYTES or MIN_EFFECT_PCT of
    BASE's median, whichever is smaller (whole bytes: a change is a whole number of them)."""
    return min(MIN_EFFECT_BYTES, math.ceil(abs(base_median) * MIN_EFFECT_PCT / 100.0))


def peak_change(base: Any, new: Any) -> dict[str, Any]:
    """Two runs' per-step peaks (bytes) compared by their medians, with a verdict (module
    docstring): base/new_median_bytes, delta_bytes, delta_pct, ci_low/high_pct, p_value,
    base/new_steps, exact, min_effect_bytes, verdict ("higher", "lower", "no change"), why."""
    a, b = np.asarray(base, dtype=np.float64), np.asarray(new, dtype=np.float64)
    if a.size == 0 or b.size == 0:
        raise ValueError("both runs need at least one step")
    ma, mb = float(np.median(a)), float(np.median(b))
    delta = mb - ma
    threshold = min_effect_bytes(ma)
    counts = delta != 0 and abs(delta) >= threshold
    out = {"base_median_bytes": _bytes(ma), "new_median_bytes": _bytes(mb), "delta_bytes": _bytes(delta),
           "delta_pct": 100.0 * delta / ma if ma else None, "ci_low_pct": None, "ci_high_pct": None,
           "p_value": None, "base_steps": int(a.size), "new_steps": int(b.size), "exact": False,
           "min_effect_bytes": threshold}
    under = f"the {size(threshold)} that counts ({size(MIN_EFFECT_BYTES)} or {MIN_EFFECT_PCT:g}% of BASE)"
    if min(a.size, b.size) >= MIN_EXACT_STEPS and np.ptp(a) == 0 and np.ptp(b) == 0:
        verdict = (HIGHER if delta > 0 else LOWER) if counts else noise.NO_CHANGE
        why = f"every steady step peaks at the same bytes in each run ({a.size} and {b.size} steps): " + (
            "no difference" if delta == 0 else
            f"the difference is exact, {'at least' if counts else 'under'} {under}")
        return {**out, "exact": True, "verdict": verdict, "why": why}
    # the interval and test of step time; what counts is decided here, in bytes
    change = noise.compare(a, b, min_effect_pct=0.0)
    out.update(ci_low_pct=change.ci_low_pct, ci_high_pct=change.ci_high_pct, p_value=change.p_value)
    if change.verdict in (noise.NO_CHANGE, noise.UNKNOWN):
        return {**out, "verdict": change.verdict, "why": change.why}
    if not counts:
        return {**out, "verdict": noise.NO_CHANGE,
                "why": f"the interval excludes 0, but {size(int(abs(delta)))} is under {under}"}
    return {**out, "verdict": HIGHER if delta > 0 else LOWER, "why": change.why}


def _bytes(value: float) -> int | float:
    """A size as whole bytes where it is one (the median of an even number of steps may be half a byte)."""
    return int(value) if float(value).is_integer() else float(value)


def memory_diff(base: Trace, new: Trace) -> dict[str, Any] | None:
    """The "memory" object of `profkit diff`'s JSON: None when neither trace recorded allocator
    events; else ``devices`` (one per device compared: device, label, ``allocated`` and
    ``reserved`` as ``peak_change`` gives them, reserved None where either run lacks it),
    ``verdict`` (the allocated peak's: "higher" on any device, else "lower" on any, else
    "no change"; "unknown" with nothing compared) and ``note`` (why a device or the whole
    comparison is missing, else None)."""
    a, b = run_peaks(base), run_peaks(new)
    if a is None and b is None:
        return None
    if a is None or b is None:
        (has, with_), (lacks, without) = (("BASE", base), ("NEW", new)) if b is None else \
            (("NEW", new), ("BASE", base))
        return _unknown(f"only {has} ({with_.name}) recorded allocator events, {lacks} ({without.name}) did not: "
                        f"peak memory not compared ({HOW})")
    missing = a.missing or b.missing
    if missing:
        return _unknown(f"{missing}: peak memory not compared")
    kinds = {side: "GPU" if run.devices[0].device != HOST else "host" for side, run in (("BASE", a), ("NEW", b))}
    if kinds["BASE"] != kinds["NEW"]:
        return _unknown(f"BASE recorded the {kinds['BASE']} allocator, NEW the {kinds['NEW']} one: "
                        "peak memory not compared")
    figures = {side: run.devices[0].figure for side, run in (("BASE", a), ("NEW", b))}
    if figures["BASE"] != figures["NEW"]:
        said = {"allocated": "the allocator's allocated bytes",
                HELD: "the device memory the process held (nsys --cuda-memory-usage: the driver's allocations)"}
        return _unknown(f"BASE recorded {said[figures['BASE']]}, NEW {said[figures['NEW']]}: peak memory not compared")
    if len(a.devices) == len(b.devices) == 1:  # one GPU each: the same role, whatever its number
        pairs = [(a.devices[0], b.devices[0])]
    else:
        by_id = {d.device: d for d in b.devices}
        pairs = [(d, by_id[d.device]) for d in a.devices if d.device in by_id]
    devices = []
    for da, db in pairs:
        devices.append({
            "device": db.device, "label": db.label if da.device == db.device else f"{da.label} → {db.label}",
            "figure": db.figure, "allocated": peak_change(da.allocated, db.allocated),
            "reserved": peak_change(da.reserved, db.reserved) if da.reserved is not None and db.reserved is not None
            else None})
    alone = sorted({d.label for d in a.devices} ^ {d.label for d in b.devices}) if len(pairs) < max(
        len(a.devices), len(b.devices)) else []
    verdicts = {d["allocated"]["verdict"] for d in devices}
    return {"devices": devices,
            "verdict": HIGHER if HIGHER in verdicts else LOWER if LOWER in verdicts else
            noise.NO_CHANGE if devices else "unknown",
            "note": f"{', '.join(alone)} in one run only: not compared" if alone else None}


def _unknown(note: str) -> dict[str, Any]:
    return {"devices": [], "verdict": "unknown", "note": note}


def memory_growth(memory: dict[str, Any] | None) -> dict[str, Any] | None:
    """The device whose median per-step peak allocated grew the most (its ``devices`` row); None
    when no peak was compared."""
    devices = (memory or {}).get("devices") or []
    return max(devices, key=lambda d: d["allocated"]["delta_bytes"]) if devices else None


def growth_over(memory: dict[str, Any] | None, max_bytes: int) -> str | None:
    """``--fail-on-memory-growth``: the reason, in one sentence, when NEW's median per-step peak
    allocated exceeds BASE's by more than ``max_bytes`` on some device, else None.  The medians
    themselves, not the verdict: a gate in bytes means those bytes.  Raises when the two runs
    cannot answer it (a gate that passes for want of data would hide what it guards)."""
    grew = memory_growth(memory)
    if grew is None:
        why = (memory or {}).get("note") or "neither trace recorded allocator events"
        raise ProfkitError(f"--fail-on-memory-growth: {why}", hint=None if memory else HOW)
    a = grew["allocated"]
    if a["delta_bytes"] <= max_bytes:
        return None
    return (f"peak memory ({grew['label']}) grew {size(a['delta_bytes'])} ({a['delta_bytes']:,} B, > "
            f"{size(max_bytes)}): median per-step peak {grew.get('figure', 'allocated')} {size(a['base_median_bytes'])} → "
            f"{size(a['new_median_bytes'])}")
