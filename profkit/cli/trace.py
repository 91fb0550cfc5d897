"""`profkit trace`: run a program under nsys or torch.profiler (and ncu), then write the report."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import click

from profkit.errors import ProfkitError


@click.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("-m", "module", metavar="MODULE", help="Profile `python -m MODULE` instead of a script.")
@click.option("--backend", type=click.Choice(["auto", "nsys", "torch"]), default="auto", show_default=True,
              help="Profiler: Nsight Systems, torch.profiler (Kineto trace), or nsys where found, else torch.")
@click.option("-o", "--output", type=click.Path(file_okay=False, path_type=Path),
              help="Run folder [default: profkit-runs/<script>-<time>/].")
@click.option("--ncu-top", type=click.IntRange(min=0), default=0, show_default=True, metavar="N",
              help="Afterwards, profile the N kernels with the most GPU time with ncu.")
@click.option("--nvtx-only", "nvtx_range", metavar="RANGE",
              help="Capture only inside the NVTX range RANGE (any domain, or RANGE@DOMAIN).")
@click.option("--python-sync-sites/--no-python-sync-sites", "sync_sites", default=True, show_default=True,
              help="Record the Python line of every synchronizing call (Tensor.item, .cpu, print ...).")
@click.option("--bare-run", "bare_run", is_flag=True,
              help="First run the program without a profiler, then say how much the capture slowed its steps "
                   "(optimizer steps, or outermost forward calls), and warn when beyond run-to-run noise.")
@click.option("--full", is_flag=True,
              help="nsys: also trace OS runtime calls (osrt) and every CUDA graph node, and sample Python at "
                   "1000 Hz (by default -t cuda,nvtx, one row per graph replay, 200 Hz): costs the program more.")
@click.option("--memory", is_flag=True,
              help="Record the CUDA caching allocator's history (bounded) and write its snapshot to the run "
                   "folder at exit and at the first out-of-memory error: profkit memory reads them.")
@click.option("--nsys-args", default="", metavar='"ARGS"', help='Extra nsys profile flags, e.g. "--cuda-memory-usage=true".')
@click.option("--python", "python", default=sys.executable, show_default="this Python", metavar="PATH",
              help="Python interpreter that runs the script.")
@click.option("--tmp-dir", type=click.Path(file_okay=False, path_type=Path),
              help="Where nsys writes its (multi-GB) capture before import [default: system temp].")
@click.option("--gpu-check/--no-gpu-check", default=True, show_default=True,
              help="Stop early when no NVIDIA GPU is visible.")
@click.option("--top", type=click.IntRange(min=1), default=10, show_default=True,
              help="Kernels in the terminal summary.")
@click.option("--keep-env", is_flag=True,
              help="Keep the trace as the profiler wrote it (by default trace.sqlite or trace.json.gz "
                   "is scrubbed of the environment and secrets: profkit scrub).")
@click.option("--keep-rep", is_flag=True,
              help="Keep trace.nsys-rep (for the Nsight Systems GUI; it holds the environment).")
@click.option("--steps", "steps", type=click.IntRange(min=0), default=None,
              show_default="torch: 4 after --skip 3; nsys: the whole program (0: the whole program)",
              metavar="N", help="Record N training steps (each optimizer step ends one), not the whole program; a "
                                "program without an optimizer gets 3 s of its forward calls after 5 s of them.  "
                                "torch: ProfilerStep#N ranges; nsys: only they are traced (cudaProfilerStart/Stop), "
                                "the rest runs untraced, and the traced steps are compared with the untraced ones.")
@click.option("--skip", "skip_steps", type=click.IntRange(min=0), default=3, show_default=True, metavar="K",
              help="With --steps: the first K optimizer steps (start-up, compilation, warm-up) are not recorded.")
@click.option("--whole", is_flag=True, help="--backend torch: record the whole program (= --steps 0).")
@click.option("--with-stack", "with_stack", is_flag=True,
              help="--backend torch: record every Python call (with_stack=True; slows Python-heavy code "
                   "several times) instead of sampling the stacks with py-spy.")
@click.option("--sample/--no-sample", "sample", default=True, show_default=True,
              help="--backend torch: sample Python stacks with py-spy (when installed) for profkit host.")
@click.option("--window", "window", metavar="START:END",
              help="For loops without an optimizer (inference, generate()): record (torch) or trace (nsys) only "
                   "from START to END seconds after the program started (END empty: to the end); the "
                   "window opens and closes at the next module forward or optimizer step.")
@click.argument("target_and_args", nargs=-1, type=click.UNPROCESSED, metavar="SCRIPT.py [-- ARGS...]")
@click.pass_context
def trace(ctx: click.Context, module: str | None, backend: str, output: Path | None, ncu_top: int, nvtx_range: str | None,
          sync_sites: bool, nsys_args: str, python: str, tmp_dir: Path | None, gpu_check: bool, top: int,
          keep_env: bool, keep_rep: bool, steps: int | None, skip_steps: int, whole: bool, with_stack: bool,
          sample: bool, window: str | None, full: bool, bare_run: bool, memory: bool,
          target_and_args: tuple[str, ...]) -> None:
    """Profile a program with Nsight Systems (or torch.profiler) and write profkit's report.

    \b
      profkit trace train.py -- --steps 20
      profkit trace --backend torch train.py -- --steps 20
      profkit trace --backend torch --steps 5 --skip 3 train.py -- --steps 1000   # a window of 5 steps
      profkit trace --steps 20 --skip 10 train.py -- --steps 1000   # nsys traces steps 11-30 only
      profkit trace --backend torch --whole --with-stack train.py                 # all of it, every call
      profkit trace --backend torch --window 20:25 serve.py                       # 5 s of an inference loop
      profkit trace --ncu-top 3 sample_kernels/gelu.py --n 8192
      profkit trace --memory train.py                                              # + allocator snapshots
      profkit trace -m my_pkg.bench -- --size 4096
    """
    from profkit.capture.progress import make_reporter
    from profkit.capture.summary import print_summary
    from profkit.capture.trace import TraceOptions, run_trace

    args = list(target_and_args)
    if module is None:
        if not args:
            raise click.UsageError("give a script to profile (or -m MODULE)")
        target, args = args[0], args[1:]
    else:
        target = module
    if args[:1] == ["--"]:
        args = args[1:]
    try:
        extra = shlex.split(nsys_args)
    except ValueError as exc:
        raise ProfkitError(f"--nsys-args cannot be parsed ({exc})") from None
    options = TraceOptions(target=target, args=args, module=module is not None, output=output, ncu_top=ncu_top,
                           nvtx_range=nvtx_range, sync_sites=sync_sites, nsys_args=extra, python=python,
                           temp_root=tmp_dir, check_gpu=gpu_check, top=top, backend=backend, keep_env=keep_env,
                           keep_rep=keep_rep, steps=steps, skip_steps=skip_steps, window=window,
                           whole=whole, with_stack=with_stack, sample=sample, full=full, bare_run=bare_run,
                           memory=memory)
    reporter = make_reporter()
    try:
        result = run_trace(options, reporter)
    finally:
        reporter.close()
    print_summary(result)
    ctx.exit(result.exit_code)
