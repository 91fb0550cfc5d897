"""Scrub the profiled process's environment out of captures before they are
committed, then check that none is left.

  python scripts/scrub_export.py FILE.sqlite ...          scrub nsys exports in place
  python scripts/scrub_export.py --check FILE ...         check only (.sqlite, .json, .gz, .xz)

An nsys SQLite export keeps the environment in three places: the
TARGET_INFO_SYSTEM_ENV "DeviceEnvironment" row, META_DATA_CAPTURE
"...ENVIRONMENT_VARIABLE..." rows, and StringIds values that are whole
NUL-separated NAME=VALUE blocks (a process's `environ`).  All three are
removed, then the file is VACUUMed so the deleted pages are gone too.
The check is the byte pattern the project's before-stop hook uses.
"""

from __future__ import annotations

import gzip
import lzma
import re
import sqlite3
import sys

# the before-stop hook's pattern (shared/hooks/before-stop)
ENV_BLOCK = re.compile(rb"\x00(HOME|PATH|USER|PYTHONPATH|LD_LIBRARY_PATH)=[^\x00]*\x00")
# any NUL-separated NAME=VALUE pair: what a StringIds environ block is made of
ENV_PAIR = re.compile(rb"(^|\x00)[A-Za-z_][A-Za-z0-9_]*=[^\x00]*\x00[A-Za-z_][A-Za-z0-9_]*=")
# the same names as JSON text, for Kineto traces (which hold no NULs)
ENV_JSON = re.compile(rb'"(HOME|PATH|USER|PYTHONPATH|LD_LIBRARY_PATH)=')


def scrub(path: str) -> int:
    """Remove the environment from one export in place; returns the rows changed."""
    db = sqlite3.connect(path)
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    changed = 0
    if "META_DATA_CAPTURE" in tables:
        changed += db.execute("DELETE FROM META_DATA_CAPTURE WHERE name LIKE '%ENVIRONMENT_VARIABLE%'").rowcount
    if "TARGET_INFO_SYSTEM_ENV" in tables:
        changed += db.execute("DELETE FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'DeviceEnvironment'").rowcount
    if "StringIds" in tables:
        leaky = [sid for sid, raw in db.execute("SELECT id, CAST(value AS BLOB) FROM StringIds")
                 if raw and ENV_PAIR.search(raw)]
        db.executemany("UPDATE StringIds SET value = '' WHERE id = ?", [(sid,) for sid in leaky])
        changed += len(leaky)
    db.commit()
    db.execute("VACUUM")
    db.close()
    return changed


def leaks(path: str) -> bool:
    """Whether a capture (plain, .gz or .xz) still holds an environment block."""
    with open(path, "rb") as f:
        raw = f.read()
    if path.endswith(".xz"):
        raw = lzma.decompress(raw)
    elif path.endswith(".gz"):
        raw = gzip.decompress(raw)
    return bool(ENV_BLOCK.search(raw) or ENV_PAIR.search(raw) or ENV_JSON.search(raw)
                or (b"DeviceEnvironment" in raw and b"HOME=" in raw))


def main(argv: list[str]) -> int:
    check_only = argv[:1] == ["--check"]
    paths = argv[1:] if check_only else argv
    bad = []
    for path in paths:
        if not check_only:
            print(f"{path}: {scrub(path)} environment rows removed")
        if leaks(path):
            bad.append(path)
    for path in bad:
        print(f"ENVIRONMENT LEFT IN {path}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
