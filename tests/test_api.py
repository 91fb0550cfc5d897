"""The Python API (``profkit.open``, ``profkit.open_ranks``) gives what the CLI's ``--format json`` prints.

Each DataFrame is turned back into JSON records and compared, key by key, with the JSON the
command prints through click's CliRunner, on a real nsys export and a real Kineto trace;
the kernel rows are checked against ``nsys stats`` too (the CSV made on the GPU host).
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import profkit
from profkit.cli import cli
from profkit.errors import ProfkitError
from profkit.output import rows_to_json
from tests.conftest import DATA, nsys_fixture, oracle_csv

NSYS = "nsys2023_sync_sites"
KINETO = DATA / "kineto" / "mlp_print.json.gz"


@pytest.fixture(scope="module", params=["nsys", "kineto"])
def path(request: pytest.FixtureRequest) -> Path:
    return nsys_fixture(NSYS) if request.param == "nsys" else KINETO


@pytest.fixture(scope="module")
def opened(path: Path):  # noqa: ANN201
    with profkit.open(path) as t:
        yield t


def cli_json(*args: str) -> Any:
    result = CliRunner().invoke(cli, [*args, "--format", "json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def records(frame: Any) -> list[dict[str, Any]]:
    """A DataFrame's rows as the CLI would print them (numpy scalars as JSON numbers)."""
    return json.loads(rows_to_json(frame.to_dict(orient="records")))


def by_name(rows: list[dict[str, Any]], key: str = "name") -> dict[Any, dict[str, Any]]:
    out = {row[key] if key == "name" else (row["name"], row[key]): row for row in rows}
    assert len(out) == len(rows)  # names are unique, so nothing is compared away
    return out


@pytest.mark.parametrize("command", ["kernels", "api", "nvtx"])
def test_summaries_equal_the_cli_name_by_name(opened: Any, path: Path, command: str) -> None:
    frame = getattr(opened, command)()
    expected = cli_json(command, str(path))
    assert expected, f"{command} printed no rows: nothing would be compared"
    key = "style" if command == "nvtx" else "name"
    assert by_name(records(frame), key) == by_name(expected, key)
    assert list(frame.columns) == list(expected[0])  # same columns, in the same order


def test_kernels_equal_nsys_stats() -> None:
    """Against the oracle, not only the CLI: cuda_gpu_kern_sum's total and count per kernel name."""
    with open(oracle_csv(NSYS, "cuda_gpu_kern_sum"), newline="") as f:
        oracle = {row["Name"]: row for row in csv.DictReader(f)}
    with profkit.open(nsys_fixture(NSYS)) as t:
        frame = t.kernels()
    assert set(frame["name"]) == set(oracle)
    for row in frame.to_dict(orient="records"):
        assert row["total_ns"] == int(oracle[row["name"]]["Total Time (ns)"])
        assert row["instances"] == int(oracle[row["name"]]["Instances"])


def test_steps_equal_the_cli(opened: Any, path: Path) -> None:
    frame = opened.steps()
    expected = cli_json("steps", str(path))
    assert expected["steps"], "no steps found: nothing would be compared"
    assert records(frame) == expected["steps"]
    assert json.loads(json.dumps(frame.attrs)) == {k: v for k, v in expected.items() if k != "steps"}


def test_breakdown_equals_the_cli(opened: Any, path: Path) -> None:
    assert records(opened.breakdown()) == cli_json("breakdown", str(path))
    assert records(opened.breakdown(steady=True)) == cli_json("breakdown", str(path), "--steady")


def test_stalls_equal_the_cli(opened: Any, path: Path) -> None:
    frame = opened.stalls()
    expected = cli_json("stalls", str(path))["rows"]
    assert expected
    assert records(frame) == expected
    assert frame.attrs["findings"]


def test_graphs_equal_the_cli() -> None:
    path = DATA / "graphs" / "gpt_graphs_kineto.json.gz"
    with profkit.open(path) as t:
        frame = t.graphs()
    expected = cli_json("graphs", str(path))
    assert len(frame) and frame.attrs["level"] == "node"
    assert records(frame) == expected["graphs"]
    assert json.loads(json.dumps(frame.attrs)) == {k: v for k, v in expected.items() if k != "graphs"}
    assert frame["replays"].sum() == frame.attrs["replays"]  # the per-graph rows add up to the whole
    assert frame["gpu_ns"].sum() == frame.attrs["in_graphs_ns"]
    with profkit.open(KINETO) as t:
        assert t.graphs().empty


def test_whole_job_export_gives_each_rank() -> None:
    whole = _whole_job()
    with profkit.open(whole) as t:
        steps = t.steps()
        breakdown = t.breakdown()
    expected = cli_json("steps", str(whole))
    assert sorted(set(steps["rank"])) == [r["rank"] for r in expected] == [0, 1]
    assert records(steps.drop(columns="rank")) == [s for r in expected for s in r["steps"]]
    assert records(breakdown) == cli_json("breakdown", str(whole))


@pytest.mark.slow  # profkit ranks in a child process (~6 s)
def test_open_ranks_equals_profkit_ranks() -> None:
    whole = _whole_job()
    frame = profkit.open_ranks([whole], scheduler="threads").summary()
    expected = cli_json("ranks", str(whole), "--scheduler", "threads")
    assert len(expected) == 2  # a whole-job export counts as its ranks
    assert records(frame) == expected


def _whole_job() -> Path:
    from tests.conftest import _decompressed

    return _decompressed(DATA / "ddp" / "whole2" / "whole.sqlite.xz")


def test_bad_input_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "notes.sqlite"
    bad.write_text("not a trace\n")
    for path in (tmp_path / "missing.sqlite", bad):
        with pytest.raises(ProfkitError) as caught:
            profkit.open(path)
        assert "\n" not in caught.value.one_line()
    with pytest.raises(ProfkitError, match="at least one"):
        profkit.open_ranks([])


def test_import_profkit_stays_light() -> None:
    """``import profkit`` loads no pandas, numpy or API module; the API loads on first use."""
    code = ("import sys, profkit; assert 'profkit.api' not in sys.modules; "
            "print(sorted(m for m in ('numpy', 'pandas', 'click') if m in sys.modules)); "
            "profkit.open; assert 'profkit.api' in sys.modules")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parent.parent).stdout
    assert out.strip() == "[]"
