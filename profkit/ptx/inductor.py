"""The kernels torch.compile left on disk: an inductor cache or an output-code dump.

Inductor points Triton's cache at ``$TORCHINDUCTOR_CACHE_DIR/triton/<device>/``,
where every compiled kernel leaves ``<name>.ptx``, ``<name>.cubin`` and
``<name>.json`` (Triton's metadata: warps, shared memory, target) in a
directory named by its hash.  The generated ``.py`` modules (and
``output_code.py`` in a TORCH_COMPILE_DEBUG dump) hold the kernels' Triton
source in ``async_compile.triton('name', '''...''')`` calls; a kernel that
appears only there has not been compiled yet.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from profkit.errors import ProfkitError
from profkit.ptx.cache import Cache, make_key
from profkit.ptx.compile import Build, assemble_ptx, ptx_target_arch
from profkit.ptx.resources import parse_resource_usage, resource_usage_text
from profkit.ptx.tools import file_digest, find_tool


@dataclass(frozen=True)
class SourceOnlyKernel:
    """A kernel found in generated Python with no binary next to it."""

    name: str
    path: Path


@dataclass
class InductorScan:
    builds: list[Build]
    source_only: list[SourceOnlyKernel]
    python_files: int


def scan(directory: Path, cache: Cache, only: Collection[str] | None = None) -> InductorScan:
    """Every distinct compiled kernel under ``directory``, as Builds.

    ``only``: just the kernels of these names (Triton names a kernel's files after
    it), and no error when there are none: a trace's kernels looked up in a
    shared Triton cache that holds thousands of other programs' kernels."""
    if not directory.is_dir():
        raise ProfkitError(f"{directory} is not a directory", hint="pass TORCHINDUCTOR_CACHE_DIR or an output-code dump")
    builds: list[Build] = []
    seen: set[str] = set()
    files = bounded_files(directory, (".cubin", ".ptx", ".py"))
    cubins = {p for p in files if p.suffix == ".cubin"}
    binaries = sorted(cubins) + sorted(p for p in files if p.suffix == ".ptx" and p.with_suffix(".cubin") not in cubins)
    if only is not None:
        binaries = [p for p in binaries if p.stem in only]
    for path in binaries:
        build = _artifact_build(path, directory, cache)
        digest = file_digest(build.cubin)
        if digest not in seen:  # the same kernel is cached once per device / process
            seen.add(digest)
            builds.append(build)
    if only is not None:
        return InductorScan(builds, [], 0)
    compiled = {_stem_name(b) for b in builds}
    python_files = sorted(p for p in files if p.suffix == ".py")
    source_only = []
    for py in python_files:
        for name in inductor_kernel_names(py):
            if name not in compiled and name not in {k.name for k in source_only}:
                source_only.append(SourceOnlyKernel(name, py))
    if not builds and not source_only:
        raise ProfkitError(f"no kernels under {directory} (no .cubin, .ptx, or generated .py with Triton kernels)",
                           hint="run the program with TORCHINDUCTOR_CACHE_DIR set to this directory")
    return InductorScan(builds, source_only, len(python_files))


def bounded_files(directory: Path, suffixes: tuple[str, ...]) -> list[Path]:
    """The files under ``directory`` with these suffixes, walked without following links;
    a folder with more files than ``PROFKIT_MAX_CACHE_FILES`` is refused (a kernel cache
    holds thousands; "/" holds millions)."""
    import os

    from profkit.limits import VARIABLES, LimitExceeded, current

    limit = current().max_cache_files
    seen = 0
    found = []
    for folder, _, names in os.walk(directory, followlinks=False):
        seen += len(names)
        if seen > limit:
            raise LimitExceeded(f"{directory} holds more than {limit:,} files: not a kernel cache",
                                VARIABLES["max_cache_files"])
        found += [Path(folder, n) for n in names if n.endswith(suffixes)]
    return found


def _stem_name(build: Build) -> str:
    return build.kernel or ""


def _artifact_build(path: Path, root: Path, cache: Cache) -> Build:
    label = str(path.relative_to(root))
    ptx_path = path.with_suffix(".ptx")
    ptx = ptx_path.read_text() if ptx_path.exists() else None
    meta = _triton_metadata(path.with_suffix(".json"))
    if path.suffix == ".cubin":
        cubin = path.read_bytes()
        if not cubin.startswith(b"\x7fELF"):
            raise ProfkitError(f"{path} is not a cubin (no ELF header)")
        arch = (f"sm_{meta['target']['arch']}" if meta.get("target") else None) or (ptx_target_arch(ptx) if ptx else "")
        if ptx and ptx_target_arch(ptx):
            arch = ptx_target_arch(ptx)
        log = _spill_log(ptx, arch, cubin, cache, label) if ptx else None
    else:
        arch = ptx_target_arch(ptx or "") or ""
        cubin, log = _assemble_cached(ptx or "", arch, cache, label)
    name = meta.get("name") or path.stem
    shared = {name: int(meta["shared"])} if "shared" in meta else {}
    params = {k: meta[k] for k in ("num_warps", "num_stages") if k in meta}
    compiler = f"triton {meta['triton_version']}" if "triton_version" in meta else "inductor cache"
    return Build(label, "inductor", arch, ptx, cubin, log, compiler, kernel=name,
                 dynamic_shared_bytes=shared, params=params)


def _triton_metadata(path: Path) -> dict:
    if not path.exists():
        return {}
    try:
        return json.loads(path.read_text())
    except ValueError:
        raise ProfkitError(f"{path} is not Triton metadata (invalid JSON)") from None


def _spill_log(ptx: str, arch: str, cubin: bytes, cache: Cache, label: str) -> str | None:
    """ptxas -v for spill counts, but only when the cubin has a stack frame to spill into."""
    resources = parse_resource_usage(resource_usage_text(cubin, cache))
    if all(r.stack_bytes == 0 and r.local_bytes == 0 for r in resources.values()):
        return None
    return _assemble_cached(ptx, arch, cache, label)[1]


def _assemble_cached(ptx: str, arch: str, cache: Cache, label: str) -> tuple[bytes, str]:
    ptxas = find_tool("ptxas")
    key = make_key({"kind": "ptx", "ptx": file_digest(ptx.encode()), "arch": arch, "ptxas": ptxas.identity})
    hit = cache.get("ptx", key)
    if hit is not None and "kernel.cubin" in hit[1]:
        return hit[1]["kernel.cubin"], hit[1].get("ptxas.log", b"").decode()
    cubin, log = assemble_ptx(ptx, arch, label)
    cache.put("ptx", key, {"arch": arch, "compiler": f"ptxas {ptxas.release}"},
              {"kernel.cubin": cubin, "ptxas.log": log.encode()})
    return cubin, log


_TRITON_CALL = re.compile(r"async_compile\.triton\(")


def inductor_kernel_names(path: Path) -> list[str]:
    """Kernel names in ``async_compile.triton('name', '''source''')`` calls of a generated module."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError):
        return []
    if not _TRITON_CALL.search(text):
        return []
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []
    names = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "triton"
                and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            names.append(node.args[0].value)
    return names
