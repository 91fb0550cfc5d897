"""`profkit trace --backend torch`: the program runs inside torch.profiler.

CPU: a tiny CPU-only script under the real torch.profiler (torch's CPU build),
checked against the raw Kineto JSON it wrote.  GPU (@pytest.mark.gpu): the
MLP training loop end to end, report included.
"""

from __future__ import annotations

import gzip
import json
import os
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from profkit.readers.run_folder import KINETO_JSON, read_run_record
from profkit.capture.trace import ProgramFailed, TraceOptions, choose_backend, run_trace
from profkit.cli import cli
from profkit.errors import ProfkitError

torch = pytest.importorskip("torch", reason="the torch backend needs PyTorch")

ROOT = Path(__file__).resolve().parent.parent
FAKE_TOOLS = Path(__file__).parent / "fake_tools"
PROGRAM = """\
import torch

x = torch.randn(64, 64)
for step in range(3):
    with torch.profiler.record_function("step"):
        y = (x @ x).relu().sum()
try:
    torch.cuda.synchronize()  # the sync hook records it, even where CUDA is "missing" \\ here
except (AssertionError, RuntimeError):
    pass
print("sum", float(y))
"""
SYNC_LINE = 8


class Recorder:
    def __init__(self) -> None:
        self.stages: list[str] = []
        self.text: list[str] = []

    def stage(self, name: str, detail: str = "") -> None:
        self.stages.append(name)

    def progress(self, percent: int) -> None:
        pass

    def output(self, text: str, stream: str) -> None:
        self.text.append(text)


def raw_events(path: Path) -> list[dict]:
    with gzip.open(path) as fh:
        return json.load(fh)["traceEvents"]


def test_auto_takes_nsys_where_found_else_torch(tmp_path: Path) -> None:
    assert choose_backend("auto", {"PATH": str(FAKE_TOOLS)}, root=tmp_path) == "nsys"
    assert choose_backend("auto", {"PATH": str(tmp_path)}, root=tmp_path) == "torch"
    assert choose_backend("nsys", {"PATH": ""}, root=tmp_path) == "nsys"
    with pytest.raises(ProfkitError, match="unknown backend"):
        choose_backend("perf", {}, root=tmp_path)


@pytest.mark.slow  # torch.profiler in its own process (~10 s); test_trace_is_written_when_the_program_fails runs it
def test_cpu_script_under_torch_profiler(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    (tmp_path / "prog.py").write_text(PROGRAM)
    run_dir = tmp_path / "run"
    reporter = Recorder()
    options = TraceOptions(target="prog.py", backend="torch", output=run_dir, python=sys.executable, whole=True,
                           with_stack=True)
    run_trace(options, reporter)  # type: ignore[arg-type]  # a CPU-only trace gets its report too
    record = read_run_record(run_dir)
    assert record["backend"] == "torch" and record["exit_code"] == 0 and record["partial"] is False
    assert record["status"] == "ok" and record["recorded"]["whole_program"] is True
    assert record["tools"]["torch"]["version"] == torch.__version__
    assert record["files"]["trace"] == KINETO_JSON and "sum" in (run_dir / "trace.log").read_text()
    assert not list(run_dir.glob("*.sqlite"))
    events = raw_events(run_dir / KINETO_JSON)
    annotations = [e["name"] for e in events if e.get("cat") == "user_annotation"]
    assert annotations.count("step") == 3
    sync = [a for a in annotations if a.startswith("profkit.sync|")]
    assert sync == [f"profkit.sync|synchronize|prog.py:{SYNC_LINE}|torch.cuda.synchronize() "
                    "# the sync hook records it, even where CUDA is 'missing' / here"]  # see _kineto_safe
    assert any(e.get("cat") == "cpu_op" and e["name"] == "aten::mm" for e in events)
    assert any(e.get("cat") == "python_function" for e in events)  # with_stack
    assert not any(e.get("cat") == "kernel" for e in events)  # CPU only
    assert "profiling" in reporter.stages


def test_trace_is_written_when_the_program_fails(tmp_path: Path) -> None:
    from profkit.capture.launch import run_under_torch_profiler

    def failing() -> None:
        with torch.profiler.record_function("before the failure"):
            torch.ones(4).sum()
        raise SystemExit(3)

    with pytest.raises(SystemExit) as info:
        run_under_torch_profiler(failing, str(tmp_path / "t.json.gz"))
    assert info.value.code == 3
    names = [e["name"] for e in raw_events(tmp_path / "t.json.gz") if e.get("cat") == "user_annotation"]
    assert names == ["before the failure"]


def test_sync_sites_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from profkit.capture.torch_backend import torch_environment

    env = torch_environment({"PATH": "/bin"}, tmp_path / "t.json.gz", sync_sites=False)
    assert env["PROFKIT_SYNC_SITES"] == "0" and env["PROFKIT_TORCH_TRACE"] == str(tmp_path / "t.json.gz")
    assert env["PROFKIT_SYNC_RANGES"] == "record_function"


def test_native_program_is_refused_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    native = Path("/bin/true")
    if not native.exists():
        pytest.skip("no /bin/true")
    result = CliRunner().invoke(cli, ["trace", "--backend", "torch", "-o", "run", str(native)])
    assert result.exit_code == 2
    last = result.output.strip().splitlines()[-1]
    assert last.startswith("profkit: error: /bin/true is not a Python program") and "--backend nsys" in last
    assert not (tmp_path / "run").exists()


def test_python_without_torch_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "prog.py").write_text("print('hi')\n")
    no_torch = tmp_path / "python-without-torch"
    no_torch.write_text("#!/bin/sh\necho 'ModuleNotFoundError: No module named torch' >&2\nexit 1\n")
    no_torch.chmod(0o755)
    with pytest.raises(ProfkitError) as info:
        run_trace(TraceOptions(target="prog.py", backend="torch", python=str(no_torch), output=tmp_path / "run"),
                  Recorder())  # type: ignore[arg-type]
    assert "cannot import it (ModuleNotFoundError: No module named torch)" in info.value.one_line()
    assert not (tmp_path / "run").exists()


