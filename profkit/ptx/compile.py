"""Producing PTX, a cubin and ptxas's ``-v`` log for a target, with no GPU.

- Triton: ``triton.compile`` on an ``ASTSource`` for a ``GPUTarget('cuda',
  capability, 32)``, the ahead-of-time path of triton/tools/compile.py.
  Triton's own ptxas runs with ``-v``; we capture its log for spill counts.
- CUDA C++: one ``nvcc -cubin -Xptxas -v --keep`` run, which leaves the PTX
  that was assembled next to the cubin.
- PTX files: ``ptxas -v``.  Cubins need no compile.

Every result goes through the cache (cache.py) keyed by the source files,
parameters, architecture and compiler version.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import io
import os
import re
import sys
import tempfile
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from profkit.errors import ProfkitError
from profkit.ptx import sources
from profkit.ptx.cache import Cache, make_key
from profkit.ptx.targets import Arch, ArgType, Target
from profkit.ptx.tools import find_tool, run_tool


@dataclass
class Build:
    """What a compile leaves behind, for every kernel of one target."""

    label: str
    kind: str
    arch: str  # what the machine code targets: the PTX .target, or the cubin's
    ptx: str | None
    cubin: bytes | None
    ptxas_log: str | None
    compiler: str
    kernel: str | None = None  # the kernel asked for (a symbol or base name), None: the only one
    dynamic_shared_bytes: dict[str, int] = field(default_factory=dict)
    params: dict[str, Any] = field(default_factory=dict)  # resolved parameters, for display
    cached: bool = False
    seconds: float = 0.0


def build(target: Target, cache: Cache) -> Build:
    """Compile (or read) a target, through the cache."""
    builders = {"triton": _build_triton, "cuda": _build_cuda, "ptx": _build_ptx, "cubin": _build_cubin}
    started = time.perf_counter()
    result = builders[target.kind](target, cache)
    result.seconds = time.perf_counter() - started
    return result


def _from_cache(cache: Cache, namespace: str, key: str, target: Target) -> Build | None:
    hit = cache.get(namespace, key)
    if hit is None:
        return None
    manifest, files = hit
    return Build(
        label=target.label, kind=target.kind, arch=manifest["arch"],
        ptx=files["kernel.ptx"].decode() if "kernel.ptx" in files else None,
        cubin=files.get("kernel.cubin"),
        ptxas_log=files["ptxas.log"].decode() if "ptxas.log" in files else None,
        compiler=manifest["compiler"], kernel=manifest.get("kernel"),
        dynamic_shared_bytes=manifest.get("dynamic_shared_bytes", {}),
        params=manifest.get("params", {}), cached=True,
    )


def _store(cache: Cache, namespace: str, key: str, result: Build) -> Build:
    files = {"kernel.cubin": result.cubin} if result.cubin is not None else {}
    if result.ptx is not None:
        files["kernel.ptx"] = result.ptx.encode()
    if result.ptxas_log is not None:
        files["ptxas.log"] = result.ptxas_log.encode()
    manifest = {"arch": result.arch, "compiler": result.compiler, "kernel": result.kernel,
                "dynamic_shared_bytes": result.dynamic_shared_bytes, "params": result.params,
                "label": result.label}
    cache.put(namespace, key, manifest, files)
    return result


# --------------------------------------------------------------------------- Triton

@dataclass(frozen=True)
class TritonSpec:
    """A Triton kernel's compile request with every name resolved."""

    kernel: str
    signature: dict[str, str]  # every parameter -> type, or "constexpr"
    constexprs: dict[str, Any]
    divisible_by_16: tuple[int, ...]  # parameter indices
    num_warps: int
    num_stages: int | None


