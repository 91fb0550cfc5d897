"""Progress (a spinner or a bar) goes to stderr, and only when stderr is a terminal:
stdout, and so every ``--format json``, is the same byte for byte either way."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from profkit import terminal
from profkit.cli import cli
from tests.conftest import DATA, nsys_fixture

RANKS = DATA / "ddp" / "kineto"


def test_progress_writes_nothing_off_a_terminal(capsys: pytest.CaptureFixture) -> None:
    with terminal.progress("working"):
        print("result")
    bar = terminal.ProgressBar("ranks", total=2)
    bar.advance()
    bar.close()
    assert capsys.readouterr() == ("result\n", "")


def test_progress_on_a_terminal_goes_to_stderr(monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setattr(terminal, "stderr_is_terminal", lambda: True)
    with terminal.progress("working"):
        print("result")
    bar = terminal.ProgressBar("ranks", total=2)
    assert bar.shown
    bar.advance()
    bar.close()
    assert capsys.readouterr().out == "result\n"


def _stdout(args: list[str], tty: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    monkeypatch.setattr(terminal, "stderr_is_terminal", lambda: tty)
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.stdout, result.stderr


@pytest.mark.parametrize("command", ["scrub", "ranks", "report"])
def test_stdout_is_the_same_with_and_without_a_terminal(command: str, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    def args(tag: str) -> list[str]:
        if command == "scrub":
            return ["scrub", str(nsys_fixture("nsys2025_sync")), "-o", str(tmp_path / f"{tag}.sqlite"),
                    "--format", "json"]
        if command == "ranks":
            return ["ranks", str(RANKS / "rank0.json.gz"), str(RANKS / "rank1.json.gz"), "--scheduler", "threads",
                    "--format", "json"]
        return ["report", str(nsys_fixture("nsys2025_sync")), "-o", str(tmp_path / tag)]

    plain, plain_err = _stdout(args("plain"), False, monkeypatch)
    shown, _ = _stdout(args("tty"), True, monkeypatch)
    if command == "report":
        plain, shown = Path(plain.strip()).name, Path(shown.strip()).name  # each names its own folder
        assert plain == shown == "report.html"
    else:
        assert shown == plain
        json.loads(plain)
    if command == "ranks":  # off a terminal: one plain line per rank, as before
        assert plain_err.count("profkit: [") == 2
    else:
        assert plain_err == ""


def test_history_window_is_now_last(tmp_path: Path) -> None:
    db = tmp_path / "h.db"
    runner = CliRunner()
    for i in (1, 2):
        assert runner.invoke(cli, ["history", "add", str(DATA / "kineto" / f"hist_run{i}.json.gz"), "--db", str(db),
                                   "--label", f"run{i}"]).exit_code == 0
    show = ["history", "show", "--db", str(db), "--format", "json", "--plot", str(tmp_path / "p.png")]
    new: Any = runner.invoke(cli, [*show, "--last", "1"])
    old: Any = runner.invoke(cli, [*show, "--window", "1"])
    assert new.exit_code == old.exit_code == 0
    assert new.stdout == old.stdout
    assert "--window is deprecated, use --last" in old.stderr and "--window" not in \
        runner.invoke(cli, ["history", "show", "--help"]).output
