"""Step annotation and in-process profiling shared by the training samples
(train_mlp.py, gpt.py, gpt_ddp.py), so every loop takes the same flags:

  --profile none|torch|torch-noschedule   torch.profiler (CPU + CUDA activities):
        torch             schedule(wait=1, warmup=2, active=steps-3), prof.step()
                          after each step, so the trace has ProfilerStep#N ranges;
        torch-noschedule  the whole loop profiled, no prof.step();
  --trace-out PATH         where export_chrome_trace writes (".gz" gzips);
  --with-stack             record Python stacks (python_function events);
  --nvtx-steps             an NVTX range around each step (torch.cuda.nvtx,
                           default domain) for Nsight Systems;
  --annotate-steps         a record_function range around each step, seen by
                           torch.profiler;
  --slow-kernel            one deliberately slow extra kernel per step
                           (torch.cuda._sleep: a kernel named "spin_kernel").
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator

import torch

PROFILE_MODES = ("none", "torch", "torch-noschedule")
# torch.cuda._sleep spins for this many GPU clock cycles: ~1 ms at the H100/H200's ~1.98 GHz
SLOW_KERNEL_CYCLES = 2_000_000


def add_profile_args(parser: argparse.ArgumentParser, *, nvtx_default: bool = False) -> None:
    """The shared flags above; nvtx_default keeps an older sample's always-on step range."""
    parser.add_argument("--profile", choices=PROFILE_MODES, default="none")
    parser.add_argument("--trace-out", default="trace.json.gz", help="Kineto trace path for --profile torch*")
    parser.add_argument("--with-stack", action="store_true", help="record Python stacks in the Kineto trace")
    parser.add_argument("--nvtx-steps", action=argparse.BooleanOptionalAction, default=nvtx_default,
                        help="an NVTX range around each step")
    parser.add_argument("--annotate-steps", action="store_true", help="a record_function range around each step")
    parser.add_argument("--slow-kernel", action="store_true", help="one deliberately slow extra kernel per step")


def device() -> torch.device:
    """CUDA when present; CPU otherwise (so the loops also run where CI runs)."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


class _NoProfiler:
    def step(self) -> None:
        pass


@contextlib.contextmanager
def profiler(args: argparse.Namespace, steps: int) -> Iterator[object]:
    """A torch.profiler session per --profile (an object with .step() either way);
    the trace is exported to --trace-out when the loop ends."""
    if args.profile == "none":
        yield _NoProfiler()
        return
    from torch.profiler import ProfilerActivity, profile, schedule

    activities = [ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(ProfilerActivity.CUDA)
    kwargs = {}
    if args.profile == "torch":
        # step 0 (allocations, lazy init, a compile) is skipped; warm-up steps are recorded and dropped
        kwargs["schedule"] = schedule(wait=1, warmup=2, active=max(steps - 3, 1), repeat=1)
    with profile(activities=activities, record_shapes=True, with_stack=args.with_stack, **kwargs) as prof:
        yield prof if args.profile == "torch" else _NoProfiler()
    prof.export_chrome_trace(args.trace_out)


@contextlib.contextmanager
def step_range(args: argparse.Namespace, name: str, nvtx: contextlib.AbstractContextManager | None = None):
    """The step's annotations: an NVTX range (the given context manager, else
    torch.cuda.nvtx in the default domain) and/or a record_function range, both named `name`."""
    with contextlib.ExitStack() as stack:
        if args.nvtx_steps:
            if nvtx is None:
                stack.enter_context(torch.cuda.nvtx.range(name))
            else:
                stack.enter_context(nvtx)
        if args.annotate_steps:
            stack.enter_context(torch.profiler.record_function(name))
        yield


def slow_kernel(args: argparse.Namespace) -> None:
    """The deliberate regression: one extra ~1 ms kernel ("spin_kernel") on the GPU."""
    if args.slow_kernel and torch.cuda.is_available():
        torch.cuda._sleep(SLOW_KERNEL_CYCLES)