def triton_spec(target: Target) -> TritonSpec:
    """Check the signature and constexprs against the kernel's parameters, read from its source."""
    kernels = sources.triton_kernels_in(target.path)
    kernel = sources.pick_kernel(target.path, target.kernel, kernels)
    params = kernels[kernel]
    runtime = [p for p in params if not p.constexpr]
    declared = [p.name for p in params if p.constexpr]
    signature_types = target.params.signature
    if signature_types is None:
        names = ", ".join(p.name for p in runtime)
        raise ProfkitError(f"{kernel} needs --signature with one type per argument ({names})",
                           hint='e.g. --signature "*fp32:16,*fp32:16,i32:16"')
    if len(signature_types) != len(runtime):
        names = ", ".join(p.name for p in runtime)
        raise ProfkitError(f"bad signature: {kernel} takes {len(runtime)} runtime arguments ({names}), "
                           f"the signature has {len(signature_types)}")
    constexprs: dict[str, Any] = {p.name: p.default for p in params
                                  if p.constexpr and p.default is not sources.NO_DEFAULT}
    for name, value in target.params.constexprs:
        constexprs[_constexpr_name(kernel, name, declared)] = value
    missing = [name for name in declared if name not in constexprs]
    if missing:
        raise ProfkitError(f"{kernel} needs a value for constexpr {', '.join(missing)}",
                           hint=f"--constexpr {missing[0]}=...")
    types: dict[str, ArgType] = dict(zip((p.name for p in runtime), signature_types))
    signature: dict[str, str] = {}
    divisible = []
    for index, param in enumerate(params):
        if param.constexpr:
            signature[param.name] = "constexpr"
            continue
        arg = types[param.name]
        if arg.hint == 1:  # specialized to the value 1, as Triton's launcher does
            constexprs[param.name] = 1
            signature[param.name] = "constexpr"
            continue
        signature[param.name] = arg.type
        if arg.hint == 16:
            divisible.append(index)
    return TritonSpec(kernel, signature, {k: constexprs[k] for k in sorted(constexprs)}, tuple(divisible),
                      target.params.num_warps or 4, target.params.num_stages)


def _constexpr_name(kernel: str, name: str, declared: list[str]) -> str:
    """Exact name, or the one constexpr it is a prefix of (BLOCK -> BLOCK_SIZE)."""
    matches = sources.constexprs_named(name, declared)
    if len(matches) == 1:
        return matches[0]
    known = ", ".join(declared) or "none"
    if matches:
        raise ProfkitError(f"--constexpr {name} is ambiguous for {kernel}", hint=f"one of {', '.join(matches)}")
    raise ProfkitError(f"{kernel} has no constexpr {name!r}", hint=f"its constexprs: {known}")


def triton_version() -> str:
    try:
        return importlib.metadata.version("triton")
    except importlib.metadata.PackageNotFoundError:
        raise ProfkitError("Triton kernels need triton", hint="pip install 'profkit[ptx]'") from None


# Environment variables that change Triton's code generation (cache key input).
_CODEGEN_ENV_PREFIXES = ("TRITON_", "PTXAS_", "DISABLE_PTXAS", "LLVM_", "MLIR_", "NVPTX_", "USE_IR_LOC", "DISABLE_LLVM")
_NOT_CODEGEN_ENV = ("TRITON_CACHE_DIR", "TRITON_HOME", "TRITON_DUMP_DIR", "TRITON_OVERRIDE_DIR", "TRITON_PRINT_AUTOTUNING")


def _triton_ptxas_identity() -> list[str]:
    idents = []
    for directory in sources_triton_bin():
        for name in ("ptxas", "ptxas-blackwell"):
            path = directory / name
            if path.exists():
                st = path.stat()
                idents.append(f"{path} {st.st_size} {int(st.st_mtime)}")
    return idents


def sources_triton_bin() -> list[Path]:
    spec = importlib.util.find_spec("triton")
    if spec is None or not spec.submodule_search_locations:
        return []
    return [Path(p) / "backends" / "nvidia" / "bin" for p in spec.submodule_search_locations]


