"""``scrub``: a copy of a trace that is safe to share.

    removed = scrub("run.sqlite", "run.shared.sqlite", anonymize=True)

The format is told by the file's first bytes (SQLite: an nsys export;
otherwise a Kineto JSON trace, gzipped or not).  One module per format finds
its places (``profkit.scrub.nsys``, ``profkit.scrub.kineto``), reading them
with that format's reader (scrub sits above ``profkit.readers``, never
below); the rules for what goes are in ``profkit.scrub.text``.  The input is never changed; the output is written
under a temporary name and renamed, so it is whole or absent.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from profkit.errors import ProfkitError

GZIP_MAGIC = b"\x1f\x8b"


def scrub(source: str | os.PathLike[str], output: str | os.PathLike[str], *, anonymize: bool = False,
          environment: Mapping[str, str] | None = None) -> dict[str, int]:
    """Write a copy of ``source`` without its recorded environment and credentials.

    Returns what was removed, by kind (``{"META_DATA_CAPTURE environment rows": 83, ...}``).
    ``environment``: variables whose secret values must also go wherever they
    occur (``profkit trace`` passes the environment the program ran with).
    """
    src, out = Path(source), Path(output)
    head = _head(src)
    if out.exists() and out.resolve() == src.resolve():
        raise ProfkitError(f"{out} is the input; scrub writes a copy", hint="give another -o path")
    if out.is_dir():
        raise ProfkitError(f"{out} is a folder", hint="give the path of the file to write")
    if not out.parent.is_dir():
        raise ProfkitError(f"{out.parent} does not exist", hint="create the folder first")
    from profkit.readers.nsys.reader import SQLITE_MAGIC

    if head.startswith(SQLITE_MAGIC):
        from profkit.scrub.nsys import scrub_export

        return scrub_export(src, out, anonymize=anonymize, environment=environment)
    if head.startswith(GZIP_MAGIC) or head.lstrip()[:1] in (b"{", b"["):
        from profkit.scrub.kineto import scrub_kineto

        return scrub_kineto(src, out, anonymize=anonymize, environment=environment)
    raise ProfkitError(f"{src} is neither an nsys SQLite export nor a Kineto JSON trace",
                       hint="scrub takes EXPORT.sqlite, TRACE.json or TRACE.json.gz")


def _head(path: Path) -> bytes:
    try:
        with open(path, "rb") as fh:
            return fh.read(64)
    except FileNotFoundError:
        raise ProfkitError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise ProfkitError(f"{path} is a directory, not a trace") from None
    except OSError as exc:
        raise ProfkitError(f"{path}: cannot read ({exc.strerror or exc})") from None
