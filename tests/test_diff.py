"""`profkit diff` and the noise model, on real captures of the same program."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from profkit.analysis import noise
from profkit.cli import cli
from profkit.report.diff import GITHUB_COMMENT_LIMIT
from tests.conftest import nsys_fixture

PRINT = "nsys2025_train_print"      # MLP loop with print(loss.item()) each step (train_mlp.py:59)
NOPRINT = "nsys2025_train_noprint"  # the same loop without it


def test_mann_whitney_equals_scipy():
    scipy_stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(7)
    for a, b in [(rng.normal(0, 1, 40), rng.normal(0.4, 1, 33)),
                 (np.round(rng.normal(5, 1, 25)), np.round(rng.normal(5, 1, 30))),  # many ties
                 (np.arange(5.0), np.arange(3.0, 9.0))]:
        expected = scipy_stats.mannwhitneyu(a, b, method="asymptotic", use_continuity=True).pvalue
        assert noise.mann_whitney_p(a, b) == pytest.approx(expected, rel=1e-9)


def test_noise_is_no_change_and_a_shift_is_slower():
    rng = np.random.default_rng(3)
    base = rng.normal(10.0, 0.3, 30)
    assert noise.compare(base, rng.normal(10.0, 0.3, 30)).verdict == noise.NO_CHANGE
    slower = noise.compare(base, base * 1.06)
    assert slower.verdict == noise.SLOWER and slower.ci_low_pct > 0
    # a real but tiny change is not a regression
    assert noise.compare(base, base * 1.005).verdict == noise.NO_CHANGE
    assert noise.compare(base[:2], base[:2] * 2).verdict == noise.NO_CHANGE  # too few samples


def _diff(base: str, new: str, *extra: str):
    return CliRunner().invoke(cli, ["diff", str(nsys_fixture(base)), str(nsys_fixture(new)), *extra])


def test_print_adds_a_sync_site_at_the_print_line():
    result = _diff(NOPRINT, PRINT, "--format", "json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert set(data["step"]) >= {"base_median_ns", "new_median_ns", "delta_pct", "ci_low_pct", "ci_high_pct",
                                 "verdict"}
    added = [s for s in data["syncs"] if s["status"] == "added"]
    assert any(s["source"].endswith("train_mlp.py:59") for s in added), added
    assert all(s["new_count"] > 0 and s["base_count"] == 0 for s in added)
    for row in data["kernels"]:
        assert set(row) >= {"name", "base_ns_per_step", "new_ns_per_step", "delta_ns_per_step", "status"}
        assert row["status"] in {"new", "gone", "slower", "faster", "same"}


def test_a_trace_against_itself_is_no_change():
    data = json.loads(_diff(PRINT, PRINT, "--format", "json").output)
    assert data["step"]["verdict"] == "no change"
    assert data["step"]["delta_pct"] == 0
    assert {k["status"] for k in data["kernels"]} == {"same"}
    assert all(s["status"] == "same" for s in data["syncs"])


def test_markdown_comment_leads_with_the_verdict_and_fits():
    result = _diff(NOPRINT, PRINT, "--format", "md")
    assert result.exit_code == 0
    text = result.output
    assert text.startswith("### profkit diff: ")
    assert "<details>" in text and len(text) < GITHUB_COMMENT_LIMIT
    assert text.index("Step time") < text.index("<details>")


def test_fail_on_regression_sets_exit_code():
    data = json.loads(_diff(NOPRINT, PRINT, "--format", "json").output)
    result = _diff(NOPRINT, PRINT, "--fail-on-regression", "0")
    assert result.exit_code == (1 if data["step"]["verdict"] == "slower" else 0)
    assert _diff(PRINT, PRINT, "--fail-on-regression", "0").exit_code == 0


def test_bad_input_is_one_line(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text("{\"not\": \"a trace\"}")
    result = CliRunner().invoke(cli, ["diff", str(bad), str(nsys_fixture(PRINT))])
    assert result.exit_code == 2
    assert "Traceback" not in result.output
