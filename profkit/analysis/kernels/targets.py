"""Machine code for traced kernels compiled now from their sources: ``--kernels TARGET``.

A trace names its kernels; a Triton or inductor cache (``code.code_by_kernel``)
holds the code that ran, when the run left one.  Without it, the sources the user
names are compiled here, with ``profkit ptx``'s targets and compiler
(``profkit.ptx.targets.resolve_target``, ``profkit.ptx.compile.build`` and its
on-disk cache), for the GPU architecture the trace recorded (its devices'
compute capability; an explicit ``arch`` wins), and joined to the traced
kernels by function name:

- ``file.py`` (no ``::kernel``): every ``@triton.jit`` kernel in it, and in the
  local modules it imports, that the trace ran (so ``--kernels gelu.py`` finds the
  kernels of ``triton_kernels.py`` that gelu.py imports);
- a sample name or a sample's file: the sample registry's signature, constexprs and warps;
- Triton's ``num_warps``: the one given, else one variant per block size the trace
  launched the kernel with (threads / 32), so the variant that ran is the one
  compiled for its block size (``code.pick_variant``);
- ``file.cu`` / ``file.ptx`` / ``file.cubin``: every kernel in it that the trace ran.
  nvcc and nsys spell a C++ kernel with its parameter list
  (``gelu_kernel(const float *, float *, int)``) and its symbol is mangled; a
  Triton (or ``extern "C"``) kernel has neither, so a Triton ``gelu_kernel`` and a
  CUDA C++ ``gelu_kernel`` in one trace each get their own code (``names.code_key``).

This is the code the sources compile to here and now, not what ran: a variant
says so (``code_source`` "compiled"), and a kernel that could not be compiled
(no signature given, no nvcc, a compile error) gets a note instead of code.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from profkit.analysis.kernels.code import launch_configurations, symbol_code_key, variant_of
from profkit.analysis.kernels.names import code_key, has_parameter_list
from profkit.errors import ProfkitError
from profkit.model import Trace

DEFAULT_TRITON_WARPS = 4


@dataclass(frozen=True)
class KernelTargets:
    """``--kernels`` targets and the options that say how to compile them (the
    syntax of ``profkit ptx``).  ``signatures``: "SIG" for every Triton kernel, or
    "KERNEL=SIG" for one; ``constexprs``: "NAME=VALUE", set in the kernels that
    declare NAME (a unique prefix works: BLOCK=128 sets BLOCK_SIZE)."""

    targets: tuple[str, ...] = ()
    arch: str | None = None
    signatures: tuple[str, ...] = ()
    constexprs: tuple[str, ...] = ()
    num_warps: int | None = None
    nvcc_flags: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.targets)

    def check(self) -> KernelTargets:
        """Self, once every target resolves and every option parses; else a one-line
        ProfkitError (bad input: exit 2 before any trace is read)."""
        from profkit.ptx.compile import check_nvcc_flags
        from profkit.ptx.targets import parse_arch, parse_constexpr, resolve_target

        if self.arch:
            parse_arch(self.arch)
        self.signature_for_all()
        for text in self.constexprs:
            parse_constexpr(text)
        check_nvcc_flags(self.nvcc_flags)
        for text in self.targets:
            resolve_target(text)
        return self

    def signature_for_all(self) -> tuple[str | None, dict[str, str]]:
        """(the signature for every Triton kernel, kernel -> its own signature)."""
        from profkit.ptx.targets import parse_signature

        common, own = None, {}
        for text in self.signatures:
            name, sep, sig = text.partition("=")
            if sep and name.strip().isidentifier():
                parse_signature(sig)
                own[name.strip()] = sig.strip()
            elif common is not None:
                raise ProfkitError("two --signature values for every kernel",
                                   hint="give one per kernel: --signature KERNEL=TYPES")
            else:
                parse_signature(text)
                common = text
        return common, own


@dataclass
class CompiledCode:
    """What ``compile_for_trace`` found: kernel function name -> variants (as
    ``code.code_by_kernel`` gives them), one note per kernel or target
    that got no code, and what compiled them (for the table's note)."""

    code: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    arch: str = ""
    compilers: list[str] = field(default_factory=list)


def trace_arch(trace: Trace) -> tuple[str | None, str | None]:
    """(the architecture of the GPU the trace's kernels ran on, e.g. "sm_90", or None;
    a note when the trace has several of different capability)."""
    if not trace.has("devices"):
        return None, None
    devices = trace.table("devices", ["device", "cc_major", "cc_minor"])
    capability = {int(d): (int(a), int(b)) for d, a, b in zip(devices["device"], devices["cc_major"],
                                                               devices["cc_minor"]) if a > 0 and b >= 0}
    kinds = set(capability.values())
    if not kinds:
        return None, None
    if len(kinds) == 1:
        major, minor = kinds.pop()
        return f"sm_{major}{minor}", None
    launches = trace.table("kernels", ["device"])["device"].value_counts() if trace.has("kernels") else None
    busiest = max(capability, key=lambda d: int(launches.get(d, 0)) if launches is not None else 0)
    major, minor = capability[busiest]
    listed = ", ".join(sorted({f"sm_{a}{b}" for a, b in capability.values()}))
    return f"sm_{major}{minor}", (f"The trace's GPUs differ ({listed}): --kernels compiled for sm_{major}{minor}, "
                                  "the GPU that ran the most kernels (--arch picks another).")


def launch_threads(trace: Trace) -> dict[str, list[int]]:
    """Kernel function name (bare names only: Triton's) -> the threads per block it was
    launched with, most launched first."""
    configurations = launch_configurations(trace)
    if configurations is None:
        return {}
    counts = configurations.groupby(["name", "threads"], observed=True)["launches"].sum().reset_index()
    counts = counts.sort_values("launches", ascending=False, kind="stable")
    out: dict[str, list[int]] = {}
    for name, threads in zip(counts["name"], counts["threads"]):
        if not has_parameter_list(str(name)) and threads > 0:
            out.setdefault(code_key(str(name)), []).append(int(threads))
    return out


def compile_for_trace(spec: KernelTargets, trace: Trace, names: Sequence[str]) -> CompiledCode:
    """Compile ``spec``'s targets for the trace's GPU and keep the kernels among ``names``
    (the trace's kernel names). Never raises for one kernel: its failure is a note."""
    return compile_kernels(spec, names, trace_arch(trace), launch_threads(trace))


def compile_for_launches(spec: KernelTargets, launches: Sequence[Any], names: Sequence[str]) -> CompiledCode:
    """``compile_for_trace`` for an Nsight Compute capture: the GPU and block sizes come from
    its profiled launches (``profkit.readers.ncu.NcuLaunch``: ``cc`` "9.0", ``block_size``)."""
    capabilities = sorted({str(x.cc) for x in launches if getattr(x, "cc", "")})
    arch = (f"sm_{capabilities[0].replace('.', '')}", None) if len(capabilities) == 1 else (None, None)
    if len(capabilities) > 1:
        arch = (f"sm_{capabilities[-1].replace('.', '')}",
                f"The capture's GPUs differ ({', '.join(capabilities)}): --kernels compiled for the newest "
                "(--arch picks another).")
    counts: dict[str, dict[int, int]] = {}
    for x in launches:
        name = str(x.kernel_name)
        if x.block_size and not has_parameter_list(name):
            per = counts.setdefault(code_key(name), {})
            per[int(x.block_size)] = per.get(int(x.block_size), 0) + 1
    threads = {k: sorted(v, key=lambda t: -v[t]) for k, v in counts.items()}
    return compile_kernels(spec, names, arch, threads)


def compile_kernels(spec: KernelTargets, names: Sequence[str], gpu_arch: tuple[str | None, str | None],
                    threads: dict[str, list[int]]) -> CompiledCode:
    """The work of ``compile_for_trace``: ``gpu_arch`` is (the architecture the kernels ran on
    or None, a note), ``threads`` each Triton kernel's block sizes, most launched first."""
    from profkit.ptx.cache import Cache
    from profkit.ptx.targets import DEFAULT_ARCH, CompileParams, parse_arch, parse_constexpr, resolve_target

    result = CompiledCode()
    arch_text, arch_note = (spec.arch, None) if spec.arch else gpu_arch
    if arch_text is None:
        arch_text = DEFAULT_ARCH
        arch_note = f"The trace does not record its GPU's architecture: --kernels compiled for {DEFAULT_ARCH} (--arch picks another)."
    if arch_note:
        result.notes.append(arch_note)
    arch = parse_arch(arch_text)
    result.arch = arch.name
    traced = {code_key(str(n)) for n in names}
    common_signature, own_signatures = spec.signature_for_all()
    params = CompileParams(arch=arch, nvcc_flags=spec.nvcc_flags)
    context = _Context(Cache(), traced, threads, common_signature, own_signatures,
                       [parse_constexpr(c) for c in spec.constexprs], spec.num_warps, result, bool(spec.arch))
    for text in dict.fromkeys(spec.targets):
        try:
            target = resolve_target(text, params)
            if target.kind == "triton":
                _add_triton(context, target)
            else:
                _add_binary(context, target)
        except ProfkitError as exc:
            result.notes.append(f"--kernels {text}: no code: {exc.one_line()}")
    return result


@dataclass
class _Context:
    cache: Any
    traced: set[str]  # code_key of every traced kernel
    threads: dict[str, list[int]]
    common_signature: str | None
    own_signatures: dict[str, str]
    constexprs: list[tuple[str, Any]]
    num_warps: int | None
    result: CompiledCode
    explicit_arch: bool = False


def _add_binary(ctx: _Context, target: Any) -> None:
    """A .cu, .ptx or .cubin: one build, its kernels that the trace ran."""
    from profkit.ptx.compile import build
    from profkit.ptx.kernel import kernels_of

    if target.kind == "ptx" and not ctx.explicit_arch:
        target = _ptx_own_arch(target)
    made = build(target, ctx.cache)
    wanted = made.kernel
    made.kernel = None  # every kernel of the file, then those the trace ran
    codes = kernels_of(made, ctx.cache, every=True)
    if wanted is not None:
        from profkit.ptx.kernel import symbol_matches

        codes = [c for c in codes if symbol_matches(c.symbol, wanted)]
    ran = [c for c in codes if symbol_code_key(c) in ctx.traced]
    if not ran:
        listed = ", ".join(c.name for c in codes) or "none"
        ctx.result.notes.append(f"--kernels {target.label}: none of its kernels ({listed}) ran in the trace.")
        return
    _note_compiler(ctx, made.compiler)
    for code in ran:
        _add_variant(ctx, code, threads=None)


def _ptx_own_arch(target: Any) -> Any:
    """A .ptx for the trace's GPU keeps its own .target (``sm_90a`` PTX cannot be
    assembled for plain ``sm_90``); one for another GPU is assembled for the trace's,
    as the driver would JIT it there."""
    from profkit.ptx.compile import ptx_target_arch
    from profkit.ptx.targets import parse_arch

    own = ptx_target_arch(target.path.read_text())
    if own is None or parse_arch(own).capability != target.params.arch.capability:
        return target
    return replace(target, params=replace(target.params, arch=None))


def _add_triton(ctx: _Context, target: Any) -> None:
    from profkit.ptx import sources

    if target.kernel is not None:
        kernels = [(target.path, target.kernel)]
    else:
        kernels = []
        for file in sources.python_dependencies(target.path, target.search_dirs):
            path = Path(file)
            for name in sources.triton_kernels_in(path):
                if not name.startswith("_") and name in ctx.traced:
                    kernels.append((path, name))
        if not kernels:
            raise ProfkitError(f"none of the Triton kernels in {target.path.name} (or the local modules it imports) "
                               "ran in the trace")
    for path, kernel in kernels:
        if kernel not in ctx.traced:
            ctx.result.notes.append(f"--kernels {target.label}: {kernel} did not run in the trace.")
            continue
        try:
            _compile_triton_kernel(ctx, _kernel_target(ctx, target, path, kernel))
        except ProfkitError as exc:
            ctx.result.notes.append(f"{kernel} ({path.name}): no code: {exc.one_line()}")


def _kernel_target(ctx: _Context, target: Any, path: Path, kernel: str) -> Any:
    """The target of one kernel: the sample's own parameters when it is a sample, the
    signature given for it (or for every kernel), the constexprs it declares."""
    from profkit.ptx import sources
    from profkit.ptx.targets import parse_signature, sample_target

    base = target
    sample = _sample_of(path, kernel)
    if target.sample is None and sample is not None:
        base = sample_target(sample, target.params)
    elif target.sample is None:
        base = replace(target, path=path, kernel=kernel, label=f"{path.name}::{kernel}")
    signature = ctx.own_signatures.get(kernel) or ctx.common_signature
    params = base.params
    if signature is not None:
        params = replace(params, signature=parse_signature(signature))
    if params.signature is None:
        runtime = [p.name for p in sources.triton_kernels_in(path)[kernel] if not p.constexpr]
        example = ",".join("*fp32:16" if "ptr" in p else "i32" for p in runtime)
        raise ProfkitError(f"its argument types are unknown: add --signature '{kernel}={example}' (one Triton type "
                           f"per runtime argument: {', '.join(runtime)})")
    declared = [p.name for p in sources.triton_kernels_in(path)[kernel] if p.constexpr]
    mine = {name: value for name, value in ctx.constexprs
            if len(sources.constexprs_named(name, declared)) == 1}
    return replace(base, params=params.with_constexprs(mine))


def _sample_of(path: Path, kernel: str) -> Any:
    from profkit.ptx.targets import SAMPLES, samples_dir

    try:
        directory = samples_dir().resolve()
    except ProfkitError:
        return None
    for sample in SAMPLES:
        if sample.kind == "triton" and sample.kernel == kernel and (directory / sample.file) == path.resolve():
            return sample
    return None


def _compile_triton_kernel(ctx: _Context, target: Any) -> None:
    """One variant per block size the trace launched the kernel with (or the warps given)."""
    from profkit.ptx.compile import build
    from profkit.ptx.kernel import kernels_of

    if ctx.num_warps is not None:
        warps = [ctx.num_warps]
    else:
        warps = [t // 32 for t in ctx.threads.get(target.kernel, []) if t % 32 == 0][:4]
        warps = warps or [target.params.num_warps or DEFAULT_TRITON_WARPS]
    for w in dict.fromkeys(warps):
        made = build(replace(target, params=replace(target.params, num_warps=w)), ctx.cache)
        _note_compiler(ctx, made.compiler)
        for code in kernels_of(made, ctx.cache):
            _add_variant(ctx, code, threads=w * 32)


def _add_variant(ctx: _Context, code: Any, threads: int | None) -> None:
    variant = variant_of(code, threads, code.build.dynamic_shared_bytes.get(code.symbol), "compiled")
    ctx.result.code.setdefault(symbol_code_key(code), []).append(variant)


def _note_compiler(ctx: _Context, compiler: str) -> None:
    if compiler not in ctx.result.compilers:
        ctx.result.compilers.append(compiler)


def compiled_note(rows: Sequence[dict[str, Any]], compiled: CompiledCode) -> str | None:
    """The sentence that says which rows' code was compiled now, and what that means."""
    count = sum(1 for r in rows if r.get("code_source") == "compiled")
    if not count:
        return None
    what = ", ".join(compiled.compilers) or "the compiler here"
    text = (f"Machine code of {count} kernel(s) compiled now from --kernels ({what}, {compiled.arch}), not read "
            "from the run: it is what the sources compile to here, which differs from what ran when the "
            "compiler version, its flags or the parameters differ (code_source: compiled).")
    unclear = sum(1 for r in rows if r.get("code_source") == "compiled" and (r.get("code_variants") or 0) > 1
                  and any(r.get(k) is None for k in ("registers", "global_loads", "global_stores", "vector_grade")))
    if unclear:
        text += (f" {unclear} match several compiled kernels of one name (template instantiations, overloads, or "
                 "block sizes the launches do not tell apart): where their code differs, the cell shows —.")
    return text


def code_for_trace(trace: Trace, names: Sequence[str], directories: Sequence[Path] = (),
                   targets: KernelTargets | None = None) -> tuple[dict[str, list[dict[str, Any]]], CompiledCode | None]:
    """The code of the traced kernels ``names``: from the caches under ``directories``
    (what ran) and compiled now from ``targets`` (None when there are none);
    ``code.attach_code`` prefers a cache's code to code compiled now."""
    from profkit.analysis.kernels.code import code_by_kernel

    code = code_by_kernel(directories, names=names) if directories else {}
    if not targets:
        return code, None
    compiled = compile_for_trace(targets, trace, names)
    for name, variants in compiled.code.items():
        code.setdefault(name, []).extend(variants)
    return code, compiled


def code_notes(rows: Sequence[dict[str, Any]], directories: Sequence[Path],
               compiled: CompiledCode | None) -> list[str]:
    """The notes under a kernel table with code: what the caches held, what was
    compiled now and what it means, and why a kernel named by --kernels has none."""
    from profkit.analysis.kernels.code import code_note

    searched = directories or compiled is None  # "searched: no folder given" says what to do
    notes = [n for n in [code_note(rows, list(directories))] if n] if searched else []
    if compiled is not None:
        notes += [n for n in [compiled_note(rows, compiled)] if n]
        notes += compiled.notes
    return notes
