"""One comparison engine: `report --baseline` and `stalls --compare` give `profkit diff`'s
step-time verdict, with its confidence interval, for the same two runs (issue 26).

Oracle: `profkit diff`'s own JSON (its noise model is pinned against scipy in
tests/test_diff.py), on the real MLP loop with and without a per-step print under nsys
and under torch.profiler.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from profkit.cli import cli
from tests.conftest import nsys_fixture

KINETO = Path(__file__).parent / "data" / "kineto"
ENGINE_KEYS = ("base_median_ns", "new_median_ns", "delta_pct", "ci_low_pct", "ci_high_pct", "p_value",
               "base_steps", "new_steps", "verdict", "why")


def _pairs() -> list:
    return [pytest.param(lambda: (nsys_fixture("nsys2025_train_noprint"), nsys_fixture("nsys2025_train_print")),
                         id="nsys"),
            pytest.param(lambda: (KINETO / "mlp_noprint.json.gz", KINETO / "mlp_print.json.gz"), id="kineto")]


def _json(*args) -> dict:
    result = CliRunner().invoke(cli, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


@pytest.mark.parametrize("pair", _pairs())
def test_stalls_compare_and_report_baseline_give_diffs_verdict_and_interval(pair, tmp_path: Path) -> None:
    base, new = pair()
    step = _json("diff", base, new, "--format", "json")["step"]
    expected = {k: step[k] for k in ENGINE_KEYS}
    assert expected["ci_low_pct"] is not None
    compare = _json("stalls", new, "--compare", base, "--format", "json")["comparison"]
    assert compare["change"] == expected
    assert f"{expected['verdict']} ({expected['delta_pct']:+.1f}%, 95% interval" in compare["finding"]
    CliRunner().invoke(cli, ["report", str(new), "--baseline", str(base), "-o", str(tmp_path / "r")])
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    assert report["sections"]["stalls"]["data"]["baseline_comparison"]["change"] == expected
    text = CliRunner().invoke(cli, ["stalls", str(new), "--compare", str(base)]).output
    assert "95% interval" in text


def test_force_lets_every_comparing_command_compare_two_programs(tmp_path: Path) -> None:
    gpt, mlp = nsys_fixture("nsys2025_gpt_eager"), nsys_fixture("nsys2025_mlp_nvtx")
    for args in (["diff", gpt, mlp, "--format", "json"], ["stalls", mlp, "--compare", gpt, "--format", "json"],
                 ["report", mlp, "--baseline", gpt, "-o", tmp_path / "r"],
                 ["history", "add", mlp, "--db", tmp_path / "h.db"],
                 ["history", "add", gpt, "--db", tmp_path / "h.db"]):
        refused = CliRunner().invoke(cli, [str(a) for a in args])
        if args[:2] == ["history", "add"] and args[2] == mlp:
            assert refused.exit_code == 0, refused.output  # the first run of a history compares with nothing
            continue
        assert refused.exit_code == 2 and "different programs" in refused.output, (args, refused.output)
        forced = CliRunner().invoke(cli, [str(a) for a in args] + ["--force"])
        assert forced.exit_code == 0, (args, forced.output)
