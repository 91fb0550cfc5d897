"""`profkit trace` as a library call: profile a program, optionally ncu its top
kernels, and write the report into a run folder.

Backends: "nsys" (Nsight Systems, trace.sqlite), "torch" (torch.profiler,
trace.json.gz; capture/torch_backend.py), "auto" (nsys where it is found and
usable, else torch).  The torch backend needs no GPU: without one the
trace holds the CPU side only.

    result = run_trace(TraceOptions(target="train.py", args=["--steps", "20"]), reporter)

Failure policy (the CLI turns it into exit codes):
- no nsys (or no PyTorch for the torch backend), no GPU (nsys), no such
  script: ProfkitError before anything runs;
- the program fails or is interrupted: whatever nsys captured is kept, the
  report is built from it and marked partial, and ``result.exit_code`` is
  the program's exit status;
- nsys captures nothing: ProfkitError carrying the program's exit status.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, is_dataclass
from pathlib import Path
from typing import Any

from profkit.capture import bare_run
from profkit.capture import ncu as ncu_mod
from profkit.capture import nsys as nsys_mod
from profkit.capture import torch_backend
from profkit.capture.launch import (
    DISTRIBUTED,
    LAUNCH_MODULE,
    MEMORY_ENV,
    NSYS_FORWARD_ENV,
    NSYS_STEPS_ENV,
    NSYS_WINDOW_ENV,
    STEP_TIMES_ENV,
    parse_window,
)
from profkit.capture.options import DEFAULT_FORWARD, ProgramFailed, TraceOptions, launcher_env
from profkit.capture.gpu import detect_gpus
from profkit.capture.nsys import ProfileRequest, Reporter
from profkit.capture.run import RunRecord, Stopwatch, create_run_dir
from profkit.capture.tools import (
    FoundTool,
    find_tool,
    nsys_layout_problem,
    require_tool,
    tool_version,
)
from profkit.atomic import write_text
from profkit.errors import ProfkitError
from profkit.capture.keep import keep_trace
from profkit.scrub.text import Redactor, secret_values
from profkit.readers.run_folder import LOG, NCU_CSV, NSYS_REP, SQLITE, TRACE_BASENAME

BACKENDS = ("auto", "nsys", "torch")


@dataclass
class TraceResult:
    run_dir: Path
    record: RunRecord
    export: Path
    report: Any  # profkit.report.ReportPaths
    kernels: list[dict[str, Any]] = field(default_factory=list)  # busiest first
    total_gpu_ns: int = 0
    exit_code: int = 0


def program_argv(options: TraceOptions) -> list[str]:
    """The argv run under nsys: through profkit's launcher where a feature of it is asked for
    (sync sites, --memory's allocator history, --bare-run's step clock), else as given."""
    target, args = options.target, list(options.args)
    if options.module:
        entry = ["-m", target]
    elif target.endswith(".py") or not _is_native_executable(target):
        if not Path(target).is_file():
            raise ProfkitError(f"{target}: no such script")
        # a script named "-x.py" must reach python as a path, not an option
        entry = [f"./{target}" if target.startswith("-") else target]
    else:
        return [str(Path(target).resolve()) if os.sep in target else target, *args]
    launcher = options.sync_sites or options.memory or options.bare_run or bool(nsys_window(options))
    if launcher and torch_backend.is_distributed(options):
        # torchrun itself unhooked; each rank's worker through the launcher, so every rank has its sync sites
        return [options.python, "-m", LAUNCH_MODULE, DISTRIBUTED, *args]
    if launcher:
        return [options.python, "-m", LAUNCH_MODULE, *entry, *args]
    return [options.python, *entry, *args]


def _is_native_executable(target: str) -> bool:
    path = Path(target)
    if path.is_file():
        if not os.access(path, os.X_OK):
            return False
        with open(path, "rb") as fh:
            return fh.read(4) == b"\x7fELF"
    return shutil.which(target) is not None and not target.endswith(".py")


def choose_backend(requested: str, env: Mapping[str, str], root: Path = Path("/")) -> str:
    """"nsys" or "torch": auto takes nsys where it is found and usable, else torch."""
    if requested not in BACKENDS:
        raise ProfkitError(f"unknown backend {requested!r}", hint=f"choose one of {', '.join(BACKENDS)}")
    if requested != "auto":
        return requested
    nsys = find_tool("nsys", env=env, root=root)
    return "nsys" if nsys is not None and nsys_layout_problem(nsys.path) is None else "torch"


def run_trace(options: TraceOptions, reporter: Reporter, *, env: Mapping[str, str] | None = None,
              root: Path = Path("/")) -> TraceResult:
    base_env = dict(os.environ if env is None else env)
    backend = choose_backend(options.backend, base_env, root)
    if backend != "torch" and nsys_window(options):
        if options.nvtx_range:
            raise ProfkitError("--nvtx-only and --steps / --window each choose what nsys traces: give one")
        if torch_backend.is_distributed(options):
            raise ProfkitError("--steps / --window under nsys trace one process; a torchrun job is traced whole",
                               hint="or use --backend torch, which windows every rank")
    if options.window is not None:
        if options.steps:
            raise ProfkitError("--steps and --window each choose what to record: give one")
        try:
            parse_window(options.window)
        except ValueError as exc:
            raise ProfkitError(f"--window {exc}", hint="for example --window 10:15 (seconds since the "
                               "program started; 10: records from 10 s to the end)") from None
    nsys = None
    if backend == "nsys":
        nsys = require_tool("nsys", env=base_env, root=root)
        layout = nsys_layout_problem(nsys.path)
        if layout:
            raise ProfkitError(layout, hint="install Nsight Systems, or on the GPU host `source .gpu-kit/setup.sh`")
    ncu = require_tool("ncu", env=base_env, root=root) if options.ncu_top > 0 else None
    if options.check_gpu and backend == "nsys":
        problem = detect_gpus(root / "dev", base_env).problem()
        if problem:
            raise ProfkitError(problem, hint="run on a machine with an NVIDIA GPU and driver "
                                             "(--no-gpu-check traces anyway)")
    if nsys is not None:
        program = program_argv(options)
    else:
        program = torch_backend.program_argv(options)
        torch_tool = {"path": options.python, "source": "python",
                      "version": torch_backend.torch_version(options.python, base_env)}

    run_dir = create_run_dir(options.target, options.output, options.runs_dir)
    record = RunRecord(command=[options.target, *options.args], cwd=os.getcwd(), run_dir=str(run_dir),
                       backend=backend)
    if options.module:
        record.command = ["-m", *record.command]
    record.command = shareable(record.command, options, base_env)
    record.tools.update({"nsys": _tool_info(nsys)} if nsys is not None else {"torch": torch_tool})
    if ncu is not None:
        record.tools["ncu"] = _tool_info(ncu)
    record.write(run_dir)
    clock = Stopwatch(record)

    bare_dir = None
    if options.bare_run:
        bare_dir = Path(tempfile.mkdtemp(prefix="profkit-bare-", dir=options.temp_root)).resolve()
        reporter.stage("bare run", "the program without a profiler, to time its steps")
        with clock("bare run"):
            bare_run.run_bare(options, base_env, bare_dir / "bare.json")
        base_env = {**base_env, STEP_TIMES_ENV: str(bare_dir / "traced.json")}

    if options.memory:
        base_env = {**base_env, MEMORY_ENV: str(run_dir)}
    window_env = nsys_window(options) if nsys is not None else {}
    if window_env:
        # the steps' times, inside the traced window and out of it (--bare-run's file when it has one)
        base_env = {STEP_TIMES_ENV: str(run_dir / STEP_TIMES), **base_env, **window_env}

    rank_traces: list[Path] = []
    if nsys is None:
        rank_traces, returncode, interrupted = torch_backend.profile(options, program, run_dir, base_env, record,
                                                                     clock, reporter)
        export = rank_traces[0]
    else:
        temp_dir = Path(tempfile.mkdtemp(prefix="profkit-trace-", dir=options.temp_root)).resolve()
        try:
            export, returncode, interrupted = _profile(options, nsys, program, run_dir, temp_dir, base_env,
                                                       record, clock, reporter)
        finally:
            shutil.rmtree(temp_dir, ignore_errors=True)

    if window_env:
        times = Path(base_env[STEP_TIMES_ENV])
        record.recorded["capture_window"] = bare_run.compare_window(times)
        if times.parent == run_dir:
            times.unlink(missing_ok=True)
            base_env.pop(STEP_TIMES_ENV, None)
        for key in window_env:  # ncu's runs are not windowed
            base_env.pop(key, None)
        if record.recorded["capture_window"].get("inflated"):
            record.warnings.append(record.recorded["capture_window"]["sentence"])
    if bare_dir is not None:
        record.recorded["bare_run"] = bare_run.compare(bare_dir / "bare.json", bare_dir / "traced.json")
        if record.recorded["bare_run"].get("inflated"):
            record.warnings.append(record.recorded["bare_run"]["sentence"])
        shutil.rmtree(bare_dir, ignore_errors=True)
        base_env.pop(STEP_TIMES_ENV, None)  # ncu's runs are not timed
    base_env.pop(MEMORY_ENV, None)  # nor recorded by the allocator again
    if options.memory:
        _note_memory_snapshots(run_dir, record)
    record.exit_code = returncode
    if interrupted:
        record.partial, record.partial_reason = True, "interrupted (Ctrl-C)"
    elif returncode != 0:
        record.partial, record.partial_reason = True, f"the program exited with status {returncode}"
    record.write(run_dir)

    with clock("summary"):
        kernels, total_ns = kernel_rows(export)
    # a distributed job: one trace per rank (torch backend), or one nsys export of every rank's process
    job = rank_traces if len(rank_traces) > 1 else [export] if nsys is not None and _is_whole_job(export) else []

    ncu_csv = None
    if ncu is not None:
        if job:
            record.warnings.append("ncu skipped: it profiles one process, and this job ran one per rank")
        elif record.partial:
            record.warnings.append("ncu skipped: the program did not finish cleanly")
        elif not kernels:
            record.warnings.append("ncu skipped: the trace has no kernels")
        else:
            with clock("ncu"):
                ncu_csv = _run_ncu(options, ncu, kernels, run_dir, base_env, record, reporter)

    reporter.stage("report")
    try:
        with clock("report"):
            report = _write_job_report(job, run_dir) if job else _write_report(export, run_dir, ncu_csv, record)
    except ProfkitError as exc:
        record.warnings.append(f"report: {exc.one_line()}")
        record.finish("failed")
        record.write(run_dir)
        raise ProgramFailed(f"the trace is in {run_dir}, but the report failed: {exc.message}",
                            returncode, exc.hint) from None
    record.files.update({"report_html": Path(report.html).name, "report_md": Path(report.md).name,
                         "report_json": Path(report.json).name})
    record.finish("partial" if record.partial else "ok")
    record.write(run_dir)
    reporter.stage("done")
    exit_code = 130 if interrupted and returncode == 0 else returncode
    return TraceResult(run_dir, record, export, report, kernels[: options.top], total_ns, exit_code)


def _profile(options: TraceOptions, nsys: FoundTool, program: list[str], run_dir: Path, temp_dir: Path,
             base_env: dict[str, str], record: RunRecord, clock: Stopwatch,
             reporter: Reporter) -> tuple[Path, int, bool]:
    """Run nsys, make sure there is an SQLite export, move the files into run_dir."""
    blobs = nsys_mod.exports_blobs(nsys.path)  # asked once: for the sampling and for the export
    request = ProfileRequest(program=program, output_base=temp_dir / TRACE_BASENAME,
                             nvtx_range=options.nvtx_range, extra_args=list(options.nsys_args),
                             python_sampling=nsys_mod.samples_python(nsys.path, blobs=blobs), full=options.full,
                             cuda_memory_usage=options.memory, cuda_profiler_range=bool(nsys_window(options)))
    cmd = nsys_mod.build_profile_command(nsys.path, request)
    record.nsys_command = shareable(cmd, options, base_env)
    record.write(run_dir)
    env = nsys_mod.profile_environment(base_env, temp_dir, nvtx_range=options.nvtx_range,
                                       sync_sites=options.sync_sites)
    if program[1:3] == ["-m", LAUNCH_MODULE]:
        env = launcher_env(env)
    log_path = run_dir / LOG
    reporter.stage("profiling", " ".join([options.target, *options.args]))
    with clock("nsys"):
        result = nsys_mod.run_streaming(cmd, env=env, cwd=None, log_path=log_path, reporter=reporter)
    report = temp_dir / f"{TRACE_BASENAME}.nsys-rep"
    sqlite = temp_dir / f"{TRACE_BASENAME}.sqlite"
    if report.exists() and not sqlite.exists():
        with clock("export"):
            nsys_mod.run_export(nsys.path, report, sqlite, env=env, log_path=log_path, reporter=reporter,
                                blobs=blobs)
    if not sqlite.exists():
        record.exit_code = result.returncode
        record.finish("failed")
        record.write(run_dir)
        if nsys_window(options):
            why = ("nothing captured: the window never opened (the program made fewer optimizer steps than "
                   "--skip, or ran no module forward for long enough, or ended before --window's start)")
            hint = f"choose a smaller --skip or an earlier --window; see {log_path}"
        elif options.nvtx_range:
            why = f"nothing captured: the NVTX range {options.nvtx_range!r} never started"
            hint = f"check the range's name and domain (`profkit nvtx` on a full trace lists them); see {log_path}"
        else:
            last = next((line for line in reversed(result.tail) if line.strip()), "no output")
            why = f"nsys wrote no report (exit status {result.returncode}; last output: {last.strip()})"
            hint = f"see {log_path}"
        raise ProgramFailed(why, result.returncode, hint)
    if report.exists() and options.keep_rep:
        shutil.move(str(report), run_dir / NSYS_REP)
        record.files["nsys_rep"] = NSYS_REP
    keep_trace(sqlite, run_dir / SQLITE, keep_env=options.keep_env, environment=env, record=record, clock=clock,
               returncode=result.returncode)
    if options.keep_rep and not options.keep_env:
        record.warnings.append(f"{NSYS_REP} still holds the environment (--keep-rep); share {SQLITE} instead")
    record.files["sqlite"] = SQLITE
    record.files["log"] = LOG
    return run_dir / SQLITE, result.returncode, result.interrupted


STEP_TIMES = "step_times.json"  # the launcher's StepClock, while a windowed nsys capture runs


def nsys_window(options: TraceOptions) -> dict[str, str]:
    """The launcher's environment for a windowed nsys capture (--steps N [--skip K], or --window
    START:END): nsys traces only that window (``launch.run_in_capture_range``); {} for the whole
    program (no --steps, --steps 0, --whole)."""
    if options.window is not None:
        return {NSYS_WINDOW_ENV: options.window}
    if options.whole or not options.steps:
        return {}
    return {NSYS_STEPS_ENV: f"{options.skip_steps}:{options.steps}", NSYS_FORWARD_ENV: DEFAULT_FORWARD}


def shareable(args: Sequence[str], options: TraceOptions, env: Mapping[str, str]) -> list[str]:
    """A command line for run.json and the report: the secret values of ``env`` it holds
    are replaced (unless --keep-env), as ``profkit scrub`` does in the export."""
    if options.keep_env:
        return list(args)
    redact = Redactor(secret_values(env))
    return [redact(a) for a in args]


def kernel_rows(export: Path) -> tuple[list[dict[str, Any]], int]:
    """Kernel summary rows (dicts, busiest first) and the total kernel time in ns."""
    from profkit.analysis.kernels.summaries import kernel_summary
    from profkit.readers import open_trace
    from profkit.readers.nsys import open_export
    from profkit.readers.nsys.model_source import trace_of_export
    from profkit.readers.nsys.queries import KERNELS, mangled_names

    if export.name.endswith((".json", ".json.gz")):  # a Kineto trace (torch backend): no mangled names
        with open_trace(export) as trace:
            rows = [_as_dict(row) for row in kernel_summary(trace)] if trace.has("kernels") else []
    else:
        with open_export(export) as nsys_export:
            if not nsys_export.has_table(KERNELS.table):
                return [], 0
            rows = [_as_dict(row) for row in kernel_summary(trace_of_export(nsys_export))]
            mangled = mangled_names(nsys_export)
        for row in rows:
            row.setdefault("mangled", mangled.get(row.get("name")))
    rows.sort(key=lambda r: -int(r.get("total_ns") or 0))
    return rows, sum(int(r.get("total_ns") or 0) for r in rows)


def _as_dict(row: Any) -> dict[str, Any]:
    if isinstance(row, dict):
        return row
    if is_dataclass(row):
        return asdict(row)
    if hasattr(row, "_asdict"):
        return row._asdict()
    return dict(row)


def _run_ncu(options: TraceOptions, ncu: FoundTool, kernels: list[dict[str, Any]], run_dir: Path,
             base_env: dict[str, str], record: RunRecord, reporter: Reporter) -> Path | None:
    """Profile the top kernels; ncu.csv in run_dir, or None if every kernel failed."""
    # ncu replays the program as given
    plain = {"sync_sites": False, "memory": False, "bare_run": False, "steps": None, "window": None}
    program = program_argv(TraceOptions(**{**options.__dict__, **plain}))
    env = ncu_mod.ncu_environment(base_env)
    targets = ncu_mod.pick_targets(kernels, options.ncu_top)
    ncu_mod.remove_stale(run_dir)
    texts, done, errors = [], [], []
    for target in targets:
        reporter.stage("ncu", f"{target.rank}/{len(targets)} {target.name[:80]}")
        base = ncu_mod.report_base(run_dir, target)
        rep = ncu_mod.report_path(run_dir, target)
        for roofline in (True, False):
            cmd = ncu_mod.build_ncu_command(ncu.path, target, base, program, roofline=roofline)
            record.ncu_commands.append(cmd)
            result = nsys_mod.run_streaming(cmd, env=env, cwd=None, log_path=run_dir / "ncu.log",
                                            reporter=_Quiet(), classify_stdout=_all_chatter)
            if rep.exists() or not roofline or not ncu_mod.refused_roofline("\n".join(result.tail)):
                break
            record.warnings.append(f"ncu refused the roofline sections or metrics for {target.name[:80]}: "
                                   "profiled without them")
        if not rep.exists():
            errors.append(f"{target.name}: {ncu_mod.first_error(chr(10).join(result.tail))}")
            continue
        try:
            texts.append(ncu_mod.import_csv(ncu.path, rep, env))
            # the raw page carries every metric at full precision, the tensor chart's dense peaks included
            write_text(run_dir / ncu_mod.raw_csv_name(target), ncu_mod.import_csv(ncu.path, rep, env, page="raw"))
        except ProfkitError as exc:
            errors.append(f"{target.name}: {exc.one_line()}")
            continue
        done.append({"rank": target.rank, "kernel": target.name, "report": rep.name, "match": target.match,
                     "name_base": target.name_base})
    record.ncu = {"kernels": done, "errors": errors, "sections": list(ncu_mod.SECTIONS),
                  "metrics": list(ncu_mod.METRICS)}
    record.warnings += [f"ncu: {e}" for e in errors]
    if not texts:
        return None
    csv_path = run_dir / NCU_CSV
    write_text(csv_path, ncu_mod.merge_details_csv(texts))
    record.files["ncu_csv"] = NCU_CSV
    record.files["ncu_log"] = "ncu.log"
    return csv_path


class _Quiet(Reporter):
    """ncu re-runs the program: its output is already in the trace log."""


def _all_chatter(segment: str) -> nsys_mod.NsysEvent:
    return nsys_mod.NsysEvent("chatter", text=segment)


def _note_memory_snapshots(run_dir: Path, record: RunRecord) -> None:
    """List the allocator snapshots the program wrote; an out-of-memory one's cause is a warning."""
    from profkit.analysis.memory import oom_sentences
    from profkit.readers.snapshot import open_snapshot

    snapshots = sorted(p.name for p in run_dir.glob("*snapshot*.pickle"))
    record.files.update({name.removesuffix(".pickle"): name for name in snapshots})
    if not snapshots:
        record.warnings.append("--memory: the program wrote no allocator snapshot (no CUDA device, or it "
                               "was killed before its exit)")
    for name in snapshots:
        if not name.startswith("oom_snapshot"):
            continue
        try:
            trace = open_snapshot(run_dir / name)
            try:
                record.warnings.extend(oom_sentences(trace))
            finally:
                trace.close()
        except ProfkitError as exc:
            record.warnings.append(f"{name}: {exc.one_line()}")


def _write_report(export: Path, run_dir: Path, ncu_csv: Path | None, record: RunRecord) -> Any:
    try:
        from profkit.report import write_report
    except ImportError as exc:
        raise ProfkitError(f"the report writer is not available ({exc})") from None
    return write_report(export, run_dir, ncu_csv=ncu_csv, partial=record.partial, run_info=record.report_info(),
                        code_dirs=list(record.kernel_caches.values()))


def _is_whole_job(export: Path) -> bool:
    from profkit.readers import is_whole_job

    try:
        return is_whole_job(export)
    except ProfkitError:
        return False  # the single-trace report says what is wrong with it


def _write_job_report(traces: list[Path], run_dir: Path) -> Any:
    """The cross-rank report of a distributed job's per-rank traces, into the run folder."""
    from profkit.report import JSON_NAME, MD_NAME, ReportPaths
    from profkit.report.ranks import write_job_report

    html = write_job_report(traces, run_dir)
    return ReportPaths(html=html, md=html.with_name(MD_NAME), json=html.with_name(JSON_NAME))


def _tool_info(tool: FoundTool) -> dict[str, str | None]:
    return {"path": str(tool.path), "source": tool.source, "version": tool_version(tool.path)}
