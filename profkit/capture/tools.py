"""Find NVIDIA's command-line tools and ask them their versions.

Search order for a tool (the first hit wins):
  1. PATH;
  2. the usual install folders (newest version first): Nsight Systems under
     /opt/nvidia/nsight-systems*, the CUDA toolkit under /usr/local/cuda and
     /usr/local/cuda-*, Nsight Compute under /opt/nvidia/nsight-compute, and
     the copy of Nsight Systems that ships inside an Nsight Compute install
     (<ncu>/host/target-linux-x64/nsys);
  3. the tool's environment variable (PROFKIT_NSYS, PROFKIT_NCU, ...);
  4. for ptxas, cuobjdump and nvdisasm: the copies inside the triton wheel.

Nothing here raises for a missing tool except ``require_tool``; doctor wants
to list what is missing, trace wants to stop with a one-line fix.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from profkit.errors import ProfkitError

TOOLS = ("nsys", "ncu", "nvcc", "ptxas", "cuobjdump", "nvdisasm")

# Glob patterns per tool, relative to the filesystem root ("/" in production,
# a temporary folder in tests).  Within one pattern, higher versions win.
INSTALL_GLOBS: dict[str, tuple[str, ...]] = {
    "nsys": (
        "opt/nvidia/nsight-systems/*/bin/nsys",
        "opt/nvidia/nsight-systems-cli/*/bin/nsys",
        "opt/nvidia/nsight-systems/*/target-linux-x64/nsys",
        "opt/nvidia/nsight-systems-cli/*/target-linux-x64/nsys",
        "usr/local/cuda/bin/nsys",
        "usr/local/cuda-*/bin/nsys",
        "opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys",
        "usr/local/cuda/nsight-compute-*/host/target-linux-x64/nsys",
        "usr/local/cuda-*/nsight-compute-*/host/target-linux-x64/nsys",
    ),
    "ncu": (
        "usr/local/cuda/bin/ncu",
        "usr/local/cuda-*/bin/ncu",
        "opt/nvidia/nsight-compute/*/ncu",
        "usr/local/cuda/nsight-compute-*/ncu",
        "usr/local/cuda-*/nsight-compute-*/ncu",
    ),
}
for _name in ("nvcc", "ptxas", "cuobjdump", "nvdisasm"):
    INSTALL_GLOBS[_name] = (f"usr/local/cuda/bin/{_name}", f"usr/local/cuda-*/bin/{_name}")

ENV_VARS = {name: f"PROFKIT_{name.upper()}" for name in TOOLS}

# The triton wheel bundles these three (triton/backends/nvidia/bin/).
TRITON_BUNDLED = ("ptxas", "cuobjdump", "nvdisasm")

HOW_TO_GET = {
    "nsys": "install Nsight Systems (https://developer.nvidia.com/nsight-systems) or set PROFKIT_NSYS=/path/to/nsys",
    "ncu": "install Nsight Compute (it ships with the CUDA toolkit) or set PROFKIT_NCU=/path/to/ncu",
    "nvcc": "install the CUDA toolkit or put its bin/ on PATH (or set PROFKIT_NVCC)",
    "ptxas": "pip install triton (bundles ptxas), install the CUDA toolkit, or set PROFKIT_PTXAS",
    "cuobjdump": "pip install triton (bundles cuobjdump), install the CUDA toolkit, or set PROFKIT_CUOBJDUMP",
    "nvdisasm": "pip install triton (bundles nvdisasm), install the CUDA toolkit, or set PROFKIT_NVDISASM",
}


@dataclass(frozen=True)
class FoundTool:
    """Where a tool was found and how: source is path|install|env|triton."""

    name: str
    path: Path
    source: str


def _is_executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def _version_key(path: str) -> tuple:
    """Sort key that orders 2025.3.1 after 2025.10.0 correctly (like sort -V)."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", path))


