"""DDP training where rank --slow-rank runs one extra slow GPU kernel per step (torch.cuda._sleep,
--slow-ms long) before its backward, at the planted "slow" line.

Truth: the straggler is --slow-rank, its cause GPU compute (one spin_kernel per step of ~--slow-ms);
the other ranks' all-reduce waits about --slow-ms per step.  --dry: one gloo process on the CPU,
where a matmul stands in for the slow kernel."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import zoo_common as zoo


def slow_kernel(device: torch.device, ms: float) -> None:
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        clock_khz = getattr(props, "clock_rate", 1_800_000)  # cycles per ms
        torch.cuda._sleep(int(ms * clock_khz))
    else:
        torch.randn(256, 256) @ torch.randn(256, 256)


def main() -> None:
    ap = zoo.parser(__doc__)
    ap.add_argument("--slow-rank", type=int, default=1)
    ap.add_argument("--slow-ms", type=float, default=10.0)
    args = ap.parse_args()
    device = zoo.setup(args)
    rank, world, device = zoo.init_distributed(device)
    width = 64 if args.dry else 2048
    model = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU(), torch.nn.Linear(width, width))
    ddp = DDP(model.to(device), device_ids=[device.index] if device.type == "cuda" else None)
    opt = torch.optim.SGD(ddp.parameters(), lr=1e-3)
    x = torch.randn(256, width, device=device)
    with zoo.profiler(args, device) as prof:
        loop = zoo.Steps(args, device, prof)
        for _ in loop:
            loss = ddp(x).pow(2).mean()
            if rank == args.slow_rank:
                zoo.plant_next("slow", "slow_kernel(")
                slow_kernel(device, args.slow_ms)
            loss.backward()
            opt.step()
            opt.zero_grad()
    print(f"ZOO_TRUTH {{\"rank\": {rank}, \"world_size\": {world}, \"slow_rank\": {args.slow_rank}, "
          f"\"slow_kernel_ms\": {args.slow_ms if rank == args.slow_rank else 0}}}")
    loop.report()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