@pytest.mark.gpu
def test_gpu_train_mlp_end_to_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The MLP loop with print(loss.item()), the whole program recorded: kernels, one sync site per step
    at the print, a report."""
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    run_dir = tmp_path / "run"
    result = run_trace(TraceOptions(target="sample_kernels/train_mlp.py", args=["--steps", "5", "--print-loss"],
                                    backend="torch", whole=True, output=run_dir, python=sys.executable), Recorder())
    assert result.exit_code == 0 and result.record.backend == "torch"
    events = raw_events(run_dir / KINETO_JSON)
    kernels = [e for e in events if e.get("cat") == "kernel"]
    assert kernels and sum(r["instances"] for r in result.kernels) <= len(kernels)
    print_line = next(i for i, line in enumerate((ROOT / "sample_kernels/train_mlp.py").read_text().splitlines(), 1)
                      if "loss.item()" in line and "print(" in line)
    sites = [e["name"] for e in events if e.get("cat") == "user_annotation"
             and e["name"].startswith(f"profkit.sync|item|sample_kernels/train_mlp.py:{print_line}|")]
    assert len(sites) == 5
    data = json.loads((run_dir / "report.json").read_text())
    assert data["sections"]["kernels"]["tables"]["kernels"]["rows"]


# -- the kept trace is scrubbed (issue 15) ----------------------------------------------------------
# A program that puts the planted secret (tests/planted.py) where a Kineto trace can hold one:
# record_function names (its own text and its command line, as a program that labels a step
# with its arguments would), and the paths of its stacks and of its sync site (its folder's name).
PLANTED_PROGRAM = """\
import os
import sys

import torch

secret = os.environ[{variable!r}]
device = "cuda" if torch.cuda.is_available() else "cpu"
x = torch.randn(256, 256, device=device)
for step in range(3):
    with torch.profiler.record_function(f"upload {{secret}}"):
        y = (x @ x).relu()
    with torch.profiler.record_function(" ".join(sys.argv)):
        total = float(y.sum().item())
try:
    torch.cuda.synchronize()
except (AssertionError, RuntimeError):
    pass
