"""issue 32: `profkit trace --backend torch` is bounded by default and samples stacks with py-spy.

Programs: benchmarks/programs/cpu_train.py, a CPU training loop (a torch MLP:
transformers is not installed here), its batches made by torch or, with
--python-batches, in pure Python.  The bare run of the same program in the
same test is the oracle for the time budgets; the trace's own ProfilerStep#N
ranges and the program's make_batch function for what is recorded.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from profkit.capture.options import DEFAULT_FORWARD, DEFAULT_SKIP, DEFAULT_STEPS, TraceOptions
from profkit.capture.samples import clock_offset, find_py_spy, short_path
from profkit.capture.torch_backend import recorded_window
from profkit.readers.run_folder import KINETO_JSON, read_run_record

ROOT = Path(__file__).resolve().parent.parent
PROGRAM = ROOT / "benchmarks" / "programs" / "cpu_train.py"
PY_SPY = find_py_spy(os.environ)
needs_py_spy = pytest.mark.skipif(PY_SPY is None, reason="no py-spy (pip install py-spy, or PROFKIT_PY_SPY=PATH)")


def test_bounded_by_default_whole_on_request() -> None:
    assert recorded_window(TraceOptions(target="t.py")) == ((DEFAULT_SKIP, DEFAULT_STEPS), DEFAULT_FORWARD)
    assert recorded_window(TraceOptions(target="t.py", whole=True)) == (None, None)
    assert recorded_window(TraceOptions(target="t.py", steps=0)) == (None, None)
    assert recorded_window(TraceOptions(target="t.py", steps=5, skip_steps=2)) == ((2, 5), None)
    assert recorded_window(TraceOptions(target="t.py", window="1:2")) == (None, None)


def test_the_clock_offset_is_bracketed_by_the_spin() -> None:
    # a spin from 1000 to 1060 on the wall clock; samples every 10 at sampler times 2-ish:
    # the first inside at 3 (wall 1003), the first after at 63 (wall 1063): offset 1000
    offset, uncertainty = clock_offset(1000.0, 1060.0, 3.0, 63.0, 10.0)
    assert abs(offset - 1000.0) <= uncertainty <= 5.0
    assert 1000.0 - 3.0 <= offset <= 1000.0 - 3.0 + 10.0


def test_files_are_named_as_torch_names_them() -> None:
    assert short_path("/venv/lib/python3.11/site-packages/torch/nn/modules/linear.py") == "torch/nn/modules/linear.py"
    assert short_path("/usr/lib/python3.11/random.py") == "random.py"
    assert short_path("/home/me/project/train.py") == "train.py"


def _bare(args: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, str(PROGRAM), *args], check=True, capture_output=True, timeout=600)
    return time.perf_counter() - start


def _trace(run_dir: Path, args: list[str]) -> float:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "profkit", "trace", "--backend", "torch", "-o", str(run_dir),
                           str(PROGRAM), "--", *args], capture_output=True, text=True, timeout=900,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return time.perf_counter() - start


def _events(run_dir: Path) -> list[dict]:
    return json.loads(gzip.decompress((run_dir / KINETO_JSON).read_bytes()))["traceEvents"]


@pytest.mark.slow  # a CPU training loop twice, bare and traced (~40 s on 2 busy cores)
def test_an_eight_step_training_loop_traced_with_no_flags(tmp_path: Path) -> None:
    args = ["--steps", "8"]
    bare = _bare(args)
    traced = _trace(tmp_path / "run", args)
    assert traced <= max(3 * bare, bare + 60), (traced, bare)
    steps = {e["name"] for e in _events(tmp_path / "run") if str(e.get("name", "")).startswith("ProfilerStep#")}
    assert len(steps) >= 3, steps
    record = read_run_record(tmp_path / "run")
    assert record["recorded"]["steps"] == f"{DEFAULT_STEPS} after {DEFAULT_SKIP}"


@needs_py_spy
@pytest.mark.slow  # a Python-heavy loop twice, bare and traced (~50 s on 2 busy cores)
def test_a_python_heavy_loop_costs_little_and_host_names_its_batch_builder(tmp_path: Path) -> None:
    args = ["--steps", "30", "--python-batches", "--rows", "128"]
    bare = _bare(args)
    run_dir = tmp_path / "run"
    traced = _trace(run_dir, args)
    assert traced <= max(1.5 * bare, bare + 15), (traced, bare)
    sampler = read_run_record(run_dir)["recorded"]["sampler"]
    assert sampler["frames"] > 0 and sampler["clock_uncertainty_ms"] <= 20, sampler
    events = _events(run_dir)
    assert not any(e.get("cat") == "python_function" and "sampled_by" not in e.get("args", {}) for e in events), \
        "no with_stack frames: the stacks are sampled"
    host = subprocess.run([sys.executable, "-m", "profkit", "host", str(run_dir), "--format", "json"],
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert host.returncode == 0, host.stderr
    top = [row["function"] for row in json.loads(host.stdout)["functions"][:3]]
    assert "make_batch" in top, top


@pytest.mark.slow  # the training loop bare, then traced (~60 s on 2 busy cores)
def test_bare_run_is_measured_and_stated(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "profkit", "trace", "--backend", "torch", "--bare-run", "-o",
                           str(run_dir), str(PROGRAM), "--", "--steps", "10"], capture_output=True, text=True,
                          timeout=900, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-2000:]
    measured = read_run_record(run_dir)["recorded"]["bare_run"]
    assert measured["steps_by"] == "optimizer" and measured["bare_step_ns"] > 0 and measured["traced_step_ns"] > 0
    assert measured["sentence"] in (run_dir / "report.md").read_text().replace("\n", " ")
    steps = subprocess.run([sys.executable, "-m", "profkit", "steps", str(run_dir)], capture_output=True, text=True,
                           env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert "Measured with --bare-run: the capture" in " ".join(steps.stdout.split())


FORWARD_LOOP = """\
import time

import torch
from torch.profiler import record_function

model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64))
start = time.monotonic()
i = 0
with torch.no_grad():
    while time.monotonic() - start < 14:
        with record_function(f"iteration#{i}"):
            model(torch.randn(8, 64))
        time.sleep(0.05)
        i += 1
"""


@pytest.mark.slow  # a 14 s inference loop under the profiler's default window
def test_without_an_optimizer_a_few_seconds_of_forward_calls_are_recorded(tmp_path: Path) -> None:
    script = tmp_path / "serve.py"
    script.write_text(FORWARD_LOOP)
    run_dir = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "profkit", "trace", "--backend", "torch", "--no-sample", "-o",
                           str(run_dir), str(script)], capture_output=True, text=True, timeout=900,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-2000:]
    iterations = sorted((e["ts"], e["ts"] + e["dur"]) for e in _events(run_dir)
                        if str(e.get("name", "")).startswith("iteration#"))
    after, length = (float(v) for v in DEFAULT_FORWARD.split(":"))
    span_s = (iterations[-1][1] - iterations[0][0]) / 1e6
    assert 0.5 * length <= span_s <= 1.5 * length, span_s  # the window, not the 14 s loop
