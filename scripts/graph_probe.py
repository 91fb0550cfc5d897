"""A CUDA graph of elementwise kernels replayed once per step, between two
eager kernels, for the graph fixtures (scripts/make_graph_fixtures.sh).

Elementwise only (no cuBLAS), so Nsight Systems 2023.4 can trace it on the
CUDA 13 host.  Each step is an NVTX range "step" (domain "probe"):

  eager: x.mul_(0.5)            1 kernel
  graph.replay()                --ops kernels (the captured chain below)
  eager: y.add_(x)              1 kernel

Run: python scripts/graph_probe.py --steps 20 [--ops 12] [--n 16777216]"""

from __future__ import annotations

import argparse

import nvtx
import torch


def chain(x: torch.Tensor, y: torch.Tensor, ops: int) -> None:
    """ops elementwise kernels, in place, each reading x and writing y."""
    for i in range(ops):
        if i % 2:
            y.mul_(x)
        else:
            y.add_(x)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--ops", type=int, default=12)
    parser.add_argument("--n", type=int, default=16 * 1024 * 1024)
    args = parser.parse_args()

    x = torch.ones(args.n, device="cuda")
    y = torch.zeros(args.n, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up off the capture stream, as torch.cuda.graphs recommends
        chain(x, y, args.ops)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with nvtx.annotate("capture", domain="probe"):
        with torch.cuda.graph(graph):
            chain(x, y, args.ops)
    torch.cuda.synchronize()
    for _ in range(args.steps):
        with nvtx.annotate("step", domain="probe"):
            x.mul_(0.5)
            graph.replay()
            y.add_(x)
    torch.cuda.synchronize()
    print(f"steps {args.steps}, {args.ops} kernels per replay, y[0] = {y[0].item():.4f}")


if __name__ == "__main__":
    main()
