#!/usr/bin/env python3
"""Re-scrub committed exports in place: ``python scripts/scrub_committed_exports.py [FILE...]``.

Without arguments: every nsys export and Kineto trace that git tracks
(``*.sqlite``, ``*.sqlite.xz``, ``*.json.gz``, ``*.json.xz`` outside
``reports/*/report.json``).  Each is decompressed, passed through
``profkit.scrub.scrub`` (environment removed, no anonymization: the oracle
CSVs beside the fixtures must stay valid) and compressed again the same
way.  tests/test_committed_exports.py checks the result byte-wise.
"""

from __future__ import annotations

import gzip
import lzma
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from profkit.atomic import write_bytes  # noqa: E402
from profkit.scrub import scrub  # noqa: E402

SUFFIXES = (".sqlite", ".sqlite.xz", ".json.gz", ".json.xz")


def tracked_exports() -> list[Path]:
    names = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    return [ROOT / n for n in names if n.endswith(SUFFIXES)]


def rescrub(path: Path) -> dict[str, int] | None:
    """Scrub one file in place; None for a JSON file that is not a trace (ncu/occupancy tables)."""
    raw = path.read_bytes()
    packed = path.name.endswith(".xz")
    if ".json" in path.name:
        text = lzma.decompress(raw) if packed else raw
        if b'"traceEvents"' not in (gzip.decompress(text) if text[:2] == b"\x1f\x8b" else text):
            return None
    plain_name = path.name.removesuffix(".xz")
    with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
        plain, out = Path(tmp) / plain_name, Path(tmp) / f"scrubbed.{plain_name}"
        plain.write_bytes(lzma.decompress(raw) if packed else raw)
        removed = scrub(plain, out)
        data = out.read_bytes()
    if plain_name.endswith(".json.gz") and not out.name.endswith(".gz"):
        data = gzip.compress(data, mtime=0)
    write_bytes(path, lzma.compress(data, preset=9 | lzma.PRESET_EXTREME) if packed else data)
    return removed


def main(argv: list[str]) -> int:
    paths = [Path(a).resolve() for a in argv] or tracked_exports()
    for path in paths:
        removed = rescrub(path)
        what = "not a trace, left as it is" if removed is None else removed or "nothing to remove"
        print(f"{path.relative_to(ROOT)}: {what}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
