"""The sync-site hook: range texts, which calls are wrapped, nesting, the launcher."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from profkit.capture import sync_hook
from profkit.model.sync_sites import decode_site

ROOT = Path(__file__).resolve().parent.parent


class FakeTensor:
    """Stands in for torch.Tensor: is_cuda decides whether the hook records."""

    def __init__(self, is_cuda: bool, value: float = 1.5) -> None:
        self.is_cuda = is_cuda
        self.value = value

    def item(self) -> float:
        return self.value

    def __repr__(self) -> str:
        # like torch's repr, formatting reads the values through item()
        return f"tensor({self.item()})"


@pytest.fixture
def recorded(monkeypatch):
    """Wrap FakeTensor.item/__repr__ and record the NVTX pushes and pops."""
    events: list[tuple[str, str | None]] = []
    monkeypatch.setattr(sync_hook, "_make_attributes", lambda text: text)
    monkeypatch.setattr(sync_hook, "_push_range", lambda attrs: events.append(("push", attrs)))
    monkeypatch.setattr(sync_hook, "_pop_range", lambda: events.append(("pop", None)))
    monkeypatch.setattr(sync_hook, "_SKIP_DIRS", sync_hook._skip_dirs("/nonexistent/torch"))
    sync_hook._site_cache.clear()
    saved = (FakeTensor.item, FakeTensor.__repr__)
    sync_hook._wrap(FakeTensor, "item", sync_hook.ITEM, sync_hook._on_cuda)
    sync_hook._wrap(FakeTensor, "__repr__", sync_hook.FORMAT, sync_hook._on_cuda)
    yield events
    sync_hook.uninstall()
    assert (FakeTensor.item, FakeTensor.__repr__) == saved


def test_encode_decode_roundtrip():
    text = sync_hook.encode_site("item", "train.py", 42, "  loss_value = loss.item()  |  x ")
    assert text == "profkit.sync|item|train.py:42|loss_value = loss.item() ¦ x"
    assert decode_site(text) == ("item", "train.py:42", "loss_value = loss.item() ¦ x")
    assert decode_site("samples:gelu/manual") is None
    assert decode_site("profkit.sync|item") is None


def test_cuda_call_is_recorded_with_the_callers_line(recorded):
    x = FakeTensor(is_cuda=True)
    value = x.item(); line = sys._getframe().f_lineno  # noqa: E702 - the line under test
    assert value == 1.5
    assert [e[0] for e in recorded] == ["push", "pop"]
    kind, site, code = decode_site(recorded[0][1])
    assert kind == "item"
    assert site == f"{os.path.relpath(__file__)}:{line}"
    assert code.startswith("value = x.item()")


def test_cpu_call_is_not_recorded(recorded):
    assert FakeTensor(is_cuda=False).item() == 1.5
    assert recorded == []


def test_nested_calls_record_only_the_outer_one(recorded):
    text = repr(FakeTensor(is_cuda=True, value=2.0))
    assert text == "tensor(2.0)"
    assert [e[0] for e in recorded] == ["push", "pop"]
    assert decode_site(recorded[0][1])[0] == sync_hook.FORMAT


def test_range_is_popped_when_the_call_raises(recorded):
    class Broken(FakeTensor):
        def item(self) -> float:
            raise RuntimeError("CUDA error: device-side assert triggered")

    sync_hook._wrap(Broken, "item", sync_hook.ITEM, sync_hook._on_cuda)
    with pytest.raises(RuntimeError, match="device-side assert"):
        Broken(is_cuda=True).item()
    assert [e[0] for e in recorded] == ["push", "pop"]
    assert FakeTensor(is_cuda=True).item() == 1.5  # the nesting flag was reset
    assert [e[0] for e in recorded] == ["push", "pop", "push", "pop"]


def test_site_text_is_cached_per_line(recorded, monkeypatch):
    made: list[str] = []
    monkeypatch.setattr(sync_hook, "_make_attributes", lambda text: made.append(text) or text)
    x = FakeTensor(is_cuda=True)
    for _ in range(5):
        x.item()
    x.item()
    assert len(made) == 2  # one per source line, not per call
    assert len(recorded) == 12


def test_frames_inside_skipped_folders_are_passed_over(recorded, tmp_path, monkeypatch):
    library = tmp_path / "fakelib"
    library.mkdir()
    (library / "helpers.py").write_text("def read(t):\n    return t.item()\n")
    monkeypatch.setattr(sync_hook, "_SKIP_DIRS", sync_hook._skip_dirs(str(library)))
    sys.path.insert(0, str(tmp_path))
    try:
        from fakelib import helpers  # noqa: PLC0415 - the temp folder above
        helpers.read(FakeTensor(is_cuda=True)); line = sys._getframe().f_lineno  # noqa: E702
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("fakelib.helpers", None)
        sys.modules.pop("fakelib", None)
    assert decode_site(recorded[0][1])[1].endswith(f"test_capture_sync_hook.py:{line}")


def test_skip_dirs_end_with_a_separator():
    # /site-packages/torch must not also hide /site-packages/torchvision
    dirs = sync_hook._skip_dirs("/venv/lib/site-packages/torch")
    assert "/venv/lib/site-packages/torchvision/io.py".startswith(dirs) is False
    assert "/venv/lib/site-packages/torch/_tensor.py".startswith(dirs)


class Device:
    def __init__(self, type_: str) -> None:
        self.type = type_


class Moving(FakeTensor):
    def __init__(self, is_cuda: bool, device: str) -> None:
        super().__init__(is_cuda)
        self.device = Device(device)


@pytest.mark.parametrize("args, kwargs, syncs", [
    (("cpu",), {}, True),
    (("cpu:0",), {}, True),
    ((Device("cpu"),), {}, True),
    ((), {"device": "cpu"}, True),
    ((Moving(False, "cpu"),), {}, True),  # .to(other_tensor) goes to other's device
    (("cuda:1",), {}, False),
    ((Moving(True, "cuda"),), {}, False),
    (("float16",), {}, False),
    ((object(),), {}, False),  # a dtype or anything else without a device
])
def test_to_cpu_detection(args, kwargs, syncs):
    assert sync_hook._to_cpu(FakeTensor(is_cuda=True), *args, **kwargs) is syncs
    assert sync_hook._to_cpu(FakeTensor(is_cuda=False), *args, **kwargs) is False


def run_launcher(tmp_path: Path, script: str, *args: str, env_extra: dict | None = None) -> subprocess.CompletedProcess:
    path = tmp_path / "prog.py"
    path.write_text(textwrap.dedent(script))
    env = {**os.environ, "PYTHONPATH": str(ROOT), **(env_extra or {})}
    return subprocess.run([sys.executable, "-m", "profkit.capture.launch", str(path), *args], cwd=tmp_path,
                          capture_output=True, text=True, env=env, timeout=60)


def test_launcher_runs_a_script_like_python_does(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "helper.py").write_text("VALUE = 41\n")
    script = """
        import sys
        from helper import VALUE  # the script's own folder comes first on sys.path
        print(__name__, sys.argv[1:], VALUE + 1, sys.path[0].endswith("sub"))
        sys.exit(3)
    """
    (tmp_path / "sub" / "prog.py").write_text(textwrap.dedent(script))
    proc = subprocess.run([sys.executable, "-m", "profkit.capture.launch", "sub/prog.py", "--n", "4"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.stdout == "__main__ ['--n', '4'] 42 True\n"
    assert proc.returncode == 3


def test_launcher_runs_a_module(tmp_path):
    pkg = tmp_path / "mypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "tool.py").write_text("import sys\nprint(__name__, sys.argv[1:])\n")
    proc = subprocess.run([sys.executable, "-m", "profkit.capture.launch", "-m", "mypkg.tool", "a", "--b"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "__main__ ['a', '--b']\n"


def test_launcher_does_not_import_torch_for_programs_that_do_not(tmp_path):
    proc = run_launcher(tmp_path, "import sys; print('torch' in sys.modules)")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "False\n"


def test_launcher_usage(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "profkit.capture.launch"], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=60)
    assert proc.returncode != 0 and "usage" in proc.stderr


def test_install_wraps_torch_and_uninstall_restores():
    torch = pytest.importorskip("torch")
    original = torch.Tensor.item, torch.cuda.synchronize
    sync_hook.install()
    try:
        assert torch.Tensor.item is not original[0]
        assert torch.tensor(2.5).item() == 2.5  # CPU tensors pass through
        assert torch.cuda.synchronize is not original[1]
    finally:
        sync_hook.uninstall()
    assert (torch.Tensor.item, torch.cuda.synchronize) == original


@pytest.mark.slow  # imports the real torch in a child process (~10 s); the hook's logic is tested without it
def test_hook_is_installed_when_the_program_imports_torch(tmp_path):
    pytest.importorskip("torch")
    script = """
        import sys
        print('torch' in sys.modules)
        import torch
        from profkit.capture import sync_hook
        print(getattr(torch.Tensor.item, "__module__", "builtin"), torch.tensor([1.0, 2.0]).tolist())
    """
    proc = run_launcher(tmp_path, script)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "False\nprofkit.capture.sync_hook [1.0, 2.0]\n"
    off = run_launcher(tmp_path, script, env_extra={"PROFKIT_SYNC_SITES": "0"})
    assert off.returncode == 0, off.stderr
    assert off.stdout == "False\nbuiltin [1.0, 2.0]\n"
