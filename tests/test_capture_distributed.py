"""`profkit trace -m torch.distributed.run`: each rank's worker starts through profkit's
launcher (no PyTorch needed to check the command lines)."""

from __future__ import annotations

from pathlib import Path

from profkit.capture.trace import TraceOptions


def test_a_torchrun_job_runs_each_rank_through_the_launcher() -> None:
    """torchrun itself is not profiled: every worker starts through the launcher, which
    writes one trace per rank ("{rank}" in the trace path), under both backends."""
    from profkit.capture import torch_backend
    from profkit.capture.trace import program_argv

    options = TraceOptions("torch.distributed.run", ["--nproc-per-node", "2", "train.py", "--steps", "3"],
                           module=True, python="python3")
    expected = ["python3", "-m", "profkit.capture.launch", "--distributed", "--nproc-per-node", "2", "train.py",
                "--steps", "3"]
    assert torch_backend.program_argv(options) == expected
    assert program_argv(options) == expected
    plain = TraceOptions("mypkg.bench", ["--size", "8"], module=True, python="python3")
    assert torch_backend.program_argv(plain)[3:] == ["-m", "mypkg.bench", "--size", "8"]


def test_each_rank_writes_its_own_trace(monkeypatch, tmp_path: Path) -> None:
    from profkit.capture import launch

    seen = []
    monkeypatch.setattr(launch, "run_under_torch_profiler", lambda run, path, *args, **options: seen.append(path))
    monkeypatch.setenv(launch.TORCH_TRACE_ENV, str(tmp_path / "trace_rank{rank}.json"))
    monkeypatch.setenv("PROFKIT_SYNC_SITES", "0")
    monkeypatch.setenv("RANK", "3")
    launch.main(["script.py"])
    assert seen == [str(tmp_path / "trace_rank3.json")]
