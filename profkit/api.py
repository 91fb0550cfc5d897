"""profkit as a Python library: a trace in, pandas DataFrames out.

    import profkit
    with profkit.open("run.sqlite") as t:      # an nsys export, a Kineto trace or folder, a run folder
        t.kernels()                            # = profkit kernels run.sqlite --format json
        t.steps().attrs["summary"]             # = profkit steps ... | jq .summary
    job = profkit.open("whole.sqlite")         # a multi-rank input: every rank, a ``rank`` column
    profkit.open("ranks/", rank=1).host()      # = profkit host ranks/ --rank 1 --format json

Each method returns the rows of the matching command's ``--format json`` as a DataFrame, with
the same columns and values; what is not a row table (a summary, findings, a note) is in
``df.attrs``.  The ``*_json`` functions below build that JSON once, for both: the CLI prints
them, the API frames them, so the two cannot drift apart; ``per_rank``/``Answers`` give every
per-trace command one answer per rank of a multi-rank input (``profkit.readers.job``), in one
shape (``Answers.json``).  ``tests/test_api_twins.py`` holds every command to its twin.

Imports are lazy, here as in ``profkit/__init__.py``: ``profkit kernels`` imports this module
and must not pay for pandas or the step finder, which only the commands that use them load.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from profkit.errors import ProfkitError

if TYPE_CHECKING:
    import pandas as pd

    from profkit.analysis.sync.stalls import StallReport
    from profkit.analysis.steps.result import StepResult
    from profkit.model import Trace
    from profkit.readers.job import Job

PathLike = str | Path
Row = dict[str, Any]


# -- one answer per rank: how every per-trace command meets a multi-rank input ------------------

@dataclass(frozen=True)
class RankAnswer:
    """One rank's answer: its rank (None for a single trace that records none) and where that came from."""

    rank: int | None
    rank_source: str | None
    value: Any

    def label(self) -> str:
        """``"rank 1 (rank from: NCCL payload)"``: the heading of this rank's block in a table."""
        return f"rank {self.rank} (rank from: {self.rank_source})"


@dataclass(frozen=True)
class Answers:
    """A per-trace command's answer over what its path names: one item for a single trace, one per
    rank (the asked one, with ``--rank``) for a multi-rank input."""

    multi_rank: bool
    items: list[RankAnswer]

    def map(self, change: Callable[[Any], Any]) -> Answers:
        return Answers(self.multi_rank, [RankAnswer(a.rank, a.rank_source, change(a.value)) for a in self.items])

    def json(self) -> Any:
        """The command's JSON.  A single trace: its value as it is.  A multi-rank input, never one
        rank silently: rows (a list) become one list, each row with a leading ``rank``; any other
        value one object per rank, ``{"rank", "rank_source", **value}`` (None: the rank keys only)."""
        if not self.multi_rank:
            return self.items[0].value
        out: list[Any] = []
        for a in self.items:
            if isinstance(a.value, list):
                out += [{"rank": a.rank, **row} for row in a.value]
            else:
                out.append({"rank": a.rank, "rank_source": a.rank_source, **(a.value or {})})
        return out


def answer_ranks(job: Job, one: Callable[[Trace], Any]) -> Answers:
    """``one(trace)`` for each rank of an open ``Job`` (``profkit.readers.job``); a rank that cannot
    answer fails the whole, its error naming the rank."""
    items = []
    for trace in job.each():
        try:
            value = one(trace)
        except ProfkitError as exc:
            if not job.multi_rank:
                raise
            raise ProfkitError(f"rank {trace.meta.rank}: {exc.message}", exc.hint) from None
        items.append(RankAnswer(trace.meta.rank, trace.meta.extra.get("rank_source"), value))
    return Answers(job.multi_rank, items)


