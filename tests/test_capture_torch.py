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

from profkit.capture.run import KINETO_JSON, read_run_record
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


def test_cpu_script_under_torch_profiler(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    (tmp_path / "prog.py").write_text(PROGRAM)
    run_dir = tmp_path / "run"
    reporter = Recorder()
    options = TraceOptions(target="prog.py", backend="torch", output=run_dir, python=sys.executable)
    try:
        run_trace(options, reporter)  # type: ignore[arg-type]
    except ProgramFailed as exc:  # the report refuses a trace without CUDA data, in one line
        assert "report failed" in exc.one_line() and "no CUDA trace data" in exc.one_line()
    record = read_run_record(run_dir)
    assert record["backend"] == "torch" and record["exit_code"] == 0 and record["partial"] is False
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
    """The MLP loop with print(loss.item()): kernels, one sync site per step at the print, a report."""
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    run_dir = tmp_path / "run"
    result = run_trace(TraceOptions(target="sample_kernels/train_mlp.py", args=["--steps", "5", "--print-loss"],
                                    backend="torch", output=run_dir, python=sys.executable), Recorder())
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