def find_tool(
    name: str,
    *,
    env: Mapping[str, str] | None = None,
    root: Path = Path("/"),
    use_triton: bool = True,
) -> FoundTool | None:
    """Find ``name`` (nsys, ncu, nvcc, ptxas, cuobjdump, nvdisasm); None if absent.

    ``env`` (default os.environ) supplies PATH and PROFKIT_*; ``root`` is
    where the install folders are looked up (tests point it at a temp dir).
    """
    env = os.environ if env is None else env
    on_path = shutil.which(name, path=env.get("PATH", ""))
    if on_path:
        return FoundTool(name, Path(on_path), "path")
    for pattern in INSTALL_GLOBS.get(name, ()):
        hits = sorted(glob.glob(str(root / pattern)), key=_version_key, reverse=True)
        for hit in hits:
            if _is_executable(Path(hit)):
                return FoundTool(name, Path(hit), "install")
    override = env.get(ENV_VARS.get(name, ""), "")
    if override:
        path = Path(override).expanduser()
        if _is_executable(path):
            return FoundTool(name, path, "env")
    if use_triton and name in TRITON_BUNDLED:
        bundled = triton_bin_dir()
        if bundled is not None and _is_executable(bundled / name):
            return FoundTool(name, bundled / name, "triton")
    return None


def require_tool(name: str, *, env: Mapping[str, str] | None = None, root: Path = Path("/")) -> FoundTool:
    """Like find_tool, but a missing tool is a ProfkitError saying how to get it."""
    found = find_tool(name, env=env, root=root)
    if found is not None:
        return found
    env = os.environ if env is None else env
    override = env.get(ENV_VARS.get(name, ""), "")
    if override:
        raise ProfkitError(f"{ENV_VARS[name]}={override} is not an executable file",
                           hint=HOW_TO_GET.get(name))
    raise ProfkitError(f"{name} not found on PATH or in the usual install folders", hint=HOW_TO_GET.get(name))


def triton_bin_dir() -> Path | None:
    """triton/backends/nvidia/bin of the installed triton, without importing triton."""
    try:
        spec = importlib.util.find_spec("triton")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        candidate = Path(location) / "backends" / "nvidia" / "bin"
        if candidate.is_dir():
            return candidate
    return None


_VERSION_PATTERNS = (
    re.compile(r"Nsight Systems version (\S+)"),
    re.compile(r"^Version (\S+)", re.MULTILINE),  # ncu
    re.compile(r"release [\d.]+, V(\S+)"),  # nvcc, ptxas, cuobjdump, nvdisasm
)


def parse_version(output: str) -> str | None:
    """The version in a tool's ``--version`` output, or None."""
    for pattern in _VERSION_PATTERNS:
        match = pattern.search(output)
        if match:
            return match.group(1)
    return None


def tool_version(path: Path, timeout: float = 30.0) -> str | None:
    """Run ``path --version``; the version string, or None if it did not say."""
    try:
        proc = subprocess.run([str(path), "--version"], capture_output=True, text=True,
                              timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return parse_version(proc.stdout + "\n" + proc.stderr)


def nsys_inside_ncu(path: Path) -> bool:
    """True for the Nsight Systems copy inside an Nsight Compute install."""
    return path.parent.name == "target-linux-x64" and path.parent.parent.name == "host"


def nsys_layout_problem(path: Path) -> str | None:
    """Why an nsys binary cannot import its own captures, or None.

    nsys runs its QdstrmImporter from ../host-linux-x64; the copy inside
    Nsight Compute lacks that folder, so profiling works but the report is
    never written.  (The GPU kit's setup.sh assembles the layout in /tmp.)
    """
    real = path.resolve()
    if real.parent.name != "target-linux-x64":
        return None  # a bin/ wrapper or a distribution package: its own layout
    if (real.parent.parent / "host-linux-x64" / "QdstrmImporter").exists():
        return None
    where = "the Nsight Systems copy inside Nsight Compute" if nsys_inside_ncu(real) else str(real)
    return (f"{where} has no host-linux-x64/QdstrmImporter beside target-linux-x64, "
            "so nsys cannot turn its captures into reports")


def versions(found: Sequence[FoundTool]) -> dict[str, str | None]:
    """{tool name: version} for run.json."""
    return {tool.name: tool_version(tool.path) for tool in found}