def per_rank(path: PathLike, rank: int | None, one: Callable[[Trace], Any]) -> Answers:
    """``one(trace)`` for each rank ``path`` names (or only ``rank``): a whole-job export, a folder of
    rank traces, a torchrun run folder, or one trace (``profkit.readers.job.open_job``)."""
    import warnings

    from profkit.errors import ProfkitWarning
    from profkit.readers.job import open_job

    with open_job(path, rank) as job:
        if job.skipped:  # a rank file that is no trace would otherwise vanish from the job unsaid
            names = ", ".join(p.name for p in job.skipped[:5]) + (", ..." if len(job.skipped) > 5 else "")
            single = len(job.skipped) == 1
            warnings.warn(f"{Path(path).name}: skipped {len(job.skipped)} file{'' if single else 's'} that "
                          f"hold{'s' if single else ''} no trace: {names}", ProfkitWarning, stacklevel=2)
        return answer_ranks(job, one)


# -- the JSON of each command, from an open trace (the CLI prints these) --------------------

def kernels_json(trace: Trace) -> list[Row]:
    """``profkit kernels --format json``: one row per kernel name (= nsys's cuda_gpu_kern_sum)."""
    from profkit.analysis.cpu_only import is_cpu_only
    from profkit.analysis.kernels.summaries import kernel_summary

    return [] if is_cpu_only(trace) else kernel_summary(trace)


def api_json(trace: Trace) -> list[Row]:
    """``profkit api --format json``: one row per CUDA API function (= cuda_api_sum)."""
    from profkit.analysis.kernels.summaries import api_summary

    return api_summary(trace)


def nvtx_json(trace: Trace) -> list[Row]:
    """``profkit nvtx --format json``: one row per NVTX range text and style (= nvtx_sum)."""
    from profkit.analysis.kernels.summaries import nvtx_summary

    return nvtx_summary(trace)


def steps_of(trace: Trace, *, use_ranges: bool = True, step_range: str | None = None) -> StepResult:
    """``profkit steps``' analysis of one trace (of one rank)."""
    from profkit.analysis.steps import find_steps

    return find_steps(trace, use_ranges=use_ranges, step_range=step_range)


def steps_json(result: StepResult) -> dict[str, Any]:
    """``profkit steps --format json`` of one rank: ``{"summary", "steps", ...}`` (a multi-rank
    input: a list of these, ``Answers.json``)."""
    return result.to_dict()


def host_json(trace: Trace, *, steady: bool = True) -> dict[str, Any]:
    """``profkit host --format json`` of one rank: summary, functions, other_threads, verdict; over the
    steady-state steps, or with ``steady=False`` every step (warm-up too)."""
    from profkit.analysis.host import host_time
    from profkit.analysis.host.verdict import verdict

    result = host_time(trace, steady_only=steady)
    return {**result.to_dict(), "verdict": verdict(trace, result)}


def occupancy_json(trace: Trace, *, arch: str | None = None, sms: int | None = None,
                   launches: Sequence[Any] | None = None) -> list[Row]:
    """``profkit occupancy TRACE --format json``: theoretical occupancy and its limiter per kernel
    (``arch``/``sms`` override the trace's GPU; ``launches``: an ncu CSV's, for achieved occupancy)."""
    from profkit.analysis import occupancy as occ

    rows = occ.trace_occupancy(trace, device=occ.device_limits(arch, sm_count=sms) if arch else None)
    return occ.attach_ncu(rows, launches) if launches is not None else rows


def graphs_json(trace: Trace) -> dict[str, Any] | None:
    """``profkit graphs --format json``: the CUDA graphs summary, None when no graph was replayed."""
    from profkit.analysis.kernels.graphs import cuda_graphs

    return cuda_graphs(trace)


def memory_json(trace: Trace, *, steady: bool = False, snapshot: PathLike | None = None) -> dict[str, Any]:
    """``profkit memory --format json``: per-step peaks, what holds the peak, growth and leaks.
    ``snapshot``: a memory snapshot of the same run, which splits an nsys ``--cuda-memory-usage``
    trace's device memory into the caching allocator's and the libraries' (a ``profkit trace
    --memory`` run folder's own ``memory_snapshot.pickle`` is used when none is given)."""
    from profkit.report.memory_section import memory_with_run_snapshot

    return memory_with_run_snapshot(trace, steady=steady, snapshot=None if snapshot is None else Path(snapshot))


