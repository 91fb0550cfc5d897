"""Mixed precision: a transformer-ish MLP trained under torch.autocast(bfloat16), fused AdamW, the
loss read back every --log-every steps (the planted sync).

Truth: the GEMMs run in bf16 (bf16 kernel names); one sync every --log-every steps at the planted line."""

from __future__ import annotations

import torch

import zoo_common as zoo


def main() -> None:
    ap = zoo.parser(__doc__)
    ap.add_argument("--log-every", type=int, default=5)
    args = ap.parse_args()
    device = zoo.setup(args)
    width = 64 if args.dry else 4096
    model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.SiLU())
                                  for _ in range(4)]).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device.type == "cuda")
    x, y = torch.randn(128, width, device=device), torch.randn(128, width, device=device)
    with zoo.profiler(args, device) as prof:
        loop = zoo.Steps(args, device, prof)
        for step in loop:
            with torch.autocast(device.type, dtype=torch.bfloat16):
                loss = torch.nn.functional.mse_loss(model(x).float(), y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            if step % args.log_every == 0:
                zoo.plant_next("sync", ".item()")
                print(f"step {step} loss {loss.item():.4f}")
    loop.report()


if __name__ == "__main__":
    main()
