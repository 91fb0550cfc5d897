"""`profkit trace` of the ways real programs run (issue 21), end to end on the GPU host:
a torchrun job of 2 ranks under both backends gives the cross-rank report, and a
torch.compile(mode="reduce-overhead") program is recorded per graph node."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
GPT = ROOT / "sample_kernels" / "gpt.py"
GPT_DDP = ROOT / "sample_kernels" / "gpt_ddp.py"


def _gpus() -> int:
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(line.startswith("GPU ") for line in out.splitlines())


def profkit_trace(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
    return subprocess.run([sys.executable, "-m", "profkit", "trace", "-o", str(tmp_path / "run"), *args],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=500)


two_gpus = pytest.mark.skipif(_gpus() < 2, reason="needs 2 GPUs")


@pytest.mark.gpu
@two_gpus
@pytest.mark.parametrize("backend", ["nsys", "torch"])
def test_torchrun_job_gives_the_cross_rank_report(tmp_path: Path, backend: str) -> None:
    done = profkit_trace(tmp_path, "--backend", backend, "-m", "torch.distributed.run", "--",
                         "--standalone", "--nproc-per-node", "2", str(GPT_DDP), "--steps", "8",
                         "--slow-rank", "1", "--annotate-steps", "--nvtx-steps")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    text = json.dumps(report)
    ranks = report["sections"]["ranks"]["tables"]["ranks"]["rows"]
    assert len(ranks) == 2, text[:2000]
    assert "straggler" in text.lower()
    assert any("rank 1 is the straggler" in f.lower() for f in report["findings"]), report["findings"]


@pytest.mark.gpu
def test_reduce_overhead_program_is_recorded_per_graph_node_with_full(tmp_path: Path) -> None:
    """--full records every kernel of every replay (nsys's node level); the default one row per
    replay (tests/test_graphs.py reads such captures)."""
    done = profkit_trace(tmp_path, "--full", str(GPT), "--", "--steps", "12", "--compile-mode", "reduce-overhead",
                         "--nvtx-steps")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    graphs = report["sections"]["graphs"]["data"]
    assert graphs["level"] == "node" and graphs["kernels_in_replays"] > 0
    assert graphs["per_step"]["replays_per_step"] >= 1
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    assert "--cuda-graph-trace=node" in run["nsys_command"]
