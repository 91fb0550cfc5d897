"""A path and a rank -> the traces it names, one per rank: the one resolver of every per-trace command.

Three inputs hold several ranks, and read alike:

- one export of a whole job (``nsys profile torchrun ...``: one process per GPU), split into
  its ranks by ``profkit.model.rank_view``;
- a folder of rank traces (``rank0.sqlite rank1.sqlite``, or torch.profiler traces of
  several ranks): one file per rank;
- a ``profkit trace`` run folder of a torchrun job: its run.json's ``rank_traces`` (the torch
  backend writes one trace per rank), or its one trace (nsys: an export of the whole job).

Anything else is one trace, read as ``open_trace`` reads it (a Kineto folder of one rank's
profiler cycles included).  Which rank a file is: the trace's own record (Kineto's
``distributedInfo``), else its name (``rank3``, ``rank_3``, ``trace_3.json.gz``); a folder's
traces are its ranks only when each says which (a run folder's rank traces are ranks whatever
their names, by their place when they say nothing).  Each trace's ``meta.extra["rank_source"]``
says where its rank came from.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from profkit.errors import ProfkitError
from profkit.model import Trace
from profkit.model.rank_view import rank_views
from profkit.readers.run_folder import RUN_JSON, read_run_record, run_folder_trace

TRACE_SUFFIXES = (".sqlite", ".json", ".json.gz")
_RANK_WORD = re.compile(r"rank[_-]?(\d+)", re.IGNORECASE)
_TRAILING_NUMBER = re.compile(r"[_-](\d+)\.(?:pt\.trace\.)?(?:sqlite|json)(?:\.gz)?$")

# meta.extra["rank_source"] of a rank file (a whole-job export's views name how they were split)
FROM_TRACE, FROM_NAME, FROM_ORDER = "trace", "file name", "file order"


def rank_from_name(name: str, pattern: str | None = None) -> int | None:
    """The rank in a file name: ``pattern``'s first group, else ``rank3``/``rank_3``/``rank-3``, else a
    trailing ``_3.``/``-3.`` before the extension; not tensorboard_trace_handler's ``host_pid.ns`` names."""
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


@dataclass(frozen=True)
class RankFile:
    path: Path
    rank: int | None    # known before it is opened; None: one trace, or a whole-job export
    rank_source: str | None


@dataclass(frozen=True)
class JobFiles:
    """The trace files a path names: one (a trace, or a whole job's export) or one per rank."""

    files: tuple[RankFile, ...]
    skipped: tuple[Path, ...] = ()  # files named like traces that hold none (a run folder's run.json)

    @property
    def rank_files(self) -> bool:
        return len(self.files) > 1


def job_files(path: Path) -> JobFiles:
    """What ``path`` names, before anything is opened (only the heads of a folder's files are read)."""
    path = Path(path)
    if not _is_dir(path):
        return JobFiles((RankFile(path, None, None),))
    if (path / RUN_JSON).is_file():
        record = read_run_record(path)
        files = record.get("files") if isinstance(record, dict) else None  # run.json is input: checked
        names = files.get("rank_traces") if isinstance(files, dict) else None
        if isinstance(names, list) and len(names) > 1 and all(isinstance(n, str) for n in names):
            return JobFiles(_ranked([path / n for n in names]), _not_traces(path))
        if run_folder_trace(path) is not None:
            return JobFiles((RankFile(path, None, None),))
    traces, skipped = _folder_traces(path)
    ranked = _ranked(traces) if len(traces) > 1 else ()
    # several traces are ranks only where each says which (its record or its name): two exports
    # a.sqlite b.sqlite may be two runs, which open_trace's folder policy refuses by name
    if ranked and all(f.rank_source != FROM_ORDER for f in ranked):
        return JobFiles(ranked, tuple(skipped))
    return JobFiles((RankFile(path, None, None),), tuple(skipped))


def _is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except PermissionError:
        raise ProfkitError(f"{path}: permission denied") from None


def _folder_traces(folder: Path) -> tuple[list[Path], list[Path]]:
    """(one trace file per rank, files named like traces that are not): nsys exports by their first
    bytes; Kineto traces by their head, the newest profiler cycle of each rank or process."""
    from profkit.readers.kineto.folder import newest_per_rank
    from profkit.readers.nsys.reader import SQLITE_MAGIC

    exports, other = [], []
    for p in sorted(folder.iterdir()):
        if not p.is_file() or not p.name.endswith(TRACE_SUFFIXES):
            continue
        if p.name.endswith(".sqlite"):
            (exports if _head(p).startswith(SQLITE_MAGIC) else other).append(p)
    kineto, not_kineto = newest_per_rank(folder)
    return exports + kineto, sorted(other + not_kineto)


def _not_traces(folder: Path) -> tuple[Path, ...]:
    return tuple(_folder_traces(folder)[1])


def _head(path: Path) -> bytes:
    try:
        with path.open("rb") as f:
            return f.read(16)
    except OSError:
        return b""


