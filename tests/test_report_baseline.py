"""`profkit report --baseline`: the step-time difference between two real runs
of the MLP training loop (with and without `print(loss.item())`), from their
NVTX step ranges, in all three report formats.  Step times: first GPU
operation of a step to the next step's, computed in SQL (tests/step_oracle.py);
medians over the steady state."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from profkit.cli import cli
from tests.conftest import nsys_fixture
from tests.step_oracle import gpu_step_durations, steady_median


def _step_median_ns(path: Path, side: dict) -> float:
    """Steady-state median of the GPU-side step times (the warm-up steps lead)."""
    durations = gpu_step_durations(path)
    assert len(durations) == 20 == side["count"]
    return steady_median(durations, side["count"] - side["steady_count"])


def test_report_compares_step_times_with_the_baseline(tmp_path: Path) -> None:
    printing, quiet = nsys_fixture("nsys2025_train_print"), nsys_fixture("nsys2025_train_noprint")
    result = CliRunner().invoke(cli, ["report", str(printing), "--baseline", str(quiet), "-o", str(tmp_path)])
    assert result.exit_code == 0, result.output

    report = json.loads((tmp_path / "report.json").read_text())
    stalls = report["sections"]["stalls"]
    comparison = stalls["data"]["baseline_comparison"]
    expected = _step_median_ns(printing, comparison["a"]) - _step_median_ns(quiet, comparison["b"])
    assert comparison["median_difference_ns"] == expected
    assert expected > 0  # the print costs time every step
    assert comparison["a"]["count"] == comparison["b"]["count"] == 20
    assert any("train_mlp.py" in site for site in comparison["sites_only_in_a"])

    finding = comparison["finding"]
    # profkit diff's verdict: 4.4% longer, but its 95% interval includes 0 (tests/test_one_engine.py)
    assert "no change (+4.4%, 95% interval" in finding
    assert finding in report["findings"]
    markdown = (tmp_path / "report.md").read_text()
    assert "Step time vs the baseline run" in markdown
    assert f"{round(_step_median_ns(quiet, comparison['b'])):,}" in markdown
    assert "Step time vs the baseline run" in (tmp_path / "report.html").read_text()


def test_baseline_without_steps_is_a_note_not_a_failure(tmp_path: Path) -> None:
    from tests.test_report_timeline import build_synthetic

    baseline = tmp_path / "no-steps.sqlite"  # hand-built: kernels of one name at random times, no loop
    build_synthetic(baseline, 400, seed=1)
    # --force: the hand-built baseline shares no kernel name with the run (another program)
    result = CliRunner().invoke(cli, ["report", str(nsys_fixture("nsys2025_train_print")),
                                      "--baseline", str(baseline), "-o", str(tmp_path), "--force"])
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "report.json").read_text())
    stalls = report["sections"]["stalls"]
    assert "baseline_comparison" not in stalls["data"]
    assert any("Step comparison with no-steps.sqlite" in note for note in stalls["notes"])


def test_missing_baseline_is_one_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["report", str(nsys_fixture("nsys2025_train_print")),
                                      "--baseline", str(tmp_path / "nope.sqlite"), "-o", str(tmp_path)])
    assert result.exit_code == 2
    assert len(result.output.strip().splitlines()) == 1 and "nope.sqlite" in result.output
