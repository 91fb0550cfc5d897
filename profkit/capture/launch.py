"""Run a user's script the way `python script.py args` (or `python -m module
args`) would, with profkit's hooks installed first.  `profkit trace` puts
this under nsys:

    nsys profile ... python -m profkit.capture.launch script.py [args]
    nsys profile ... python -m profkit.capture.launch -m package.module [args]

or, for `profkit trace --backend torch`, runs it with PROFKIT_TORCH_TRACE=PATH:
the whole program then runs inside torch.profiler (CPU + CUDA activities,
Python stacks) and the Kineto trace is written to PATH when it ends, also
when it fails or is interrupted.  "{rank}" in PATH becomes the process's
RANK, so each rank of a distributed job writes its own trace.

    python -m profkit.capture.launch --distributed [torchrun options] script.py [args]

runs torchrun (``torch.distributed.run``) itself unprofiled, with each worker
started through this shim (torchrun's ``--module profkit.capture.launch
script.py args``), so every rank runs inside its own profiler.

PROFKIT_TORCH_STEPS=SKIP:COUNT profiles a window of the program's training steps
instead of all of it: the profiler's schedule advances on every optimizer step
(PyTorch's global ``register_optimizer_step_post_hook``), skips the first SKIP
steps and records the next COUNT, each a ``ProfilerStep#N`` range, then stops
recording, so memory and the trace stay bounded however long the program runs.

PROFKIT_TORCH_WINDOW=START:END profiles a window of seconds instead, for loops without an
optimizer (inference, ``generate()``): seconds since the program started (this shim's start;
END empty: until the program ends).  The profiler's first start takes seconds (Kineto sets
itself up), so recording begins that much after START and lasts END - START.  torch.profiler records only the thread that starts it, so
the window opens and closes on the main thread, at the first module forward (a global forward
pre-hook) or optimizer step at or after START and END; a loop of plain tensor code with
neither records from START to the program's end.

PROFKIT_TORCH_FORWARD=AFTER:LENGTH (with PROFKIT_TORCH_STEPS, as ``profkit trace --backend
torch`` sets both by default): a program that made no optimizer step after AFTER seconds of
module forward calls (inference, ``generate()``) is recorded for LENGTH seconds of them instead,
from there (``ForwardFallback``).

PROFKIT_TORCH_STACKS=1 records Python stacks (``with_stack=True``: every Python call, which
slows a Python-heavy program several times); by default the profiler records none and
``profkit trace`` samples the stacks from outside (py-spy, ``profkit.capture.samples``).

PROFKIT_CLOCK_MARK=PATH: before the program, the shim spins for CLOCK_MARK_S in
``_profkit_clock_mark`` and writes the wall-clock times around it to PATH, so that a
sampler's samples of that function put its clock on the trace's.

PROFKIT_STEP_TIMES=PATH (``profkit trace --bare-run``): the start time of every optimizer
step's end and of every outermost module forward call is written to PATH as the program
exits (``StepClock``), the same in the bare run and under the profiler, so that the two
runs' steps can be compared.

PROFKIT_MEMORY=DIR (``profkit trace --memory``): the CUDA caching allocator records its history
(``torch.cuda.memory._record_memory_history``, Python stacks, a ring of PROFKIT_MEMORY_ENTRIES
events, default 200,000, so memory stays bounded however long the program runs); an
out-of-memory observer dumps the snapshot at the first allocation that fails to
DIR/oom_snapshot.pickle, and the program's exit dumps DIR/memory_snapshot.pickle (".rankN" before
".pickle" under torchrun).  ``profkit memory`` reads both.

PROFKIT_NSYS_STEPS=SKIP:COUNT (``profkit trace --steps COUNT --skip SKIP`` under nsys, which then
runs with ``--capture-range=cudaProfilerApi``): nsys traces only that window of optimizer steps:
the shim calls ``cudaProfilerStart`` after step SKIP and ``cudaProfilerStop`` after step
SKIP + COUNT; a program with no optimizer step gets LENGTH seconds of module forward calls after
AFTER (PROFKIT_NSYS_FORWARD=AFTER:LENGTH).  PROFKIT_NSYS_WINDOW=START:END traces a window of
seconds instead (as PROFKIT_TORCH_WINDOW does).  The rest of the program runs untraced, at its
own speed; with the StepClock on, the window's open and close times are written beside the
steps, so its traced steps can be compared with the untraced ones of the same run.

PROFKIT_SYNC_SITES=0 turns the sync-site hook off.
"""

from __future__ import annotations

import os
import runpy
import sys
from collections.abc import Callable

