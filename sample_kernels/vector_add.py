"""Vector add: PyTorch, CUDA C++ and Triton.  The smallest complete example.
Run: python sample_kernels/vector_add.py [--n 67108864]"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import triton

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from sample_kernels import triton_kernels as tk  # noqa: E402
from sample_kernels.bench import base_parser, benchmark, check_close, load_cuda_extension, selected  # noqa: E402

CUDA_WRAPPERS = r"""
torch::Tensor vector_add(torch::Tensor a, torch::Tensor b) {
    auto c = torch::empty_like(a);
    int n = a.numel();
    vector_add_kernel<<<(n + 255) / 256, 256>>>(a.data_ptr<float>(), b.data_ptr<float>(), c.data_ptr<float>(), n);
    return c;
}
"""


def triton_add(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(a)
    n = a.numel()
    tk.add_kernel[(triton.cdiv(n, tk.ADD_BLOCK),)](a, b, out, n, BLOCK_SIZE=tk.ADD_BLOCK)
    return out


def main() -> None:
    parser = base_parser(__doc__)
    parser.add_argument("--n", type=int, default=1 << 26)
    args = parser.parse_args()
    a = torch.randn(args.n, device="cuda")
    b = torch.randn(args.n, device="cuda")
    reference = a + b
    cuda_ext = None
    variants = {
        "pytorch": lambda: a + b,
        "cuda": lambda: cuda_ext.vector_add(a, b),
        "triton": lambda: triton_add(a, b),
    }
    names = selected(args, list(variants))
    if "cuda" in names:
        cuda_ext = load_cuda_extension("profkit_vector_add", "vector_add.cu",
                                       "torch::Tensor vector_add(torch::Tensor a, torch::Tensor b);",
                                       ["vector_add"], CUDA_WRAPPERS)
    for name in names:
        check_close(name, variants[name](), reference)
        print(benchmark(f"vector_add/{name}", variants[name], args.warmup, args.trials))


if __name__ == "__main__":
    main()
