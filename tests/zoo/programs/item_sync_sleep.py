"""A training loop with two planted costs per step: a .item() sync (the loss read back to decide
on a learning-rate change) and a host sleep of --sleep-ms (standing in for host work).

Truth: one sync per step at the "sync" line; the "slow" line costs --sleep-ms per step on the host."""

from __future__ import annotations

import time

import torch

import zoo_common as zoo


def main() -> None:
    ap = zoo.parser(__doc__)
    ap.add_argument("--sleep-ms", type=float, default=3.0)
    args = ap.parse_args()
    device = zoo.setup(args)
    width = 64 if args.dry else 2048
    model = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU(), torch.nn.Linear(width, 1)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x, y = torch.randn(512, width, device=device), torch.randn(512, 1, device=device)
    with zoo.profiler(args, device) as prof:
        loop = zoo.Steps(args, device, prof)
        for _ in loop:
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            zoo.plant_next("sync", ".item()")
            if loss.item() > 1e6:
                opt.param_groups[0]["lr"] *= 0.5
            zoo.plant_next("slow", "time.sleep")
            time.sleep(args.sleep_ms / 1e3)
    print(f"ZOO_TRUTH {{\"slow_ms_per_step\": {args.sleep_ms}}}")
    loop.report()


if __name__ == "__main__":
    main()
