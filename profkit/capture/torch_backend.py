"""`profkit trace --backend torch`: profile a Python program with torch.profiler
instead of Nsight Systems, for machines that have PyTorch but no nsys.

The unchanged script runs through the same launch shim as under nsys
(``python -m profkit.capture.launch script.py args``), with
PROFKIT_TORCH_TRACE naming the Kineto trace to write: the shim wraps the whole
program in torch.profiler (CPU + CUDA activities, Python stacks).  The sync
hook records its sites as ``record_function`` ranges (PROFKIT_SYNC_RANGES),
with the same ``profkit.sync|kind|file:line|code`` text as the NVTX ranges.
The run folder holds trace.json.gz where the nsys backend puts trace.sqlite,
scrubbed the same way unless --keep-env; the report and the summaries read
either.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path

from profkit.capture import nsys as nsys_mod
from profkit.capture.keep import keep_trace
from profkit.capture import samples as sampler
from profkit.capture.launch import (
    CLOCK_MARK_ENV,
    DISTRIBUTED,
    LAUNCH_MODULE,
    TORCH_FORWARD_ENV,
    TORCH_STACKS_ENV,
    TORCH_STEPS_ENV,
    TORCH_TRACE_ENV,
    TORCH_WINDOW_ENV,
)
from profkit.capture.options import (
    DEFAULT_FORWARD,
    DEFAULT_SKIP,
    DEFAULT_STEPS,
    ProgramFailed,
    TraceOptions,
    launcher_env,
)
from profkit.capture.run import RunRecord, Stopwatch
from profkit.readers.run_folder import KINETO_JSON, LOG
from profkit.capture.sync_hook import RANGES_ENV, RECORD_FUNCTION
from profkit.errors import ProfkitError

NO_TORCH_HINT = "install PyTorch in that Python (or pass --python), or use --backend nsys"


def torch_version(python: str, env: Mapping[str, str]) -> str:
    """The PyTorch version the program's Python imports; a ProfkitError when it has none."""
    try:
        done = subprocess.run([python, "-c", "import torch; print(torch.__version__)"], env=dict(env),
                              capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ProfkitError(f"cannot run {python} to find PyTorch: {exc}", hint=NO_TORCH_HINT) from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise ProfkitError(f"the torch backend needs PyTorch, and {python} cannot import it ({last})",
                           hint=NO_TORCH_HINT)
    return done.stdout.strip().splitlines()[-1]


DISTRIBUTED_MODULES = ("torch.distributed.run",)
RANK_TRACE = "trace_rank{rank}.json"


def is_distributed(options: TraceOptions) -> bool:
    """``profkit trace -m torch.distributed.run -- ...``: one trace per rank, not one of the launcher."""
    return bool(options.module) and options.target in DISTRIBUTED_MODULES


def program_argv(options: TraceOptions) -> list[str]:
    """python -m profkit.capture.launch (script.py | -m module) args: Python programs only."""
    if is_distributed(options):
        return [options.python, "-m", LAUNCH_MODULE, DISTRIBUTED, *options.args]
    if options.module:
        entry = ["-m", options.target]
    else:
        path = Path(options.target)
        if not path.is_file():
            raise ProfkitError(f"{options.target}: no such script")
        with open(path, "rb") as fh:
            if fh.read(4) == b"\x7fELF":
                raise ProfkitError(f"{options.target} is not a Python program: the torch backend profiles "
                                   "Python programs", hint="use --backend nsys for native programs")
        entry = [options.target]
    return [options.python, "-m", LAUNCH_MODULE, *entry, *options.args]


def torch_environment(base: Mapping[str, str], trace_path: Path, *, sync_sites: bool,
                      steps: tuple[int, int] | None = None, window: str | None = None,
                      forward: str | None = None, with_stack: bool = False,
                      clock_mark: Path | None = None) -> dict[str, str]:
    """The program's environment: where the shim writes the trace, and record_function sync ranges."""
    env = launcher_env(base)
    env[TORCH_TRACE_ENV] = str(trace_path)
    env[RANGES_ENV] = RECORD_FUNCTION
    if steps is not None:
        env[TORCH_STEPS_ENV] = f"{steps[0]}:{steps[1]}"
    if window is not None:
        env[TORCH_WINDOW_ENV] = window
    if forward is not None:
        env[TORCH_FORWARD_ENV] = forward
    if with_stack:
        env[TORCH_STACKS_ENV] = "1"
    if clock_mark is not None:
        env[CLOCK_MARK_ENV] = str(clock_mark)
    if not sync_sites:
        env["PROFKIT_SYNC_SITES"] = "0"
    return env


def profile(options: TraceOptions, program: list[str], run_dir: Path, base_env: Mapping[str, str],
            record: RunRecord, clock: Stopwatch, reporter: nsys_mod.Reporter) -> tuple[list[Path], int, bool]:
    """Run the program inside torch.profiler; (kept trace paths, exit status, interrupted):
    one trace, or one per rank of a distributed job (``is_distributed``).

    The shim writes the trace into a temporary folder; the run folder gets
    the copy ``profkit.scrub`` made of it (``keep_trace``), as the nsys
    backend does with its export: a record_function name, a stack's path or
    anything the program added can hold a secret of its environment.
    """
    temp_dir = Path(tempfile.mkdtemp(prefix="profkit-trace-", dir=options.temp_root)).resolve()
    try:
        distributed = is_distributed(options)
        raw = temp_dir / (RANK_TRACE if distributed else KINETO_JSON)
        steps, forward = recorded_window(options)
        py_spy = sampler.find_py_spy(base_env) if options.sample and not distributed else None
        mark = temp_dir / sampler.MARK_FILE if py_spy else None
        env = torch_environment(base_env, raw, sync_sites=options.sync_sites, steps=steps,
                                window=options.window, forward=forward, with_stack=options.with_stack,
                                clock_mark=mark)
        record.recorded = {"steps": f"{steps[1]} after {steps[0]}" if steps else None, "window": options.window,
                           "forward_fallback": forward, "with_stack": options.with_stack,
                           "whole_program": steps is None and options.window is None}
        if py_spy:
            program = sampler.sampler_argv(py_spy, temp_dir / sampler.SAMPLES_FILE, program)
        elif options.sample and not options.with_stack and not distributed:
            record.warnings.append("no py-spy: the trace holds no Python stacks, so profkit host has nothing to "
                                   "attribute (pip install py-spy, or pass --with-stack)")
        log_path = run_dir / LOG
        reporter.stage("profiling", " ".join([options.target, *options.args]))
        with clock("torch.profiler"):
            result = nsys_mod.run_streaming(program, env=env, cwd=None, log_path=log_path, reporter=reporter,
                                            classify_stdout=_program_output)
        record.files["log"] = LOG
        written = sorted(temp_dir.glob("trace_rank*.json"), key=_rank_of) if distributed else \
            [raw] if raw.exists() else []
        if not written:
            record.exit_code = result.returncode
            record.finish("failed")
            record.write(run_dir)
            last = next((line for line in reversed(result.tail) if line.strip()), "no output")
            if forward is not None and result.returncode == 0:
                raise ProgramFailed("torch.profiler recorded nothing: the program made no optimizer step after "
                                    f"{DEFAULT_SKIP} of warm-up and no module forward call for "
                                    f"{DEFAULT_FORWARD.split(':')[0]} s, which open the default window",
                                    result.returncode, "record the whole program with --whole, or a time "
                                    "window with --window START:END")
            if options.window is not None and result.returncode == 0:
                raise ProgramFailed(f"torch.profiler recorded nothing: the program ended before --window "
                                    f"{options.window} opened", result.returncode,
                                    "give a START within the program's run time (seconds since it started)")
            raise ProgramFailed(f"torch.profiler wrote no trace (exit status {result.returncode}; "
                                f"last output: {last.strip()})", result.returncode, f"see {log_path}")
        if py_spy and mark is not None:
            with clock("samples"):
                record.recorded["sampler"] = {"tool": "py-spy", **sampler.merge_samples(
                    written[0], temp_dir / sampler.SAMPLES_FILE, mark)}
        kept = [run_dir / (f"{path.stem}.json.gz" if distributed else KINETO_JSON) for path in written]
        for path, target in zip(written, kept):
            keep_trace(path, target, keep_env=options.keep_env, environment=env, record=record,
                       clock=clock, returncode=result.returncode)
    finally:
        shutil.rmtree(temp_dir, ignore_errors=True)
    record.files["trace"] = kept[0].name
    if distributed:
        record.files["rank_traces"] = [p.name for p in kept]  # type: ignore[assignment]
    return kept, result.returncode, result.interrupted


def recorded_window(options: TraceOptions) -> tuple[tuple[int, int] | None, str | None]:
    """(SKIP, COUNT) optimizer steps to record, and the forward-call fallback ("AFTER:LENGTH"):
    bounded by default; the whole program with --whole or --steps 0; none with --window."""
    if options.window is not None or options.whole or options.steps == 0:
        return None, None
    if options.steps is None:
        return (DEFAULT_SKIP, DEFAULT_STEPS), DEFAULT_FORWARD
    return (options.skip_steps, options.steps), None


def _rank_of(path: Path) -> int:
    digits = "".join(c for c in path.stem.rsplit("rank", 1)[-1] if c.isdigit())
    return int(digits) if digits else 0


def _program_output(segment: str) -> nsys_mod.NsysEvent:
    """Everything on stdout is the program's (no nsys messages to tell apart)."""
    return nsys_mod.NsysEvent("output", text=segment)