USAGE = "usage: python -m profkit.capture.launch (script.py | -m module) [args]"
LAUNCH_MODULE = "profkit.capture.launch"  # this module, as `python -m` names it
TORCH_TRACE_ENV = "PROFKIT_TORCH_TRACE"
TORCH_STEPS_ENV = "PROFKIT_TORCH_STEPS"
TORCH_WINDOW_ENV = "PROFKIT_TORCH_WINDOW"
TORCH_FORWARD_ENV = "PROFKIT_TORCH_FORWARD"
TORCH_STACKS_ENV = "PROFKIT_TORCH_STACKS"
CLOCK_MARK_ENV = "PROFKIT_CLOCK_MARK"
STEP_TIMES_ENV = "PROFKIT_STEP_TIMES"
NSYS_STEPS_ENV, NSYS_FORWARD_ENV, NSYS_WINDOW_ENV = "PROFKIT_NSYS_STEPS", "PROFKIT_NSYS_FORWARD", "PROFKIT_NSYS_WINDOW"
# perf_counter_ns when nsys's capture range opened and closed (StepClock writes them with the steps)
CAPTURE_RANGE_NS: dict[str, int] = {}
MEMORY_ENV = "PROFKIT_MEMORY"
MEMORY_ENTRIES_ENV = "PROFKIT_MEMORY_ENTRIES"
MEMORY_ENTRIES = 200_000
MEMORY_SNAPSHOT, OOM_SNAPSHOT = "memory_snapshot", "oom_snapshot"
CLOCK_MARK_FUNCTION = "_profkit_clock_mark"
# Long enough for a few samples at 100 Hz: the offset is known to within a sample period.
CLOCK_MARK_S = 0.06
DISTRIBUTED = "--distributed"
RANK_FIELD = "{rank}"


def main(argv: list[str]) -> None:
    if not argv or argv[0] == "-m" and len(argv) < 2:
        raise SystemExit(USAGE)
    if argv[0] == DISTRIBUTED:
        run_distributed(argv[1:])
        return
    if os.environ.get("PROFKIT_SYNC_SITES", "1") != "0":
        from profkit.capture import sync_hook

        sync_hook.install_when_imported()
    step_times = os.environ.get(STEP_TIMES_ENV)
    if step_times:
        StepClock.install(step_times.replace(RANK_FIELD, os.environ.get("RANK", "0")))
    memory_dir = os.environ.get(MEMORY_ENV)
    memory = MemoryRecorder.install(memory_dir, int(os.environ.get(MEMORY_ENTRIES_ENV) or MEMORY_ENTRIES)) \
        if memory_dir else None
    mark = os.environ.get(CLOCK_MARK_ENV)
    if mark:
        _profkit_clock_mark(mark.replace(RANK_FIELD, os.environ.get("RANK", "0")))
    trace_path = os.environ.get(TORCH_TRACE_ENV)
    nsys_window = os.environ.get(NSYS_STEPS_ENV) or os.environ.get(NSYS_WINDOW_ENV)
    try:
        if nsys_window:
            run_in_capture_range(lambda: run_program(argv), os.environ.get(NSYS_STEPS_ENV),
                                 os.environ.get(NSYS_WINDOW_ENV), os.environ.get(NSYS_FORWARD_ENV))
        elif trace_path:
            trace_path = trace_path.replace(RANK_FIELD, os.environ.get("RANK", "0"))
            run_under_torch_profiler(lambda: run_program(argv), trace_path, os.environ.get(TORCH_STEPS_ENV),
                                     os.environ.get(TORCH_WINDOW_ENV),
                                     with_stack=os.environ.get(TORCH_STACKS_ENV) == "1",
                                     forward=os.environ.get(TORCH_FORWARD_ENV))
        else:
            run_program(argv)
    finally:  # however the program ends (an exception, sys.exit), before the interpreter tears down
        if memory is not None:
            memory.dump(memory.at_exit)


def _profkit_clock_mark(path: str) -> None:
    """Spin CLOCK_MARK_S seconds; write the wall-clock nanoseconds before and after to ``path``
    (the name of this function is what the sampler's samples are matched by)."""
    import json
    import time

    start = time.time_ns()
    while time.time_ns() - start < CLOCK_MARK_S * 1e9:
        pass
    end = time.time_ns()
    with open(path, "w") as fh:
        json.dump({"start_ns": start, "end_ns": end, "pid": os.getpid()}, fh)