def breakdown_json(paths: Sequence[PathLike], *, steady: bool = False, rank: int | None = None) -> list[Row]:
    """``profkit breakdown PATHS --format json``: one row per rank (each rank of a multi-rank input),
    sorted by rank; a trace that records no rank is numbered by its place in ``paths``."""
    from profkit.readers.job import open_job

    rows = []
    for position, path in enumerate(paths):
        # one path: --rank picks among its ranks; several: each is a rank, and --rank picks a row
        with open_job(path, rank if len(paths) == 1 else None) as job:
            rows += [breakdown_row(t, job.multi_rank, position, steady) for t in job.each()]
    if rank is not None and len(paths) > 1:
        have = sorted(r["rank"] for r in rows)
        rows = [r for r in rows if r["rank"] == rank]
        if not rows:
            raise ProfkitError(f"the traces hold ranks {', '.join(map(str, have))}: there is no rank {rank}")
    rows.sort(key=lambda r: r["rank"])
    return rows


def breakdown_row(trace: Trace, multi_rank: bool, position: int, steady: bool) -> Row:
    """One rank's row of ``breakdown_json`` (``position``: its rank where the trace records none)."""
    from profkit.analysis.breakdown import rank_breakdown
    from profkit.model.clock import session_zero

    row = rank_breakdown(trace, steady=steady)
    # the trace-clock ns that the printed seconds count from (``profkit.model.clock``)
    row["session_start_ns"] = session_zero(trace)
    if multi_rank:
        row["rank_source"] = trace.meta.extra.get("rank_source")
    if row["rank"] is None:
        row["rank"] = position
    row["launch_bound"] = row["launch"]["launch_bound"]
    return row


def stalls_json(report: StallReport) -> dict[str, Any]:
    """``profkit stalls --format json`` of one rank (without --compare): ``{"rows": the sync sites,
    "findings", "by_nvtx", "step_stats", "step_range"}``."""
    return {"rows": report.sites, "findings": report.findings, "by_nvtx": report.by_nvtx,
            "step_stats": report.step_stats, "step_range": report.step_range}


def stalls_of_trace(trace: Trace, path: Path, step_range: str | None, threshold_pct: float) -> StallReport:
    """``stall_report`` of a trace already open from ``path`` (its run folder's source roots)."""
    from profkit.analysis.sync.stalls import analyze_stalls

    return analyze_stalls(trace, step_range=step_range, threshold_pct=threshold_pct, source_roots=source_roots(path))


def source_roots(target: Path) -> list[Path]:
    """Where a folder's program ran (run.json's cwd), then the folder: the recorded
    source paths of its sync sites are tried against these."""
    from profkit.readers.run_folder import RUN_JSON, read_run_record

    if not target.is_dir():
        return []
    roots = [target]
    if (target / RUN_JSON).is_file():  # unreadable: one line, as for profkit report
        record = read_run_record(target)
        cwd = record.get("cwd") if isinstance(record, dict) else None
        if isinstance(cwd, str) and cwd:
            roots.insert(0, Path(cwd))
    return roots


def ranks_json(paths: Sequence[PathLike], *, scheduler: str | None = None, workers: int | None = None,
               rank_from: str | None = None,
               on_done: Callable[[Any, dict[str, Any], int], None] | None = None,
               skipped: list[Path] | None = None) -> list[dict[str, Any]]:
    """The per-rank summaries behind ``profkit ranks`` (read in parallel on Dask), one per rank
    or per unreadable file (``{"file", "rank", "error"}``); ``on_done(input, summary, total)``
    is called as each rank is read.  Files of the folders that are named like traces but hold
    none (a run folder's run.json) are left out, and added to ``skipped``."""
    from profkit.ranks.engine import map_ranks
    from profkit.ranks.inputs import rank_inputs
    from profkit.ranks.per_rank import summarize_rank

    inputs = rank_inputs([Path(p) for p in paths], rank_from, skipped)
    return map_ranks(summarize_rank, inputs, scheduler=scheduler, workers=workers, on_done=on_done)


