"""`profkit history`: five real runs of one program, run 4 with a deliberately slowed kernel.

The runs are torch.profiler traces of sample_kernels/train_mlp.py made on the
GPU host (tests/data/kineto/hist_run{1..5}.json.gz, see its README); run 4 ran
with --slow-kernel.  The history must flag run 4 and no other.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from profkit.cli import cli

RUNS = [Path(__file__).parent / "data" / "kineto" / f"hist_run{i}.json.gz" for i in range(1, 6)]
pytestmark = pytest.mark.skipif(not all(p.exists() for p in RUNS), reason="history fixtures not committed")


@pytest.fixture(scope="module")
def history_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("history") / "history.db"
    runner = CliRunner()
    for i, run in enumerate(RUNS, start=1):
        result = runner.invoke(cli, ["history", "add", str(run), "--db", str(db), "--label", f"run{i}",
                                     "--commit", f"{i:040x}"])
        assert result.exit_code == 0, result.output
    return db


def test_the_slowed_run_and_no_other_is_flagged(history_db: Path, tmp_path: Path) -> None:
    plot = tmp_path / "trend.png"
    result = CliRunner().invoke(cli, ["history", "show", "--db", str(history_db), "--format", "json",
                                      "--plot", str(plot)])
    assert result.exit_code == 0, result.output
    runs = json.loads(result.output)["runs"]
    assert [r["label"] for r in runs] == ["run1", "run2", "run3", "run4", "run5"]
    assert [r["label"] for r in runs if r["regression"]] == ["run4"]
    assert runs[3]["verdict"] == "slower" and runs[3]["delta_pct"] > 0
    assert runs[0]["verdict"] == "baseline"
    assert plot.read_bytes().startswith(b"\x89PNG")
    # Step time of this launch-bound loop moves with the host from run to run
    # (see profkit/history.py): run 4 still reads slower by it.
    by_step = json.loads(CliRunner().invoke(cli, ["history", "show", "--db", str(history_db), "--metric",
                                                  "step_median", "--format", "json", "--plot", str(plot)]).output)
    assert by_step["runs"][3]["verdict"] == "slower"


def test_stored_step_median_equals_profkit_steps(history_db: Path) -> None:
    import sqlite3

    steps = json.loads(CliRunner().invoke(cli, ["steps", str(RUNS[0]), "--format", "json"]).output)
    with sqlite3.connect(history_db) as db:
        (median,) = db.execute("SELECT step_median_ns FROM runs WHERE label = 'run1'").fetchone()
    assert median == pytest.approx(steps["summary"]["median_ns"])


def test_kernel_metric_and_bad_metric(history_db: Path) -> None:
    runner = CliRunner()
    with __import__("sqlite3").connect(history_db) as db:
        (name,) = db.execute("SELECT name FROM kernels WHERE run_id = 1 ORDER BY ns_per_step DESC LIMIT 1").fetchone()
    result = runner.invoke(cli, ["history", "show", "--db", str(history_db), "--metric", f"kernel:{name}",
                                 "--format", "json", "--plot", str(history_db.with_suffix(".k.png"))])
    assert result.exit_code == 0, result.output
    assert len(json.loads(result.output)["runs"]) == 5
    bad = runner.invoke(cli, ["history", "show", "--db", str(history_db), "--metric", "nope"])
    assert bad.exit_code == 2 and "unknown metric" in bad.output


def test_no_history_is_one_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["history", "show", "--db", str(tmp_path / "none.db")])
    assert result.exit_code == 2 and "no history yet" in result.output


def test_kernel_metric_takes_the_short_name_or_its_start(history_db: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    with __import__("sqlite3").connect(history_db) as db:
        (full,) = db.execute("SELECT DISTINCT name FROM kernels WHERE name LIKE '%splitKreduce_kernel%'").fetchone()

    def show(name: str):
        return runner.invoke(cli, ["history", "show", "--db", str(history_db), "--metric", f"kernel:{name}",
                                   "--format", "json", "--plot", str(tmp_path / "k.png")])

    expected = json.loads(show(full).stdout)["runs"]
    assert all(r["value_ns"] is not None for r in expected)
    for name in ("splitKreduce_kernel", "splitK"):  # the base name as tables show it, and its start
        result = show(name)
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout)["runs"] == expected


def test_an_ambiguous_kernel_name_lists_the_candidates(history_db: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["history", "show", "--db", str(history_db), "--metric",
                                      "kernel:vectorized_elementwise_kernel", "--plot", str(tmp_path / "k.png")])
    assert result.exit_code == 2
    [line] = result.output.strip().splitlines()
    assert "matches 4 kernels" in line and "vectorized_elementwise_kernel<FillFunctor>" in line, line
    none = CliRunner().invoke(cli, ["history", "show", "--db", str(history_db), "--metric", "kernel:no_such_kernel",
                                    "--plot", str(tmp_path / "k.png")])
    assert none.exit_code == 2 and "no kernel 'no_such_kernel'" in none.output