class StepClock:
    """perf_counter_ns at the end of each optimizer step and at the start of each outermost module
    forward call (one per decode token of a generate() loop), written as JSON at exit."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.optimizer: list[int] = []
        self.forward: list[int] = []
        self.depth = 0

    @classmethod
    def install(cls, path: str) -> None:
        import atexit
        import time

        try:
            from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook
            from torch.optim.optimizer import register_optimizer_step_post_hook
        except ImportError:  # no PyTorch: no steps to time
            return
        clock = cls(path)
        now = time.perf_counter_ns

        def enter(*_: object) -> None:
            if clock.depth == 0:
                clock.forward.append(now())
            clock.depth += 1

        def leave(*_: object) -> None:
            clock.depth = max(clock.depth - 1, 0)

        register_optimizer_step_post_hook(lambda *_: clock.optimizer.append(now()))
        register_module_forward_pre_hook(enter)
        register_module_forward_hook(leave)
        atexit.register(clock.write)

    def write(self) -> None:
        import json

        try:
            with open(self.path, "w") as fh:
                json.dump({"optimizer_ns": self.optimizer, "forward_ns": self.forward,
                           "capture_range_ns": [CAPTURE_RANGE_NS.get("start"), CAPTURE_RANGE_NS.get("stop")]}, fh)
        except OSError:  # the folder went (profkit stopped): the timing is lost, not the program's exit
            pass


def snapshot_name(kind: str, rank: str | None) -> str:
    """memory_snapshot.pickle, or memory_snapshot.rank1.pickle for a rank of a distributed job."""
    return f"{kind}.rank{rank}.pickle" if rank is not None else f"{kind}.pickle"


class MemoryRecorder:
    """The allocator's bounded history; its snapshot at the first out-of-memory error and at exit."""

    def __init__(self, folder: str) -> None:
        rank = os.environ.get("RANK") if "WORLD_SIZE" in os.environ else None
        self.at_exit = os.path.join(folder, snapshot_name(MEMORY_SNAPSHOT, rank))
        self.at_oom = os.path.join(folder, snapshot_name(OOM_SNAPSHOT, rank))
        self.oom_seen = False

    @classmethod
    def install(cls, folder: str, entries: int) -> MemoryRecorder | None:
        try:
            import torch
        except ImportError:  # no PyTorch: no allocator to record
            return None
        if not torch.cuda.is_available():
            return None
        recorder = cls(folder)
        # Python frames only: C++ stacks ("all") cost every allocation a native unwind
        torch.cuda.memory._record_memory_history(max_entries=entries, stacks="python")
        torch._C._cuda_attach_out_of_memory_observer(recorder.on_oom)
        return recorder

    def on_oom(self, device: int, requested: int, device_allocated: int, device_free: int) -> None:
        # The first failure is the one to explain: a program that catches it and retries smaller
        # would overwrite it with a state it recovered from.
        if not self.oom_seen:
            self.oom_seen = True
            self.dump(self.at_oom)

    @staticmethod
    def dump(path: str) -> None:
        import torch

        try:
            torch.cuda.memory._dump_snapshot(path)
        except Exception as exc:  # noqa: BLE001 - the program's own exit status and error stay what they were
            print(f"profkit: warning: no memory snapshot written to {path} ({type(exc).__name__}: {exc})",
                  file=sys.stderr)


def run_program(argv: list[str]) -> None:
    # `python -m profkit.capture.launch` put the working directory first on
    # sys.path; `python script.py` would put the script's folder there, and
    # `python -m module` the working directory: do the same.
    if argv[0] == "-m":
        module, args = argv[1], argv[2:]
        sys.argv = [module, *args]  # runpy sets argv[0] to the module's file
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        return
    script = argv[0]
    sys.argv = list(argv)
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    runpy.run_path(script, run_name="__main__")


def run_distributed(torchrun_args: list[str]) -> None:
    """torchrun with every worker started through this shim: torchrun's own parser reads the
    options, then the training script becomes the shim's argument (``--module``)."""
    from torch.distributed.run import get_args_parser, run

    args = get_args_parser().parse_args(torchrun_args)
    if args.no_python:
        raise SystemExit("profkit: torchrun --no-python runs a program that is not Python; "
                         "use profkit trace --backend nsys for it")
    script = ["-m", args.training_script] if args.module else [args.training_script]
    args.training_script_args = [*script, *args.training_script_args]
    args.training_script = "profkit.capture.launch"
    args.module = True
    run(args)


def parse_window(text: str) -> tuple[float, float]:
    """"START:END" seconds (END empty: no end) as (start, end); ValueError when it is not one."""
    start_text, sep, end_text = text.partition(":")
    if not sep:
        raise ValueError(f"{text!r} is not START:END")
    start = float(start_text or 0)
    end = float(end_text) if end_text.strip() else float("inf")
    if not (0 <= start < end):
        raise ValueError(f"{text!r}: START must be >= 0 and before END")
    return start, end