def require_some_rank(summaries: Sequence[dict[str, Any]]) -> None:
    """A ProfkitError when no rank could be read (some unreadable files are only reported)."""
    failed = [s for s in summaries if "error" in s]
    if failed and len(failed) == len(summaries):
        raise ProfkitError(f"no rank could be read ({failed[0]['file']}: {failed[0]['error']})")


def rank_table_json(summaries: Sequence[dict[str, Any]]) -> list[Row]:
    """``profkit ranks --format json``: the readable ranks' rows, then one row per failed file.
    The straggler's row has ``straggler`` true and ``straggler_evidence``, the sentence that names
    it and its cause; every other rank's ``wait_per_step_ns`` is how long it waits for it."""
    from profkit.analysis.ranks.cross_rank import check_one_job, failed_ranks, rank_rows, straggler
    from profkit.report.ranks import straggler_sentence

    require_some_rank(summaries)
    check_one_job(summaries)
    slow = straggler(summaries)
    rows = rank_rows(summaries, slow)
    sentence = straggler_sentence(slow, len(rows))
    for row in rows:
        row["straggler_evidence"] = sentence if row["straggler"] else None
    return rows + [{"file": f["file"], "rank": f["rank"], "error": f["error"]} for f in failed_ranks(summaries)]


def diff_json(base: PathLike, new: PathLike, *, rank: int | None = None, force: bool = False,
              min_effect_pct: float | None = None, code_dirs: Sequence[PathLike] = (),
              kernel_targets: Any = None) -> dict[str, Any]:
    """``profkit diff BASE NEW --format json``: step time, kernels, sync sites, breakdown (one rank of
    a whole-job export: ``rank``)."""
    from contextlib import ExitStack

    from profkit.analysis.compare import noise
    from profkit.analysis.compare.diff import check_comparable, diff_traces
    from profkit.readers.job import open_job

    with ExitStack() as stack:
        # a whole-job export, a folder of rank traces or a torchrun run folder: --rank picks one
        base_trace = _one_rank(stack.enter_context(open_job(Path(base), rank)).traces, Path(base))
        new_trace = _one_rank(stack.enter_context(open_job(Path(new), rank)).traces, Path(new))
        program = check_comparable(base_trace, new_trace, force=force)
        result = diff_traces(base_trace, new_trace,
                             min_effect_pct=noise.MIN_EFFECT_PCT if min_effect_pct is None else min_effect_pct)
        result["kernel_names_shared_pct"] = 100.0 * program.share
        result["same_program_by"] = program.by
        if program.note:
            result["notes"] = [*result["notes"], program.note]
        if Path(base).resolve() == Path(new).resolve():
            result["notes"] = [*result["notes"], f"BASE and NEW are the same file ({Path(base).name}): nothing "
                                                 "can differ"]
        if code_dirs or kernel_targets:
            from profkit.analysis.kernels.code import attach_code, launch_shapes
            from profkit.analysis.kernels.targets import code_for_trace

            # the variant that ran is told by NEW's launches (BASE's for a kernel that is gone);
            # --kernels compiles for NEW's GPU, for the block sizes NEW launched
            shapes = {**launch_shapes(base_trace), **launch_shapes(new_trace)}
            code, _ = code_for_trace(new_trace, [k["name"] for k in result["kernels"]], code_dirs, kernel_targets)
            result["kernels"] = attach_code(result["kernels"], code, shapes)
    return result


def _one_rank(traces: list[Any], path: Path) -> Any:
    """The one trace to compare; a whole-job export needs --rank (a diff compares one rank)."""
    if len(traces) > 1:
        source = traces[0].meta.extra.get("rank_source")
        raise ProfkitError(f"{path.name} holds {len(traces)} ranks (rank from: {source}): "
                           "pass --rank N to compare one of them")
    return traces[0]


