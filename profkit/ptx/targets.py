"""What `profkit ptx` can read or compile, and how a target string names it.

A target is one of:
- a sample name (``gelu``, ``softmax_cuda``...; ``profkit ptx --list``), which
  carries its own source file and compile parameters;
- ``path/kernels.py::kernel_name``: a Triton kernel, compiled ahead of time;
- ``file.cu`` (optionally ``::kernel``): CUDA C++ through nvcc;
- ``file.ptx`` or ``file.cubin``: an existing artifact.

Nothing here imports triton or runs a compiler: resolving a target only reads
files, so it is cheap and its errors are the user's.
"""

from __future__ import annotations

import ast
import difflib
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from profkit.errors import ProfkitError

DEFAULT_ARCH = "sm_90"

# Compute capabilities that ptxas/nvdisasm of CUDA 12-13 know.
KNOWN_CAPABILITIES = (75, 80, 86, 87, 89, 90, 100, 101, 103, 110, 120, 121)

# Triton's scalar type names (triton.language dtype short names).
TRITON_SCALAR_TYPES = frozenset({
    "i1", "i8", "i16", "i32", "i64", "u1", "u8", "u16", "u32", "u64",
    "fp8e4nv", "fp8e5", "fp8e4b15", "fp8e4b8", "fp8e5b16", "fp16", "bf16", "fp32", "fp64",
})

# The nvcc flags the samples are built with (sample_kernels/bench.py).
SAMPLE_NVCC_FLAGS = ("-O3", "-lineinfo")


@dataclass(frozen=True)
class Arch:
    """A GPU architecture: ``sm_90`` is capability 90, ``sm_90a`` adds suffix "a"."""

    capability: int
    suffix: str = ""

    @property
    def name(self) -> str:
        return f"sm_{self.capability}{self.suffix}"

    def __str__(self) -> str:
        return self.name


def parse_arch(text: str) -> Arch:
    """``sm_90``, ``sm_90a``, ``90``, ``9.0``, ``compute_90`` -> Arch."""
    m = re.fullmatch(r"(?:sm_?|compute_?)?(\d+)(?:\.(\d+))?([af]?)", text.strip().lower())
    if not m:
        raise ProfkitError(f"bad --arch {text!r}", hint="use a name such as sm_80, sm_90 or sm_100")
    major, minor, suffix = m.groups()
    capability = int(major) * 10 + int(minor) if minor is not None else int(major)
    if capability not in KNOWN_CAPABILITIES:
        known = ", ".join(f"sm_{c}" for c in KNOWN_CAPABILITIES)
        raise ProfkitError(f"unknown architecture {text!r}", hint=f"known: {known}")
    return Arch(capability, suffix)


@dataclass(frozen=True)
class ArgType:
    """One entry of a Triton signature: ``*fp32:16`` is a pointer to fp32 whose
    address is a multiple of 16 bytes; ``i32:1`` is an int specialized to 1."""

    type: str
    hint: int | None = None

    def __str__(self) -> str:
        return self.type if self.hint is None else f"{self.type}:{self.hint}"


def parse_signature(text: str) -> tuple[ArgType, ...]:
    """Parse ``"*fp32:16, *fp32:16, i32:16"`` (the syntax of triton's compile.py)."""
    entries = [part.strip() for part in text.split(",")]
    if not text.strip() or any(not e for e in entries):
        raise ProfkitError(f"bad signature {text!r}: empty entry", hint='write e.g. "*fp32:16,*fp32:16,i32:16"')
    parsed = []
    for entry in entries:
        type_, _, hint = entry.partition(":")
        type_ = type_.strip()
        base = type_.removeprefix("*")
        if type_.startswith("*") and base.startswith("k") and base[1:] in TRITON_SCALAR_TYPES:
            base = base[1:]  # "*kfp32": pointer to const
        if base not in TRITON_SCALAR_TYPES:
            raise ProfkitError(
                f"bad signature {text!r}: unknown type {type_!r}",
                hint="types are i1/i8/i16/i32/i64/u8../fp16/bf16/fp32/fp64, '*' for pointers",
            )
        hint_value = None
        if hint:
            if hint.strip() not in ("1", "16"):
                raise ProfkitError(f"bad signature {text!r}: hint {hint!r} in {entry!r}",
                                   hint="the only hints are :16 (divisible by 16) and :1 (equal to 1)")
            hint_value = int(hint)
            if hint_value == 1 and type_.startswith("*"):
                raise ProfkitError(f"bad signature {text!r}: a pointer cannot be specialized to 1 ({entry!r})")
        parsed.append(ArgType(type_, hint_value))
    return tuple(parsed)