def _build_triton(target: Target, cache: Cache) -> Build:
    spec = triton_spec(target)
    arch = target.params.resolved_arch()
    version = triton_version()
    key = make_key({
        "kind": "triton", "sources": sources.python_dependencies(target.path, target.search_dirs),
        "kernel": spec.kernel, "signature": spec.signature, "constexprs": repr(spec.constexprs),
        "divisible_by_16": spec.divisible_by_16, "num_warps": spec.num_warps, "num_stages": spec.num_stages,
        "capability": arch.capability, "triton": version, "ptxas": _triton_ptxas_identity(),
        "env": {k: v for k, v in os.environ.items()
                if k.startswith(_CODEGEN_ENV_PREFIXES) and k not in _NOT_CODEGEN_ENV},
    })
    hit = _from_cache(cache, "triton", key, target)
    if hit is not None:
        return hit
    ptx, cubin, log, shared = _compile_triton(target, spec, arch)
    m = re.search(r"^\s*\.target\s+(\S+?)\s*(?:,|$)", ptx, re.MULTILINE)
    params = {"signature": ", ".join(f"{n}: {t}{':16' if i in spec.divisible_by_16 else ''}"
                                     for i, (n, t) in enumerate(spec.signature.items()) if t != "constexpr"),
              "constexprs": ", ".join(f"{k}={v}" for k, v in spec.constexprs.items()),
              "num_warps": spec.num_warps}
    if spec.num_stages is not None:
        params["num_stages"] = spec.num_stages
    result = Build(target.label, "triton", m.group(1) if m else arch.name, ptx, cubin, log,
                   f"triton {version}", kernel=spec.kernel, dynamic_shared_bytes={spec.kernel: shared},
                   params=params)
    return _store(cache, "triton", key, result)


def _import_kernel_module(path: Path, search_dirs: tuple[Path, ...]) -> Any:
    dependencies = sources.python_dependencies(path, search_dirs)
    name = "_profkit_kernels_" + make_key({"dependencies": dependencies})[:16]
    if name in sys.modules:
        return sys.modules[name]
    # Local modules the kernel imports ("from helpers import scale") must come
    # from its own directory as they are now, not from an earlier import of a
    # same-named module elsewhere or of an older version: import them afresh.
    local = {n.split(".")[0] for n in sources.imported_names(path)
             if any(sources.module_file(root, n.split(".")[0]) for root in (path.parent, *search_dirs))}
    for module_name, module in list(sys.modules.items()):
        module_file = getattr(module, "__file__", None)
        if module_name.split(".")[0] in local or (module_file and str(Path(module_file).resolve()) in dependencies):
            del sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ProfkitError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    added = [str(d) for d in (path.parent, *search_dirs) if str(d) not in sys.path]
    sys.path[:0] = added
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # noqa: BLE001 - the user's module: any failure is theirs to see
        del sys.modules[name]
        raise ProfkitError(f"cannot import {path.name}: {type(exc).__name__}: {_first_line(str(exc))}") from None
    finally:
        for d in added:
            sys.path.remove(d)
    return module


def _compile_triton(target: Target, spec: TritonSpec, arch: Arch) -> tuple[str, bytes, str, int]:
    try:
        import triton
        from triton import knobs
        from triton.backends.compiler import GPUTarget
    except ImportError as exc:
        raise ProfkitError(f"cannot import triton ({exc})", hint="pip install 'profkit[ptx]'") from None
    module = _import_kernel_module(target.path, target.search_dirs)
    fn = getattr(module, spec.kernel)
    while not isinstance(fn, triton.runtime.JITFunction) and hasattr(fn, "fn"):
        fn = fn.fn  # Autotuner / Heuristics wrap the JITFunction
    if not isinstance(fn, triton.runtime.JITFunction):
        raise ProfkitError(f"{target.path.name}::{spec.kernel} is not a @triton.jit function")
    attrs = {(i,): [["tt.divisibility", 16]] for i in spec.divisible_by_16}
    src = triton.compiler.ASTSource(fn=fn, signature=spec.signature, constexprs=spec.constexprs, attrs=attrs)
    options: dict[str, Any] = {"num_warps": spec.num_warps}
    if spec.num_stages is not None:
        options["num_stages"] = spec.num_stages
    captured = io.StringIO()
    # Our cache is the one that counts: compile into a throwaway Triton cache so
    # that ptxas always runs (its -v log is how spills are known).
    with tempfile.TemporaryDirectory(prefix="profkit-triton-") as scratch, \
            knobs.cache.scope(), knobs.compilation.scope(), knobs.nvidia.scope(), \
            contextlib.redirect_stdout(captured), warnings.catch_warnings():
        # Triton 3.9 warns that its FP-fusion default will change; the launcher
        # uses the same default, so the AOT compile matches what would run.
        warnings.simplefilter("ignore")
        knobs.cache.dir = scratch
        knobs.compilation.always_compile = True
        knobs.nvidia.dump_ptxas_log = True
        try:
            compiled = triton.compile(src, target=GPUTarget("cuda", arch.capability, 32), options=options)
        except Exception as exc:  # noqa: BLE001 - the compiler's own message is the answer
            where = f"{target.path.name}:{sources.kernel_def_line(target.path, spec.kernel)}"
            raise ProfkitError(f"{spec.kernel} failed to compile for {arch}: {_triton_error(exc, where)}") from None
    log = "\n".join(line for line in captured.getvalue().splitlines() if "ptxas" in line or "bytes" in line)
    return compiled.asm["ptx"], compiled.asm["cubin"], log, int(compiled.metadata.shared)


