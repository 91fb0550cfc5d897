"""Deliberately bad kernels for profkit's analyses to catch:
- strided GELU (Triton and CUDA): loads that cannot be vectorized;
- register-heavy kernels (Triton and CUDA): occupancy limited by registers.
Run: python sample_kernels/bad_kernels.py"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import triton

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from sample_kernels import triton_kernels as tk  # noqa: E402
from sample_kernels.bench import base_parser, benchmark, check_close, load_cuda_extension, selected  # noqa: E402
from sample_kernels.gelu import pytorch_gelu  # noqa: E402

CUDA_WRAPPERS = r"""
torch::Tensor gelu_strided(torch::Tensor x, int64_t stride) {
    auto out = torch::empty_like(x);
    int n = x.numel();
    gelu_strided_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), out.data_ptr<float>(), n, (int)stride);
    return out;
}
torch::Tensor register_heavy(torch::Tensor x, int64_t iters) {
    auto out = torch::empty_like(x);
    int n = x.numel();
    register_heavy_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), out.data_ptr<float>(), n, (int)iters);
    return out;
}
"""
CPP_DECLS = ("torch::Tensor gelu_strided(torch::Tensor x, int64_t stride);\n"
             "torch::Tensor register_heavy(torch::Tensor x, int64_t iters);")

STRIDE = 33  # coprime with the power-of-two sizes, so the CUDA permutation covers every element
HEAVY_ACC, HEAVY_OFFSET, HEAVY_ITERS = 64, 4099, 4  # as in csrc/bad.cu


def register_heavy_reference(x: torch.Tensor, iters: int, count: int) -> torch.Tensor:
    """register_heavy_kernel's first `count` outputs, in float64, with the
    kernel's in-place update order (later accumulators see earlier updates)."""
    n = x.numel()
    i = torch.arange(count, device=x.device)
    acc = [x[(i + k * HEAVY_OFFSET) % n].double() for k in range(HEAVY_ACC)]
    for _ in range(iters):
        for k in range(HEAVY_ACC):
            acc[k] = acc[k] * acc[(k + 1) % HEAVY_ACC] + 0.5 * acc[(k + 7) % HEAVY_ACC]
    return torch.stack(acc).sum(dim=0)


def check_register_heavy(got: torch.Tensor, x: torch.Tensor, iters: int, count: int = 8192) -> None:
    """The fp32 kernel against the float64 reference, within 1e-3 of each
    output's magnitude scale (a wrong index is off by O(1) of it)."""
    ref = register_heavy_reference(x, iters, count)
    i = torch.arange(count, device=x.device)
    scale = sum(x[(i + k * HEAVY_OFFSET) % x.numel()].double().abs() for k in range(HEAVY_ACC)) + ref.abs()
    err = ((got[:count].double() - ref).abs() / scale).max().item()
    if not err <= 1e-3:
        raise SystemExit(f"cuda_register_heavy: wrong result (max scaled error {err:.3g})")


def triton_gelu_strided(x: torch.Tensor, stride: int) -> torch.Tensor:
    out = torch.zeros_like(x)
    n = x.numel() // stride
    tk.gelu_strided_kernel[(triton.cdiv(n, tk.GELU_BLOCK),)](x, out, n, stride, BLOCK_SIZE=tk.GELU_BLOCK)
    return out


def triton_register_heavy(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    n = x.numel()
    block = tk.REGISTER_HEAVY_BLOCK
    tk.gelu_register_heavy_kernel[(triton.cdiv(n, block),)](x, out, n, BLOCK_SIZE=block, num_warps=1)
    return out


def main() -> None:
    parser = base_parser(__doc__)
    parser.add_argument("--n", type=int, default=1 << 26)
    args = parser.parse_args()
    x = torch.randn(args.n, device="cuda")
    ext = load_cuda_extension("profkit_bad", "bad.cu", CPP_DECLS, ["gelu_strided", "register_heavy"], CUDA_WRAPPERS)
    reference = pytorch_gelu(x)
    strided_ref = torch.zeros_like(x)
    strided_ref[::STRIDE][: x.numel() // STRIDE] = reference[::STRIDE][: x.numel() // STRIDE]
    variants = {
        "triton_strided": lambda: triton_gelu_strided(x, STRIDE),
        "cuda_strided": lambda: ext.gelu_strided(x, STRIDE),
        "triton_register_heavy": lambda: triton_register_heavy(x),
        "cuda_register_heavy": lambda: ext.register_heavy(x, HEAVY_ITERS),
    }
    check_close("triton_strided", variants["triton_strided"](), strided_ref)
    check_close("cuda_strided", variants["cuda_strided"](), reference)
    check_close("triton_register_heavy", variants["triton_register_heavy"](), reference)
    check_register_heavy(variants["cuda_register_heavy"](), x, HEAVY_ITERS)
    for name in selected(args, list(variants)):
        print(benchmark(f"bad/{name}", variants[name], args.warmup, args.trials))


if __name__ == "__main__":
    main()
