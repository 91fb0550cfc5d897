"""Softmax over the rows of a large matrix: manual PyTorch, torch.softmax,
CUDA C++, Triton (one row per program) and torch.compile.
Run: python sample_kernels/softmax.py [--rows 16384 --cols 1024]"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import triton

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from sample_kernels import triton_kernels as tk  # noqa: E402
from sample_kernels.bench import base_parser, benchmark, check_close, load_cuda_extension, selected  # noqa: E402

CUDA_WRAPPERS = r"""
torch::Tensor softmax(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.dim() == 2 && x.dtype() == torch::kFloat32);
    auto out = torch::empty_like(x);
    int threads = 256;
    softmax_kernel<<<x.size(0), threads, threads * sizeof(float)>>>(x.data_ptr<float>(), out.data_ptr<float>(), x.size(1));
    return out;
}
"""


def manual_softmax(x: torch.Tensor) -> torch.Tensor:
    # Unfused: max, subtract, exp, sum, divide are each a kernel.
    x_max = x.max(dim=1, keepdim=True)[0]
    numerator = torch.exp(x - x_max)
    return numerator / numerator.sum(dim=1, keepdim=True)


def triton_softmax(x: torch.Tensor) -> torch.Tensor:
    rows, cols = x.shape
    out = torch.empty_like(x)
    block = triton.next_power_of_2(cols)
    tk.softmax_kernel[(rows,)](x, out, x.stride(0), out.stride(0), cols, BLOCK_SIZE=block, num_warps=4)
    return out


def main() -> None:
    parser = base_parser(__doc__)
    parser.add_argument("--rows", type=int, default=16384)
    parser.add_argument("--cols", type=int, default=1024)
    args = parser.parse_args()
    x = torch.randn(args.rows, args.cols, device="cuda")
    reference = torch.softmax(x, dim=1)
    cuda_ext = None
    variants = {
        "manual": lambda: manual_softmax(x),
        "pytorch": lambda: torch.softmax(x, dim=1),
        "cuda": lambda: cuda_ext.softmax(x),
        "triton": lambda: triton_softmax(x),
        "compiled": lambda: compiled(x),
    }
    names = selected(args, list(variants))
    if "cuda" in names:
        cuda_ext = load_cuda_extension("profkit_softmax", "softmax.cu", "torch::Tensor softmax(torch::Tensor x);",
                                       ["softmax"], CUDA_WRAPPERS)
    if "compiled" in names:
        compiled = torch.compile(manual_softmax)
    for name in names:
        check_close(name, variants[name](), reference, atol=1e-6, rtol=1e-4)
        print(benchmark(f"softmax/{name}", variants[name], args.warmup, args.trials))


if __name__ == "__main__":
    main()