def _triton_error(exc: Exception, where: str) -> str:
    """One line out of Triton's multi-line errors: the message and the file line."""
    text = str(exc)
    if "ptxas" in text:
        errors = [line.strip() for line in text.splitlines() if "error" in line.lower() and "ptxas" in line.lower()]
        return errors[0] if errors else _first_line(text)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    # "at 2:42:" counts lines from the kernel's def line
    at = re.match(r"at (\d+):(\d+):", lines[0]) if lines else None
    message = lines[-1] if lines else type(exc).__name__
    if at:
        path, def_line = where.rsplit(":", 1)
        return f"{message} ({path}:{int(def_line) + int(at.group(1)) - 1}:{at.group(2)})"
    return f"{type(exc).__name__}: {message}"


def _first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return ""


# --------------------------------------------------------------------------- CUDA C++

# nvcc flags a user may pass (--nvcc-flag): code generation only.  Anything
# else could run a program (-ccbin), write elsewhere (-o, -odir, --keep-dir),
# pass options on to the host compiler or linker (-Xcompiler, -Xlinker) or
# read files (-I, --options-file), so it never reaches nvcc.
_NVCC_FLAGS = re.compile(r"""(?x)
    -?-maxrregcount=\d{1,3} | -O[0-3] | --optimize=[0-3] | -?-use_fast_math | -lineinfo | --generate-line-info
  | -G | --device-debug | -?-restrict | --extra-device-vectorization | --expt-relaxed-constexpr
  | --expt-extended-lambda | --extended-lambda | -std=c\+\+\d\d | --std=c\+\+\d\d
  | --(?:ftz|prec-div|prec-sqrt|fmad)=(?:true|false) | -rdc=(?:true|false) | --relocatable-device-code=(?:true|false)
  | --default-stream=(?:legacy|null|per-thread) | -[DU][A-Za-z_][A-Za-z0-9_]{0,63}(?:=[A-Za-z0-9_.+-]{0,64})?
  | -Xptxas=(?:-v|-O[0-3]|--maxrregcount=\d{1,3}|-dlcm=c[ag]|--allow-expensive-optimizations=(?:true|false))
     (?:,(?:-v|-O[0-3]|--maxrregcount=\d{1,3}|-dlcm=c[ag]|--allow-expensive-optimizations=(?:true|false)))*
""")


def check_nvcc_flags(flags: Sequence[str]) -> tuple[str, ...]:
    """The flags, if every one is on the allow-list; else a ProfkitError naming the first that is not."""
    for flag in flags:
        if not _NVCC_FLAGS.fullmatch(flag):
            raise ProfkitError(f"--nvcc-flag {flag!r} is not an allowed nvcc flag",
                               hint="allowed: -O0..3, -maxrregcount=N, --use_fast_math, -lineinfo, -DNAME[=VALUE], "
                                    "-std=c++NN, --ftz/--prec-div/--prec-sqrt/--fmad=true|false, -Xptxas=-v|-O3|...")
    return tuple(flags)


