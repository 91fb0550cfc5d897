"""The same MLP training script run eager (--eager) or under torch.compile (the default).

Eager runs its GELU as at::native's own kernel; compiled, the GELU is fused into a Triton kernel.
Truth: a diff of the two runs compares one program (same script, same step ranges), its kernels
differing; the compiled run gets no torch.compile advice.  --dry: CPU, aot_eager backend."""

from __future__ import annotations

import torch

import zoo_common as zoo


def main() -> None:
    ap = zoo.parser(__doc__)
    ap.add_argument("--eager", action="store_true", help="no torch.compile")
    args = ap.parse_args()
    device = zoo.setup(args)
    width = 64 if args.dry else 2048
    model = torch.nn.Sequential(torch.nn.Linear(width, 4 * width), torch.nn.GELU(),
                                torch.nn.Linear(4 * width, width)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def train_step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        return loss

    step_fn = train_step if args.eager else torch.compile(train_step, backend="aot_eager" if args.dry else "inductor")
    x, y = torch.randn(256, width, device=device), torch.randn(256, width, device=device)
    for _ in range(2):  # compile (and warm up) before the loop
        step_fn(x, y)
        opt.zero_grad()
    with zoo.profiler(args, device) as prof:
        loop = zoo.Steps(args, device, prof)
        for _ in loop:
            step_fn(x, y)
            opt.step()
            opt.zero_grad()
    loop.report()


if __name__ == "__main__":
    main()
