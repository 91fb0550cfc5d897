"""Which files are the ranks of a job, and which rank each file is.

The rank of a file comes, in this order, from:
1. the trace itself (Kineto's ``distributedInfo.rank``; read on the worker,
   see ``per_rank``), which is authoritative;
2. ``--rank-from REGEX``: the first group of the regex, matched on the file name;
3. the file name: ``rank3``, ``rank_3``, ``rank-3``, or a trailing ``_3.`` / ``-3.``
   before the extension (``trace_3.json.gz``, ``worker-3.pt.trace.json``); not the
   ``host_pid.timestamp.pt.trace.json`` names of ``tensorboard_trace_handler``;
4. else the file's place among the others ("file order"), past the ranks names took.

A file that holds a whole job (one export of ``torchrun``: one process per GPU)
is several ranks; the worker that first opens it says so, and each rank then
becomes a task of its own (``RankInput.job_rank``, see ``engine.map_ranks``),
whose rank comes from the trace (``profkit.model.rank_view``).

Never from the recorded environment (``RANK=`` in an export's environment
tables): that is the profiled process's environment, which profkit never reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from profkit.errors import ProfkitError
from profkit.readers.job import TRACE_SUFFIXES, job_files, rank_from_name
from profkit.readers.run_folder import run_folder_trace

__all__ = ["RankInput", "expand", "rank_from_name", "rank_inputs"]


@dataclass(frozen=True)
class RankInput:
    path: Path
    rank_hint: int | None  # from the name or --rank-from; the trace may override it
    # One rank of a whole-job export (``profkit.model.rank_view``): the worker opens the
    # file and takes this rank's view.  None: the file is one rank, or not yet looked at.
    job_rank: int | None = None
    hint_source: str = "file name"  # what rank_hint came from: "file name", or "file order"


def is_trace_file(path: Path) -> bool:
    return path.is_file() and path.name.endswith(TRACE_SUFFIXES)


def expand(paths: list[Path], skipped: list[Path] | None = None) -> list[Path]:
    """Files as given, and the rank traces each folder names (``profkit.readers.job.job_files``: a
    folder's trace files, a run folder's rank traces or its one trace); the files of a folder that
    are named like traces but hold none (a run folder's run.json, report.json) go to ``skipped``."""
    files: list[Path] = []
    for p in paths:
        if p.is_dir():
            found = job_files(p)
            if skipped is not None:
                skipped += found.skipped
            folder_files = [f.path for f in found.files] if found.rank_files else _one_trace_of(p)
            if not folder_files:
                raise ProfkitError(f"{p}: no trace files (*.sqlite, *.json, *.json.gz) in this folder")
            files += folder_files
        elif p.exists():
            files.append(p)
        else:
            raise ProfkitError(f"{p}: no such file")
    seen: set[Path] = set()
    unique = [f for f in files if not (f.resolve() in seen or seen.add(f.resolve()))]
    return unique


def _one_trace_of(folder: Path) -> list[Path]:
    """The one trace of a folder that holds one: a run folder's, a folder's export or Kineto trace."""
    run_trace = run_folder_trace(folder)
    if run_trace is not None:
        return [run_trace]
    return [f for f in sorted(folder.iterdir()) if is_trace_file(f) and f not in job_files(folder).skipped]


def rank_inputs(paths: list[Path], rank_from: str | None = None,
                skipped: list[Path] | None = None) -> list[RankInput]:
    """Each file with the rank its name gives; where neither the name nor --rank-from gives one,
    the file's place among the others, skipping ranks that names took (a trace's own record, read
    on the worker, still wins)."""
    files = expand(paths, skipped)
    named = [rank_from_name(p.name, rank_from) for p in files]
    if len(files) < 2 or all(r is not None for r in named):
        return [RankInput(p, r) for p, r in zip(files, named)]
    free = (r for r in range(len(files) + len(named)) if r not in set(named))
    return [RankInput(p, r) if r is not None else RankInput(p, next(free), hint_source="file order")
            for p, r in zip(files, named)]
