"""What every zoo program shares: its arguments, the step loop, and the two lines it prints.

    ZOO_PLANT {"sync": "graphed_train.py:41", "slow": "...:57", ...}   where the planted lines are
    ZOO_STEPS {"device": "cuda", "step_ms": [...], "median_ms": ...}   the program's own step times

A planted line is named by ``plant_next(kind, expect)`` on the line before it: the file and line
come from inspect, and the line's text must contain ``expect`` (so an edit that moves the plant
fails at once, on CPU too).  Step times come from CUDA events (no extra sync inside the loop) or,
on CPU, from perf_counter.  Steps are NVTX ranges "step" under nsys and ``ProfilerStep#N`` under
torch.profiler (``--trace-out``).
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import json
import linecache
import os
import statistics
import time
from collections.abc import Iterator
from pathlib import Path

import torch

PLANTS: dict[str, str] = {}


def parser(description: str) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--steps", type=int, default=20, help="steps to run (default 20)")
    ap.add_argument("--dry", action="store_true", help="CPU dry run: tiny sizes, at most 5 steps, no GPU needed")
    ap.add_argument("--device", default=None, help="cuda or cpu (default: cuda when there is one)")
    ap.add_argument("--trace-out", default=None,
                    help="write a torch.profiler trace here (with stacks); {rank} becomes the rank under torchrun")
    return ap


def setup(args: argparse.Namespace) -> torch.device:
    """The device to run on; a dry run is at most 5 steps on the CPU."""
    if args.dry:
        args.steps = min(args.steps, 5)
        args.device = "cpu"
    torch.manual_seed(0)
    return torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))


def plant_next(kind: str, expect: str) -> None:
    """Record the caller's next line as the planted ``kind`` line; its text must hold ``expect``."""
    caller = inspect.currentframe().f_back
    path, line = caller.f_code.co_filename, caller.f_lineno + 1
    text = linecache.getline(path, line)
    if expect not in text:
        raise AssertionError(f"plant {kind!r}: {Path(path).name}:{line} is {text.strip()!r}, not {expect!r}")
    PLANTS[kind] = f"{Path(path).name}:{line}"


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


@contextlib.contextmanager
def profiler(args: argparse.Namespace, device: torch.device) -> Iterator[object | None]:
    """torch.profiler around the loop when --trace-out is given (stacks, shapes), else nothing."""
    if not args.trace_out:
        yield None
        return
    from torch.profiler import ProfilerActivity, profile, schedule

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    path = args.trace_out.format(rank=os.environ.get("RANK", "0"))
    # One cycle: the first two steps warm up, every later step is recorded; the trace is written
    # when the cycle ends (on the last prof.step()).
    with profile(activities=activities, schedule=schedule(wait=0, warmup=2, active=max(1, args.steps - 2), repeat=1),
                 on_trace_ready=lambda done: done.export_chrome_trace(path),
                 record_shapes=True, with_stack=True) as prof:
        yield prof


class Steps:
    """The step loop: ``for step in Steps(args, device): ...`` times each step and marks it."""

    def __init__(self, args: argparse.Namespace, device: torch.device, prof: object | None = None) -> None:
        self.count, self.device, self.prof = args.steps, device, prof
        self.marks: list[tuple[object, object]] = []

    def __iter__(self) -> Iterator[int]:
        cuda = self.device.type == "cuda"
        for step in range(self.count):
            start = torch.cuda.Event(enable_timing=True) if cuda else time.perf_counter()
            if cuda:
                start.record()
                torch.cuda.nvtx.range_push("step")
            yield step
            if cuda:
                torch.cuda.nvtx.range_pop()
                end = torch.cuda.Event(enable_timing=True)
                end.record()
            else:
                end = time.perf_counter()
            self.marks.append((start, end))
            if self.prof is not None:
                self.prof.step()

    def report(self) -> None:
        """Print ZOO_PLANT and ZOO_STEPS (after the loop: reading CUDA events synchronizes)."""
        if self.device.type == "cuda":
            torch.cuda.synchronize()
            times = [start.elapsed_time(end) for start, end in self.marks]
        else:
            times = [1e3 * (end - start) for start, end in self.marks]
        print("ZOO_PLANT " + json.dumps(PLANTS, sort_keys=True), flush=True)
        print("ZOO_STEPS " + json.dumps({"device": self.device.type, "step_ms": [round(t, 4) for t in times],
                                          "median_ms": round(statistics.median(times), 4) if times else None,
                                          "pid": os.getpid()}), flush=True)


def init_distributed(device: torch.device) -> tuple[int, int, torch.device]:
    """(rank, world size, this rank's device): NCCL under torchrun on GPUs; without torchrun (a
    --dry run) one gloo process of its own, so the distributed code paths still run on a CPU."""
    import socket

    import torch.distributed as dist

    if "RANK" not in os.environ:
        with socket.socket() as s:  # a free port for a world of one
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if device.type == "cuda":
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo", rank=rank, world_size=world)
    return rank, world, device