class TimeWindow:
    """Starts and stops a torch.profiler between two times, from hooks that run on the program's
    main thread (see the module docstring); ``tick()`` is their one entry."""

    def __init__(self, prof: object, window: tuple[float, float], save: Callable[[], None]) -> None:
        import time

        self.prof, (self.start, self.end), self.save = prof, window, save
        self.clock = time.monotonic
        self.t0 = self.clock()
        self.state = "waiting"  # -> recording -> done

    def tick(self, *_: object) -> None:
        if self.state == "done":
            return
        import torch

        if torch.compiler.is_compiling():  # traced by dynamo: no side effect inside a graph
            return
        elapsed = self.clock() - self.t0
        if self.state == "waiting" and elapsed >= self.start:
            self.prof.start()  # type: ignore[attr-defined]
            self.state = "recording"
            # the profiler's first start takes seconds (Kineto's set-up): the window keeps its length
            self.end += self.clock() - self.t0 - elapsed
        elif self.state == "recording" and elapsed >= self.end:
            self.finish()

    def finish(self) -> None:
        """Stop and export now (the window closed, or the program ended inside it)."""
        if self.state == "recording":
            import torch

            if torch.cuda.is_available():
                torch.cuda.synchronize()  # the window's last kernels end before the trace does
            self.prof.stop()  # type: ignore[attr-defined]
            self.save()
        self.state = "done"


def run_in_time_window(run: Callable[[], None], timer: TimeWindow) -> None:
    """run() with ``timer`` ticked by every module forward and optimizer step of the program's main
    thread (and once now: START 0 is the program's first line); the window is closed when run() ends."""
    from torch.nn.modules.module import register_module_forward_pre_hook
    from torch.optim.optimizer import register_optimizer_step_post_hook

    # the hooks stay registered once the window closed (a no-op then): removing a global hook
    # while the program runs would make torch.compile recompile its graphs
    hooks = [register_module_forward_pre_hook(timer.tick), register_optimizer_step_post_hook(timer.tick)]
    timer.tick()
    try:
        run()
    finally:
        if timer.state == "waiting":  # the program ended before START: record nothing
            timer.state = "done"
        timer.finish()
        for hook in hooks:
            hook.remove()


class ForwardFallback:
    """For a program without an optimizer: once AFTER seconds passed since its first module
    forward call with no optimizer step, a ``TimeWindow`` of LENGTH seconds opens there."""

    def __init__(self, make_profiler: Callable[[], object], forward: str, save: Callable[[object], None]) -> None:
        import time

        after, length = (float(v) for v in forward.split(":"))
        self.after, self.length, self.make_profiler, self.save = after, length, make_profiler, save
        self.clock = time.monotonic
        self.first: float | None = None
        self.optimizer = False
        self.window: TimeWindow | None = None

    def tick(self, *_: object) -> None:
        if self.window is not None:
            self.window.tick()
            return
        if self.optimizer:
            return
        now = self.clock()
        if self.first is None:
            self.first = now
        elif now - self.first >= self.after:
            prof = self.make_profiler()
            self.window = TimeWindow(prof, (0.0, self.length), lambda: self.save(prof))
            self.window.tick()

    def finish(self) -> bool:
        """Stop and export the window if it opened; whether it did."""
        if self.window is None:
            return False
        self.window.finish()
        return True


class CudaProfilerRange:
    """nsys's capture range (``--capture-range=cudaProfilerApi``) as a profiler with start() and
    stop(): ``cudaProfilerStart`` / ``cudaProfilerStop``, after the GPU finished the work before."""

    def start(self) -> None:
        import time

        import torch

        torch.cuda.synchronize()
        CAPTURE_RANGE_NS["start"] = time.perf_counter_ns()
        torch.cuda.profiler.start()

    def stop(self) -> None:
        import time

        import torch

        torch.cuda.synchronize()  # the window's last kernels end inside it
        torch.cuda.profiler.stop()
        CAPTURE_RANGE_NS["stop"] = time.perf_counter_ns()