def export_file(trace: Trace, out: PathLike, per_rank_name: bool = False, *, window: str | None = None,
                steps: str | None = None) -> dict[str, Any]:
    """``profkit export``'s work for one rank: write ``trace`` to ``out`` (``per_rank_name``: OUT.rankN),
    cut to ``window`` ("START:END", seconds from the session start) or ``steps`` ("A:B")."""
    from profkit.export.perfetto import export_perfetto
    from profkit.export.tracks import step_table, steps_window, trace_span
    from profkit.model.clock import session_zero

    if window is not None and steps is not None:
        raise ProfkitError("--window and --steps both cut the trace: give one of them")
    out = Path(out)
    if per_rank_name:
        stem, dot, suffixes = out.name.partition(".")
        out = out.with_name(f"{stem}.rank{trace.meta.rank}{dot}{suffixes}")
    table = step_table(trace)
    window_ns = None
    if window is not None:
        bounds = parse_window(window)
        span = trace_span(trace)
        if span is not None:
            zero = session_zero(trace)
            # both ends included: the window of an idle stretch holds the operations on each side of it
            window_ns = (span[0] if bounds[0] is None else zero + bounds[0],
                         span[1] + 1 if bounds[1] is None else zero + bounds[1] + 1)
    elif steps is not None:
        window_ns = steps_window(table, *parse_steps(steps))
    result = export_perfetto(trace, out, window_ns=window_ns, steps=table)
    return {"rank": trace.meta.rank, "path": str(result.path), "events": result.events, "kernels": result.kernels,
            "flows": result.flows}


def parse_window(text: str) -> tuple[int | None, int | None]:
    """'1.5:2.25' -> (1_500_000_000, 2_250_000_000) ns from the session start, exactly (as
    decimals: a time pasted from the report with its nine decimals is that nanosecond);
    either side may be left empty."""
    from profkit.model.clock import parse_seconds

    start, sep, end = text.partition(":")
    try:
        if not sep:
            raise ValueError
        return (parse_seconds(start) if start.strip() else None, parse_seconds(end) if end.strip() else None)
    except ValueError:
        raise ProfkitError(f"--window takes START:END in seconds from the session start, e.g. 1.5:2.0 "
                           f"(got {text!r})") from None


def parse_steps(text: str) -> tuple[int, int]:
    """'3:5' -> (3, 5), both included; '4' -> (4, 4)."""
    first, sep, last = text.partition(":")
    try:
        return (int(first), int(last if sep else first))
    except ValueError:
        raise ProfkitError(f"--steps takes A:B, step indices as `profkit steps` numbers them (got {text!r})") from None


def _is_ncu_csv(path: Path) -> bool:
    return path.suffix.lower() == ".csv" and path.is_file()


def roofline_json(source: PathLike, *, code_dirs: Sequence[PathLike] = (),
                  kernel_targets: Any = None) -> tuple[dict[str, Any], list[str]]:
    """``profkit roofline SOURCE --format json`` (``{"launches", "kernels", "hint"}``) and the notes on
    the kernels' code; SOURCE is an ncu CSV or a ``profkit trace --ncu-top`` run folder."""
    from profkit.analysis.kernels.code import run_folder_caches
    from profkit.analysis.roofline import roofline as analyze
    from profkit.analysis.roofline.code import code_for_launches, join_code
    from profkit.readers.ncu import read_launches
    from profkit.readers.run_folder import RUN_JSON, read_run_record

    source = Path(source)
    launches = read_launches(source)
    result = analyze(launches)
    dirs = [Path(d) for d in code_dirs]
    if source.is_dir() and (source / RUN_JSON).is_file():
        dirs += run_folder_caches(read_run_record(source), source)
    notes: list[str] = []
    if dirs or kernel_targets:
        code, notes = code_for_launches(launches, dirs, kernel_targets)
        result = join_code(result, code)
    return ({"launches": [dict(r.as_dict(), level="launch") for r in result.launches],
             "kernels": [dict(r.as_dict(), level="kernel") for r in result.kernels], "hint": result.hint}, notes)


# -- DataFrames ---------------------------------------------------------------------------

def _frame(rows: Sequence[Row], columns: Iterable[str] = (), **attrs: Any) -> pd.DataFrame:
    """Rows as a DataFrame that gives the same rows back: a column holding a None stays
    object (pandas would make it float and the None a NaN, and integers floats)."""
    import pandas as pd

    names = list(dict.fromkeys([*(k for row in rows for k in row), *columns]))
    frame = pd.DataFrame({name: pd.Series([row.get(name) for row in rows],
                                          dtype=object if any(row.get(name) is None for row in rows) else None)
                          for name in names}, columns=names)
    frame.attrs.update(attrs)
    return frame


