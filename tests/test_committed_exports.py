"""No committed export holds the profiled process's environment (issue 15, item 5).

Every nsys export and trace in the repository, whoever adds it later, is
decompressed and searched byte-wise: SQLite's LIKE stops at the first NUL,
so a query would miss the NUL-separated ``environ`` blocks nsys 2025 keeps
in StringIds.  The patterns are the project's before-stop hook's, plus the
other two places nsys records the environment.  A file that fails is fixed
with ``python scripts/scrub_committed_exports.py PATH``.
"""

from __future__ import annotations

import gzip
import json
import lzma
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SUFFIXES = (".sqlite", ".sqlite.xz", ".sqlite.gz", ".json", ".json.gz", ".json.xz", ".nsys-rep", ".tar.xz")
SKIP_DIRS = {".git", ".venv", ".tools", ".gpu-kit", "node_modules", "__pycache__", ".pytest_cache"}

ENV_PATTERNS = [
    # the before-stop hook's test
    re.compile(rb"\x00(HOME|PATH|USER|PYTHONPATH|LD_LIBRARY_PATH)=[^\x00]*\x00"),
    # TARGET_INFO_SYSTEM_ENV's row and META_DATA_CAPTURE's rows
    re.compile(rb"DeviceEnvironment"),
    re.compile(rb"PROCESS_[0-9]+:ENVIRONMENT_VARIABLE"),
]
# Any three NUL-separated NAME=VALUE entries in a row (raw, and as JSON text).
# NUL bytes are everywhere in SQLite pages, so each block pattern is tried
# only where its first entry starts.
BLOCKS = [
    (re.compile(rb"\x00[A-Za-z_][A-Za-z0-9_]{0,127}="),
     re.compile(rb"(?:\x00[A-Za-z_][A-Za-z0-9_]{0,127}=[^\x00]{0,4096}){3}\x00")),
    (re.compile(rb"\\u0000[A-Za-z_][A-Za-z0-9_]{0,127}="),
     re.compile(rb"(?:\\u0000[A-Za-z_][A-Za-z0-9_]{0,127}=(?:[^\"\\]|\\[^u]){0,4096}){3}")),
]


def environment_at(data: bytes) -> int | None:
    """Offset of the first environment block in ``data``, or None."""
    for pattern in ENV_PATTERNS:
        if found := pattern.search(data):
            return found.start()
    for start, block in BLOCKS:
        for entry in start.finditer(data):
            if block.match(data, entry.start()):
                return entry.start()
    return None


def committed_exports() -> list[Path]:
    """Tracked files (git ls-files), or every file under the root outside a git checkout."""
    try:
        names = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
        files = [ROOT / n for n in names.decode().split("\x00") if n]
    except (OSError, subprocess.CalledProcessError):
        files = [p for p in ROOT.rglob("*") if not SKIP_DIRS & set(p.relative_to(ROOT).parts)]
    return sorted(p for p in files if p.name.endswith(SUFFIXES) and p.is_file())


def contents(path: Path) -> bytes:
    raw = path.read_bytes()
    if path.name.endswith(".xz"):
        raw = lzma.decompress(raw)
    if path.name.endswith(".gz") or raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    return raw


EXPORTS = committed_exports()


def test_the_known_exports_are_scanned() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in EXPORTS}
    assert "profkit/examples/train_print.sqlite.xz" in names
    assert any(n.startswith("tests/data/nsys/") for n in names)
    assert any(n.startswith("reports/") and ".sqlite" in n for n in names)


@pytest.mark.parametrize("path", EXPORTS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_environment_in_committed_export(path: Path) -> None:
    at = environment_at(contents(path))
    assert at is None, (f"{path.relative_to(ROOT)} holds an environment block near byte {at}: "
                        f"run python scripts/scrub_committed_exports.py {path.relative_to(ROOT)}")


def test_the_scan_finds_a_planted_block(tmp_path: Path) -> None:
    """The patterns above catch what nsys writes (a planted copy of a real fixture)."""
    from tests.planted import plant_secret

    data = plant_secret("nsys2025_sync", tmp_path).read_bytes()
    assert all(p.search(data) for p in ENV_PATTERNS)
    start, block = BLOCKS[0]
    assert any(block.match(data, m.start()) for m in start.finditer(data))
    as_json = json.dumps({"name": "x\x00HOME=/root\x00PATH=/bin\x00USER=me\x00"}).encode()
    assert environment_at(as_json) is not None
