"""Sync stalls on a PyTorch profiler (Kineto) trace read through the trace model.

The traces are synthetic, built in the test (no Kineto capture is committed
yet): two steps, each printing ``loss.item()``, which torch does as a
device-to-host cudaMemcpyAsync into pinned memory and a
cudaStreamSynchronize.  Every expected figure is worked out by hand in the
comments (Kineto times are microseconds; the model's are ns).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from profkit.analysis.sync.stalls import analyze_stalls
from profkit.cli import cli
from profkit.readers import open_trace

SITE = "profkit.sync|item|train.py:59|print(loss.item())"
CPU, GPU = (100, 100), (0, 7)


def event(cat: str, name: str, ts: float, dur: float, **args: Any) -> dict[str, Any]:
    pid, tid = GPU if cat in ("kernel", "gpu_memcpy") else CPU
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def synthetic_item_loop(hook_ranges: bool, stacks: bool) -> dict[str, Any]:
    """Step k (k = 0, 1) starts at 1000k µs:
    - kernel      [1000k+10, 1000k+60)   launched at 1000k+5
    - D2H memcpy  [1000k+70, 1000k+71)   cudaMemcpyAsync at [1000k+62, 1000k+64)
    - cudaStreamSynchronize [1000k+65, 1000k+72): the CPU waits 7 µs
    - next kernel [1000k+90, 1000k+120)  launched at 1000k+80
    so the GPU is idle from 71 (the copy's end) to 90.  Launched onto a drained GPU, the operations
    start 3, 6 and 8 µs after their launch calls return: the trace's launch latency is their median,
    6 µs, so from 82 + 6 = 88 the next kernel was queued (timeline.queued) and the sync caused
    71 -> 88: 17 µs per step."""
    events = []
    for k in range(2):
        t = 1000.0 * k
        c = 10 * k
        events += [
            event("user_annotation", f"step {k}", t, 200.0),
            event("cuda_runtime", "cudaLaunchKernel", t + 5, 2.0, correlation=c + 1),
            event("kernel", "k_fwd", t + 10, 50.0, device=0, stream=7, correlation=c + 1),
            event("cuda_runtime", "cudaMemcpyAsync", t + 62, 2.0, correlation=c + 2),
            event("gpu_memcpy", "Memcpy DtoH (Device -> Pinned)", t + 70, 1.0, device=0, stream=7,
                  correlation=c + 2, bytes=4),
            event("cuda_runtime", "cudaStreamSynchronize", t + 65, 7.0, correlation=c + 3),
            event("cuda_runtime", "cudaLaunchKernel", t + 80, 2.0, correlation=c + 4),
            event("kernel", "k_next", t + 90, 30.0, device=0, stream=7, correlation=c + 4),
        ]
        if hook_ranges:
            events.append(event("user_annotation", SITE, t + 61, 12.0))
        if stacks:
            events += [event("python_function", "train.py(50): train_step", t + 1, 150.0),
                       event("python_function", "<built-in method item of Tensor object at 0x1>", t + 61, 12.0)]
    return {"schemaVersion": 1, "deviceProperties": [], "traceEvents": events, "traceName": "synthetic"}


def write(tmp_path: Path, doc: dict[str, Any]) -> Path:
    path = tmp_path / "synthetic_item_loop.json"
    path.write_text(json.dumps(doc))
    return path


def test_item_syncs_of_a_kineto_trace_with_the_hook_ranges(tmp_path: Path) -> None:
    with open_trace(write(tmp_path, synthetic_item_loop(hook_ranges=True, stacks=False))) as trace:
        report = analyze_stalls(trace)
    assert len(report.events) == 2
    for k, e in enumerate(report.events):
        assert e.api == "cudaMemcpyAsync + cudaStreamSynchronize"
        assert (e.kind, e.source, e.code, e.cause) == ("item", "train.py:59", "print(loss.item())", ".item()")
        assert e.cpu_blocked_ns == 7_000  # only the synchronize blocks (the copy goes to pinned memory)
        assert (e.idle_start, e.idle_end) == (1_000_000 * k + 71_000, 1_000_000 * k + 88_000)
        assert e.gpu_idle_ns == 17_000 and e.device == 0 and e.step == k
        assert e.copy == "Device-to-Host 4 B to Pinned"
    assert report.step_range == "step N"  # "step 0", "step 1": numbers count as one name
    [site] = report.sites
    assert (site["source"], site["count"], site["gpu_idle_ns"], site["in_steps"]) == ("train.py:59", 2, 34_000, 2)
    # step times (profkit.analysis.steps): each range opens on an idle GPU, so a step starts with
    # its range (0 and 1000 µs), not 10 µs later at its first kernel; the last one ends at its
    # range's end, 1000 -> 1200 µs
    assert [s.duration_ns for s in report.steps] == [1_000_000, 200_000]
    assert report.step_stats["count"] == 2 and report.step_stats["median_ns"] == 600_000


def test_without_hook_ranges_the_python_stack_names_the_function(tmp_path: Path) -> None:
    # with_stack=True: the innermost user frame around the synchronize is train.py(50): train_step
    with open_trace(write(tmp_path, synthetic_item_loop(hook_ranges=False, stacks=True))) as trace:
        report = analyze_stalls(trace)
    assert [e.source for e in report.events] == ["train.py:50", "train.py:50"]
    assert all(e.kind is None and e.cause == "blocking copy" for e in report.events)
    assert [e.gpu_idle_ns for e in report.events] == [17_000, 17_000]


def test_without_stacks_or_hook_the_source_is_unknown(tmp_path: Path) -> None:
    with open_trace(write(tmp_path, synthetic_item_loop(hook_ranges=False, stacks=False))) as trace:
        report = analyze_stalls(trace)
    assert [e.source for e in report.events] == [None, None]
    [site] = report.sites
    assert site["api"] == "cudaMemcpyAsync + cudaStreamSynchronize" and site["nvtx"] == "step N"


def test_stalls_cli_takes_a_kineto_trace(tmp_path: Path) -> None:
    path = write(tmp_path, synthetic_item_loop(hook_ranges=True, stacks=False))
    result = CliRunner().invoke(cli, ["stalls", str(path), "--format", "json"])
    assert result.exit_code == 0, result.output
    [site] = json.loads(result.stdout)["rows"]
    assert (site["source"], site["count"], site["gpu_idle_ns"]) == ("train.py:59", 2, 34_000)