def parse_constexpr(text: str) -> tuple[str, Any]:
    """``BLOCK=1024`` -> ("BLOCK", 1024); values are int, float, bool or a string."""
    name, sep, value = text.partition("=")
    if not sep or not name.strip() or not value.strip():
        raise ProfkitError(f"bad --constexpr {text!r}", hint="write NAME=VALUE, e.g. BLOCK_SIZE=1024")
    return name.strip(), parse_value(value.strip())


def parse_value(text: str) -> Any:
    for convert in (int, float):
        try:
            return convert(text)
        except ValueError:
            pass
    if text in ("True", "true"):
        return True
    if text in ("False", "false"):
        return False
    return text


@dataclass(frozen=True)
class CompileParams:
    """How to compile a target. ``None`` means "the target's own default"."""

    arch: Arch | None = None
    signature: tuple[ArgType, ...] | None = None
    constexprs: tuple[tuple[str, Any], ...] = ()
    num_warps: int | None = None
    num_stages: int | None = None
    nvcc_flags: tuple[str, ...] = ()

    def with_constexprs(self, values: dict[str, Any]) -> CompileParams:
        merged = dict(self.constexprs)
        merged.update(values)
        return replace(self, constexprs=tuple(merged.items()))

    def resolved_arch(self) -> Arch:
        return self.arch or parse_arch(DEFAULT_ARCH)


@dataclass(frozen=True)
class Target:
    """A resolved target: what to read or compile, and how.

    kind: "triton" | "cuda" | "ptx" | "cubin".  ``kernel`` selects one kernel in
    a file with several (None: the only one).  ``label`` is how to show it.
    ``search_dirs`` are extra directories for imports/includes (set when the
    source was copied out of git into a temporary file).
    """

    kind: str
    path: Path
    kernel: str | None
    label: str
    params: CompileParams = field(default_factory=CompileParams)
    sample: str | None = None
    search_dirs: tuple[Path, ...] = ()


@dataclass(frozen=True)
class Sample:
    """A kernel shipped in sample_kernels/, with the parameters its sample launches it with."""

    name: str
    kind: str  # triton | cuda
    file: str  # relative to the sample directory
    kernel: str
    description: str
    signature: str = ""
    # constexpr name -> a value, or the name of a module-level constant in the
    # kernel's file (so the registry follows GELU_BLOCK etc. when they change)
    constexprs: tuple[tuple[str, Any], ...] = ()
    num_warps: int | None = None


# The pointer arguments are torch allocations (16-byte aligned); integer
# arguments get ":16" when the sample's sizes are multiples of 16, exactly as
# Triton's launcher specializes them at run time.
SAMPLES: tuple[Sample, ...] = (
    Sample("gelu", "triton", "triton_kernels.py", "gelu_kernel",
           "GELU, one contiguous block per program (vectorizes)",
           "*fp32:16,*fp32:16,i32:16", (("BLOCK_SIZE", "GELU_BLOCK"),), 4),
    Sample("gelu_strided", "triton", "triton_kernels.py", "gelu_strided_kernel",
           "GELU with a runtime stride between neighbours (cannot vectorize)",
           "*fp32:16,*fp32:16,i32,i32", (("BLOCK_SIZE", "GELU_BLOCK"),), 4),
    Sample("softmax", "triton", "triton_kernels.py", "softmax_kernel",
           "row softmax, the whole row in registers",
           "*fp32:16,*fp32:16,i32:16,i32:16,i32:16", (("BLOCK_SIZE", "SOFTMAX_BLOCK"),), 4),
    Sample("vector_add", "triton", "triton_kernels.py", "add_kernel",
           "vector add",
           "*fp32:16,*fp32:16,*fp32:16,i32:16", (("BLOCK_SIZE", "ADD_BLOCK"),), 4),
    Sample("register_heavy", "triton", "triton_kernels.py", "gelu_register_heavy_kernel",
           "GELU with a huge block on one warp (register pressure)",
           "*fp32:16,*fp32:16,i32:16", (("BLOCK_SIZE", "REGISTER_HEAVY_BLOCK"),), 1),
    Sample("gelu_cuda", "cuda", "csrc/gelu.cu", "gelu_kernel", "CUDA C++ GELU, one float per thread"),
    Sample("gelu_vec4_cuda", "cuda", "csrc/gelu.cu", "gelu_vec4_kernel", "CUDA C++ GELU through float4"),
    Sample("gelu_strided_cuda", "cuda", "csrc/bad.cu", "gelu_strided_kernel",
           "CUDA C++ GELU with strided, uncoalesced access"),
    Sample("register_heavy_cuda", "cuda", "csrc/bad.cu", "register_heavy_kernel",
           "CUDA C++ kernel with 64 live accumulators per thread"),
    Sample("softmax_cuda", "cuda", "csrc/softmax.cu", "softmax_kernel",
           "CUDA C++ row softmax with a shared-memory reduction"),
    Sample("vector_add_cuda", "cuda", "csrc/vector_add.cu", "vector_add_kernel", "CUDA C++ vector add"),
)
SAMPLES_BY_NAME = {s.name: s for s in SAMPLES}


