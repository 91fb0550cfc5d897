"""`profkit report --baseline`: the step-time difference between two real runs
of the MLP training loop (with and without `print(loss.item())`), from their
NVTX step ranges, in all three report formats."""

from __future__ import annotations

import json
import sqlite3
import statistics
from pathlib import Path

from click.testing import CliRunner

from profkit.cli import cli
from tests.conftest import nsys_fixture


def _step_median_ns(path: Path) -> float:
    """Median duration of the "step" push/pop ranges, straight from NVTX_EVENTS."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    durations = [end - start for start, end in db.execute(
        "SELECT e.start, e.end FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId "
        "WHERE e.eventType = 59 AND COALESCE(e.text, s.value) = 'step'")]
    db.close()
    assert len(durations) == 20
    return statistics.median(durations)


def test_report_compares_step_times_with_the_baseline(tmp_path: Path) -> None:
    printing, quiet = nsys_fixture("nsys2025_train_print"), nsys_fixture("nsys2025_train_noprint")
    result = CliRunner().invoke(cli, ["report", str(printing), "--baseline", str(quiet), "-o", str(tmp_path)])
    assert result.exit_code == 0, result.output

    report = json.loads((tmp_path / "report.json").read_text())
    stalls = report["sections"]["stalls"]
    comparison = stalls["data"]["baseline_comparison"]
    expected = _step_median_ns(printing) - _step_median_ns(quiet)
    assert comparison["median_difference_ns"] == expected
    assert expected > 0  # the print costs time every step
    assert comparison["a"]["count"] == comparison["b"]["count"] == 20
    assert any("train_mlp.py" in site for site in comparison["sites_only_in_a"])

    finding = comparison["finding"]
    assert "slower" in finding
    assert finding in report["findings"]
    markdown = (tmp_path / "report.md").read_text()
    assert "Step time vs the baseline run" in markdown
    assert f"{round(_step_median_ns(quiet)):,}" in markdown
    assert "Step time vs the baseline run" in (tmp_path / "report.html").read_text()


def test_baseline_without_steps_is_a_note_not_a_failure(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["report", str(nsys_fixture("nsys2025_train_print")),
                                      "--baseline", str(nsys_fixture("nsys2025_gelu")), "-o", str(tmp_path)])
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "report.json").read_text())
    stalls = report["sections"]["stalls"]
    assert "baseline_comparison" not in stalls["data"]
    assert any("Step comparison with nsys2025_gelu.sqlite" in note for note in stalls["notes"])


def test_missing_baseline_is_one_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["report", str(nsys_fixture("nsys2025_train_print")),
                                      "--baseline", str(tmp_path / "nope.sqlite"), "-o", str(tmp_path)])
    assert result.exit_code == 2
    assert len(result.output.strip().splitlines()) == 1 and "nope.sqlite" in result.output
