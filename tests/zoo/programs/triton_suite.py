"""Three hand-written Triton kernels, each step running all three: an FP32 GEMM (FFMA), a bf16
GEMM (tensor cores) and a fused LayerNorm, each checked against torch.

Truth (for `profkit roofline` on an ncu capture): the FP32 GEMM is compute-bound on FP32 FMA
(2·M·N·K FLOPs per launch), the bf16 GEMM on the tensor cores, the LayerNorm memory-bound.
--dry runs the same kernels in Triton's interpreter (TRITON_INTERPRET=1) on the CPU."""

from __future__ import annotations

import os
import sys

if "--dry" in sys.argv:  # before triton is imported: the interpreter runs kernels on the CPU
    os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

import zoo_common as zoo  # noqa: E402


@triton.jit
def matmul_kernel(a, b, c, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                  IEEE: tl.constexpr):
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a_tile = tl.load(a + rm[:, None] * K + (k + rk)[None, :], mask=(rm[:, None] < M) & ((k + rk)[None, :] < K),
                         other=0.0)
        b_tile = tl.load(b + (k + rk)[:, None] * N + rn[None, :], mask=((k + rk)[:, None] < K) & (rn[None, :] < N),
                         other=0.0)
        if IEEE:  # FP32 on the FMA units, not TF32 tensor cores
            acc += tl.dot(a_tile, b_tile, input_precision="ieee")
        else:
            acc += tl.dot(a_tile, b_tile)
    tl.store(c + rm[:, None] * N + rn[None, :], acc.to(c.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def layernorm_kernel(x, y, w, b, N, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    v = tl.load(x + row * N + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(v, axis=0) / N
    diff = tl.where(mask, v - mean, 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(diff * diff, axis=0) / N + eps)
    out = diff * rstd * tl.load(w + cols, mask=mask) + tl.load(b + cols, mask=mask)
    tl.store(y + row * N + cols, out, mask=mask)


def matmul(a: torch.Tensor, b: torch.Tensor, block: tuple[int, int, int]) -> torch.Tensor:
    (M, K), N = a.shape, b.shape[1]
    c = torch.empty(M, N, device=a.device, dtype=a.dtype)
    grid = (triton.cdiv(M, block[0]), triton.cdiv(N, block[1]))
    matmul_kernel[grid](a, b, c, M, N, K, BLOCK_M=block[0], BLOCK_N=block[1], BLOCK_K=block[2],
                        IEEE=a.dtype == torch.float32)
    return c


def layernorm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    y = torch.empty_like(x)
    layernorm_kernel[(x.shape[0],)](x, y, w, b, x.shape[1], 1e-5, BLOCK=triton.next_power_of_2(x.shape[1]))
    return y


def main() -> None:
    ap = zoo.parser(__doc__)
    args = ap.parse_args()
    device = zoo.setup(args)
    size, rows, block = (32, 8, (16, 16, 16)) if args.dry else (4096, 8192, (128, 128, 32))
    a32, b32 = torch.randn(size, size, device=device), torch.randn(size, size, device=device)
    a16, b16 = a32.bfloat16(), b32.bfloat16()
    x = torch.randn(rows, size, device=device)
    w, bias = torch.ones(size, device=device), torch.zeros(size, device=device)
    # Checked once before the loop, against torch.
    torch.testing.assert_close(matmul(a32, b32, block), a32 @ b32, rtol=1e-3, atol=1e-2 * size ** 0.5)
    if not args.dry:  # Triton's interpreter holds bf16 in numpy, which has no bf16: checked on the GPU only
        torch.testing.assert_close(matmul(a16, b16, block).float(), (a16 @ b16).float(), rtol=2e-2,
                                   atol=size ** 0.5)
    torch.testing.assert_close(layernorm(x, w, bias), torch.nn.functional.layer_norm(x, (size,), w, bias),
                               rtol=1e-4, atol=1e-4)
    with zoo.profiler(args, device) as prof:
        loop = zoo.Steps(args, device, prof)
        for _ in loop:
            matmul(a32, b32, block)
            matmul(a16, b16, block)
            layernorm(x, w, bias)
    print(f"ZOO_TRUTH {{\"gemm_flops\": {2 * size ** 3}, \"layernorm_bytes\": {2 * 4 * rows * size}}}")
    loop.report()


if __name__ == "__main__":
    main()
