"""A small MLP training loop (256 wide, 4 layers, batch 256), the CS336
lecture 6 example.  Each step is an NVTX range "step" (none with --no-nvtx-steps).

  --print-loss   prints loss.item() every step: a device-to-host copy and a
                 cudaStreamSynchronize per step, so the CPU can no longer
                 queue work ahead of the GPU;
  (default)      keeps the losses on the GPU and reads them once at the end.
Profiling flags (--profile, --annotate-steps, --slow-kernel, ...): sample_kernels/profiling.py.
Run: python sample_kernels/train_mlp.py --steps 20 [--print-loss]"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from sample_kernels.bench import nvtx_range  # noqa: E402
from sample_kernels.profiling import add_profile_args, profiler, slow_kernel, step_range  # noqa: E402


def build_model(dim: int, layers: int) -> torch.nn.Module:
    blocks = [module for _ in range(layers) for module in (torch.nn.Linear(dim, dim), torch.nn.GELU())]
    return torch.nn.Sequential(*blocks).cuda()


def main() -> None:  # the sync sites' line numbers are pinned by committed traces (tests/test_stalls*.py)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--print-loss", action="store_true", help="print loss.item() every step (syncs)")
    add_profile_args(parser, nvtx_default=True)
    args = parser.parse_args()

    torch.manual_seed(0)
    model = build_model(args.dim, args.layers)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(args.batch, args.dim, device="cuda")
    y = torch.randn(args.batch, args.dim, device="cuda")
    losses = torch.zeros(args.steps, device="cuda")
    with profiler(args, args.steps) as prof:  # under a schedule, the warm-up falls in the skipped first step
        with step_range(args, "warmup", nvtx_range("warmup")):
            for _ in range(3):
                torch.nn.functional.mse_loss(model(x), y).backward()
                optimizer.zero_grad(set_to_none=True)
            torch.cuda.synchronize()
        for step in range(args.steps):
            with step_range(args, "step", nvtx_range("step")):
                optimizer.zero_grad(set_to_none=True)
                loss = torch.nn.functional.mse_loss(model(x), y)
                slow_kernel(args)
                loss.backward()
                optimizer.step()
                if args.print_loss:
                    print(f"step {step} loss {loss.item():.5f}")
                else:
                    losses[step] = loss.detach()
            prof.step()
        torch.cuda.synchronize()
    if not args.print_loss:
        print("losses:", " ".join(f"{v:.5f}" for v in losses.tolist()))


if __name__ == "__main__":
    main()
