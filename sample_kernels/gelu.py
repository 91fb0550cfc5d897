"""GELU (tanh approximation) five ways, on a tensor big enough that memory
traffic dominates: manual PyTorch, torch's fused GELU, CUDA C++, Triton and
torch.compile.  Run: python sample_kernels/gelu.py [--n 16384]"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import torch
import triton

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from sample_kernels import triton_kernels as tk  # noqa: E402
from sample_kernels.bench import base_parser, benchmark, check_close, load_cuda_extension, selected  # noqa: E402

CUDA_WRAPPERS = r"""
torch::Tensor gelu(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.dtype() == torch::kFloat32);
    auto out = torch::empty_like(x);
    int n = x.numel();
    int threads = 1024;
    gelu_kernel<<<(n + threads - 1) / threads, threads>>>(x.data_ptr<float>(), out.data_ptr<float>(), n);
    return out;
}
"""


def manual_gelu(x: torch.Tensor) -> torch.Tensor:
    # Unfused: every operator is its own kernel and its own trip to DRAM.
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * torch.pow(x, 3))))


def pytorch_gelu(x: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.gelu(x, approximate="tanh")


def triton_gelu(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    n = x.numel()
    tk.gelu_kernel[(triton.cdiv(n, tk.GELU_BLOCK),)](x, out, n, BLOCK_SIZE=tk.GELU_BLOCK)
    return out



def main() -> None:
    parser = base_parser(__doc__)
    parser.add_argument("--n", type=int, default=16384, help="the tensor is n x n fp32")
    args = parser.parse_args()
    x = torch.randn(args.n, args.n, device="cuda")
    reference = pytorch_gelu(x)
    cuda_ext = None
    variants = {
        "manual": lambda: manual_gelu(x),
        "pytorch": lambda: pytorch_gelu(x),
        "cuda": lambda: cuda_ext.gelu(x),
        "triton": lambda: triton_gelu(x),
        "compiled": lambda: compiled(x),
    }
    names = selected(args, list(variants))
    if "cuda" in names:
        cuda_ext = load_cuda_extension("profkit_gelu", "gelu.cu", "torch::Tensor gelu(torch::Tensor x);",
                                       ["gelu"], CUDA_WRAPPERS)
    if "compiled" in names:
        compiled = torch.compile(manual_gelu)
    for name in names:
        check_close(name, variants[name](), reference)
        print(benchmark(f"gelu/{name}", variants[name], args.warmup, args.trials))


if __name__ == "__main__":
    main()
