"""Inference of a small transformer block under torch.compile(mode=--mode): default,
reduce-overhead (CUDA graphs via cudagraph trees) or max-autotune (GEMM autotuning, then graphs).

Compilation and autotuning run before the loop (warm-up calls); each step is one forward.
Truth: --steps steps; under reduce-overhead and max-autotune one graph replay per step; the
kernels are Triton's (so no advice to fuse with torch.compile, nor to use CUDA graphs).
--dry runs the same code on the CPU with the aot_eager backend (no C++ compiler needed)."""

from __future__ import annotations

import torch

import zoo_common as zoo


class Block(torch.nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.norm1, self.norm2 = torch.nn.LayerNorm(width), torch.nn.LayerNorm(width)
        self.attn = torch.nn.MultiheadAttention(width, heads, batch_first=True)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(width, 4 * width), torch.nn.GELU(),
                                       torch.nn.Linear(4 * width, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


def main() -> None:
    ap = zoo.parser(__doc__)
    ap.add_argument("--mode", choices=["default", "reduce-overhead", "max-autotune"], default="default")
    ap.add_argument("--warmup-calls", type=int, default=3, help="compiling calls before the loop")
    args = ap.parse_args()
    device = zoo.setup(args)
    width, seq, batch = (32, 16, 2) if args.dry else (1024, 512, 8)
    model = Block(width, 8 if not args.dry else 4).to(device).eval()
    if args.dry:
        compiled = torch.compile(model, backend="aot_eager")
    else:
        compiled = torch.compile(model, mode=None if args.mode == "default" else args.mode)
    x = torch.randn(batch, seq, width, device=device)
    with torch.inference_mode():
        for _ in range(args.warmup_calls):
            compiled(x)
        zoo.sync(device)
        with zoo.profiler(args, device) as prof:
            loop = zoo.Steps(args, device, prof)
            for _ in loop:
                out = compiled(x)
    print(f"ZOO_TRUTH {{\"mode\": \"{args.mode}\", \"out_norm\": {float(out.float().norm()):.4f}}}")
    loop.report()


if __name__ == "__main__":
    main()