def samples_dir() -> Path:
    """Where sample_kernels/ lives: $PROFKIT_SAMPLES_DIR, next to the profkit
    package (a checkout or editable install), or above the working directory."""
    env = os.environ.get("PROFKIT_SAMPLES_DIR")
    candidates = [Path(env)] if env else []
    candidates.append(Path(__file__).resolve().parents[2] / "sample_kernels")
    cwd = Path.cwd().resolve()
    candidates += [d / "sample_kernels" for d in (cwd, *cwd.parents)]
    for candidate in candidates:
        if (candidate / "triton_kernels.py").is_file():
            return candidate
    raise ProfkitError(
        "cannot find the sample kernels (sample_kernels/triton_kernels.py)",
        hint="run from a profkit checkout or set PROFKIT_SAMPLES_DIR",
    )


def module_constants(path: Path) -> dict[str, Any]:
    """Module-level ``NAME = <literal>`` assignments of a Python file, without importing it."""
    tree = ast.parse(path.read_text(), filename=str(path))
    constants: dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                constants[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                continue
    return constants


def sample_target(sample: Sample, params: CompileParams) -> Target:
    """The sample's own parameters, overridden by whatever ``params`` sets."""
    directory = samples_dir()
    path = directory / sample.file
    own_constexprs: dict[str, Any] = {}
    if sample.constexprs:
        constants = module_constants(path)
        for name, value in sample.constexprs:
            if isinstance(value, str):
                if value not in constants:
                    raise ProfkitError(f"sample {sample.name}: {path.name} has no constant {value}")
                value = constants[value]
            own_constexprs[name] = value
    own_constexprs.update(dict(params.constexprs))
    merged = CompileParams(
        arch=params.arch,
        signature=params.signature or (parse_signature(sample.signature) if sample.signature else None),
        constexprs=tuple(own_constexprs.items()),
        num_warps=params.num_warps or sample.num_warps,
        num_stages=params.num_stages,
        nvcc_flags=params.nvcc_flags or (SAMPLE_NVCC_FLAGS if sample.kind == "cuda" else ()),
    )
    return Target(sample.kind, path, sample.kernel, sample.name, merged, sample=sample.name)


_KIND_BY_SUFFIX = {".py": "triton", ".cu": "cuda", ".cuh": "cuda", ".ptx": "ptx", ".cubin": "cubin"}


def resolve_target(text: str, params: CompileParams | None = None, kernel: str | None = None) -> Target:
    """Turn what the user typed into a Target, or raise a one-line ProfkitError."""
    params = params or CompileParams()
    path_text, sep, kernel_in_text = text.partition("::")
    if sep and not kernel_in_text:
        raise ProfkitError(f"bad target {text!r}: no kernel name after '::'")
    if sep and kernel and kernel != kernel_in_text:
        raise ProfkitError(f"target {text!r} names kernel {kernel_in_text!r} but --kernel says {kernel!r}")
    kernel = kernel_in_text or kernel
    if not sep and text in SAMPLES_BY_NAME:
        return sample_target(SAMPLES_BY_NAME[text], params)
    path = Path(path_text).expanduser()
    if not path.exists():
        close = difflib.get_close_matches(text, list(SAMPLES_BY_NAME), n=3)
        hint = f"did you mean {', '.join(close)}?" if close else "profkit ptx --list shows the sample names"
        raise ProfkitError(f"unknown kernel {text!r}: not a sample name and no such file", hint=hint)
    if path.is_dir():
        raise ProfkitError(f"{path} is a directory", hint="use --inductor DIR for a torch.compile cache")
    kind = _KIND_BY_SUFFIX.get(path.suffix.lower()) or sniff_kind(path)
    if kind is None:
        raise ProfkitError(
            f"{path} is not PTX, a cubin, CUDA C++ or a Python file with Triton kernels",
            hint="targets are a sample name, kernels.py::name, file.cu, file.ptx or file.cubin",
        )
    check_artifact(path, kind)
    return Target(kind, path.resolve(), kernel, text, params)


def sniff_kind(path: Path) -> str | None:
    """Recognize a PTX or cubin file whose name does not say so."""
    with open(path, "rb") as f:
        head = f.read(4096)
    if head.startswith(b"\x7fELF"):
        return "cubin"
    if re.search(rb"^\s*\.version\s+\d+\.\d+", head, re.MULTILINE):
        return "ptx"
    return None


def check_artifact(path: Path, kind: str) -> None:
    """Refuse a .ptx that is not PTX or a .cubin that is not an ELF file."""
    if kind == "cubin":
        with open(path, "rb") as f:
            if f.read(4) != b"\x7fELF":
                raise ProfkitError(f"{path} is not a cubin (no ELF header)")
    elif kind == "ptx":
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            raise ProfkitError(f"{path} is not PTX (not a text file)") from None
        if not re.search(r"^\s*\.version\s+\d+\.\d+", text, re.MULTILINE):
            raise ProfkitError(f"{path} is not PTX (no .version directive)")
        if not re.search(r"\.entry\s", text):
            raise ProfkitError(f"{path} has no kernel (.entry) to show")


def apply_overrides(target: Target, overrides: dict[str, str]) -> Target:
    """The same target under other parameters: ``arch``, ``num_warps``,
    ``num_stages`` or a constexpr name (``BLOCK_SIZE=128``)."""
    params = target.params
    constexprs: dict[str, Any] = {}
    for key, value in overrides.items():
        if key == "arch":
            params = replace(params, arch=parse_arch(value))
        elif key in ("num_warps", "num-warps"):
            params = replace(params, num_warps=_positive_int(key, value))
        elif key in ("num_stages", "num-stages"):
            params = replace(params, num_stages=_positive_int(key, value))
        else:
            constexprs[key] = parse_value(value)
    if constexprs:
        if target.kind != "triton":
            raise ProfkitError(f"{target.label} is not a Triton kernel: it has no constexprs to set "
                               f"({', '.join(constexprs)})")
        params = params.with_constexprs(constexprs)
    return replace(target, params=params)


def _positive_int(name: str, value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number <= 0:
        raise ProfkitError(f"bad {name}={value!r}: need a positive integer")
    return number


def parse_diff_spec(text: str) -> tuple[str | None, dict[str, str]]:
    """``gelu_strided`` / ``BLOCK_SIZE=128`` / ``gelu_strided,arch=sm_80``
    -> (other target or None, parameter overrides)."""
    if os.path.exists(text):
        return text, {}
    other = None
    overrides: dict[str, str] = {}
    for token in (t.strip() for t in text.split(",")):
        if not token:
            continue
        if "=" in token and "::" not in token:
            key, _, value = token.partition("=")
            if not key.strip() or not value.strip():
                raise ProfkitError(f"bad --diff {text!r}: {token!r} is not KEY=VALUE")
            overrides[key.strip()] = value.strip()
        elif other is None:
            other = token
        else:
            raise ProfkitError(f"bad --diff {text!r}: two targets ({other}, {token})")
    if other is None and not overrides:
        raise ProfkitError(f"bad --diff {text!r}: name a target or KEY=VALUE parameters")
    return other, overrides


def diff_target(a: Target, spec: str, params: CompileParams) -> Target:
    """The B side of ``--diff SPEC``.

    Another sample uses its own parameters (only ``--arch`` carries over);
    another file inherits the command line's parameters and A's kernel name;
    ``KEY=VALUE`` entries then override B's parameters.
    """
    other, overrides = parse_diff_spec(spec)
    if other is None:
        b = a
    elif other in SAMPLES_BY_NAME and "::" not in other:
        b = resolve_target(other, CompileParams(arch=params.arch))
    else:
        b = resolve_target(other, params)
        if b.kernel is None and b.kind == a.kind:
            b = replace(b, kernel=a.kernel)
    b = apply_overrides(b, overrides)
    if other is None:
        changes = ",".join(f"{k}={v}" for k, v in overrides.items())
        b = replace(b, label=f"{a.label} [{changes}]")
    return b
