"""A windowed nsys capture (``profkit trace --steps N --skip K`` or ``--window`` under nsys): nsys
traces only between the launcher's cudaProfilerStart and cudaProfilerStop, and the traced steps
are compared with the untraced ones of the same run.

The launcher's hooks run here on the CPU build of torch with a stand-in for the CUDA profiler
range (a real one needs the GPU: tests/test_trace_cli.py's GPU test); the step-time files of the
comparison are hand-written cases of its rules, named as such."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pytest

from profkit.capture.bare_run import compare_window
from profkit.capture.nsys import ProfileRequest, build_profile_command
from profkit.capture.options import TraceOptions
from profkit.capture.trace import nsys_window, program_argv

torch = pytest.importorskip("torch", reason="the launcher's hooks need torch (pip install torch, the CPU wheel)")


class Range:
    """Stands in for launch.CudaProfilerRange: records when it was started and stopped."""

    def __init__(self, clock: list[str]) -> None:
        self.clock = clock

    def start(self) -> None:
        self.clock.append("start")

    def stop(self) -> None:
        self.clock.append("stop")


def train(steps: int, clock: list[str]) -> None:
    model = torch.nn.Linear(4, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for i in range(steps):
        clock.append(f"step {i + 1}")
        model(torch.ones(2, 4)).sum().backward()
        opt.step()


def test_the_window_opens_after_step_k_and_closes_after_k_plus_n() -> None:
    from profkit.capture.launch import run_in_capture_range

    clock: list[str] = []
    run_in_capture_range(lambda: train(6, clock), "2:3", None, None, capture=Range(clock))
    assert clock == ["step 1", "step 2", "start", "step 3", "step 4", "step 5", "stop", "step 6"]


def test_a_program_that_ends_inside_the_window_still_closes_it() -> None:
    from profkit.capture.launch import run_in_capture_range

    clock: list[str] = []
    run_in_capture_range(lambda: train(3, clock), "1:10", None, None, capture=Range(clock))
    assert clock == ["step 1", "start", "step 2", "step 3", "stop"]


def test_the_window_leaves_no_global_hook_behind() -> None:
    """Its optimizer-step and forward hooks are removed once the program ends (they had stayed
    registered, ticking on in whatever ran after it in the process)."""
    from torch.nn.modules.module import _global_forward_pre_hooks
    from torch.optim.optimizer import _global_optimizer_post_hooks

    from profkit.capture.launch import run_in_capture_range

    before = (len(_global_optimizer_post_hooks), len(_global_forward_pre_hooks))
    clock: list[str] = []
    run_in_capture_range(lambda: train(3, clock), "1:1", None, "5:1", capture=Range(clock))
    assert clock == ["step 1", "start", "step 2", "stop", "step 3"]
    assert (len(_global_optimizer_post_hooks), len(_global_forward_pre_hooks)) == before


def test_the_nsys_command_traces_only_the_profiler_range() -> None:
    cmd = build_profile_command("nsys", ProfileRequest(program=["python", "x.py"], output_base=Path("/tmp/t"),
                                                       cuda_profiler_range=True))
    assert "--capture-range=cudaProfilerApi" in cmd and "--capture-range-end=stop" in cmd


def test_a_windowed_capture_runs_through_the_launcher() -> None:
    options = TraceOptions(target="tests/test_capture_window.py", steps=5, skip_steps=10, sync_sites=False)
    assert nsys_window(options)["PROFKIT_NSYS_STEPS"] == "10:5"
    assert program_argv(options)[1:3] == ["-m", "profkit.capture.launch"]
    assert nsys_window(TraceOptions(target="x.py")) == {} and nsys_window(TraceOptions(target="x.py", steps=0)) == {}


def times_file(tmp_path: Path, marks: list[int], window: tuple[int, int | None]) -> Path:
    """A hand-written step-times file (the launcher's StepClock format)."""
    path = tmp_path / "step_times.json"
    path.write_text(json.dumps({"optimizer_ns": marks, "forward_ns": [], "capture_range_ns": list(window)}))
    return path


def test_traced_steps_are_compared_with_the_untraced_ones_of_the_run(tmp_path: Path) -> None:
    """Steps of 10 ms outside the window, 15 ms inside: a 50% slowdown, beyond the noise; the steps
    the range opened or closed in are neither."""
    marks, t = [], 0
    for i in range(20):
        t += 15_000_000 if 8 <= i < 13 else 10_000_000
        marks.append(t)
    out = compare_window(times_file(tmp_path, marks, (marks[7] + 1, marks[12] + 1)))
    assert out["slowdown"] == 1.5 and out["inflated"]
    assert out["traced_steps"] == 4 and out["untraced_steps"] == 10
    assert "slowed them by 50%" in out["sentence"]


def test_too_few_untraced_steps_say_so(tmp_path: Path) -> None:
    marks = [i * 10_000_000 for i in range(1, 9)]
    out = compare_window(times_file(tmp_path, marks, (marks[3], None)))
    assert "skipped" in out and "too few" in out["skipped"]


def test_untraced_steps_that_are_no_steps_alike_are_not_compared_with(tmp_path: Path) -> None:
    """Forward calls of a decode loop measured as steps around a compile: 3 ms, 300 ms, 2 ms ...
    (the GPU host's static-cache decode gave a 585% spread): no slowdown is claimed from them."""
    gaps = [3, 300, 2, 250, 4, 2, 280, 3, 2, 2, 2, 2, 2, 2, 2, 2]
    marks = [sum(gaps[:i + 1]) * 1_000_000 for i in range(len(gaps))]
    out = compare_window(times_file(tmp_path, marks, (marks[9] + 1, marks[13] + 1)))
    assert "vary too much" in out.get("skipped", ""), out


def test_the_comparison_reaches_the_report() -> None:
    from profkit.capture.run import RunRecord
    from profkit.report import run_folder_info

    record = RunRecord(command=["x.py"], cwd="/", run_dir="/tmp/run", backend="nsys")
    record.recorded["capture_window"] = {"sentence": "nsys traced a window of the run: ..."}
    assert record.report_info()["capture_window"] == run_folder_info(asdict(record))["capture_window"]


def test_a_window_of_seconds_opens_from_the_program_start_and_closes_at_its_end() -> None:
    from profkit.capture.launch import run_in_capture_range

    clock: list[str] = []
    run_in_capture_range(lambda: train(2, clock), None, "0:", None, capture=Range(clock))
    assert clock == ["start", "step 1", "step 2", "stop"]
