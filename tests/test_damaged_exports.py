"""Damaged real exports give the one-line "is damaged" error on every command (issue 15, item 2).

Each case is a real fixture with a few bytes changed inside its pages, the
way a bad disk or a cut download changes them.  The oracle is the contract:
exit status 2, one line on stderr, no traceback, the input unchanged.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from profkit.cli import cli
from tests.conftest import nsys_fixture

COMMANDS = [["kernels"], ["api"], ["nvtx"], ["info"], ["stalls"], ["report", "-o", "{out}"],
            ["scrub", "-o", "{out}/scrubbed.sqlite"]]


def schema_name_not_utf8(data: bytearray) -> bytearray:
    """A table's name in sqlite_master gets a byte that is not UTF-8 and its CREATE statement
    stops parsing: SQLite's error message quotes the name, and before the fix Python failed
    to decode that message (UnicodeDecodeError from the first PRAGMA)."""
    m = re.search(rb"table(StringIds)StringIds", data)
    data[m.start(1) + 3] = 0xC6
    sql = data.find(b"CREATE TABLE", m.end())
    data[sql:sql + 6] = b"CREATX"
    return data


def flipped_in_schema_text(data: bytearray) -> bytearray:
    idx = data.find(b"CREATE TABLE", 100)
    data[idx + 14] = 0xC6
    return data


def flipped_in_data_page(data: bytearray) -> bytearray:
    """Every byte of one b-tree page past the header inverted."""
    page = len(data) // 4096 // 2
    for i in range(page * 4096 + 8, page * 4096 + 4096):
        data[i] ^= 0xFF
    return data


@pytest.mark.parametrize("fixture", ["nsys2025_sync_apis", "nsys2023_sync_apis"])
@pytest.mark.parametrize("damage", [schema_name_not_utf8, flipped_in_schema_text, flipped_in_data_page])
@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
def test_damaged_export_is_one_line(fixture: str, damage, command: list[str], tmp_path: Path) -> None:  # noqa: ANN001
    path = tmp_path / f"damaged_{fixture}.sqlite"
    path.write_bytes(damage(bytearray(nsys_fixture(fixture).read_bytes())))
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    (tmp_path / "out").mkdir()
    args = [command[0], str(path), *[a.format(out=tmp_path / "out") for a in command[1:]]]
    result = CliRunner().invoke(cli, args)
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    if damage is not flipped_in_data_page or result.exit_code != 0:
        # (one inverted data page may sit in a table this command never reads)
        assert result.exit_code == 2, result.output
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("profkit: error: ") and "damaged" in lines[0], lines
    assert hashlib.sha256(path.read_bytes()).hexdigest() == digest
    assert not [p for p in (tmp_path / "out").iterdir() if p.name.startswith(".")], "temporary files left"
