"""Finding nvcc, ptxas, cuobjdump and nvdisasm without a CUDA toolkit.

Candidates, in order: $PROFKIT_<TOOL> (an explicit path), $CUDA_HOME/bin,
$CUDA_PATH/bin, PATH, /usr/local/cuda*/bin, the copies inside the triton
wheel (triton/backends/nvidia/bin) and the nvidia-cuda-* pip packages
(nvidia/cu13/bin, nvidia/cuda_nvdisasm/bin...).  Where several exist, the
newest release wins: a newer disassembler reads every older architecture,
and only a recent ptxas accepts the PTX versions Triton emits.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from profkit.errors import ProfkitError

TOOL_NAMES = ("nvcc", "ptxas", "cuobjdump", "nvdisasm")


@dataclass(frozen=True)
class Tool:
    name: str
    path: Path
    version: tuple[int, int]  # CUDA release, e.g. (13, 1)
    version_text: str

    @property
    def release(self) -> str:
        return f"{self.version[0]}.{self.version[1]}"

    @property
    def identity(self) -> str:
        """Changes whenever the binary does (for cache keys)."""
        st = self.path.stat()
        return f"{self.name} {self.release} {self.path} {st.st_size} {int(st.st_mtime)}"


def _toolkit_dirs() -> list[Path]:
    dirs = []
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            dirs.append(Path(os.environ[var]) / "bin")
    dirs.append(Path("/usr/local/cuda/bin"))
    versioned = sorted(Path("/usr/local").glob("cuda-*/bin"), key=lambda p: _version_key(p.parent.name), reverse=True)
    return dirs + versioned


def _version_key(text: str) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", text))


def _package_dirs(package: str) -> list[Path]:
    """Directories of an installed package, found without importing it."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return []
    if spec is None or not spec.submodule_search_locations:
        return []
    return [Path(p) for p in spec.submodule_search_locations]


def _wheel_dirs(name: str) -> list[Path]:
    dirs = [d / "backends" / "nvidia" / "bin" for d in _package_dirs("triton")]
    for root in _package_dirs("nvidia"):
        # nvidia-cuda-nvdisasm 13.x installs nvidia/cu13/bin; 12.x nvidia/cuda_nvdisasm/bin
        dirs += sorted(root.glob("cu*/bin"), reverse=True)
        dirs += sorted(root.glob(f"cuda_{name}/bin"))
    return dirs


def candidates(name: str) -> list[Path]:
    """Every copy of tool ``name`` we can find."""
    found: list[Path] = []
    dirs = _toolkit_dirs()
    on_path = shutil.which(name)
    if on_path:
        dirs.insert(0, Path(on_path).parent)
    dirs += _wheel_dirs(name)
    names = [name]
    if name == "ptxas":
        names.append("ptxas-blackwell")  # the triton wheel's CUDA 13 ptxas
    for d in dirs:
        for n in names:
            path = d / n
            if path.is_file() and os.access(path, os.X_OK) and path not in found:
                found.append(path)
    return found


@functools.cache
def _probe(path: Path, name: str) -> Tool | None:
    try:
        out = subprocess.run([str(path), "--version"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = out.stdout + out.stderr
    m = re.search(r"release (\d+)\.(\d+)", text)
    if out.returncode != 0 or not m:
        return None
    return Tool(name, path, (int(m.group(1)), int(m.group(2))), text.strip())


def find_tool(name: str, required: bool = True) -> Tool | None:
    """The newest working copy of ``name``; an explicit $PROFKIT_<NAME> always wins."""
    override = os.environ.get(f"PROFKIT_{name.upper()}")
    if override:
        tool = _probe(Path(override), name)
        if tool is None:
            raise ProfkitError(f"PROFKIT_{name.upper()}={override} is not a working {name}")
        return tool
    tools = [t for t in (_probe(p, name) for p in candidates(name)) if t is not None]
    if tools:
        return max(tools, key=lambda t: t.version)
    if required:
        raise ProfkitError(f"{name} not found", hint=_install_hint(name))
    return None


def _install_hint(name: str) -> str:
    if name == "nvcc":
        return "install the CUDA toolkit or set CUDA_HOME; Triton kernels and .ptx/.cubin files do not need it"
    package = {"cuobjdump": "nvidia-cuda-cuobjdump", "nvdisasm": "nvidia-cuda-nvdisasm", "ptxas": "triton"}[name]
    return f"pip install {package} (or install the CUDA toolkit), or set PROFKIT_{name.upper()}"


def run_tool(tool: Tool, args: list[str], what: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run a tool; a failure becomes a one-line ProfkitError carrying its first error line."""
    try:
        result = subprocess.run([str(tool.path), *args], capture_output=True, cwd=cwd, timeout=600, check=False)
    except subprocess.TimeoutExpired:
        raise ProfkitError(f"{tool.name} timed out on {what}") from None
    if result.returncode != 0:
        message = first_error_line(result.stderr.decode(errors="replace") + result.stdout.decode(errors="replace"))
        raise ProfkitError(f"{tool.name} failed on {what}: {message}")
    return result


def first_error_line(text: str) -> str:
    """The compiler's own error line ("x.cu(3): error: ...") out of its output."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in lines:
        if re.search(r"\berror\b", line, re.IGNORECASE):
            return line
    return lines[0] if lines else "no message"


def file_digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