print("total", total)
"""


def trace_planted_program(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, keep_env: bool) -> Path:
    """The real torch backend on PLANTED_PROGRAM, with the secret in its environment and argv."""
    from tests import planted

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv(planted.SECRET_VARIABLE, planted.SECRET)
    folder = tmp_path / f"project-{planted.SECRET}"
    folder.mkdir(exist_ok=True)
    (folder / "prog.py").write_text(PLANTED_PROGRAM.format(variable=planted.SECRET_VARIABLE))
    run_dir = tmp_path / ("run-keep-env" if keep_env else "run")
    options = TraceOptions(target=f"{folder.name}/prog.py", args=[planted.ARGUMENT], backend="torch",
                           output=run_dir, python=sys.executable, keep_env=keep_env, temp_root=tmp_path,
                           whole=True, with_stack=True)
    run_trace(options, Recorder())  # type: ignore[arg-type]
    return run_dir


def annotations(path: Path) -> list[str]:
    return [e["name"] for e in raw_events(path) if e.get("cat") == "user_annotation"]


@pytest.mark.slow  # a torch.profiler run (~8 s), the control of the planted-secret test below
def test_torch_backend_keeps_the_trace_as_written_with_keep_env(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The planting works: without scrubbing, the kept trace holds the secret in each place."""
    from tests import planted

    run_dir = trace_planted_program(tmp_path, monkeypatch, keep_env=True)
    record = read_run_record(run_dir)
    assert record["scrub"] == {"scrubbed": False, "why": "--keep-env"}
    names = annotations(run_dir / KINETO_JSON)
    assert names.count(planted.NVTX_TEXT) == 3
    assert sum(planted.ARGUMENT in n for n in names) == 3  # the command line
    assert any(n.startswith(f"profkit.sync|synchronize|project-{planted.SECRET}/prog.py:") for n in names)
    stacks = [e["name"] for e in raw_events(run_dir / KINETO_JSON) if e.get("cat") == "python_function"]
    assert any(f"project-{planted.SECRET}/prog.py" in s for s in stacks)
    assert not list(tmp_path.glob("profkit-trace-*")), "the temporary folder is removed"


def check_no_planted_secret(tmp_path: Path, run_dir: Path) -> dict:
    """The default run: the secret's bytes are in no file of the run folder; what is kept still reads."""
    from tests import planted

    record = read_run_record(run_dir)
    assert record["scrub"]["scrubbed"] is True
    # counted once per distinct string: the two names, the sync site, the stack frames of prog.py
    assert record["scrub"]["removed"]["secret values"] >= 4
    assert record["command"] == ["project-[redacted]/prog.py", "--token=[redacted]"]
    for path in run_dir.iterdir():
        data = path.read_bytes()
        if path.name.endswith(".gz"):
            data = gzip.decompress(data)
        assert planted.SECRET.encode() not in data and b"5ecret" not in data, path.name
    names = annotations(run_dir / KINETO_JSON)
    assert names.count("upload [redacted]") == 3
    assert sum("--token=[redacted]" in n for n in names) == 3
    assert any(n.startswith("profkit.sync|synchronize|project-[redacted]/prog.py:") for n in names)
    assert not list(tmp_path.glob("profkit-trace-*")), "the temporary folder (the raw trace) is removed"
    assert not [p.name for p in run_dir.iterdir() if p.name.startswith(".")], "no temporary file is left"
    return record


