"""`profkit doctor`: what profkit can use on this machine, and how to fix what is missing.

Checks, in order: the NVIDIA tools (with versions), the GPU / driver / CUDA
version, the Python packages (torch, triton, nvtx and profkit's own
dependencies), and the two permissions that decide what can be profiled
(perf_event_paranoid for CPU sampling, the driver's admin-only switch for
GPU performance counters).

Every check returns a plain ``Check``; nothing here prints.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from profkit.capture.gpu import GpuStatus, detect_gpus
from profkit.capture.tools import (
    HOW_TO_GET,
    TOOLS,
    find_tool,
    nsys_layout_problem,
    tool_version,
)

OK, MISSING, WARN, INFO = "ok", "missing", "warn", "info"

CAP_SYS_ADMIN = 21


@dataclass(frozen=True)
class Check:
    group: str  # tools | gpu | python | permissions
    name: str
    status: str  # ok | missing | warn | info
    detail: str
    fix: str = ""


def tool_checks(env: Mapping[str, str] | None = None, root: Path = Path("/")) -> list[Check]:
    found = {name: find_tool(name, env=env, root=root) for name in TOOLS}
    with ThreadPoolExecutor(max_workers=len(TOOLS)) as pool:
        versions = dict(zip(TOOLS, pool.map(lambda n: tool_version(found[n].path) if found[n] else None, TOOLS)))
    checks = []
    for name in TOOLS:
        tool = found[name]
        if tool is None:
            checks.append(Check("tools", name, MISSING, "not found", HOW_TO_GET[name]))
            continue
        where = f"{tool.path}" + ("" if tool.source == "path" else f" (from {tool.source})")
        version = versions[name]
        if version is None:
            checks.append(Check("tools", name, WARN, f"{where}: `--version` gave no version",
                                f"check that {tool.path} runs on this machine"))
            continue
        layout = nsys_layout_problem(tool.path) if name == "nsys" else None
        if layout:
            checks.append(Check("tools", name, WARN, f"{version} at {where}; {layout}",
                                "install Nsight Systems, or on the GPU host `source .gpu-kit/setup.sh`"))
            continue
        checks.append(Check("tools", name, OK, f"{version} at {where}"))
    return checks


def gpu_checks(status: GpuStatus) -> list[Check]:
    problem = status.problem()
    if problem:
        fix = "install the NVIDIA driver" if status.smi is None else "check the driver (nvidia-smi)"
        if not status.devices:
            fix = ("run on a machine with an NVIDIA GPU; in a container, start it with the GPUs "
                   "(docker run --gpus all)")
        return [Check("gpu", "GPU", MISSING, problem, fix)]
    if not status.gpus:  # device nodes but no nvidia-smi to name them
        return [Check("gpu", "GPU", WARN, f"{len(status.devices)} device(s) {', '.join(status.devices)}; "
                      "nvidia-smi not found, so no names or versions", "put nvidia-smi on PATH")]
    checks = []
    for i, gpu in enumerate(status.gpus):
        parts = [gpu.get("name", "?")]
        if gpu.get("compute_cap"):
            parts.append(f"compute capability {gpu['compute_cap']}")
        if gpu.get("memory_total_mib"):
            parts.append(f"{gpu['memory_total_mib']} MiB")
        checks.append(Check("gpu", f"GPU {i}", OK, ", ".join(parts)))
    drivers = sorted({g.get("driver_version", "?") for g in status.gpus})
    checks.append(Check("gpu", "driver", OK, ", ".join(drivers)))
    if status.cuda_version:
        checks.append(Check("gpu", "CUDA (driver)", OK, status.cuda_version))
    else:
        checks.append(Check("gpu", "CUDA (driver)", WARN, "nvidia-smi did not say", ""))
    return checks


# package -> (import name, how to get it, what profkit needs it for)
PACKAGES: dict[str, tuple[str, str, str]] = {
    "torch": ("torch", "pip install torch", "the sample kernels and the sync-site hook"),
    "triton": ("triton", "pip install triton", "Triton kernels, `profkit ptx`, bundled ptxas"),
    "nvtx": ("nvtx", "pip install nvtx", "NVTX ranges in the samples and the sync-site hook"),
    "click": ("click", "pip install click", "the command line"),
    "rich": ("rich", "pip install rich", "terminal tables and progress"),
    "numpy": ("numpy", "pip install numpy", "summaries"),
    "pandas": ("pandas", "pip install pandas", "summaries and reports"),
    "jinja2": ("jinja2", "pip install jinja2", "the HTML report"),
    "matplotlib": ("matplotlib", "pip install matplotlib", "report figures"),
    "sqlite-utils": ("sqlite_utils", "pip install sqlite-utils", "reading exports"),
}


def package_checks(importer: Callable[[str], object] = importlib.import_module) -> list[Check]:
    checks = []
    for dist, (module, how, why) in PACKAGES.items():
        try:
            mod = importer(module)
        except ImportError as exc:
            checks.append(Check("python", dist, MISSING, f"not importable ({_first_line(exc)}); needed for {why}",
                                how))
            continue
        except Exception as exc:  # noqa: BLE001 - a broken install (bad CUDA libs ...) is a finding, not a crash
            checks.append(Check("python", dist, WARN, f"import failed: {type(exc).__name__}: {_first_line(exc)}",
                                f"reinstall: {how}"))
            continue
        # distribution metadata first: click 8.2+ deprecates __version__
        version = _dist_version(dist) or getattr(mod, "__version__", None)
        detail = str(version or "version unknown")
        if dist == "torch":
            detail += _torch_detail(mod)
        checks.append(Check("python", dist, OK, detail))
    return checks


def _torch_detail(torch: object) -> str:
    cuda = getattr(getattr(torch, "version", None), "cuda", None)
    if not cuda:
        return " (CPU-only build)"
    try:
        available = torch.cuda.is_available()  # type: ignore[attr-defined]
    except Exception as exc:  # noqa: BLE001 - reported, see package_checks
        return f" (CUDA {cuda}; torch.cuda.is_available() failed: {_first_line(exc)})"
    return f" (CUDA {cuda}; GPU {'visible' if available else 'NOT visible'})"


def _dist_version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def perf_event_check(proc: Path = Path("/proc")) -> Check:
    path = proc / "sys/kernel/perf_event_paranoid"
    try:
        value = int(path.read_text().strip())
    except (OSError, ValueError):
        return Check("permissions", "perf_event_paranoid", INFO, f"cannot read {path}", "")
    if value <= 2:
        return Check("permissions", "perf_event_paranoid", OK, f"{value} (nsys may sample CPU)")
    return Check("permissions", "perf_event_paranoid", WARN,
                 f"{value}: nsys cannot sample CPU call stacks (profkit trace runs with --sample=none, so "
                 "tracing still works)", "sudo sysctl -w kernel.perf_event_paranoid=2")


def gpu_counter_check(proc: Path = Path("/proc"), euid: int | None = None) -> Check:
    """May this user read GPU performance counters (what ncu needs)?"""
    name = "GPU performance counters"
    params = proc / "driver/nvidia/params"
    try:
        text = params.read_text()
    except OSError:
        return Check("permissions", name, INFO, f"cannot read {params} (no NVIDIA driver loaded?)", "")
    restricted = None
    # The module option is NVreg_RestrictProfilingToAdminUsers; drivers publish
    # it in params as RmProfilingAdminOnly (older ones under the option's name).
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("RmProfilingAdminOnly", "RestrictProfilingToAdminUsers",
                           "NVreg_RestrictProfilingToAdminUsers"):
            restricted = value.strip() not in ("0", "")
    if restricted is None:
        return Check("permissions", name, INFO, f"{params} does not say whether profiling is admin-only", "")
    if not restricted:
        return Check("permissions", name, OK, "open to all users (RmProfilingAdminOnly: 0)")
    euid = os.geteuid() if euid is None else euid
    if euid == 0 or _has_capability(CAP_SYS_ADMIN, proc):
        return Check("permissions", name, OK, "restricted to admins, and this process is one")
    return Check("permissions", name, MISSING,
                 "restricted to admin users (RmProfilingAdminOnly: 1): ncu fails with ERR_NVGPUCTRPERM",
                 "run ncu as root, or add `options nvidia NVreg_RestrictProfilingToAdminUsers=0` to "
                 "/etc/modprobe.d/ and reload the driver")


def _has_capability(bit: int, proc: Path) -> bool:
    try:
        for line in (proc / "self/status").read_text().splitlines():
            if line.startswith("CapEff:"):
                return bool(int(line.split()[1], 16) >> bit & 1)
    except (OSError, ValueError, IndexError):
        pass
    return False


def run_checks(env: Mapping[str, str] | None = None, root: Path = Path("/"), proc: Path = Path("/proc"),
               gpu_status: GpuStatus | None = None) -> list[Check]:
    """Every check, in display order."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        tools = pool.submit(tool_checks, env, root)
        gpu = pool.submit(detect_gpus, root / "dev", env) if gpu_status is None else None
        status = gpu_status if gpu is None else gpu.result()
        tool_results = tools.result()
    return [*tool_results, *gpu_checks(status), *package_checks(), perf_event_check(proc),
            gpu_counter_check(proc)]