def _ranked(paths: list[Path]) -> tuple[RankFile, ...]:
    """Each rank file with its rank: its own record, else its name, else its place; sorted by rank."""
    from profkit.readers.kineto.folder import recorded_rank

    files = []
    for place, p in enumerate(paths):
        recorded = recorded_rank(p) if not p.name.endswith(".sqlite") else None
        named = rank_from_name(p.name)
        if recorded is not None:
            files.append(RankFile(p, recorded, FROM_TRACE))
        elif named is not None:
            files.append(RankFile(p, named, FROM_NAME))
        else:
            files.append(RankFile(p, place, FROM_ORDER))
    seen: dict[int, Path] = {}
    for f in files:
        if f.rank in seen:
            raise ProfkitError(f"{seen[f.rank].name} and {f.path.name} are both rank {f.rank}",
                               hint="pass the rank files of one job, one per rank")
        seen[f.rank] = f.path  # type: ignore[index]
    return tuple(sorted(files, key=lambda f: f.rank))  # type: ignore[arg-type, return-value]


class Job:
    """The ranks a path names: ``ranks`` (every rank the input holds; ``[]`` for a single trace),
    ``skipped`` (files that are not traces), and the asked rank's trace or each rank's, by ``each()``
    (one rank file open at a time) or ``traces`` (every one opened, kept until ``close()``)."""

    def __init__(self, ranks: list[int], skipped: tuple[Path, ...], opened: list[Trace] | None = None,
                 files: tuple[RankFile, ...] = ()) -> None:
        self.ranks = ranks
        self.skipped = skipped
        self._opened = opened
        self._files = files  # the chosen rank files, opened on use
        self._closing = ExitStack()
        for trace in opened or []:
            self._closing.callback(trace.close)

    @property
    def multi_rank(self) -> bool:
        """The input holds several ranks: commands answer per rank (a ``rank`` key, column or block)."""
        return bool(self.ranks)

    @property
    def traces(self) -> list[Trace]:
        if self._opened is None:
            self._opened = []
            for f in self._files:
                self._opened.append(self._closing.enter_context(_open_rank(f)))
        return self._opened

    def each(self) -> Iterator[Trace]:
        """Each trace in rank order; a rank file is closed before the next opens (64 ranks of a job
        are never in memory at once), unless ``traces`` opened them all."""
        if self._opened is not None:
            yield from self._opened
            return
        for f in self._files:
            with _open_rank(f) as trace:
                yield trace

    def close(self) -> None:
        self._closing.close()

    def __enter__(self) -> Job:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_job(path: str | Path, rank: int | None = None) -> Job:
    """What ``path`` names (see the module docstring): every rank, or only ``rank``; rank files are
    opened on use, a single trace or a whole job's export now (its ranks are told by its rows).

    ``rank`` that the input does not hold is a ProfkitError naming the ranks it holds; on a
    single trace, ``rank`` must be the rank it records (or it records none)."""
    from profkit.readers import open_trace

    path = Path(path)
    found = job_files(path)
    if found.rank_files:
        ranks = [f.rank for f in found.files]
        chosen = tuple(f for f in found.files if rank is None or f.rank == rank)
        if not chosen:
            raise ProfkitError(_no_such_rank(path, rank, ranks))  # type: ignore[arg-type]
        return Job(ranks, found.skipped, files=chosen)  # type: ignore[arg-type]
    whole = open_trace(found.files[0].path)
    try:
        views = rank_views(whole)
        if views == [whole]:
            # the file's rank: its own record, else its name (rank1.sqlite), as `profkit ranks` reads it
            own = whole.meta.rank if whole.meta.rank is not None else rank_from_name(found.files[0].path.name)
            if rank is not None and own is not None and own != rank:
                raise ProfkitError(f"{whole.name} is rank {own}, not rank {rank}")
            if rank is not None and own is None and rank != 0:
                raise ProfkitError(f"{path.name} is one trace of one rank: there is no rank {rank}",
                                   hint="--rank N picks a rank of a whole-job export or of a folder of rank traces")
            return Job([], found.skipped, opened=[whole])
        ranks = [v.meta.rank for v in views]
        traces = [v for v in views if rank is None or v.meta.rank == rank]
        if not traces:
            raise ProfkitError(_no_such_rank(path, rank, ranks))  # type: ignore[arg-type]
        job = Job(ranks, found.skipped, opened=traces)  # type: ignore[arg-type]
        job._closing.callback(whole.close)  # the views share the parent's columns: it closes last
        return job
    except BaseException:
        whole.close()
        raise


def _no_such_rank(path: Path, rank: int, ranks: list[int]) -> str:
    return f"{path.name} holds ranks {', '.join(map(str, ranks))}: there is no rank {rank}"


def _open_rank(file: RankFile) -> Trace:
    """A rank file's trace, with its rank and where it came from in its meta."""
    from profkit.readers import open_trace

    trace = open_trace(file.path)
    if trace.meta.rank is None:  # in place: the reader's source shares this meta
        trace.meta.rank = file.rank
    trace.meta.extra["rank_source"] = file.rank_source
    return trace