class Profile:
    """What one path names, and the questions profkit answers about it, as DataFrames.

    Open with ``profkit.open(path, rank=None)``; close with ``close()`` or a ``with`` block.  The
    path is any input of the per-trace commands: a trace, a Kineto folder, a ``profkit trace`` run
    folder, or a multi-rank input (an export of a whole job, a folder of rank traces, a torchrun run
    folder), whose every rank (or ``rank``) answers, with a ``rank`` column; an ncu CSV answers
    ``roofline()`` only.  Each method equals its command's ``--format json``
    (``tests/test_api_twins.py``); each trace's columns are read once and shared by every method."""

    def __init__(self, path: PathLike, rank: int | None = None) -> None:
        from profkit.readers.job import open_job

        self.path = Path(path)
        self.rank = rank
        self._summaries: list[dict[str, Any]] | None = None
        # an ncu CSV holds no timeline: only roofline() reads it
        self._job = None if _is_ncu_csv(self.path) else open_job(self.path, rank)
        if self._job is not None:
            try:
                self._job.traces  # noqa: B018 (every rank opened once, kept for every method)
            except BaseException:
                self._job.close()  # the ranks opened before the one that failed
                raise

    @property
    def job(self) -> Job:
        if self._job is None:
            raise ProfkitError(f"{self.path.name} is an ncu CSV, not a trace: it answers roofline() only")
        return self._job

    @property
    def traces(self) -> list[Trace]:
        """The open trace of each rank (one for a single trace)."""
        return self.job.traces

    @property
    def trace(self) -> Trace:
        """The one trace; a multi-rank input names its ranks instead of picking one."""
        if len(self.traces) > 1:
            raise ProfkitError(f"{self.path.name} holds ranks {', '.join(map(str, self.job.ranks))}",
                               hint="profkit.open(path, rank=N) opens one of them; .traces holds every one")
        return self.traces[0]

    def _answers(self, one: Callable[[Trace], Any]) -> Answers:
        return answer_ranks(self.job, one)

    def _rows(self, one: Callable[[Trace], list[Row]], columns: Iterable[str], **attrs: Any) -> pd.DataFrame:
        answers = self._answers(one)
        return _frame(answers.json(), ("rank", *columns) if answers.multi_rank else columns, **attrs)

    def _object(self, answers: Answers, rows_key: str, columns: Iterable[str] = ()) -> pd.DataFrame:
        """An object answer (``{rows_key: [...], other keys}``) as its rows, the other keys in attrs;
        a multi-rank input: every rank's rows with a ``rank`` column, ``attrs["ranks"]`` each rank's
        other keys (with rank and rank_source)."""
        out = answers.json()
        if not answers.multi_rank:
            out = out or {}
            return _frame(out.get(rows_key) or [], columns, **{k: v for k, v in out.items() if k != rows_key})
        rows = [{"rank": r["rank"], **row} for r in out for row in r.get(rows_key) or []]
        return _frame(rows, ("rank", *columns), ranks=[{k: v for k, v in r.items() if k != rows_key} for r in out])

    def kernels(self) -> pd.DataFrame:
        """Time per kernel name (``profkit kernels``); ``attrs["note"]``: kernels the trace could not see."""
        from profkit.analysis.kernels.graphs import unrecorded_kernels_note
        from profkit.analysis.kernels.summaries import SUMMARY_KEYS  # an empty summary still has its columns

        return self._rows(kernels_json, SUMMARY_KEYS,
                          note="; ".join(n for t in self.traces if (n := unrecorded_kernels_note(t))) or None)

    def api(self) -> pd.DataFrame:
        """Time per CUDA API function (``profkit api``)."""
        from profkit.analysis.kernels.summaries import SUMMARY_KEYS

        return self._rows(api_json, SUMMARY_KEYS)

    def nvtx(self) -> pd.DataFrame:
        """Time per NVTX range text and style (``profkit nvtx``)."""
        from profkit.analysis.kernels.summaries import SUMMARY_KEYS

        return self._rows(nvtx_json, (*SUMMARY_KEYS, "style"))

    def info(self) -> dict[str, Any] | list[dict[str, Any]]:
        """The capture's facts (``profkit info``): a dict, or one per rank (with rank, rank_source)."""
        from profkit.analysis.timeline.capture import capture_info

        return self._answers(capture_info).json()

    def occupancy(self, *, arch: str | None = None, sms: int | None = None) -> pd.DataFrame:
        """Theoretical occupancy and its limiter per kernel (``profkit occupancy TRACE``)."""
        return self._rows(lambda t: occupancy_json(t, arch=arch, sms=sms), ())

    def steps(self, *, use_ranges: bool = True, step_range: str | None = None) -> pd.DataFrame:
        """One row per step (``profkit steps``); ``attrs``: summary, startup, teardown, evidence,
        message (a multi-rank input: a ``rank`` column, and ``attrs["ranks"]`` each rank's)."""
        from profkit.analysis.steps.result import STEP_COLUMNS

        answers = self._answers(lambda t: steps_json(steps_of(t, use_ranges=use_ranges, step_range=step_range)))
        return self._object(answers, "steps", STEP_COLUMNS)

    def breakdown(self, *, steady: bool = False) -> pd.DataFrame:
        """Where the GPU time goes, one row per rank (``profkit breakdown``); the nested figures
        (kernel_types, idle_by_stream, longest_idle, launch, queue) are in their columns."""
        rows = [breakdown_row(t, self.job.multi_rank, 0, steady) for t in self.traces]
        rows.sort(key=lambda r: r["rank"])
        return _frame(rows)

    def host(self, *, steady: bool = True) -> pd.DataFrame:
        """Host time per Python function per steady step (``profkit host``; ``steady=False``: every step,
        warm-up too); ``attrs``: summary, verdict, other_threads (a multi-rank input: a ``rank``
        column, ``attrs["ranks"]`` each rank's)."""
        return self._object(self._answers(lambda t: host_json(t, steady=steady)), "functions")

    def stalls(self, *, step_range: str | None = None, threshold_pct: float = 5.0) -> pd.DataFrame:
        """One row per sync site (``profkit stalls``); ``attrs``: findings, by_nvtx, step_stats,
        step_range (a multi-rank input: a ``rank`` column, ``attrs["ranks"]`` each rank's)."""
        return self._object(self._answers(lambda t: stalls_json(stalls_of_trace(t, self.path, step_range,
                                                                                 threshold_pct))), "rows")

    def graphs(self) -> pd.DataFrame:
        """One row per CUDA graph replayed (``profkit graphs``); ``attrs`` the rest (level, replays,
        in_graphs_pct, launch, setup, ...).  Empty, with no attrs, when the trace replayed no graph."""
        return self._object(self._answers(graphs_json), "graphs",
                            ("graph", "replays", "gpu_ns", "mean_replay_ns", "kernels_per_replay", "replays_per_step"))

    def roofline(self, *, code_dirs: Sequence[PathLike] = ()) -> pd.DataFrame:
        """Each profiled kernel's binding roof (``profkit roofline``), from an ncu CSV or a run folder's
        ncu.csv: one row per launch then per kernel name (``level``); ``attrs["hint"]``."""
        out, _ = roofline_json(self.path, code_dirs=code_dirs)
        return _frame(out["launches"] + out["kernels"], hint=out["hint"])

    def diff(self, new: PathLike, *, force: bool = False, min_effect_pct: float | None = None) -> dict[str, Any]:
        """This trace (the base) against ``new`` (``profkit diff PATH NEW``): step time, kernels, sync
        sites, breakdown; a multi-rank input compares the rank it was opened with."""
        return diff_json(self.path, new, rank=self.rank, force=force, min_effect_pct=min_effect_pct)

    def export(self, out: PathLike, *, window: str | None = None, steps: str | None = None) -> list[dict[str, Any]]:
        """Write the trace as a Perfetto/Chrome trace (``profkit export PATH -o OUT``): one file, or one
        per rank of a multi-rank input (OUT.rankN); what was written, per file."""
        return [export_file(t, out, self.job.multi_rank and self.rank is None, window=window, steps=steps)
                for t in self.traces]

    def _rank_summaries(self, scheduler: str | None, workers: int | None) -> list[dict[str, Any]]:
        if self._summaries is None:
            self._summaries = ranks_json([self.path], scheduler=scheduler, workers=workers)
        return self._summaries

    def ranks(self, *, scheduler: str | None = "threads", workers: int | None = None) -> pd.DataFrame:
        """One row per rank of the job (``profkit ranks PATH``): every rank, whatever ``rank`` was opened."""
        from profkit.analysis.ranks.cross_rank import RANK_KEYS

        return _frame(rank_table_json(self._rank_summaries(scheduler, workers)), RANK_KEYS)

    def straggler(self, *, scheduler: str | None = "threads", workers: int | None = None) -> dict[str, Any] | None:
        """The rank the others wait for, with its evidence (the cross-rank report's); None when none is."""
        from profkit.analysis.ranks.cross_rank import straggler

        summaries = self._rank_summaries(scheduler, workers)
        require_some_rank(summaries)
        return straggler(summaries)

    def memory(self, *, steady: bool = False) -> dict[str, Any] | list[dict[str, Any]]:
        """What holds the memory at each step's peak, growth and leaks (``profkit memory``), as plain data
        (a multi-rank input: one per rank, with rank and rank_source)."""
        return self._answers(lambda t: memory_json(t, steady=steady)).json()

    def close(self) -> None:
        if self._job is not None:
            self._job.close()

    def __enter__(self) -> Profile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<profkit.Profile {self.path}{'' if self.rank is None else f' rank {self.rank}'}>"


