"""What a tracer adds to one CUDA call: host time per call of the calls a host-bound step is made of.

A decode step that launches L kernels and spends T on the host cannot be traced for less than
1 + L * delta / T, where delta is what the tracer adds to one call; this measures delta.  It times
(in the process, on the host, with the GPU kept from falling behind by a synchronize every 128 calls):

- ``launch``: an eager kernel launch (``x.add_(1)`` on a one-element tensor: cudaLaunchKernel);
- ``replay``: a CUDA graph replay of one such kernel (cudaGraphLaunch);
- ``copy``: a 4-byte device-to-device copy (cudaMemcpyAsync);
- ``item``: ``.item()`` of a device scalar (a copy to the host and a stream synchronize).

Run it bare and under each tracer, on the GPU host::

    python benchmarks/launch_cost.py                          # bare
    python benchmarks/launch_cost.py --torch-profiler cuda    # torch.profiler, CUDA activity only
    nsys profile --sample=none --cpuctxsw=none -t cuda python benchmarks/launch_cost.py

It prints one ``LAUNCH_COST {json}`` line: microseconds per call of each kind, the median of
``--rounds`` rounds of ``--calls`` calls.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from contextlib import nullcontext

SYNC_EVERY = 128  # calls between synchronizes: the GPU never holds a long queue, so no call waits on it


def per_call_us(call: Callable[[], object], calls: int, rounds: int, synchronize: Callable[[], None]) -> float:
    """Median over rounds of the host time of one call, in microseconds (the synchronizes excluded)."""
    results = []
    for _ in range(rounds):
        spent = 0.0
        done = 0
        while done < calls:
            batch = min(SYNC_EVERY, calls - done)
            synchronize()
            started = time.perf_counter()
            for _ in range(batch):
                call()
            spent += time.perf_counter() - started
            done += batch
        synchronize()
        results.append(spent / calls * 1e6)
    return statistics.median(results)


def measure(calls: int, rounds: int) -> dict[str, float]:
    import torch

    x = torch.zeros(1, device="cuda")
    y = torch.zeros(1, device="cuda")
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):  # graphs are captured off the default stream
        for _ in range(3):
            x.add_(1)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        x.add_(1)
    kinds: dict[str, Callable[[], object]] = {
        "launch": lambda: x.add_(1),
        "replay": graph.replay,
        "copy": lambda: y.copy_(x),
        "item": x.item,
    }
    for call in kinds.values():  # warm-up: first calls load modules and allocate
        for _ in range(200):
            call()
    return {kind: round(per_call_us(call, calls, rounds, torch.cuda.synchronize), 3) for kind, call in kinds.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=4096, help="calls per round (default 4096)")
    parser.add_argument("--rounds", type=int, default=7, help="rounds; the median is kept (default 7)")
    parser.add_argument("--torch-profiler", choices=["cuda", "cpu+cuda"],
                        help="measure inside torch.profiler with these activities (no stacks, no shapes)")
    parser.add_argument("--label", default="", help="a name for this run in the printed line")
    args = parser.parse_args()
    import torch

    context = nullcontext()
    if args.torch_profiler:
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CUDA]
        if args.torch_profiler == "cpu+cuda":
            activities.insert(0, ProfilerActivity.CPU)
        context = profile(activities=activities)
    with context:
        result = measure(args.calls, args.rounds)
    print("LAUNCH_COST " + json.dumps({"label": args.label, "device": torch.cuda.get_device_name(),
                                       "torch": torch.__version__, "us_per_call": result}), flush=True)


if __name__ == "__main__":
    main()
