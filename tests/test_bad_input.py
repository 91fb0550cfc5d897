"""Bad input: one line on stderr, exit code 2, no traceback, the file untouched.

Every bad file here is built in the test (from scratch or from a copy of a
real fixture), never committed as if it were a real export.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from profkit.cli import cli
from tests.conftest import nsys_fixture, nsys_fixture_names

COMMANDS = ["kernels", "api", "nvtx", "info"]
REAL = "nsys2025_gelu" if "nsys2025_gelu" in nsys_fixture_names() else (nsys_fixture_names() or [None])[0]
needs_fixture = pytest.mark.skipif(REAL is None, reason="no real nsys fixture committed yet")


def _snapshot(path: Path) -> tuple[bytes, int] | None:
    if not path.is_file():
        return None
    return path.read_bytes(), path.stat().st_mtime_ns


def _siblings(path: Path) -> set[str]:
    return set(os.listdir(path.parent)) if path.parent.is_dir() else set()


def run_failing(args: list[str], path: Path) -> str:
    """Run a CLI command that must fail cleanly on ``path``; return its one error line."""
    before, files_before = _snapshot(path), _siblings(path)
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit), result.exception
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("profkit: error: ")
    assert "Traceback" not in result.stderr
    assert _snapshot(path) == before, "the input file was modified"
    assert _siblings(path) == files_before, "a file (journal, -wal, -shm) appeared next to the input"
    return lines[0]


def _copy(name: str, dst: Path) -> Path:
    shutil.copyfile(nsys_fixture(name), dst)
    return dst


# -- not SQLite ----------------------------------------------------------------
@pytest.mark.parametrize("command", COMMANDS)
def test_text_file(tmp_path: Path, command: str) -> None:
    path = tmp_path / "notes.sqlite"
    path.write_text("kernel,time\ngelu,12\n")
    line = run_failing([command, str(path)], path)
    assert "is not an SQLite database" in line
    assert "nsys export --type sqlite" in line


def test_binary_garbage_and_empty_file(tmp_path: Path) -> None:
    garbage = tmp_path / "random.sqlite"
    garbage.write_bytes(os.urandom(8192))
    assert "not an SQLite database" in run_failing(["kernels", str(garbage)], garbage)
    empty = tmp_path / "empty.sqlite"
    empty.write_bytes(b"")
    assert "empty file" in run_failing(["kernels", str(empty)], empty)


def test_nsys_rep_instead_of_its_export(tmp_path: Path) -> None:
    rep = tmp_path / "run.nsys-rep"
    rep.write_bytes(b"PK\x03\x04" + os.urandom(4096))  # .nsys-rep files are not SQLite
    line = run_failing(["kernels", str(rep)], rep)
    assert "nsys report, not its SQLite export" in line


# -- SQLite, not nsys -----------------------------------------------------------
@pytest.mark.parametrize("command", COMMANDS)
def test_sqlite_that_is_not_an_nsys_export(tmp_path: Path, command: str) -> None:
    path = tmp_path / "bad_other_app.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE users(id INTEGER PRIMARY KEY, name TEXT)")
        conn.executemany("INSERT INTO users(name) VALUES (?)", [("ada",), ("bob",)])
    conn.close()
    line = run_failing([command, str(path)], path)
    assert "not an Nsight Systems export" in line


# -- truncated ----------------------------------------------------------------
@needs_fixture
@pytest.mark.parametrize("fraction", [0.5, 0.9, 0.999])
def test_truncated_export(tmp_path: Path, fraction: float) -> None:
    path = _copy(REAL, tmp_path / "bad_truncated.sqlite")
    size = path.stat().st_size
    with open(path, "r+b") as fh:
        fh.truncate(int(size * fraction))
    for command in COMMANDS:
        line = run_failing([command, str(path)], path)
        assert "truncated" in line


@needs_fixture
def test_truncated_to_less_than_a_header(tmp_path: Path) -> None:
    path = _copy(REAL, tmp_path / "bad_stub.sqlite")
    with open(path, "r+b") as fh:
        fh.truncate(40)
    assert "truncated" in run_failing(["kernels", str(path)], path)


@needs_fixture
def test_damaged_page_is_reported_not_raised(tmp_path: Path) -> None:
    # Same size as the real file, but pages in the middle overwritten: the
    # header check passes, SQLite's own checks must turn into one line.
    path = _copy(REAL, tmp_path / "bad_damaged.sqlite")
    size = path.stat().st_size
    with open(path, "r+b") as fh:
        fh.seek(size // 2)
        fh.write(b"\xff" * 65536)
    line = run_failing(["kernels", str(path)], path)
    assert "damaged" in line


# -- an export without the trace data a command needs -------------------------------
def _without_tables(tmp_path: Path, *tables: str) -> Path:
    path = _copy(REAL, tmp_path / f"bad_no_{tables[0].lower()}.sqlite")
    with sqlite3.connect(path) as conn:
        for table in tables:
            conn.execute(f"DROP TABLE IF EXISTS {table}")
    conn.close()
    return path


@needs_fixture
def test_export_without_cuda_trace(tmp_path: Path) -> None:
    path = _without_tables(tmp_path, "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME",
                           "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET")
    line = run_failing(["kernels", str(path)], path)
    assert "CUDA kernel data" in line and "CUPTI_ACTIVITY_KIND_KERNEL" in line
    assert "re-run nsys profile with -t cuda" in line
    line = run_failing(["api", str(path)], path)
    assert "CUPTI_ACTIVITY_KIND_RUNTIME" in line and "-t cuda" in line


@needs_fixture
def test_export_without_nvtx(tmp_path: Path) -> None:
    path = _without_tables(tmp_path, "NVTX_EVENTS")
    line = run_failing(["nvtx", str(path)], path)
    assert "NVTX" in line and "re-run nsys profile with -t nvtx" in line


# -- unreadable paths -------------------------------------------------------------
def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.sqlite"
    for command in COMMANDS:
        assert "no such file" in run_failing([command, str(path)], path)


def test_directory(tmp_path: Path) -> None:
    # A folder is read as a torch.profiler (tensorboard_trace_handler) folder.
    assert "holds no PyTorch profiler trace" in run_failing(["kernels", str(tmp_path)], tmp_path)


def test_path_through_a_file(tmp_path: Path) -> None:
    parent = tmp_path / "plain.txt"
    parent.write_text("x")
    path = parent / "run.sqlite"
    assert "cannot read" in run_failing(["kernels", str(path)], path)


def test_permission_denied(tmp_path: Path) -> None:
    path = tmp_path / "secret.sqlite"
    path.write_bytes(b"SQLite format 3\x00" + bytes(84))
    path.chmod(0)
    try:
        if os.geteuid() != 0:
            assert "permission denied" in run_failing(["kernels", str(path)], path)
            return
        # root reads anything: drop to an unprivileged effective uid for the
        # call (the real uid stays root, so it can be restored).
        tmp_path.chmod(0o755)
        os.setegid(65534)
        os.seteuid(65534)
        try:
            result = CliRunner().invoke(cli, ["kernels", str(path)])
        finally:
            os.seteuid(0)
            os.setegid(0)
        assert result.exit_code == 2, result.output
        assert result.stdout == ""
        assert result.stderr.splitlines() == [f"profkit: error: {path}: permission denied"]
    finally:
        path.chmod(0o600)


def test_text_gpu_id_is_not_a_crash(tmp_path):
    # Found by the fuzz run: a damaged export whose TARGET_INFO_GPU.id holds text.
    import shutil
    import sqlite3

    from click.testing import CliRunner

    from profkit.cli import cli
    from tests.conftest import nsys_fixture

    copy = tmp_path / "damaged_gpu_id.sqlite"
    shutil.copyfile(nsys_fixture("nsys2025_gelu"), copy)
    with sqlite3.connect(copy) as db:
        db.execute("UPDATE TARGET_INFO_GPU SET id = 'x'")
    for command in ("info", "occupancy", "kernels"):
        result = CliRunner().invoke(cli, [command, str(copy)])
        assert result.exit_code in (0, 2), (command, result.output)
        assert not isinstance(result.exception, (ValueError, TypeError)), (command, result.exception)


def test_huge_version_string_is_not_a_crash(tmp_path):
    # Found by the fuzz run: a damaged export whose version is five million digits.
    import shutil
    import sqlite3

    from click.testing import CliRunner

    from profkit.cli import cli
    from tests.conftest import nsys_fixture

    copy = tmp_path / "damaged_version.sqlite"
    shutil.copyfile(nsys_fixture("nsys2025_gelu"), copy)
    with sqlite3.connect(copy) as db:
        # 50,000 digits: past int()'s 4,300-digit limit (the ValueError the fuzz run hit with five
        # million), without minutes of drawing the value in the table
        db.execute("UPDATE META_DATA_EXPORT SET value = ? WHERE name = 'EXPORT_PRODUCT_VERSION'", ("9" * 50_000,))
    result = CliRunner().invoke(cli, ["info", str(copy)])
    assert result.exit_code in (0, 2), result.output
    assert not isinstance(result.exception, ValueError), result.exception
