"""Readers: one per source format, each filling the trace model (``profkit.model``).

- ``nsys``: Nsight Systems SQLite exports (schemas 3.7 and 3.20 and between);
- ``kineto``: torch.profiler / Kineto Chrome trace-event JSON (``.json``, ``.json.gz``);
- ``ncu``: Nsight Compute CSV (per-kernel metrics, not a timeline).

``profkit.readers.open_trace`` detects the source from the file's content.
"""

from __future__ import annotations



from pathlib import Path

from profkit.errors import ProfkitError
from profkit.model import Trace

SQLITE_MAGIC = b"SQLite format 3\x00"
GZIP_MAGIC = b"\x1f\x8b"


def detect_source(path: str | Path) -> str:
    """``"nsys"`` or ``"kineto"``, from the file's first bytes, never its name.

    A folder is a Kineto folder (``tensorboard_trace_handler`` output).
    A file that is neither gzip nor JSON goes to the nsys reader, whose
    checks say precisely what it is instead (empty, an ``.nsys-rep``,
    truncated SQLite, SQLite of another program)."""
    p = Path(path)
    try:
        is_dir = p.is_dir()
    except PermissionError:  # is_dir() re-raises EACCES on a parent folder
        raise ProfkitError(f"{p}: permission denied") from None
    if is_dir:
        return "kineto"  # the Kineto reader's folder policy says what a folder without traces is
    try:
        with p.open("rb") as f:
            head = f.read(64)
    except FileNotFoundError:
        raise ProfkitError(f"{p}: no such file") from None
    except PermissionError:
        raise ProfkitError(f"{p}: permission denied") from None
    except OSError:
        return "nsys"  # open_export names the problem (not a regular file, path through a file, ...)
    if head.startswith(GZIP_MAGIC) or head.lstrip()[:1] in (b"{", b"["):
        return "kineto"
    return "nsys"


def open_trace(path: str | Path) -> Trace:
    """Open any supported trace as a ``Trace`` (read-only; the file is never changed)."""
    source = detect_source(path)
    if source == "nsys":
        from profkit.readers.nsys.model_source import open_nsys_trace
        return open_nsys_trace(Path(path))
    from profkit.readers.kineto import open_kineto_trace
    return open_kineto_trace(Path(path))
