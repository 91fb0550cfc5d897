"""A side stream that prepares each step's input while the default stream trains, joined by an
event (cudaStreamWaitEvent: the CPU does not block); cuBLAS's first GEMM of a new shape appears
only at step --new-shape-step (module loading on the host while the GPU idles).

Truth: the planted "wait" line never blocks the CPU (no stall charged to it); the idle at step
--new-shape-step is the host loading code, not a sync."""

from __future__ import annotations

import torch

import zoo_common as zoo


def main() -> None:
    ap = zoo.parser(__doc__)
    ap.add_argument("--new-shape-step", type=int, default=10)
    args = ap.parse_args()
    device = zoo.setup(args)
    cuda = device.type == "cuda"
    width = 64 if args.dry else 2048
    weight = torch.randn(width, width, device=device)
    side = torch.cuda.Stream() if cuda else None
    with zoo.profiler(args, device) as prof:
        loop = zoo.Steps(args, device, prof)
        for step in loop:
            ready = torch.cuda.Event() if cuda else None
            with torch.cuda.stream(side) if cuda else torch.autograd.profiler.record_function("side"):
                x = torch.randn(512, width, device=device).mul_(0.1)
                if cuda:
                    ready.record(side)
            if cuda:
                zoo.plant_next("wait", "wait_event")
                torch.cuda.current_stream().wait_event(ready)
            rows = 512 if step != args.new_shape_step else 333  # a shape cuBLAS has not seen yet
            y = (x[:rows] @ weight).relu() @ weight.T
            y.sum()
    loop.report()


if __name__ == "__main__":
    main()
