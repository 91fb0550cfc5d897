"""The report's kernel finding speaks of the steady state when steps are found.

The real compiled-GPT run (reports/gpt_compiled, profkit trace on an H100)
spends 57% of its whole capture's kernel time in one ATen fill kernel: Triton's
autotuner flushes the L2 cache with it thousands of times while torch.compile
tunes, in the first step.  A finding that named it would send the reader after
start-up.  ``kernels_in_window`` is checked against ``nsys stats``' kernel
summary of a real export over the whole capture, and against per-step counts
of the steady state.
"""

from __future__ import annotations

import csv
import json
import lzma
import shutil
from pathlib import Path

import pytest

from profkit.analysis.kernels import summaries
from profkit.analysis.steps import find_steps
from profkit.analysis.steps.windows import kernels_in_window
from profkit.readers import open_trace
from profkit.report import write_report
from tests.conftest import NSYS_DATA, nsys_fixture

ROOT = Path(__file__).resolve().parent.parent
GPT_RUN = ROOT / "reports" / "gpt_compiled"


def test_whole_capture_equals_nsys_stats() -> None:
    oracle = {row["Name"]: (int(row["Total Time (ns)"]), int(row["Instances"]))
              for row in csv.DictReader(open(NSYS_DATA / "nsys2025_mlp_gpu_plain__cuda_gpu_kern_sum.csv"))}
    with open_trace(nsys_fixture("nsys2025_mlp_gpu_plain")) as trace:
        starts = trace.array("kernels", "start")
        rows = kernels_in_window(trace, int(starts.min()), int(starts.max()) + 1)
    assert {r["name"]: (r["total_ns"], r["instances"]) for r in rows} == oracle
    assert [r["total_ns"] for r in rows] == sorted((t for t, _ in oracle.values()), reverse=True)


def test_steady_state_counts_are_whole_launches_per_step() -> None:
    """The GPU-bound MLP launches the same kernels every step: every steady count is a
    whole number per step, and the three GEMM shapes of nsys stats run 4, 4 and 3 times."""
    with open_trace(nsys_fixture("nsys2025_mlp_gpu_nvtx")) as trace:
        steps = find_steps(trace)
        lo, hi = steps.steady_window
        rows = kernels_in_window(trace, lo, hi, per=steps.summary["steady_count"])
    assert steps.summary["steady_count"] == 28  # 30 steps: 1 warm-up, and the last, cut off at its GPU end, teardown
    assert all(float(r["per_step"]).is_integer() for r in rows)
    per_step = {r["name"]: r["per_step"] for r in rows}
    oracle = {row["Name"]: int(row["Instances"]) / 33  # 30 steps + 3 warm-up passes of the same layers
              for row in csv.DictReader(open(NSYS_DATA / "nsys2025_mlp_gpu_nvtx__cuda_gpu_kern_sum.csv"))
              if "sgemm" in row["Name"] or "xmma_gemm" in row["Name"]}
    assert {n: per_step[n] for n in oracle} == pytest.approx(oracle, abs=1.0)


@pytest.fixture(scope="module")
def gpt_report(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], list[dict]]:
    run = tmp_path_factory.mktemp("gpt_compiled")
    for name in ("run.json", "ncu.csv"):
        shutil.copy2(GPT_RUN / name, run / name)
    with lzma.open(GPT_RUN / "trace.sqlite.xz") as src, open(run / "trace.sqlite", "wb") as dst:
        shutil.copyfileobj(src, dst)
    out = tmp_path_factory.mktemp("out")

    paths = write_report(run, out)
    with open_trace(run / "trace.sqlite") as trace:
        whole = summaries.kernel_summary(trace)
    return json.loads(paths.json.read_text())["findings"], whole


def test_startup_fill_kernel_is_not_the_finding(gpt_report: tuple[list[str], list[dict]]) -> None:
    findings, whole = gpt_report
    total = sum(r["total_ns"] for r in whole)
    assert "FillFunctor" in whole[0]["name"] and whole[0]["total_ns"] / total > 0.5  # the whole capture's top
    kernel_lines = [f for f in findings if "kernel time" in f and "NVTX range" not in f]
    assert kernel_lines and all(f.startswith("In the steady state") for f in kernel_lines)
    assert not any("FillFunctor" in f or "vectorized_elementwise_kernel" in f for f in kernel_lines)
