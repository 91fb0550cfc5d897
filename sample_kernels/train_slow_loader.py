"""The MLP training loop of train_mlp.py fed by a slow data loader: each step
the host sleeps (as a loader waiting on disk or a queue would), then builds
the batch on the CPU and copies it to the GPU.  The GPU sits idle while the
host waits, and Nsight Systems' OS-runtime trace shows what the host was
doing then (clock_nanosleep), which `profkit breakdown` names for the
longest idle stretches.

Run: python sample_kernels/train_slow_loader.py --steps 20 --sleep-ms 5"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from sample_kernels.bench import nvtx_range  # noqa: E402
from sample_kernels.profiling import add_profile_args, profiler, step_range  # noqa: E402
from sample_kernels.train_mlp import build_model  # noqa: E402


def load_batch(batch: int, dim: int, sleep_s: float) -> tuple[torch.Tensor, torch.Tensor]:
    """What a slow loader does: wait, then hand over a CPU batch."""
    time.sleep(sleep_s)
    return torch.randn(batch, dim), torch.randn(batch, dim)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--dim", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--batch", type=int, default=1024)
    parser.add_argument("--sleep-ms", type=float, default=5.0, help="host-side wait per step")
    add_profile_args(parser, nvtx_default=True)
    args = parser.parse_args()

    torch.manual_seed(0)
    model = build_model(args.dim, args.layers)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    losses = torch.zeros(args.steps, device="cuda")
    with profiler(args, args.steps) as prof:
        for step in range(args.steps):
            with step_range(args, "step", nvtx_range("step")):
                x, y = load_batch(args.batch, args.dim, args.sleep_ms / 1000)
                x, y = x.cuda(non_blocking=False), y.cuda(non_blocking=False)
                optimizer.zero_grad(set_to_none=True)
                loss = torch.nn.functional.mse_loss(model(x), y)
                loss.backward()
                optimizer.step()
                losses[step] = loss.detach()
            prof.step()
        torch.cuda.synchronize()
    print("losses:", " ".join(f"{v:.5f}" for v in losses.tolist()))


if __name__ == "__main__":
    main()
