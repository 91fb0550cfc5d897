"""`profkit report RUN_FOLDER` re-makes the report `profkit trace` wrote: the run's
command, exit status and tools come from its run.json (the real compiled-GPT run
of reports/gpt_compiled), and a run.json with fields of the wrong type loses
those fields, not the report."""

from __future__ import annotations

import json
import lzma
import shutil
from pathlib import Path

import pytest

from profkit.report import write_report

RUN = Path(__file__).resolve().parent.parent / "reports" / "gpt_compiled"


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("run")
    shutil.copy2(RUN / "run.json", folder / "run.json")
    with lzma.open(RUN / "trace.sqlite.xz") as src, open(folder / "trace.sqlite", "wb") as dst:
        shutil.copyfileobj(src, dst)
    return folder


def facts(report_json: Path) -> dict[str, str]:
    return dict(json.loads(report_json.read_text())["sections"]["capture"]["facts"])


def test_run_json_fills_the_capture_facts(run_folder: Path, tmp_path: Path) -> None:
    record = json.loads((RUN / "run.json").read_text())
    paths = write_report(run_folder, tmp_path)
    got = facts(paths.json)
    assert got["profkit trace command"] == " ".join(record["command"])
    assert got["Program exit status"] == str(record["exit_code"])
    assert got["nsys used"] == record["tools"]["nsys"]["version"]
    assert json.loads(paths.json.read_text())["title"].endswith(" ".join(record["command"]))


def test_wrong_types_in_run_json_are_left_out(run_folder: Path, tmp_path: Path) -> None:
    folder = tmp_path / "run"
    shutil.copytree(run_folder, folder)
    record = json.loads((folder / "run.json").read_text())
    record.update(command="gpt.py --compile", exit_code=True, tools=["nsys"], started=12, partial="yes")
    (folder / "run.json").write_text(json.dumps(record))
    paths = write_report(folder, tmp_path / "out")
    got = facts(paths.json)
    assert "profkit trace command" not in got and "Program exit status" not in got and "Run started" not in got
    assert json.loads(paths.json.read_text())["partial"] is False
