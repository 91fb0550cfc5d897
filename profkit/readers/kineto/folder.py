"""Which trace of a folder to read (``tensorboard_trace_handler`` output).

tensorboard_trace_handler writes ``{worker}.{time_ns}.pt.trace.json[.gz]``
per profiling cycle, ``worker`` defaulting to ``{host}_{pid}``; a DDP run
writes one such file per rank.  The policy:

- one trace in the folder: that one;
- traces of several ranks (``distributedInfo.rank`` differs) or, where no
  rank is recorded, of several processes (worker names differ): an error
  naming them and pointing at ``profkit ranks`` / ``profkit report R0 R1``.
  Summing ranks into one table would double every kernel and mix clocks;
- several cycles of one rank or process (``schedule(..., repeat=N)``): the
  newest, by the time in its name (else its modification time).  The last
  cycle is the one the warm-up and schedule were written for (caches warm,
  ``torch.compile`` done), and every command of profkit reads one cycle;
  ``TraceMeta.extra['folder_note']`` says which file was read and how many
  were passed over, and a file path reads any other.

Files are recognised by content: every ``*.json`` / ``*.json.gz`` whose
head has a ``"traceEvents"`` key (so a run folder's ``run.json`` is not
taken for a trace).  Only the head of each file is read to decide.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass
from pathlib import Path

import msgspec

from profkit.errors import ProfkitError, ProfkitWarning
from profkit.readers.kineto.parse import EVENTS_KEY, open_binary

HEAD_BYTES = 1 << 20
HANDLER_NAME = re.compile(r"(?P<worker>.+)\.(?P<ns>\d{10,})\.pt\.trace\.json(\.gz)?")
DIST_INFO = re.compile(rb'"distributedInfo"\s*:\s*\{')


@dataclass
class Candidate:
    path: Path
    rank: int | None
    worker: str | None
    written_ns: int

    @property
    def group(self) -> str:
        if self.rank is not None:
            return f"rank {self.rank}"
        return f"process {self.worker}" if self.worker else f"file {self.path.name}"


def choose_trace(folder: Path) -> tuple[Path, str | None]:
    """(the trace to read, a note when others were passed over)."""
    candidates = [c for p in sorted(folder.iterdir()) if (c := _candidate(p)) is not None]
    if not candidates:
        raise ProfkitError(f"{folder} holds no PyTorch profiler trace (*.json or *.json.gz with traceEvents)",
                           hint="pass an nsys export (*.sqlite), a PyTorch profiler trace, "
                                "or a folder made by `profkit trace`")
    groups: dict[str, list[Candidate]] = {}
    for c in candidates:
        groups.setdefault(c.group, []).append(c)
    if len(groups) > 1:
        listing = "; ".join(f"{g}: {', '.join(c.path.name for c in cs)}" for g, cs in sorted(groups.items()))
        raise ProfkitError(f"{folder} holds the traces of {len(groups)} ranks or processes ({listing}): "
                           f"profkit reads one rank at a time",
                           hint=f"compare them with 'profkit ranks {folder}' or 'profkit report R0 R1', "
                                f"or pass one file")
    newest = max(candidates, key=lambda c: (c.written_ns, c.path.name))
    if len(candidates) == 1:
        return newest.path, None
    return newest.path, (f"{folder.name}/ holds {len(candidates)} profiler cycles of one "
                         f"{newest.group.split(' ')[0]}: read the newest, {newest.path.name} "
                         f"(pass a file to read another)")


def newest_per_rank(folder: Path) -> tuple[list[Path], list[Path]]:
    """(the newest trace of each rank or process in the folder, the ``*.json`` files that are no
    trace): the rank files of a folder that holds several ranks' traces."""
    candidates, not_traces = [], []
    for p in sorted(folder.iterdir()):
        if not p.is_file() or not p.name.endswith((".json", ".json.gz")):
            continue
        c = _candidate(p)
        (candidates if c is not None else not_traces).append(c if c is not None else p)
    groups: dict[str, list[Candidate]] = {}
    for c in candidates:
        groups.setdefault(c.group, []).append(c)
    newest = []
    for cs in groups.values():
        chosen = max(cs, key=lambda c: (c.written_ns, c.path.name))
        newest.append(chosen.path)
        if len(cs) > 1:  # a rank's profiler cycles, or two runs' traces in one folder: say which is read
            others = ", ".join(sorted(c.path.name for c in cs if c is not chosen))
            who = f"rank {chosen.rank}" if chosen.rank is not None else "one process"
            warnings.warn(f"{folder.name} holds {len(cs)} traces of {who}: reading the newest, {chosen.path.name} "
                          f"(not {others}; pass a file to read another)", ProfkitWarning, stacklevel=2)
    return sorted(newest), not_traces


def recorded_rank(path: Path) -> int | None:
    """The rank a Kineto trace records (``distributedInfo.rank``), read from its head only."""
    found = _candidate(path)
    return found.rank if found is not None else None


def _candidate(path: Path) -> Candidate | None:
    if not path.is_file() or not (path.name.endswith(".json") or path.name.endswith(".json.gz")):
        return None
    try:
        with open_binary(path) as f:
            head = f.read(HEAD_BYTES)
    except (OSError, EOFError, ProfkitError):
        head = b""
    if EVENTS_KEY not in head and (head or not path.name.endswith(".gz")):
        return None  # other JSON (a run folder's run.json); an unreadable .gz stays, to fail loudly when read
    named = HANDLER_NAME.fullmatch(path.name)
    written = int(named.group("ns")) if named else path.stat().st_mtime_ns
    return Candidate(path, _rank(head), named.group("worker") if named else None, written)


def _rank(head: bytes) -> int | None:
    """distributedInfo.rank from the header, which precedes the events."""
    m = DIST_INFO.search(head, 0, head.find(EVENTS_KEY) if EVENTS_KEY in head else len(head))
    if m is None:
        return None
    depth, start = 0, m.end() - 1
    for i in range(start, len(head)):
        ch = head[i:i + 1]
        if ch == b"{":
            depth += 1
        elif ch == b"}":
            depth -= 1
            if depth == 0:
                try:
                    info = msgspec.json.decode(head[start:i + 1])
                except msgspec.DecodeError:
                    return None
                rank = info.get("rank") if isinstance(info, dict) else None
                return rank if isinstance(rank, int) else None
    return None
