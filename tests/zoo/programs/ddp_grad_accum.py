"""DDP training with gradient accumulation: --accum micro-batches per optimizer step, the first
--accum - 1 under model.no_sync(), so gradients are all-reduced once per step.

Truth: --steps steps of --accum forward/backward each; all-reduce kernels only in the last
micro-batch's backward (the bucket count's worth per step, not per micro-batch).
--dry: one gloo process on the CPU."""

from __future__ import annotations

import contextlib

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import zoo_common as zoo


def main() -> None:
    ap = zoo.parser(__doc__)
    ap.add_argument("--accum", type=int, default=4)
    args = ap.parse_args()
    device = zoo.setup(args)
    rank, world, device = zoo.init_distributed(device)
    width = 64 if args.dry else 2048
    model = torch.nn.Sequential(torch.nn.Linear(width, 4 * width), torch.nn.GELU(),
                                torch.nn.Linear(4 * width, width)).to(device)
    ddp = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    opt = torch.optim.SGD(ddp.parameters(), lr=1e-3)
    micro = [torch.randn(64, width, device=device) for _ in range(args.accum)]
    with zoo.profiler(args, device) as prof:
        loop = zoo.Steps(args, device, prof)
        for _ in loop:
            for index, x in enumerate(micro):
                last = index == len(micro) - 1
                with contextlib.nullcontext() if last else ddp.no_sync():
                    (ddp(x).pow(2).mean() / args.accum).backward()
            opt.step()
            opt.zero_grad()
    print(f"ZOO_TRUTH {{\"rank\": {rank}, \"world_size\": {world}, \"micro_batches_per_step\": {args.accum}}}")
    loop.report()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
