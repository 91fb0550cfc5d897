"""Kernels of known work for the `profkit roofline` fixtures
(scripts/make_roofline_fixtures.sh runs this under ncu).

Every case runs in its own "window": warm-up calls first (cuBLAS heuristics,
the CUDA extension build, Triton and inductor compiles), then
cudaProfilerStart, exactly one call, synchronize, cudaProfilerStop.  Under
`ncu --profile-from-start off` only that one call's kernels are profiled, one
launch each.  The window is also an NVTX push/pop range (default domain) named
after the case, so `ncu --print-nvtx-rename kernel` maps each profiled launch
to its case; stdout says "window <i>: <case>" just before each window.

Cases (--cases, comma-separated):
  gemm_fp32    4096^3 fp32 GEMM, TF32 off: FFMA on the FP32 pipe
  gemm_bf16    8192^3 bf16 GEMM: tensor cores, bf16 in, fp32 accumulate
  gemm_fp8     8192^3 torch._scaled_mm, float8_e4m3fn in, bf16 out (skipped,
               and said so, where the GPU or torch cannot)
  elementwise  c = a + b on 2^26 fp32 (torch.add out=): memory bound
  reduction    row sums of an 8192 x 8192 fp32 matrix: memory bound
  gelu         the five variants of sample_kernels/gelu.py (manual, pytorch,
               cuda, triton, compiled), one window each
  softmax      the five variants of sample_kernels/softmax.py, one window each

--json-out writes the windows in order: kind, dtype, M/N/K and 2*M*N*K for
the GEMMs, the fewest DRAM bytes the memory-bound kernels can move, and
whether the case ran (status "ok", else why not).  --warm-only builds and
compiles everything and opens no window (fills the extension and inductor
caches before the profiled run).

Run: python sample_kernels/roofline_probe.py --cases gemm_bf16,elementwise [--json-out cases.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

CASES = ("gemm_fp32", "gemm_bf16", "gemm_fp8", "elementwise", "reduction", "gelu", "softmax")
VARIANTS = ("manual", "pytorch", "cuda", "triton", "compiled")
WARMUP = 3


class Window:
    def __init__(self, name: str, fn: Callable[[], object] | None, info: dict):
        self.name, self.fn, self.info = name, fn, {"case": name, **info}


def fp32_without_tf32() -> str:
    """IEEE fp32 matmuls (torch's default; set anyway).  One API only: torch >= 2.9
    raises when the legacy allow_tf32 flags and the new fp32_precision are mixed."""
    matmul = torch.backends.cuda.matmul
    if hasattr(matmul, "fp32_precision"):
        matmul.fp32_precision = "ieee"
        return f"fp32_precision={matmul.fp32_precision}"
    matmul.allow_tf32 = False
    return f"allow_tf32={matmul.allow_tf32}"


def gemm(dtype: str, m: int, n: int, k: int) -> Window:
    info = {"kind": "gemm", "dtype": dtype, "M": m, "N": n, "K": k, "flops": 2 * m * n * k,
            "roof": {"fp32": "fp32 FMA pipe", "bf16": "bf16 tensor", "fp8": "fp8 tensor"}[dtype]}
    if dtype == "fp32":
        info["tf32_setting"] = fp32_without_tf32()
        a = torch.randn(m, k, device="cuda")
        b = torch.randn(k, n, device="cuda")
        c = torch.empty(m, n, device="cuda")
        fn = lambda: torch.mm(a, b, out=c)  # noqa: E731
        fn()
        # TF32 would show as ~1e-3 relative error; IEEE fp32 is ~1e-6
        ref = a[:128].double() @ b.double()
        info["max_rel_err_vs_fp64"] = float(((c[:128].double() - ref).abs().max() / ref.abs().max()).item())
    elif dtype == "bf16":
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        fn = lambda: torch.mm(a, b, out=c)  # noqa: E731
    else:
        f8 = torch.float8_e4m3fn
        a = torch.randn(m, k, device="cuda").to(f8)
        b = torch.randn(n, k, device="cuda").to(f8).t()  # column-major K x N, as _scaled_mm wants
        scale = torch.tensor(1.0, device="cuda")
        fn = lambda: torch._scaled_mm(a, b, scale_a=scale, scale_b=scale, out_dtype=torch.bfloat16)  # noqa: E731
        fn()
        info["out_dtype"] = "bf16"
    return Window(f"gemm_{dtype}", fn, info)


def elementwise(n: int = 1 << 26) -> Window:
    a = torch.randn(n, device="cuda")
    b = torch.randn(n, device="cuda")
    c = torch.empty(n, device="cuda")
    return Window("elementwise", lambda: torch.add(a, b, out=c),
                  {"kind": "elementwise", "dtype": "fp32", "elements": n, "op": "c = a + b",
                   "min_dram_bytes": 3 * 4 * n, "flops": n})


def reduction(rows: int = 8192, cols: int = 8192) -> Window:
    x = torch.randn(rows, cols, device="cuda")
    y = torch.empty(rows, device="cuda")
    return Window("reduction", lambda: torch.sum(x, dim=1, out=y),
                  {"kind": "reduction", "dtype": "fp32", "rows": rows, "cols": cols, "op": "y = x.sum(dim=1)",
                   "min_dram_bytes": 4 * rows * cols + 4 * rows, "flops": rows * cols})


def gelu_windows(n: int) -> list[Window]:
    from sample_kernels import gelu as g

    x = torch.randn(n, n, device="cuda")
    fns = {"manual": lambda: g.manual_gelu,
           "pytorch": lambda: g.pytorch_gelu,
           "cuda": lambda: extension("profkit_gelu", "gelu.cu", "torch::Tensor gelu(torch::Tensor x);",
                                     "gelu", g.CUDA_WRAPPERS),
           "triton": lambda: g.triton_gelu,
           "compiled": lambda: torch.compile(g.manual_gelu)}
    info = {"kind": "gelu", "dtype": "fp32", "shape": [n, n], "min_dram_bytes": 2 * 4 * n * n,
            "source": "sample_kernels/gelu.py"}
    return variant_windows("gelu", fns, x, g.pytorch_gelu(x), info, atol=1e-5, rtol=1e-4)


def softmax_windows(rows: int, cols: int) -> list[Window]:
    from sample_kernels import softmax as s

    x = torch.randn(rows, cols, device="cuda")
    fns = {"manual": lambda: s.manual_softmax,
           "pytorch": lambda: lambda t: torch.softmax(t, dim=1),
           "cuda": lambda: extension("profkit_softmax", "softmax.cu", "torch::Tensor softmax(torch::Tensor x);",
                                     "softmax", s.CUDA_WRAPPERS),
           "triton": lambda: s.triton_softmax,
           "compiled": lambda: torch.compile(s.manual_softmax)}
    info = {"kind": "softmax", "dtype": "fp32", "shape": [rows, cols], "min_dram_bytes": 2 * 4 * rows * cols,
            "source": "sample_kernels/softmax.py"}
    return variant_windows("softmax", fns, x, torch.softmax(x, dim=1), info, atol=1e-6, rtol=1e-4)


def extension(name: str, source: str, decl: str, function: str, wrappers: str):
    """The sample's own CUDA C++ extension (same name and sources, so the same build cache)."""
    from sample_kernels.bench import load_cuda_extension

    return getattr(load_cuda_extension(name, source, decl, [function], wrappers), function)


def variant_windows(sample: str, makers: dict, x: torch.Tensor, reference: torch.Tensor, info: dict,
                    atol: float, rtol: float) -> list[Window]:
    """One window per variant; a variant that cannot be built or run is recorded as skipped."""
    windows = []
    for variant in VARIANTS:
        name = f"{sample}_{variant}"
        try:
            op = makers[variant]()
            fn = (lambda op=op: op(x))
            got = fn()  # builds, compiles
            ok = bool(torch.allclose(got, reference, atol=atol, rtol=rtol))
            del got
            if not ok:
                print(f"WARNING {name}: result differs from the reference", flush=True)
            windows.append(Window(name, fn, {**info, "variant": variant, "matches_reference": ok}))
        except Exception as exc:
            print(f"UNSUPPORTED {name}: {type(exc).__name__}: {exc}", flush=True)
            windows.append(Window(name, None, {**info, "variant": variant,
                                               "status": f"skipped: {type(exc).__name__}: {exc}"[:300]}))
    return windows


def build(case: str, args: argparse.Namespace) -> list[Window]:
    if case == "gemm_fp32":
        return [gemm("fp32", 4096, 4096, 4096)]
    if case == "gemm_bf16":
        return [gemm("bf16", 8192, 8192, 8192)]
    if case == "gemm_fp8":
        return [gemm("fp8", 8192, 8192, 8192)]
    if case == "elementwise":
        return [elementwise()]
    if case == "reduction":
        return [reduction()]
    if case == "gelu":
        return gelu_windows(args.gelu_n)
    if case == "softmax":
        return softmax_windows(args.softmax_rows, args.softmax_cols)
    raise SystemExit(f"unknown case {case!r}; choose from {', '.join(CASES)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", required=True, help="comma-separated: " + ",".join(CASES))
    parser.add_argument("--json-out", type=Path)
    parser.add_argument("--warm-only", action="store_true")
    parser.add_argument("--gelu-n", type=int, default=8192, help="GELU input is n x n fp32")
    parser.add_argument("--softmax-rows", type=int, default=65536)
    parser.add_argument("--softmax-cols", type=int, default=1024)
    args = parser.parse_args()

    windows: list[Window] = []
    for case in args.cases.split(","):
        try:
            windows += build(case, args)
        except Exception as exc:  # fp8 where unsupported, a failed build: say so, go on
            print(f"UNSUPPORTED {case}: {type(exc).__name__}: {exc}", flush=True)
            windows.append(Window(case, None, {"status": f"skipped: {type(exc).__name__}: {exc}"[:300]}))

    for w in windows:  # every warm-up before the first window
        if w.fn is None:
            continue
        try:
            for _ in range(WARMUP):
                w.fn()
            torch.cuda.synchronize()
            w.info.setdefault("status", "ok")
        except Exception as exc:
            print(f"UNSUPPORTED {w.name}: {type(exc).__name__}: {exc}", flush=True)
            w.fn, w.info["status"] = None, f"skipped: {type(exc).__name__}: {exc}"[:300]

    index = 0
    for w in windows:
        if w.fn is None or args.warm_only:
            continue
        w.info["window"] = index
        print(f"window {index}: {w.name}", flush=True)
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_push(w.name)
        torch.cuda.profiler.start()
        w.fn()
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()
        torch.cuda.nvtx.range_pop()
        index += 1

    record = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
              "cases": [w.info for w in windows]}
    print(json.dumps(record), flush=True)
    if args.json_out:
        args.json_out.write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
