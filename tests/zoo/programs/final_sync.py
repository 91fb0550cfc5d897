"""A loop with no sync inside it that ends in one torch.cuda.synchronize() after the last step.

Truth: no sync in any step (sync idle per step 0); the one planted sync lies after the loop, so
whatever idle precedes it is no per-step cost."""

from __future__ import annotations

import torch

import zoo_common as zoo


def main() -> None:
    args = zoo.parser(__doc__).parse_args()
    device = zoo.setup(args)
    width = 64 if args.dry else 4096
    weight = torch.randn(width, width, device=device)
    x = torch.randn(width, width, device=device)
    with zoo.profiler(args, device) as prof:
        loop = zoo.Steps(args, device, prof)
        for _ in loop:
            for _ in range(4):
                x = torch.tanh(x @ weight) * 0.5
    zoo.plant_next("final_sync", "zoo.sync(device)")
    zoo.sync(device)
    loop.report()


if __name__ == "__main__":
    main()