class Ranks:
    """The ranks of one multi-GPU job: rank files, folders of them, or one whole-job export
    (each of its ranks counts).  Read in parallel on Dask by ``summary()``."""

    def __init__(self, paths: Sequence[PathLike] | PathLike, *, scheduler: str | None = None, workers: int | None = None,
                 rank_from: str | None = None) -> None:
        if isinstance(paths, (str, Path)):
            paths = [paths]
        if not paths:
            raise ProfkitError("open_ranks needs at least one trace")
        self.paths = [Path(p) for p in paths]
        self.scheduler, self.workers, self.rank_from = scheduler, workers, rank_from

    def summary(self) -> pd.DataFrame:
        """One row per rank (``profkit ranks --format json``), failed files last with an ``error``;
        a ProfkitError when no rank could be read."""
        from profkit.analysis.ranks.cross_rank import RANK_KEYS

        summaries = ranks_json(self.paths, scheduler=self.scheduler, workers=self.workers, rank_from=self.rank_from)
        return _frame(rank_table_json(summaries), RANK_KEYS)

    def breakdown(self, *, steady: bool = False) -> pd.DataFrame:
        """Where each rank's GPU time goes (``profkit breakdown PATHS``), one row per rank."""
        return _frame(breakdown_json(self.paths, steady=steady))

    def __repr__(self) -> str:
        return f"<profkit.Ranks {len(self.paths)} paths>"


def open(path: PathLike, rank: int | None = None) -> Profile:  # noqa: A001 (profkit.open, as the issue names it)
    """Open what ``path`` names (read-only), as the per-trace commands do: an nsys SQLite export, a
    PyTorch profiler (Kineto) trace or its folder, a ``profkit trace`` run folder, a multi-rank input
    (every rank, or ``rank``), or an ncu CSV (``roofline()``).  Bad input raises ``ProfkitError`` (one line)."""
    return Profile(path, rank)


def open_ranks(paths: Sequence[PathLike] | PathLike, *, scheduler: str | None = None, workers: int | None = None,
               rank_from: str | None = None) -> Ranks:
    """The ranks of a multi-GPU job (see ``Ranks``)."""
    return Ranks(paths, scheduler=scheduler, workers=workers, rank_from=rank_from)
