"""Which files are the ranks of a job, and which rank each file is.

The rank of a file comes, in this order, from:
1. the trace itself (Kineto's ``distributedInfo.rank``; read on the worker,
   see ``per_rank``), which is authoritative;
2. ``--rank-from REGEX``: the first group of the regex, matched on the file name;
3. the file name: ``rank3``, ``rank_3``, ``rank-3``, or a trailing ``_3.`` / ``-3.``
   before the extension (``trace_3.json.gz``, ``worker-3.pt.trace.json``); not the
   ``host_pid.timestamp.pt.trace.json`` names of ``tensorboard_trace_handler``.

A file that holds a whole job (one export of ``torchrun``: one process per GPU)
is several ranks; the worker that first opens it says so, and each rank then
becomes a task of its own (``RankInput.job_rank``, see ``engine.map_ranks``),
whose rank comes from the trace (``profkit.model.rank_view``).

Never from the recorded environment (``RANK=`` in an export's environment
tables): that is the profiled process's environment, which profkit never reads.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from profkit.errors import ProfkitError

TRACE_SUFFIXES = (".sqlite", ".json", ".json.gz")
_RANK_WORD = re.compile(r"rank[_-]?(\d+)", re.IGNORECASE)
_TRAILING_NUMBER = re.compile(r"[_-](\d+)\.(?:pt\.trace\.)?(?:sqlite|json)(?:\.gz)?$")


@dataclass(frozen=True)
class RankInput:
    path: Path
    rank_hint: int | None  # from the name or --rank-from; the trace may override it
    # One rank of a whole-job export (``profkit.model.rank_view``): the worker opens the
    # file and takes this rank's view.  None: the file is one rank, or not yet looked at.
    job_rank: int | None = None


def is_trace_file(path: Path) -> bool:
    return path.is_file() and path.name.endswith(TRACE_SUFFIXES)


def expand(paths: list[Path]) -> list[Path]:
    """Files as given, and the trace files directly inside each folder (sorted)."""
    files: list[Path] = []
    for p in paths:
        if p.is_dir():
            found = sorted(f for f in p.iterdir() if is_trace_file(f))
            if not found:
                raise ProfkitError(f"{p}: no trace files (*.sqlite, *.json, *.json.gz) in this folder")
            files += found
        elif p.exists():
            files.append(p)
        else:
            raise ProfkitError(f"{p}: no such file")
    seen: set[Path] = set()
    unique = [f for f in files if not (f.resolve() in seen or seen.add(f.resolve()))]
    return unique


def rank_from_name(name: str, pattern: str | None = None) -> int | None:
    if pattern:
        try:
            m = re.search(pattern, name)
        except re.error as exc:
            raise ProfkitError(f"--rank-from {pattern!r} is not a valid regular expression ({exc})") from None
        if m is None:
            return None
        try:
            return int(m.group(1) if m.groups() else m.group(0))
        except ValueError:
            raise ProfkitError(f"--rank-from {pattern!r} matched {m.group(0)!r} in {name}, not a number") from None
    m = _RANK_WORD.search(name) or _TRAILING_NUMBER.search(name)
    return int(m.group(1)) if m else None


def rank_inputs(paths: list[Path], rank_from: str | None = None) -> list[RankInput]:
    return [RankInput(p, rank_from_name(p.name, rank_from)) for p in expand(paths)]
