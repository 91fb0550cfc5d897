"""Python stacks for the torch backend by sampling (py-spy), put on the Kineto trace's clock.

``with_stack=True`` makes torch.profiler record every Python call: a loop that
builds its batches in Python ran 3.9x slower (benchmarks/capture_overhead.py)
and its trace held tens of MB of calls.  Instead ``profkit trace --backend torch`` runs the program under
py-spy (``py-spy record --format chrometrace``), which reads the
interpreter's frames from outside, 100 times a second, and writes each
frame's span as begin/end events whose times count from py-spy's own start.

The clocks: torch.profiler writes ``ts`` as wall-clock microseconds minus the
trace's ``baseTimeNanoseconds``.  The launch shim spins in
``_profkit_clock_mark`` before the program and writes the wall-clock times
around it (``launch.CLOCK_MARK_ENV``); the samples of that function then
give py-spy's offset to the wall clock to within one sample period (its span
starts at the first sample inside the spin and ends at the first after it).
Every sampled frame of the program's main thread becomes a ``python_function``
event named as torch names them (``file.py(LINE): function``, LINE the
function's first line: py-spy's ``--function``), so the readers and
``profkit host`` take them as they take recorded stacks.  Frames outside
the recorded window are left out.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from profkit.capture.launch import CLOCK_MARK_FUNCTION

SAMPLE_RATE = 100  # per second: py-spy's default
PY_SPY_ENV = "PROFKIT_PY_SPY"
SAMPLES_FILE = "samples.json"
MARK_FILE = "clock_mark.json"
SAMPLED = "py-spy"  # the events' args["sampled_by"]
_SITE_DIRS = ("/site-packages/", "/dist-packages/")


def find_py_spy(env: Mapping[str, str]) -> str | None:
    """py-spy: PROFKIT_PY_SPY, else on PATH, else beside this Python (a virtual environment's bin)."""
    named = env.get(PY_SPY_ENV)
    if named:
        return named if Path(named).is_file() else None
    found = shutil.which("py-spy", path=env.get("PATH"))
    if found:
        return found
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.is_file() else None


def sampler_argv(py_spy: str, samples: Path, program: list[str], rate: int = SAMPLE_RATE) -> list[str]:
    """``program`` run under py-spy, which writes its samples to ``samples``."""
    return [py_spy, "record", "--rate", str(rate), "--function", "--format", "chrometrace",
            "--output", str(samples), "--", *program]


def merge_samples(trace_path: Path, samples_path: Path, mark_path: Path, rate: int = SAMPLE_RATE) -> dict[str, Any]:
    """Add the sampled frames to the Kineto trace at ``trace_path`` (rewritten in place);
    return what was done (``frames``, ``clock_uncertainty_ms``) or why not (``skipped``)."""
    if not samples_path.is_file() or not mark_path.is_file():
        return {"skipped": "py-spy wrote no samples" if not samples_path.is_file() else "no clock mark"}
    try:
        samples = json.loads(samples_path.read_text())
        mark = json.loads(mark_path.read_text())
        opener = gzip.open if trace_path.read_bytes()[:2] == b"\x1f\x8b" else open
        with opener(trace_path, "rb") as fh:
            trace = json.loads(fh.read())
    except (OSError, ValueError) as exc:
        return {"skipped": f"unreadable samples or trace ({exc})"}
    base_ns = trace.get("baseTimeNanoseconds") if isinstance(trace, dict) else None
    if not isinstance(base_ns, int) or not isinstance(trace.get("traceEvents"), list):
        return {"skipped": "the trace has no baseTimeNanoseconds to put samples on its clock"}
    frames = frame_spans(samples if isinstance(samples, list) else [])
    main = [f for f in frames if f["name"] == CLOCK_MARK_FUNCTION]
    if not main:
        return {"skipped": f"no sample of {CLOCK_MARK_FUNCTION}: the clocks cannot be matched"}
    period_us = 1e6 / rate
    marked = main[0]
    offset_us, uncertainty_us = clock_offset(mark["start_ns"] / 1e3, mark["end_ns"] / 1e3, marked["start"],
                                             marked["end"], period_us)
    shift = offset_us - base_ns / 1e3  # py-spy µs -> the trace's ts
    events = trace["traceEvents"]
    timed = [(e["ts"], e["ts"] + (e.get("dur") or 0)) for e in events if isinstance(e, dict)
             and e.get("ph") == "X" and isinstance(e.get("ts"), (int, float))]
    if not timed:
        return {"skipped": "the trace recorded no events"}
    lo, hi = min(t for t, _ in timed), max(t for _, t in timed)
    pid = int(mark.get("pid", marked["pid"]))
    added = 0
    for frame in frames:
        if frame["tid"] != marked["tid"] or frame["name"] == CLOCK_MARK_FUNCTION:
            continue  # the main thread only: the one torch.profiler records and the steps run on
        start, end = frame["start"] + shift, frame["end"] + shift
        if end < lo or start > hi:
            continue
        events.append({"ph": "X", "cat": "python_function", "name": frame["label"], "pid": pid, "tid": pid,
                       "ts": round(start, 3), "dur": round(end - start, 3), "args": {"sampled_by": SAMPLED}})
        added += 1
    data = json.dumps(trace).encode()
    tmp = trace_path.with_name(trace_path.name + ".merging")
    tmp.write_bytes(gzip.compress(data, 1) if opener is gzip.open else data)
    os.replace(tmp, trace_path)
    return {"frames": added, "rate_per_s": rate, "clock_uncertainty_ms": round(uncertainty_us / 1e3, 2)}


def clock_offset(mark_start: float, mark_end: float, first: float, after: float, period: float) -> tuple[float, float]:
    """(wall clock - sampler clock, its uncertainty), in the units given.  The sampled span of the
    spin starts at its first sample inside it, at most a period after the spin began, and ends
    at the first sample after it, at most a period after the spin ended."""
    lo = max(mark_start - first, mark_end - after)
    hi = min(mark_start - first, mark_end - after) + period
    if lo > hi:  # a late sample (the sampler fell behind): both estimates, halfway
        lo, hi = sorted((mark_start - first + period / 2, mark_end - after + period / 2))
    return (lo + hi) / 2, (hi - lo) / 2


def frame_spans(samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """py-spy's chrometrace begin/end events as frame spans (start, end, pid, tid, name, label)."""
    open_frames: dict[Any, list[dict[str, Any]]] = {}
    spans = []
    for event in samples:
        if not isinstance(event, dict) or event.get("ph") not in ("B", "E"):
            continue
        key = (event.get("pid"), event.get("tid"))
        stack = open_frames.setdefault(key, [])
        if event["ph"] == "B":
            args = event.get("args") or {}
            name = str(event.get("name", "")).rsplit(".", 1)[-1] or "?"
            label = f"{short_path(str(args.get('filename', '?')))}({args.get('line', 0)}): {name}"
            stack.append({"start": float(event["ts"]), "pid": event.get("pid"), "tid": event.get("tid"),
                          "name": name, "label": label})
        elif stack:
            frame = stack.pop()
            frame["end"] = float(event["ts"])
            spans.append(frame)
    return sorted(spans, key=lambda f: f["start"])


def short_path(path: str) -> str:
    """A file as torch's tracer names it: from the package folder within site-packages, the
    standard library's from its folder, anything else by its name."""
    for marker in _SITE_DIRS:
        if marker in path:
            return path.rsplit(marker, 1)[1]
    parts = path.replace("\\", "/").split("/")
    for i, part in enumerate(parts[:-1]):
        if part.startswith("python3") and i + 1 < len(parts):
            return "/".join(parts[i + 1:])
    return parts[-1]
