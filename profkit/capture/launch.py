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

PROFKIT_SYNC_SITES=0 turns the sync-site hook off.
"""

from __future__ import annotations

import os
import runpy
import sys
from collections.abc import Callable

USAGE = "usage: python -m profkit.capture.launch (script.py | -m module) [args]"
TORCH_TRACE_ENV = "PROFKIT_TORCH_TRACE"
TORCH_STEPS_ENV = "PROFKIT_TORCH_STEPS"
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
    trace_path = os.environ.get(TORCH_TRACE_ENV)
    if trace_path:
        trace_path = trace_path.replace(RANK_FIELD, os.environ.get("RANK", "0"))
        run_under_torch_profiler(lambda: run_program(argv), trace_path, os.environ.get(TORCH_STEPS_ENV))
    else:
        run_program(argv)


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


def run_under_torch_profiler(run: Callable[[], None], trace_path: str, steps: str | None = None) -> None:
    """run() inside torch.profiler; the trace is exported however run() ends.

    ``steps`` ("SKIP:COUNT", PROFKIT_TORCH_STEPS): only that window of optimizer steps is
    recorded (see the module docstring)."""
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    cuda = torch.cuda.is_available()
    activities = [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if cuda else [])]
    hook = None
    exported: list[bool] = []
    if steps:
        skip, count = (int(v) for v in steps.split(":"))

        def save(p: object) -> None:
            p.export_chrome_trace(trace_path)  # type: ignore[attr-defined]
            exported.append(True)

        # one step of warm-up (Kineto's start-up is not in the figures), inside the skipped ones
        warmup = 1 if skip >= 1 else 0
        prof = profile(activities=activities, with_stack=True, on_trace_ready=save,
                       schedule=schedule(wait=skip - warmup, warmup=warmup, active=count, repeat=1))
        from torch.optim.optimizer import register_optimizer_step_post_hook

        hook = register_optimizer_step_post_hook(lambda *_: prof.step())
    else:
        prof = profile(activities=activities, with_stack=True)
    prof.start()
    try:
        run()
    finally:
        if cuda:
            torch.cuda.synchronize()  # the last kernels end before the trace does
        if hook is not None:
            hook.remove()
        prof.stop()
        if not steps:
            prof.export_chrome_trace(trace_path)
        elif not exported:  # the program ended inside the window, or before it: keep what there is
            try:
                prof.export_chrome_trace(trace_path)
            except Exception:  # noqa: BLE001 - nothing was recorded: the caller says no trace was written
                pass


if __name__ == "__main__":
    main(sys.argv[1:])
