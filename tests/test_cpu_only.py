"""A CPU-only Kineto trace (torch.profiler without a GPU) is read, not refused.

Oracle: the real trace tests/data/cpu/cpu_train.json.gz (scripts/make_cpu_fixture.py)
holds six ``ProfilerStep#N`` ranges, no GPU event and no CUDA API call, and its
program spends most of each step building the batch in Python (``make_batch``).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from click.testing import CliRunner

from profkit.analysis.cpu_only import CPU_ONLY, is_cpu_only
from profkit.analysis.steps import PROFILER_STEP, find_steps
from profkit.cli import cli
from profkit.readers import open_trace
from tests.conftest import DATA

CPU_TRACE = DATA / "cpu" / "cpu_train.json.gz"


def _profiler_steps() -> list[dict]:
    events = json.loads(gzip.decompress(CPU_TRACE.read_bytes()))["traceEvents"]
    assert not any(e.get("cat") in ("kernel", "cuda_runtime", "gpu_memcpy") for e in events)
    return sorted((e for e in events if str(e.get("name", "")).startswith("ProfilerStep#") and e.get("ph") == "X"),
                  key=lambda e: e["ts"])


def test_steps_are_the_profiler_steps() -> None:
    expected = _profiler_steps()
    assert len(expected) == 6
    with open_trace(CPU_TRACE) as trace:
        assert is_cpu_only(trace)
        result = find_steps(trace)
    assert result.found and result.source == PROFILER_STEP
    assert list(result.steps["name"]) == [e["name"] for e in expected]
    assert result.summary["cpu_only"] is True
    result_cli = CliRunner().invoke(cli, ["steps", str(CPU_TRACE)])
    assert result_cli.exit_code == 0, result_cli.output
    assert "6 steps" in result_cli.output and CPU_ONLY in " ".join(result_cli.output.split())


def test_host_says_the_step_is_host_time_and_names_the_batch_builder() -> None:
    result = CliRunner().invoke(cli, ["host", str(CPU_TRACE), "--format", "json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    text = json.dumps(report)
    assert CPU_ONLY in text
    top = [(row["function"], row["file"]) for row in report["functions"][:3]]
    # make_batch's list comprehension: Python 3.11 runs it as its own frame
    assert ("<listcomp>", "make_cpu_fixture.py") in top or ("make_batch", "make_cpu_fixture.py") in top, top


def test_kernels_is_empty_and_says_why() -> None:
    result = CliRunner().invoke(cli, ["kernels", str(CPU_TRACE)])
    assert result.exit_code == 0, result.output
    assert CPU_ONLY in " ".join(result.stderr.split())
    as_json = CliRunner().invoke(cli, ["kernels", str(CPU_TRACE), "--format", "json"])
    assert as_json.exit_code == 0 and json.loads(as_json.stdout) == []


def test_report_is_written(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["report", str(CPU_TRACE), "-o", str(tmp_path)])
    assert result.exit_code == 0, result.output
    markdown = (tmp_path / "report.md").read_text()
    assert CPU_ONLY in markdown and "6 steps" in markdown


def test_a_gpu_trace_is_not_cpu_only() -> None:
    with open_trace(DATA / "kineto" / "mlp_plain.json.gz") as trace:
        assert not is_cpu_only(trace)