@pytest.mark.slow  # a torch.profiler run (~10 s); test_scrub and test_hostile scrub Kineto traces by default
def test_torch_backend_leaves_no_planted_secret(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """CPU: the real torch.profiler; the kept trace.json.gz is scrubbed, as the nsys export is."""
    check_no_planted_secret(tmp_path, trace_planted_program(tmp_path, monkeypatch, keep_env=False))


@pytest.mark.gpu
def test_gpu_torch_backend_leaves_no_planted_secret(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """CUDA: the same, with kernels, so report.html/.md/.json are written (from the scrubbed trace)."""
    run_dir = trace_planted_program(tmp_path, monkeypatch, keep_env=False)
    record = check_no_planted_secret(tmp_path, run_dir)
    assert record["status"] == "ok" and {"report_html", "report_md", "report_json"} <= set(record["files"])
    assert any(e.get("cat") == "kernel" for e in raw_events(run_dir / KINETO_JSON))
    assert b"upload [redacted]" in (run_dir / "report.json").read_bytes()



TINY_GPT = ["--steps", "8", "--dim", "64", "--layers", "2", "--heads", "2", "--seq", "32", "--batch", "4",
            "--vocab", "256"]


@pytest.mark.slow  # runs a GPT twice, bare and profiled (~20 s)
def test_a_window_of_training_steps_stays_close_to_the_bare_run(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """issue 22: 8 training steps on a CPU under `--backend torch --steps 4 --skip 2` finish
    within 3x the bare run (or bare + 60 s), with Python stacks, and the trace holds the
    profiled steps as ProfilerStep#N (the optimizer's steps drive the schedule)."""
    import subprocess
    import time

    monkeypatch.chdir(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    t0 = time.perf_counter()
    subprocess.run([sys.executable, str(ROOT / "sample_kernels" / "gpt.py"), *TINY_GPT], check=True, env=env,
                   capture_output=True, timeout=600)
    bare = time.perf_counter() - t0
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    run_dir = tmp_path / "run"
    options = TraceOptions(target=str(ROOT / "sample_kernels" / "gpt.py"), args=TINY_GPT, backend="torch",
                           output=run_dir, python=sys.executable, steps=4, skip_steps=2, with_stack=True)
    t0 = time.perf_counter()
    run_trace(options, Recorder())  # type: ignore[arg-type]
    traced = time.perf_counter() - t0
    assert traced < max(3 * bare, bare + 60), (traced, bare)
    events = raw_events(run_dir / KINETO_JSON)
    steps = sorted(e["name"] for e in events if str(e.get("name", "")).startswith("ProfilerStep#"))
    assert steps == [f"ProfilerStep#{i}" for i in (2, 3, 4, 5)], steps
    assert any(e.get("cat") == "python_function" for e in events)  # --with-stack
    # nothing from outside the window: one optimizer step per recorded step, of the 8 the program ran
    adam = [e for e in events if e.get("cat") == "user_annotation" and e["name"].startswith("Optimizer.step#")]
    assert len(adam) == 4


def test_an_nsys_window_and_an_nvtx_range_are_refused_together(tmp_path: Path) -> None:
    options = TraceOptions(target="prog.py", backend="nsys", output=tmp_path / "run", steps=3, nvtx_range="step")
    with pytest.raises(ProfkitError, match="--nvtx-only and --steps / --window each choose what nsys traces"):
        run_trace(options, Recorder())  # type: ignore[arg-type]


INFERENCE_LOOP = """\
import time

import torch
from torch.profiler import record_function

model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64))
start = time.monotonic()
iteration = 0
with torch.no_grad():
    while time.monotonic() - start < {seconds}:
        with record_function(f"iteration#{{iteration}}"):
            model(torch.randn(8, 64))
        time.sleep(0.02)
        iteration += 1
print("iterations", iteration)
"""


@pytest.mark.slow  # an inference loop under torch.profiler (~12 s)
def test_a_window_of_seconds_records_only_that_part_of_an_inference_loop(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """issue 22: `--window 1:2` on a 6 s loop of forwards (no optimizer) records one second of
    it, after the first second and well before the end, with stacks on.  The profiler's first
    start takes seconds on a busy machine: the window keeps its length, not its end."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    (tmp_path / "serve.py").write_text(INFERENCE_LOOP.format(seconds=6.0))
    run_dir = tmp_path / "run"
    recorder = Recorder()
    options = TraceOptions(target="serve.py", backend="torch", output=run_dir, python=sys.executable, window="1:2",
                           with_stack=True, sample=False)
    run_trace(options, recorder)  # type: ignore[arg-type]
    total = int("".join(recorder.text).split("iterations")[-1].split()[0])
    events = raw_events(run_dir / KINETO_JSON)
    iterations = sorted((int(e["name"].split("#")[1]), e["ts"], e["ts"] + e["dur"]) for e in events
                        if str(e.get("name", "")).startswith("iteration#"))
    recorded = [i for i, _, _ in iterations]
    assert recorded == list(range(recorded[0], recorded[-1] + 1))  # one stretch, no gaps
    assert 0 < recorded[0] and recorded[-1] < total - 1, (recorded, total)
    span_s = (iterations[-1][2] - iterations[0][1]) / 1e6
    assert 0.7 <= span_s <= 1.3, span_s  # the iterations fill the window, one per ~20 ms + forward
    assert any(e.get("cat") == "python_function" for e in events)  # --with-stack
    assert read_run_record(run_dir)["status"] == "ok"


@pytest.mark.slow  # a torch.profiler run (~5 s)
def test_a_window_that_never_opens_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    (tmp_path / "serve.py").write_text(INFERENCE_LOOP.format(seconds=0.3))
    options = TraceOptions(target="serve.py", backend="torch", output=tmp_path / "run", python=sys.executable,
                           window="30:40")
    with pytest.raises(ProgramFailed, match="the program ended before --window 30:40 opened"):
        run_trace(options, Recorder())  # type: ignore[arg-type]


@pytest.mark.parametrize(("backend", "window", "steps", "message"), [
    ("nsys", "1:2", 3, "--steps and --window each choose what to record"),
    ("nsys", "5", 0, "--window '5' is not START:END"),
    ("torch", "1:2", 3, "--steps and --window each choose what to record"),
    ("torch", "5", 0, "--window '5' is not START:END"),
    ("torch", "3:1", 0, "START must be >= 0 and before END"),
    ("torch", "a:b", 0, "could not convert"),
])
def test_bad_windows_are_refused_before_the_program_runs(tmp_path: Path, backend: str, window: str, steps: int,
                                                         message: str) -> None:
    options = TraceOptions(target="prog.py", backend=backend, output=tmp_path / "run", window=window, steps=steps)
    with pytest.raises(ProfkitError, match=message):
        run_trace(options, Recorder())  # type: ignore[arg-type]
    assert not (tmp_path / "run").exists()
