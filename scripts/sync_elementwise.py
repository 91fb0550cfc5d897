"""A loop of elementwise work with one synchronizing call of each kind the
stall analysis classifies.  It avoids cuBLAS, so Nsight Systems 2023.4 can
trace it on a CUDA 13 host (it drops events after the first cuBLAS call).

Run: python -m profkit.capture.launch scripts/sync_elementwise.py --steps 8"""

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from sample_kernels.bench import nvtx_range  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=8)
parser.add_argument("--n", type=int, default=1 << 22)
args = parser.parse_args()

x = torch.randn(args.n, device="cuda")
for step in range(args.steps):
    with nvtx_range("step"):
        y = torch.nn.functional.gelu(x, approximate="tanh") * 2.0
        total = y.sum().item()                # .item()
        if y.max() > 0:                       # truthiness
            y = y - 1
        head = y[:4].cpu()                    # .cpu()
        values = y[:2].tolist()               # .tolist()
        print(f"step {step} {y.mean()}")      # print/format of a tensor
        torch.cuda.synchronize()              # explicit
        host = torch.empty(args.n, dtype=y.dtype)
        host.copy_(y)                         # blocking device-to-host copy
print("done", total, head.shape, values)
