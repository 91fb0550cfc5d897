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
from profkit.model.rank_view import RankLayout, job_layout
from profkit.readers.run_folder import run_folder_trace
from profkit.readers.snapshot import PICKLE_MAGIC

SQLITE_MAGIC = b"SQLite format 3\x00"
GZIP_MAGIC = b"\x1f\x8b"


def _is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except PermissionError:  # is_dir() re-raises EACCES on a parent folder
        raise ProfkitError(f"{path}: permission denied") from None


def resolve_run_folder(path: Path) -> Path:
    """The trace a folder stands for; any other path as it is.

    A ``profkit trace`` run folder: its trace.  Another folder holding nsys
    exports: its one ``*.sqlite`` (several are an error naming them).
    Otherwise the folder itself: the Kineto reader's folder policy picks its
    PyTorch profiler trace, or says there is none."""
    if not _is_dir(path):
        return path
    run_trace = run_folder_trace(path)
    if run_trace is not None:
        return run_trace
    exports = sorted(path.glob("*.sqlite"))
    if len(exports) > 1:
        names = ", ".join(p.name for p in exports[:5])
        raise ProfkitError(f"{path} holds several exports ({names}); pass one of them")
    return exports[0] if exports else path


def detect_source(path: str | Path) -> str:
    """``"nsys"``, ``"kineto"`` or ``"snapshot"``, from the file's first bytes, never its name.

    A folder is a ``profkit trace`` run folder (it has a run.json naming its
    trace) or else a Kineto folder (``tensorboard_trace_handler`` output).
    A file that is neither gzip nor JSON goes to the nsys reader, whose
    checks say precisely what it is instead (empty, an ``.nsys-rep``,
    truncated SQLite, SQLite of another program)."""
    p = resolve_run_folder(Path(path))
    if _is_dir(p):
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
    if head.startswith(PICKLE_MAGIC):  # a pickle: a PyTorch memory snapshot, read without running it
        return "snapshot"
    return "nsys"


def open_trace(path: str | Path) -> Trace:
    """Open any supported trace as a ``Trace`` (read-only; the file is never changed).

    ``path`` is a file, a Kineto folder, or a ``profkit trace`` run folder."""
    path = resolve_run_folder(Path(path))
    source = detect_source(path)
    if source == "nsys":
        from profkit.readers.nsys.model_source import open_nsys_trace
        return open_nsys_trace(path)
    if source == "snapshot":
        from profkit.readers.snapshot import open_snapshot
        return open_snapshot(path)
    from profkit.readers.kineto import open_kineto_trace
    return open_kineto_trace(path)


def file_layout(path: str | Path) -> RankLayout:
    """The ranks a trace file holds (``profkit.model.rank_view.job_layout``), for a caller
    that hands the ranks to workers.  Only nsys exports are opened for it: a PyTorch
    profiler trace is one process's (its GPU work carries the profiled process's pid), so
    it is one rank, and parsing its JSON here would only cost time."""
    if detect_source(path) != "nsys":
        return RankLayout((), None)
    with open_trace(path) as trace:
        return job_layout(trace)


def is_whole_job(path: str | Path) -> bool:
    """One export of a whole multi-GPU job (``nsys profile torchrun ...``: one process per GPU),
    whose ranks get the cross-rank report; a ProfkitError when it is not a trace."""
    return file_layout(path).is_job
