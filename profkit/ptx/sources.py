"""Reading kernel sources without running them: a Triton kernel's parameters,
and the local files a source depends on (for cache keys)."""

from __future__ import annotations

import ast
import hashlib
import re
from dataclasses import dataclass
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from profkit.errors import ProfkitError

NO_DEFAULT = object()


@dataclass(frozen=True)
class KernelParam:
    name: str
    constexpr: bool
    default: Any = NO_DEFAULT


def constexprs_named(name: str, declared: Sequence[str]) -> list[str]:
    """The declared constexprs a ``--constexpr NAME`` stands for: the one of that name, else
    every one it is a prefix of (BLOCK -> BLOCK_SIZE).  One is a match; several are ambiguous."""
    if name in declared:
        return [name]
    return [d for d in declared if d.startswith(name)]


def _is_jit_decorator(node: ast.expr) -> bool:
    """@triton.jit, @jit, @triton.jit(...), @triton.autotune(...), @triton.heuristics(...)."""
    if isinstance(node, ast.Call):
        node = node.func
    name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""
    return name in ("jit", "autotune", "heuristics")


def triton_kernels_in(path: Path) -> dict[str, list[KernelParam]]:
    """Module-level @triton.jit functions of a file and their parameters."""
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except SyntaxError as exc:
        raise ProfkitError(f"{path.name} is not valid Python: line {exc.lineno}: {exc.msg}") from None
    kernels = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and any(_is_jit_decorator(d) for d in node.decorator_list):
            kernels[node.name] = _params_of(node)
    return kernels


def kernel_def_line(path: Path, kernel: str) -> int:
    """The line of ``def kernel`` (Triton numbers error lines from it)."""
    for node in ast.parse(path.read_bytes()).body:
        if isinstance(node, ast.FunctionDef) and node.name == kernel:
            return node.lineno
    return 1


def _params_of(node: ast.FunctionDef) -> list[KernelParam]:
    args = node.args.posonlyargs + node.args.args
    defaults = [NO_DEFAULT] * (len(args) - len(node.args.defaults)) + list(node.args.defaults)
    params = []
    for arg, default in zip(args, defaults):
        annotation = ast.unparse(arg.annotation) if arg.annotation is not None else ""
        value = NO_DEFAULT
        if default is not NO_DEFAULT:
            try:
                value = ast.literal_eval(default)
            except ValueError:
                value = ast.unparse(default)
        params.append(KernelParam(arg.arg, annotation.strip("'\"").endswith("constexpr"), value))
    return params


def pick_kernel(path: Path, kernel: str | None, kernels: dict[str, list[KernelParam]]) -> str:
    """The kernel to compile: the one named, or the file's only public one."""
    if kernel is not None:
        if kernel not in kernels:
            listed = ", ".join(kernels) or "none"
            raise ProfkitError(f"{path.name} has no Triton kernel {kernel!r}", hint=f"its @triton.jit functions: {listed}")
        return kernel
    public = [name for name in kernels if not name.startswith("_")]
    if len(public) == 1:
        return public[0]
    if not public:
        raise ProfkitError(f"{path.name} defines no @triton.jit kernel")
    raise ProfkitError(f"{path.name} has several Triton kernels ({', '.join(public)})",
                       hint=f"pick one: {path.name}::{public[0]} or --kernel NAME")


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def python_dependencies(path: Path, search_dirs: tuple[Path, ...] = ()) -> dict[str, str]:
    """sha256 of the file and of the local modules it imports, transitively.

    "Local" means found next to the file, in ``search_dirs`` or up to three
    directories above it; installed packages are covered by their version.
    """
    roots = [path.parent, *search_dirs, *list(path.parent.parents)[:3]]
    seen: dict[str, str] = {}
    pending = [path.resolve()]
    while pending:
        current = pending.pop()
        if str(current) in seen:
            continue
        seen[str(current)] = digest(current)
        try:
            tree = ast.parse(current.read_bytes())
        except SyntaxError:
            continue
        for module, level in _imported_modules(tree):
            bases = [current.parent] if level else roots
            for base in bases:
                if level > 1:
                    base = base.parents[level - 2]
                found = module_file(base, module)
                if found is not None and "site-packages" not in found.parts:
                    pending.append(found.resolve())
                    break
    return seen


def imported_names(path: Path) -> set[str]:
    """Dotted names of the absolute imports in a file."""
    try:
        tree = ast.parse(path.read_bytes())
    except SyntaxError:
        return set()
    return {name for name, level in _imported_modules(tree) if level == 0 and name}


def _imported_modules(tree: ast.Module) -> list[tuple[str, int]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, 0) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            found.append((module, node.level))
            # "from pkg import mod" may import a submodule
            found += [(f"{module}.{alias.name}" if module else alias.name, node.level) for alias in node.names]
    return found


def module_file(base: Path, dotted: str) -> Path | None:
    if not dotted:
        return None
    parts = dotted.split(".")
    for candidate in (base.joinpath(*parts).with_suffix(".py"), base.joinpath(*parts, "__init__.py")):
        if candidate.is_file():
            return candidate
    return None


_INCLUDE = re.compile(rb'^\s*#\s*include\s*"([^"]+)"', re.MULTILINE)


def cuda_dependencies(path: Path, include_dirs: tuple[Path, ...] = ()) -> dict[str, str]:
    """sha256 of a .cu file and the ``#include "..."`` files it pulls in, transitively."""
    seen: dict[str, str] = {}
    pending = [path.resolve()]
    while pending:
        current = pending.pop()
        if str(current) in seen:
            continue
        data = current.read_bytes()
        seen[str(current)] = hashlib.sha256(data).hexdigest()
        for name in _INCLUDE.findall(data):
            for base in (current.parent, *include_dirs):
                candidate = base / name.decode(errors="replace")
                if candidate.is_file():
                    pending.append(candidate.resolve())
                    break
    return seen