def _build_cuda(target: Target, cache: Cache) -> Build:
    nvcc = find_tool("nvcc")
    arch = target.params.resolved_arch()
    flags = list(check_nvcc_flags(target.params.nvcc_flags))
    include_dirs = (target.path.parent, *target.search_dirs)
    key = make_key({
        "kind": "cuda", "sources": sources.cuda_dependencies(target.path, include_dirs),
        "flags": flags, "arch": arch.name, "nvcc": nvcc.version_text, "nvcc_path": str(nvcc.path),
    })
    hit = _from_cache(cache, "cuda", key, target)
    if hit is not None:
        hit.kernel = target.kernel
        return hit
    with tempfile.TemporaryDirectory(prefix="profkit-nvcc-") as tmp:
        out = Path(tmp) / "kernel.cubin"
        args = ["-cubin", f"-arch={arch.name}", *flags, "-Xptxas", "-v", "--keep", "--keep-dir", tmp,
                *[f"-I{d}" for d in include_dirs], "-o", str(out), str(target.path)]
        result = run_tool(nvcc, args, target.path.name, cwd=Path(tmp))
        ptx_files = sorted(Path(tmp).glob("*.ptx"))
        if not ptx_files:
            raise ProfkitError(f"nvcc left no PTX for {target.path.name}")
        ptx = ptx_files[0].read_text()
        cubin = out.read_bytes()
    log = result.stderr.decode(errors="replace") + result.stdout.decode(errors="replace")
    build_result = Build(target.label, "cuda", arch.name, ptx, cubin, log, f"nvcc {nvcc.release}",
                         params={"nvcc flags": " ".join(flags)})
    _store(cache, "cuda", key, build_result)
    build_result.kernel = target.kernel
    return build_result


# --------------------------------------------------------------------------- artifacts

def ptx_target_arch(ptx: str) -> str | None:
    m = re.search(r"^\s*\.target\s+(sm_\w+?)\s*(?:,|$)", ptx, re.MULTILINE)
    return m.group(1) if m else None


def _build_ptx(target: Target, cache: Cache) -> Build:
    ptx = target.path.read_text()
    arch_name = target.params.arch.name if target.params.arch else ptx_target_arch(ptx)
    if arch_name is None:
        raise ProfkitError(f"{target.path.name} has no .target directive", hint="pass --arch")
    ptxas = find_tool("ptxas")
    key = make_key({"kind": "ptx", "ptx": sources.digest(target.path), "arch": arch_name, "ptxas": ptxas.identity})
    hit = _from_cache(cache, "ptx", key, target)
    if hit is not None:
        hit.kernel = target.kernel
        return hit
    cubin, log = assemble_ptx(ptx, arch_name, target.path.name)
    result = Build(target.label, "ptx", arch_name, ptx, cubin, log, f"ptxas {ptxas.release}")
    _store(cache, "ptx", key, result)
    result.kernel = target.kernel
    return result


def assemble_ptx(ptx: str, arch_name: str, what: str) -> tuple[bytes, str]:
    """``ptxas -v``: (cubin, log)."""
    ptxas = find_tool("ptxas")
    with tempfile.TemporaryDirectory(prefix="profkit-ptxas-") as tmp:
        source = Path(tmp) / "kernel.ptx"
        source.write_text(ptx)
        out = Path(tmp) / "kernel.cubin"
        result = run_tool(ptxas, ["-v", f"--gpu-name={arch_name}", "-o", str(out), str(source)], what)
        return out.read_bytes(), result.stderr.decode(errors="replace") + result.stdout.decode(errors="replace")


def _build_cubin(target: Target, cache: Cache) -> Build:
    # The architecture is read from the disassembly later (kernel.py).
    return Build(target.label, "cubin", "", None, target.path.read_bytes(), None, "existing cubin", kernel=target.kernel)
