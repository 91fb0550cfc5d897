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

    A folder is a Kineto folder (``tensorboard_trace_handler`` output) unless
    it is a ``profkit trace`` run folder, whose ``run.json`` names its trace."""
    p = Path(path)
    if p.is_dir():
        return "kineto"
    try:
        with p.open("rb") as f:
            head = f.read(64)
    except FileNotFoundError:
        raise ProfkitError(f"{p}: no such file") from None
    except IsADirectoryError:
        return "kineto"
    except OSError as exc:
        raise ProfkitError(f"{p}: cannot read it ({exc.strerror or exc})") from None
    if head.startswith(GZIP_MAGIC) or head.lstrip()[:1] in (b"{", b"["):
        return "kineto"
    # SQLite, and everything else: the nsys reader names what is wrong with a
    # file that is no export (empty, not SQLite, an .nsys-rep, truncated).
    return "nsys"


def open_trace(path: str | Path) -> Trace:
    """Open any supported trace as a ``Trace`` (read-only; the file is never changed)."""
    source = detect_source(path)
    if source == "nsys":
        from profkit.readers.nsys.model_source import open_nsys_trace
        return open_nsys_trace(Path(path))
    from profkit.readers.kineto import open_kineto_trace
    return open_kineto_trace(Path(path))
