"""Benchmarking helpers shared by the samples: warm-up, synchronize, trials,
median and spread.  Each variant runs inside an NVTX range named after it so
that profkit can attribute GPU time to it."""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

CSRC = Path(__file__).parent / "csrc"


NVTX_DOMAIN = "samples"


def _nvtx_domain(name: str):
    """The nvtx package's domain; None without the package.

    nvtx >= 0.2.11 returns a do-nothing DummyDomain when the attached tool
    answers nvtxDomainIsEnabled() with 0, which Nsight Systems 2023.4 does
    while recording domain ranges fine: then build the real Domain past the
    check (the same workaround as profkit/capture/sync_hook.py).
    """
    try:
        import nvtx
    except ImportError:
        return None
    domain = nvtx.get_domain(name)
    if type(domain).__name__ == "DummyDomain" and os.environ.get("NVTX_INJECTION64_PATH"):
        from nvtx._lib import lib

        real = object.__new__(lib.Domain)
        real.handle = lib.DomainHandle(name)
        real.__init__(name)
        return real
    return domain


_domain = None


@contextlib.contextmanager
def nvtx_range(name: str):
    """An NVTX push/pop range in the "samples" domain (torch's default-domain
    ranges when the nvtx package is missing)."""
    global _domain
    if _domain is None:
        _domain = _nvtx_domain(NVTX_DOMAIN) or False
    if _domain:
        _domain.push_range(_domain.get_event_attributes(message=name))
        try:
            yield
        finally:
            _domain.pop_range()
        return
    torch.cuda.nvtx.range_push(name)
    try:
        yield
    finally:
        torch.cuda.nvtx.range_pop()


@dataclass
class Timing:
    name: str
    median_ms: float
    min_ms: float
    max_ms: float
    trials: int

    def __str__(self) -> str:
        return (f"{self.name:<28} median {self.median_ms:8.3f} ms  "
                f"[{self.min_ms:.3f} .. {self.max_ms:.3f}]  n={self.trials}")


def benchmark(name: str, fn: Callable[[], object], warmup: int = 3, trials: int = 10) -> Timing:
    """Time fn on the GPU: warm-up (compiles, caches), then `trials` timed calls,
    each bracketed by torch.cuda.synchronize so the wall time covers the kernels.

    NVTX: "<name>/warmup" around the warm-up, "<name>" around the trials, and
    "<name>/call" around each trial, so a trace gives the number of calls and
    the time of each (scripts/samples_table.py reads them)."""
    with nvtx_range(f"{name}/warmup"):
        for _ in range(warmup):
            fn()
        torch.cuda.synchronize()
    times = []
    with nvtx_range(name):
        for _ in range(trials):
            with nvtx_range(f"{name}/call"):
                start = time.perf_counter()
                fn()
                torch.cuda.synchronize()
                times.append((time.perf_counter() - start) * 1e3)
    return Timing(name, statistics.median(times), min(times), max(times), trials)


def check_close(name: str, got: torch.Tensor, want: torch.Tensor, atol: float = 1e-5, rtol: float = 1e-4) -> None:
    """Fail loudly if a variant is numerically wrong."""
    if not torch.allclose(got, want, atol=atol, rtol=rtol):
        err = (got - want).abs().max().item()
        raise SystemExit(f"{name}: wrong result (max abs error {err:.3g})")


def load_cuda_extension(name: str, source_file: str, cpp_decls: str, functions: list[str], wrappers: str):
    """Build a CUDA C++ kernel file plus its torch wrappers with load_inline."""
    from torch.utils.cpp_extension import load_inline

    cuda_src = (CSRC / source_file).read_text() + "\n#include <torch/extension.h>\n" + wrappers
    return load_inline(
        name=name,
        cpp_sources=cpp_decls,
        cuda_sources=cuda_src,
        functions=functions,
        extra_cuda_cflags=["-O3", "-lineinfo"],
        verbose=False,
    )


def base_parser(description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--variants", default="all", help="comma-separated variant names, or 'all'")
    return parser


def selected(args: argparse.Namespace, names: list[str]) -> list[str]:
    if args.variants == "all":
        return names
    wanted = args.variants.split(",")
    unknown = set(wanted) - set(names)
    if unknown:
        raise SystemExit(f"unknown variants {sorted(unknown)}; choose from {names}")
    return [n for n in names if n in wanted]
