"""The code-review workflow (examples/github/profkit-review.yml) runs its commands on two commits.

The workflow calls examples/github/profkit-review.sh; this test runs that
script in a temporary git repository holding two commits of the Triton GELU sample
(the second only touches a comment), and its diff step on two real runs of
the MLP sample (without and with `print(loss.item())`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import nsys_fixture

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "examples" / "github" / "profkit-review.sh"


def _env(tmp_path: Path) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    launcher = bin_dir / "profkit"
    launcher.write_text(f"#!/bin/sh\nexec {sys.executable} -m profkit \"$@\"\n")
    launcher.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "PYTHONPATH": str(ROOT),
            "PROFKIT_CACHE_DIR": str(tmp_path / "cache"), "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e",
            "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@e"}


def _git(repo: Path, *args: str, env: dict[str, str]) -> None:
    subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True)


def test_workflow_file_calls_the_script():
    workflow = (ROOT / "examples" / "github" / "profkit-review.yml").read_text()
    for step in ("profkit-review.sh ptx", "profkit-review.sh trace", "profkit-review.sh diff"):
        assert step in workflow


def test_ptx_step_on_two_commits(tmp_path):
    pytest.importorskip("triton")
    env = _env(tmp_path)
    repo = tmp_path / "repo"
    (repo / "kernels").mkdir(parents=True)
    gelu = (ROOT / "sample_kernels" / "triton_kernels.py").read_text()
    (repo / "kernels" / "gelu.py").write_text(gelu)
    _git(repo, "init", "-q", env=env)
    _git(repo, "add", ".", env=env)
    _git(repo, "commit", "-qm", "gelu", env=env)
    # the change under review (a comment: the machine code stays the same)
    (repo / "kernels" / "gelu.py").write_text(gelu + "\n# reviewed change\n")
    _git(repo, "commit", "-qam", "touch", env=env)
    run_env = {**env, "KERNEL": "kernels/gelu.py::gelu_kernel"}
    done = subprocess.run(["bash", str(SCRIPT), "ptx", "HEAD~1"], cwd=repo, env=run_env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "gelu_kernel" in done.stdout and "|" in done.stdout  # the Markdown summary of both revisions
    # a rev that is an option is refused, not passed to git
    bad = subprocess.run(["bash", str(SCRIPT), "ptx", "--output=/tmp/x"], cwd=repo, env=run_env,
                         capture_output=True, text=True, timeout=600)
    assert bad.returncode != 0 and "Traceback" not in bad.stderr


def test_diff_step_writes_the_comment_and_gates(tmp_path):
    env = _env(tmp_path)
    base, new = tmp_path / "base.sqlite", tmp_path / "new.sqlite"
    shutil.copyfile(nsys_fixture("nsys2025_train_noprint"), base)
    shutil.copyfile(nsys_fixture("nsys2025_train_print"), new)
    done = subprocess.run(["bash", str(SCRIPT), "diff", str(base), str(new)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.stdout.startswith("### profkit diff: ")
    assert "train_mlp.py:59" in done.stdout
    verdict_slower = "slower" in done.stdout.splitlines()[0]
    assert done.returncode == (1 if verdict_slower else 0), done.stderr
    same = subprocess.run(["bash", str(SCRIPT), "diff", str(base), str(base)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert same.returncode == 0 and "no change" in same.stdout.splitlines()[0]