def run_in_capture_range(run: Callable[[], None], steps: str | None, window: str | None,
                         forward: str | None, capture: object | None = None) -> None:
    """run() with nsys tracing only a window of it (PROFKIT_NSYS_STEPS / _WINDOW, module docstring):
    ``capture`` (a ``CudaProfilerRange`` by default) is started and stopped from hooks on the
    program's main thread, and stopped when the program ends inside the window."""
    try:
        from torch.nn.modules.module import register_module_forward_pre_hook
        from torch.optim.optimizer import register_optimizer_step_post_hook
    except ImportError:
        raise SystemExit("profkit: --steps / --window under nsys cut the window at PyTorch's optimizer steps and "
                         "module calls: this Python has no torch (trace the whole program instead)") from None

    rng = capture if capture is not None else CudaProfilerRange()
    if window:
        run_in_time_window(run, TimeWindow(rng, parse_window(window), lambda: None))
        return
    skip, count = (int(v) for v in (steps or "0:0").split(":"))
    fallback = ForwardFallback(lambda: rng, forward, lambda _: None) if forward else None
    state = {"steps": 0, "open": False}

    def optimizer_step(*_: object) -> None:
        if fallback is not None:
            fallback.optimizer = True
            if fallback.window is not None:  # the forward window traced already
                return
        state["steps"] += 1
        if not state["open"] and state["steps"] == skip:
            rng.start()  # type: ignore[attr-defined]
            state["open"] = True
        elif state["open"] and state["steps"] == skip + count:
            rng.stop()  # type: ignore[attr-defined]
            state["open"] = False

    hooks = [register_optimizer_step_post_hook(optimizer_step)]
    if fallback is not None:
        hooks.append(register_module_forward_pre_hook(fallback.tick))
    if skip == 0:
        rng.start()  # type: ignore[attr-defined]
        state["open"] = True
    try:
        run()
    finally:
        if state["open"]:
            rng.stop()  # type: ignore[attr-defined]
        if fallback is not None:
            fallback.finish()
        for hook in hooks:  # as run_under_torch_profiler's: nothing of the launcher's outlives the program
            hook.remove()


def run_under_torch_profiler(run: Callable[[], None], trace_path: str, steps: str | None = None,
                             window: str | None = None, *, with_stack: bool = True,
                             forward: str | None = None) -> None:
    """run() inside torch.profiler; the trace is exported however run() ends.

    ``steps`` ("SKIP:COUNT", PROFKIT_TORCH_STEPS): only that window of optimizer steps is
    recorded; ``window`` ("START:END" seconds, PROFKIT_TORCH_WINDOW): only that window of
    time; ``forward`` ("AFTER:LENGTH", with ``steps``): LENGTH seconds of forward calls when
    there is no optimizer (see the module docstring)."""
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    cuda = torch.cuda.is_available()
    activities = [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if cuda else [])]
    hooks = []
    exported: list[bool] = []

    def save(p: object = None) -> None:
        (p or prof).export_chrome_trace(trace_path)  # type: ignore[attr-defined]
        exported.append(True)

    if window:
        prof = profile(activities=activities, with_stack=with_stack)
        run_in_time_window(run, TimeWindow(prof, parse_window(window), save))
        return
    fallback = None
    if steps:
        skip, count = (int(v) for v in steps.split(":"))
        # one step of warm-up (Kineto's start-up is not in the figures), inside the skipped ones
        warmup = 1 if skip >= 1 else 0
        prof = profile(activities=activities, with_stack=with_stack, on_trace_ready=save,
                       schedule=schedule(wait=skip - warmup, warmup=warmup, active=count, repeat=1))
        from torch.optim.optimizer import register_optimizer_step_post_hook

        if forward:
            from torch.nn.modules.module import register_module_forward_pre_hook

            fallback = ForwardFallback(lambda: profile(activities=activities, with_stack=with_stack), forward, save)

        def optimizer_step(*_: object) -> None:
            if fallback is not None:
                fallback.optimizer = True
                if fallback.window is not None:  # the forward window recorded already
                    return
            prof.step()

        hooks = [register_optimizer_step_post_hook(optimizer_step)]
        if fallback is not None:
            hooks.append(register_module_forward_pre_hook(fallback.tick))
    else:
        prof = profile(activities=activities, with_stack=with_stack)
    prof.start()
    try:
        run()
    finally:
        if cuda:
            torch.cuda.synchronize()  # the last kernels end before the trace does
        for hook in hooks:
            hook.remove()
        prof.stop()
        if fallback is not None and fallback.finish():
            pass  # the forward window's trace is the one written
        elif not steps:
            prof.export_chrome_trace(trace_path)
        elif not exported:  # the program ended inside the window, or before it: keep what there is
            try:
                prof.export_chrome_trace(trace_path)
            except Exception:  # noqa: BLE001 - nothing was recorded: the caller says no trace was written
                pass


if __name__ == "__main__":
    main(sys.argv[1:])
