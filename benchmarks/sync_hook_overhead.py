"""What the sync-site hook (profkit/capture/sync_hook.py) costs per wrapped call.

Three paths, each timed without and with the hook:

  cpu-tensor   Tensor.item() on a CPU tensor: the hook's fast path (a
               thread-local read and an is_cuda check, no NVTX);
  cuda-path    the full path a CUDA tensor takes (walk to the user's frame,
               cached site lookup, NVTX push + pop), on a tensor-like object
               whose is_cuda is True, so it runs without a GPU; the time of
               the real synchronization is not included;
  new-site     the same with the per-site cache emptied before every call
               (the first call from a line: linecache, relpath, string
               registration);
  cuda-item    with --device cuda: Tensor.item() on a real CUDA tensor,
               i.e. a device-to-host copy and a stream synchronization.

NVTX calls are near no-ops unless a tool is attached, so run it under nsys
to see the cost while profiling:

    python benchmarks/sync_hook_overhead.py
    nsys profile -t nvtx --sample=none --cpuctxsw=none -o /tmp/hookbench \\
        python benchmarks/sync_hook_overhead.py
    python benchmarks/sync_hook_overhead.py --device cuda     # GPU host

Needs torch (CPU is enough) and, for the NVTX domain, the nvtx package.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from profkit.capture import sync_hook  # noqa: E402


class CudaLike:
    """Looks like a CUDA tensor to the hook; item() returns at once."""

    is_cuda = True

    def item(self) -> float:
        return 1.0


def per_call_ns(fn: Callable[[], object], calls: int, repeats: int) -> list[float]:
    """ns per call for each repeat (a loop of `calls` calls, minus an empty loop)."""
    results = []
    for _ in range(repeats):
        start = time.perf_counter_ns()
        for _ in range(calls):
            fn()
        elapsed = time.perf_counter_ns() - start
        start = time.perf_counter_ns()
        for _ in range(calls):
            pass
        empty = time.perf_counter_ns() - start
        results.append((elapsed - empty) / calls)
    return results


def measure(name: str, make_fn: Callable[[], Callable[[], object]], calls: int, repeats: int,
            before_each: Callable[[], None] | None = None) -> dict:
    """Time fn with the hook off, then on (before_each, if given, runs before every call in both)."""

    def timed() -> list[float]:
        fn = make_fn()
        if before_each is None:
            return per_call_ns(fn, calls, repeats)
        return per_call_ns(lambda: (before_each(), fn()), calls, repeats)

    sync_hook.uninstall()
    base = timed()
    sync_hook.install()
    sync_hook._wrap(CudaLike, "item", sync_hook.ITEM, sync_hook._on_cuda)
    hooked = timed()
    sync_hook.uninstall()
    b, h = statistics.median(base), statistics.median(hooked)
    return {"path": name, "calls": calls, "repeats": repeats, "without_ns": round(b, 1), "with_ns": round(h, 1),
            "overhead_ns": round(h - b, 1), "spread_with_ns": [round(min(hooked), 1), round(max(hooked), 1)]}


def nvtx_tool_attached() -> str:
    import os

    if not os.environ.get("NVTX_INJECTION64_PATH"):
        return "no (NVTX calls are no-ops)"
    try:
        domain = sync_hook.nvtx_domain("profkit.sync.probe")
    except ImportError:
        return "yes, but no nvtx package (torch.cuda.nvtx fallback)"
    return f"yes ({type(domain).__name__})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    cpu_scalar = torch.tensor(1.5)
    like = CudaLike()
    rows = [
        measure("cpu-tensor", lambda: cpu_scalar.item, args.calls, args.repeats),
        measure("cuda-path", lambda: like.item, args.calls, args.repeats),
        measure("new-site", lambda: like.item, max(args.calls // 20, 1000), args.repeats,
                before_each=sync_hook._site_cache.clear),
    ]
    if args.device == "cuda":
        gpu_scalar = torch.tensor(1.5, device="cuda")
        gpu_scalar.item()
        rows.append(measure("cuda-item", lambda: gpu_scalar.item, max(args.calls // 20, 1000), args.repeats))
    info = {"python": sys.version.split()[0], "torch": torch.__version__, "nvtx_tool_attached": nvtx_tool_attached(),
            "rows": rows}
    if args.json:
        print(json.dumps(info, indent=2))
        return
    print(f"python {info['python']}, torch {info['torch']}, NVTX tool attached: {info['nvtx_tool_attached']}")
    print(f"{'path':<12} {'without':>10} {'with':>10} {'overhead':>10}   (ns per call, median of {args.repeats})")
    for r in rows:
        print(f"{r['path']:<12} {r['without_ns']:>10.1f} {r['with_ns']:>10.1f} {r['overhead_ns']:>10.1f}")


if __name__ == "__main__":
    main()
