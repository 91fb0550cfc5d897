"""FSDP2 (torch.distributed.fsdp.fully_shard) training of a small transformer stack on every GPU
(torchrun --nproc_per_node N); rank --slow-rank sleeps --slow-ms on the host each step, at the
planted "slow" line, before its forward.

Truth: the straggler is --slow-rank, its cause host time at the planted line (~--slow-ms per step);
the other ranks wait for it in their first all-gather / reduce-scatter.
--dry: one gloo process on the CPU (world of one; the sleep still runs when --slow-rank 0)."""

from __future__ import annotations

import time

import torch
import torch.distributed as dist

import zoo_common as zoo


def main() -> None:
    ap = zoo.parser(__doc__)
    ap.add_argument("--slow-rank", type=int, default=1)
    ap.add_argument("--slow-ms", type=float, default=20.0)
    args = ap.parse_args()
    device = zoo.setup(args)
    rank, world, device = zoo.init_distributed(device)
    from torch.distributed.fsdp import fully_shard

    width, layers = (64, 2) if args.dry else (2048, 8)
    model = torch.nn.Sequential(*[torch.nn.TransformerEncoderLayer(width, 8 if not args.dry else 4, 4 * width,
                                                                    batch_first=True) for _ in range(layers)])
    model.to(device)
    for layer in model:
        fully_shard(layer)
    fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(8, 128 if not args.dry else 8, width, device=device)
    with zoo.profiler(args, device) as prof:
        loop = zoo.Steps(args, device, prof)
        for _ in loop:
            if rank == args.slow_rank:
                zoo.plant_next("slow", "time.sleep")
                time.sleep(args.slow_ms / 1e3)
            loss = model(x).float().pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
    print(f"ZOO_TRUTH {{\"rank\": {rank}, \"world_size\": {world}, \"slow_rank\": {args.slow_rank}, "
          f"\"slow_ms_per_step\": {args.slow_ms if rank == args.slow_rank else 0}}}")
    loop.report()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
