"""Output is whole or absent (issue 15): reports and exports are written under a
temporary name and renamed; two reports into one folder never leave a mix."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from profkit.atomic import write_files
from profkit.report import json_report, write_report
from tests.conftest import nsys_fixture


EXPORTS = ("nsys2025_sync", "nsys2023_sync")


def report_source(folder: Path) -> set[str]:
    """The exports that report.html, .md and .json name (one, when they belong together)."""
    return {name for name in EXPORTS for file in ("report.html", "report.md", "report.json")
            if f"{name}.sqlite" in (folder / file).read_text()}


def test_two_reports_into_one_folder_never_mix(tmp_path: Path) -> None:
    out = tmp_path / "shared"
    errors: list[BaseException] = []

    def run(name: str) -> None:
        try:
            for _ in range(2):
                write_report(nsys_fixture(name), out)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(n,)) for n in EXPORTS]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(report_source(out)) == 1, "report.html, .md and .json come from different runs"
    assert sorted(p.name for p in out.iterdir()) == ["report.html", "report.json", "report.md"]


def test_interrupted_report_leaves_the_old_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    paths = write_report(nsys_fixture("nsys2025_sync"), tmp_path)
    before = {p: p.read_bytes() for p in (paths.html, paths.md, paths.json)}

    def interrupted(report: object) -> str:
        raise KeyboardInterrupt

    monkeypatch.setattr(json_report, "render_json", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_report(nsys_fixture("nsys2023_sync"), tmp_path)
    assert {p: p.read_bytes() for p in before} == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_write_files_interrupted_midway_leaves_nothing(tmp_path: Path) -> None:
    files = {tmp_path / "a.txt": b"a", tmp_path / "b.txt": "b"}
    write_files(files)
    assert (tmp_path / "a.txt").read_bytes() == b"a" and (tmp_path / "b.txt").read_text() == "b"
    with pytest.raises(TypeError):
        write_files({tmp_path / "a.txt": b"new", tmp_path / "b.txt": 3})  # type: ignore[dict-item]
    assert (tmp_path / "a.txt").read_bytes() == b"a"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", "b.txt"]
