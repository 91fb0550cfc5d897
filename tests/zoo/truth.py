"""What a Kineto trace holds, read straight from its JSON: the truth profkit's commands must
reproduce on the public traces (tests/data/hta_zoo).  Nothing here imports profkit.

- steps: the ``ProfilerStep#N`` ranges torch.profiler writes around each ``prof.step()`` on the
  CPU: their count and durations;
- kernels: ``cat == "kernel"`` events (``"Kernel"`` before PyTorch 1.10), per name; Triton's by name;
- CUDA graphs: ``cudaGraphLaunch`` runtime calls, and the kernels they launched (same correlation id);
- copies and sets: ``gpu_memcpy`` / ``gpu_memset`` events; syncs: ``cuda_sync`` events;
- ranks: ``distributedInfo`` (rank, world size); Python stacks: ``python_function`` events;
- collectives: NCCL kernels that carry ``Collective name``, ``In msg nelems`` and ``dtype`` (Kineto
  copies them from ``record_param_comms``): count and bytes per collective;
- forward passes: ``user_annotation`` ranges named like ``[param|...|forward]`` (PyTorch's operator
  benchmark, in the AlexNet trace, marks each forward pass so instead of ``ProfilerStep#N``).
"""

from __future__ import annotations

import gzip
import json
import re
import statistics
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

STEP_NAME = re.compile(r"ProfilerStep#(\d+)$")
FORWARD_ANNOTATION = re.compile(r"^\[param\|.*\|forward\]$")
# Bytes per element of the dtypes Kineto names in a collective's arguments.
DTYPE_BYTES = {"Float": 4, "Half": 2, "BFloat16": 2, "Double": 8, "Int": 4, "Long": 8, "Short": 2, "Char": 1,
               "Byte": 1, "Bool": 1}
GRAPH_LAUNCH = re.compile(r"^(cudaGraphLaunch|cuGraphLaunch|hipGraphLaunch)")


@dataclass
class Truth:
    """A trace's truth; durations in ns."""

    steps: int
    step_ns: list[float]
    kernels: int
    kernel_names: Counter = field(repr=False)
    triton_kernels: int
    graph_launches: int
    graph_kernels: int
    memcpys: int
    memsets: int
    cuda_syncs: int
    rank: int | None
    world_size: int | None
    python_frames: int
    gpu: str | None
    forward_annotations: int
    collectives: dict[str, tuple[int, int]] = field(default_factory=dict)  # name -> (count, bytes)

    @property
    def step_median_ns(self) -> float | None:
        return statistics.median(self.step_ns) if self.step_ns else None

    def as_row(self) -> dict:
        return {"steps": self.steps, "step_median_ms": round(self.step_median_ns / 1e6, 2) if self.steps else None,
                "kernels": self.kernels, "kernel_names": len(self.kernel_names), "triton": self.triton_kernels,
                "graph_launches": self.graph_launches, "graph_kernels": self.graph_kernels,
                "memcpys": self.memcpys, "rank": self.rank, "world_size": self.world_size,
                "forward_annotations": self.forward_annotations}


def load(path: Path) -> dict:
    with gzip.open(path, "rt") if str(path).endswith(".gz") else open(path) as handle:
        return json.load(handle)


def truth_of(path: Path) -> Truth:
    trace = load(path)
    events = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X"]
    # the CPU's ranges: newer PyTorch repeats each on the GPU's timeline (cat gpu_user_annotation)
    steps = sorted((e for e in events if STEP_NAME.match(str(e.get("name"))) and e.get("cat") != "gpu_user_annotation"),
                   key=lambda e: e["ts"])
    # PyTorch before 1.10 wrote "Kernel", "Runtime", "Memcpy", "Memset" for these categories
    kernels = [e for e in events if e.get("cat") in ("kernel", "Kernel")]
    launches = [e for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver", "Runtime")
                and GRAPH_LAUNCH.match(str(e.get("name")))]
    launch_ids = {(e.get("args") or {}).get("correlation") for e in launches}
    info = trace.get("distributedInfo") or {}
    devices = trace.get("deviceProperties") or []
    return Truth(
        steps=len(steps), step_ns=[1e3 * e["dur"] for e in steps],
        kernels=len(kernels), kernel_names=Counter(e["name"] for e in kernels),
        triton_kernels=sum("triton" in e["name"] for e in kernels),
        graph_launches=len(launches),
        graph_kernels=sum((e.get("args") or {}).get("correlation") in launch_ids for e in kernels),
        memcpys=sum(e.get("cat") in ("gpu_memcpy", "Memcpy") for e in events),
        memsets=sum(e.get("cat") in ("gpu_memset", "Memset") for e in events),
        cuda_syncs=sum(e.get("cat") == "cuda_sync" for e in events),
        rank=info.get("rank"), world_size=info.get("world_size"),
        python_frames=sum(e.get("cat") == "python_function" for e in events),
        gpu=devices[0].get("name") if devices else None,
        collectives=collectives(kernels),
        forward_annotations=sum(e.get("cat") == "user_annotation" and bool(FORWARD_ANNOTATION.match(str(e.get("name"))))
                                for e in events))


def collectives(kernels: list[dict]) -> dict[str, tuple[int, int]]:
    """(count, input bytes) per collective name, from the NCCL kernels that carry their arguments."""
    found: dict[str, tuple[int, int]] = {}
    for kernel in kernels:
        args = kernel.get("args") or {}
        if "nccl" not in kernel["name"].lower() or "Collective name" not in args:
            continue
        count, size = found.get(args["Collective name"], (0, 0))
        found[args["Collective name"]] = (count + 1, size + int(args["In msg nelems"]) * DTYPE_BYTES[args["dtype"]])
    return found


if __name__ == "__main__":  # python -m tests.zoo.truth FILE...: each trace's truth as one JSON line
    import sys

    for name in sys.argv[1:]:
        print(Path(name).name, json.dumps(truth_of(Path(name)).as_row()))
