"""The training samples' profiling flags on the GPU host (sample_kernels/profiling.py):
what scripts/make_training_fixtures.sh relies on, checked on the raw Kineto JSON."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def run_sample(script: str, *args: str, trace: Path) -> list[dict]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    subprocess.run([sys.executable, str(ROOT / "sample_kernels" / script), *args, "--trace-out", str(trace)],
                   check=True, env=env, cwd=ROOT, timeout=300)
    with gzip.open(trace) as fh:
        return json.load(fh)["traceEvents"]


def names(events: list[dict], cat: str) -> list[str]:
    return [e["name"] for e in events if e.get("cat") == cat]


@pytest.mark.gpu
def test_gpt_schedule_records_the_active_steps(tmp_path: Path) -> None:
    """--profile torch: schedule(wait=1, warmup=2, active=steps-3): 3 of 6 steps, each a ProfilerStep#N."""
    events = run_sample("gpt.py", "--steps", "6", "--annotate-steps", "--profile", "torch", trace=tmp_path / "t.json.gz")
    annotations = names(events, "user_annotation")
    assert sorted(a for a in annotations if a.startswith("ProfilerStep#")) == [f"ProfilerStep#{i}" for i in (3, 4, 5)]
    assert annotations.count("train_step") == 3
    assert names(events, "kernel")


@pytest.mark.gpu
def test_mlp_slow_kernel_is_one_spin_kernel_per_step(tmp_path: Path) -> None:
    events = run_sample("train_mlp.py", "--steps", "5", "--no-nvtx-steps", "--slow-kernel",
                        "--profile", "torch-noschedule", trace=tmp_path / "t.json.gz")
    assert sum("spin_kernel" in n for n in names(events, "kernel")) == 5
    assert not any(n.startswith("ProfilerStep#") for n in names(events, "user_annotation"))
