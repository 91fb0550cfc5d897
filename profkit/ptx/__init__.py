"""PTX and SASS of any kernel, with no GPU: the library behind ``profkit ptx``.

    from profkit.ptx import Cache, load_kernels, resolve_target, summarize

    code = load_kernels(resolve_target("gelu"), Cache())[0]
    summary = summarize(code)          # registers, spills, widths, verdict
    summary.to_json()["global_loads"]  # {"128": 2, "64": 0, "32": 0}

Modules: targets (what a target string names), compile + cache (Triton AOT,
nvcc, ptxas), kernel (PTX/SASS/resources of one kernel), parse, resources,
summary, diff, checks, html, render (terminal), inductor, gitrev, tools.
Importing this package does not import triton.
"""

from profkit.ptx.cache import Cache
from profkit.ptx.checks import CHECKS, CheckResult, run_checks
from profkit.ptx.diff import KernelDiff, diff_kernels
from profkit.ptx.kernel import KernelCode, load_kernels
from profkit.ptx.summary import KernelSummary, summarize
from profkit.ptx.targets import (
    SAMPLES,
    CompileParams,
    Target,
    parse_arch,
    resolve_target,
)

__all__ = [
    "CHECKS", "SAMPLES", "Cache", "CheckResult", "CompileParams", "KernelCode", "KernelDiff", "KernelSummary",
    "Target", "diff_kernels", "load_kernels", "parse_arch", "resolve_target", "run_checks", "summarize",
]
