"""`profkit ptx TARGET`: PTX and SASS of any kernel, with no GPU.

Parses options, calls profkit.ptx, renders.  The library does the work:
targets.py (what TARGET names), compile.py + cache.py (Triton AOT, nvcc,
ptxas), kernel.py (PTX/SASS/resources), summary.py, diff.py, checks.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click
from rich.console import Console

from profkit.atomic import write_text
from profkit.errors import ProfkitError
from profkit.output import json_text
from profkit.output import Column, emit_rows, format_option, rows_to_json, wide_option
from profkit.ptx import html, render
from profkit.ptx.cache import Cache
from profkit.ptx.checks import CHECKS, CheckResult, run_checks
from profkit.ptx.compile import check_nvcc_flags
from profkit.ptx.diff import diff_kernels
from profkit.ptx.gitrev import target_at_revision
from profkit.ptx.inductor import scan
from profkit.ptx.kernel import KernelCode, kernels_of, load_kernels, symbol_matches
from profkit.ptx.summary import KernelSummary, summarize, summary_rows
from profkit.ptx.targets import (
    SAMPLES,
    Arch,
    CompileParams,
    diff_target,
    parse_arch,
    parse_constexpr,
    parse_signature,
    resolve_target,
)
from profkit.terminal import progress

SUMMARY_COLUMNS = [Column("metric", "Metric", fit="whole"), Column("value", "Value", fit="wrap")]
DELTA_COLUMNS = [Column("metric", "Metric", fit="whole"), Column("a", "A", fit="wrap"), Column("b", "B", fit="wrap"),
                 Column("change", "Change", fit="wrap")]
# The sample's name is what the user types next (profkit ptx NAME): never cut nor wrapped.
SAMPLE_COLUMNS = [Column("name", "Name", fit="whole"), Column("kind", "Kind", drop=2),
                  Column("kernel", "Kernel", drop=3), Column("file", "File", fit="left", drop=4),
                  Column("parameters", "Parameters", fit="wrap", drop=1),
                  Column("description", "Description", fit="wrap", drop=-1)]
INDUCTOR_COLUMNS = [Column("kernel", "Kernel", fit="whole"), Column("arch", "Arch", drop=5),
                    Column("registers", "Regs", "int"), Column("spills", "Spills (B st/ld)"),
                    Column("shared_bytes", "Shared (B)", "int", drop=4),
                    Column("global_loads", "Global loads", fit="wrap", drop=2),
                    Column("global_stores", "Global stores", fit="wrap", drop=3),
                    Column("vectorized", "Vectorized"), Column("file", "File", fit="left", drop=6)]


@click.command("ptx")
@click.argument("target", required=False)
@click.option("--list", "list_samples", is_flag=True, help="List the sample kernels and exit.")
@click.option("--kernel", help="The kernel to show, in a file (or inductor cache) with several.")
@click.option("--signature", help='Triton argument types, constexprs left out: "*fp32:16,*fp32:16,i32:16".')
@click.option("--constexpr", "constexprs", multiple=True, metavar="NAME=VALUE",
              help="A Triton constexpr (repeatable). A unique prefix works: BLOCK=128 sets BLOCK_SIZE.")
@click.option("--num-warps", type=click.IntRange(1, 64), help="Triton num_warps (default: the sample's, or 4).")
@click.option("--num-stages", type=click.IntRange(1, 16), help="Triton num_stages (default: Triton's).")
@click.option("--arch", help="sm_80, sm_89, sm_90 (default), sm_100, ...; a .ptx file defaults to its .target.")
@click.option("--nvcc-flag", "nvcc_flags", multiple=True, metavar="FLAG",
              help="Extra nvcc flag for .cu targets (repeatable), e.g. --nvcc-flag=-maxrregcount=32.")
@click.option("--sass", is_flag=True, help="Show SASS (nvdisasm of the cubin) instead of PTX.")
@click.option("--raw", is_flag=True, help="The whole listing as the compiler wrote it, debug info included.")
@click.option("--plain/--color", default=None,
              help="Plain text (the default when stdout is not a terminal) or colors even in a pipe.")
@click.option("--summary-only", is_flag=True, help="Only the summary, no listing.")
@format_option()
@wide_option()
@click.option("--html", "html_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write a self-contained HTML page: PTX and SASS side by side with the summary.")
@click.option("--diff", "diff_spec", metavar="B",
              help="Compare with B: another target, and/or KEY=VALUE overrides (BLOCK_SIZE=128, arch=sm_100, "
                   "num_warps=8), e.g. --diff gelu_strided or --diff BLOCK=128.")
@click.option("--rev", metavar="REV", help="Compare the target's source at git revision REV with the working tree.")
@click.option("--check", "checks", multiple=True, type=click.Choice(CHECKS),
              help="Exit 1 unless the check holds (repeatable).")
@click.option("--max-registers", type=click.IntRange(0), metavar="N", help="Check: at most N registers per thread.")
@click.option("--no-spills", is_flag=True, help="Check: no register spills.")
@click.option("--inductor", "inductor_dir", type=click.Path(path_type=Path),
              help="Read the kernels torch.compile left in this TORCHINDUCTOR_CACHE_DIR or output-code dump.")
@click.option("--no-cache", is_flag=True, help="Compile again instead of using ~/.cache/profkit/ptx.")
@click.pass_context
def ptx(ctx: click.Context, target: str | None, list_samples: bool, kernel: str | None, signature: str | None,
        constexprs: tuple[str, ...], num_warps: int | None, num_stages: int | None, arch: str | None,
        nvcc_flags: tuple[str, ...], sass: bool, raw: bool, plain: bool | None, summary_only: bool, fmt: str,
        wide: bool, html_path: Path | None, diff_spec: str | None, rev: str | None, checks: tuple[str, ...],
        max_registers: int | None, no_spills: bool, inductor_dir: Path | None, no_cache: bool) -> None:
    """PTX and SASS of a kernel, its registers, spills and memory widths, without a GPU.

    \b
    TARGET is a sample name (--list), kernels.py::name (Triton, needs --signature),
    file.cu (nvcc), file.ptx or file.cubin.
    \b
      profkit ptx gelu                              PTX, then the summary
      profkit ptx gelu --sass --summary-only
      profkit ptx k.py::add --signature "*fp32:16,*fp32:16,i32" --constexpr BLOCK=256
      profkit ptx gelu --diff gelu_strided          what changed, registers/widths deltas
      profkit ptx gelu --diff BLOCK=128             the same kernel with another constexpr
      profkit ptx k.py::add --rev HEAD~1            since the last commit
      profkit ptx gelu --check vectorized-loads --max-registers 64 --no-spills
    """
    if list_samples:
        emit_rows(_sample_rows(), SAMPLE_COLUMNS, fmt, title="Sample kernels", wide=wide)
        return
    if no_spills:
        checks = (*checks, "no-spills")
    checking = bool(checks) or max_registers is not None
    if checking and (diff_spec or rev):
        raise ProfkitError("--check/--max-registers/--no-spills check one target; leave out --diff and --rev")
    if diff_spec and rev:
        raise ProfkitError("use --diff or --rev, not both")
    plain = (not sys.stdout.isatty()) if plain is None else plain
    console = Console(highlight=False, markup=False, force_terminal=not plain, no_color=plain, soft_wrap=True)
    cache = Cache(enabled=not no_cache)
    params = CompileParams(
        arch=parse_arch(arch) if arch else None,
        signature=parse_signature(signature) if signature else None,
        constexprs=tuple(parse_constexpr(c) for c in constexprs),
        num_warps=num_warps, num_stages=num_stages, nvcc_flags=check_nvcc_flags(nvcc_flags),
    )

    if inductor_dir is not None:
        if target or diff_spec or rev:
            raise ProfkitError("--inductor reads a directory: leave out TARGET, --diff and --rev")
        codes = _inductor_kernels(inductor_dir, cache, kernel, params.arch, fmt)
        if len(codes) > 1 or not kernel:
            if html_path is not None:
                raise ProfkitError(f"--html shows one kernel and {len(codes)} were found", hint="add --kernel NAME")
            _show_many(ctx, codes, sass, fmt, checks, max_registers, console)
            return
        _show_one(ctx, codes[0], sass, raw, plain, summary_only, fmt, html_path, checks, max_registers, console)
        return
    if not target:
        raise ProfkitError("name a TARGET (a sample name, kernels.py::name, .cu, .ptx or .cubin)",
                           hint="profkit ptx --list shows the samples")

    a = resolve_target(target, params, kernel)
    if rev or diff_spec:
        b = diff_target(a, diff_spec, params) if diff_spec else a
        if rev:
            a = target_at_revision(a, rev, cache)
        with progress(f"compiling {target}"):  # seconds when not cached yet (stderr, on a terminal only)
            code_a, code_b = load_kernels(a, cache)[0], load_kernels(b, cache)[0]
        _show_diff(code_a, code_b, sass, plain, summary_only, fmt, html_path, console)
        return
    with progress(f"compiling {target}"):
        code = load_kernels(a, cache)[0]
    _show_one(ctx, code, sass, raw, plain, summary_only, fmt, html_path, checks, max_registers, console)


def _sample_rows() -> list[dict]:
    rows = []
    for s in SAMPLES:
        parts = []
        if s.signature:
            parts.append(s.signature)
        parts += [f"{k}={v}" for k, v in s.constexprs]
        if s.num_warps:
            parts.append(f"num_warps={s.num_warps}")
        rows.append({"name": s.name, "kind": s.kind, "kernel": s.kernel, "file": s.file,
                     "parameters": " ".join(parts), "description": s.description})
    return rows


def _header(code: KernelCode, language: str) -> str:
    how = "from the cache" if code.build.cached else f"compiled in {code.build.seconds:.2f} s"
    params = "; ".join(f"{k} {v}" for k, v in code.build.params.items() if v not in ("", None))
    text = f"{code.name} [{code.arch}] {language.upper()} from {code.label} - {code.build.compiler}"
    text += f", {how}" if code.build.kind in ("triton", "cuda", "ptx") else ""
    if params:
        text += f" ({params})"
    if not code.has_ptx and language == "sass":
        text += "; a cubin holds no PTX, showing SASS"
    return text


def _show_one(ctx: click.Context, code: KernelCode, sass: bool, raw: bool, plain: bool, summary_only: bool,
              fmt: str, html_path: Path | None, checks: tuple[str, ...], max_registers: int | None,
              console: Console) -> None:
    summary = summarize(code, sass=sass)
    if html_path is not None:
        _write(html_path, _kernel_page(code, summary))
    if checks or max_registers is not None:
        results = run_checks(summary, checks, max_registers)
        _report_checks(ctx, results, [summary], fmt)
        return
    if fmt == "json":
        click.echo(json_text(summary.to_json(), indent=2))
        return
    if fmt in ("csv", "md"):
        emit_rows(summary_rows(summary), SUMMARY_COLUMNS, fmt, title=f"{summary.kernel} [{summary.arch}]")
        return
    header = _header(code, summary.listing)
    if plain:
        click.echo(f"// {header}")
    else:
        console.print(header, style="bold")
    if not summary_only:
        render.print_listing(console, code.listing(sass, raw=raw), plain)
        click.echo()
    if plain:
        click.echo("\n".join(render.plain_summary(summary)))
    else:
        emit_rows(summary_rows(summary), SUMMARY_COLUMNS, "table", title=f"{summary.kernel} [{summary.arch}]")


def _kernel_page(code: KernelCode, summary: KernelSummary) -> str:
    sass_summary = summary if summary.listing == "sass" else summarize(code, sass=True)
    ptx_listing = code.ptx() if code.has_ptx else None
    ptx_summary = summarize(code, sass=False) if code.has_ptx else None
    return html.kernel_page(sass_summary, ptx_listing, code.sass(), ptx_summary)


def _write(path: Path, text: str) -> None:
    try:
        write_text(path, text)
    except OSError as exc:
        raise ProfkitError(f"cannot write {path}: {exc.strerror}") from None
    click.echo(f"profkit: wrote {path}", err=True)


def _report_checks(ctx: click.Context, results: list[CheckResult], summaries: list[KernelSummary],
                   fmt: str) -> None:
    failed = [r for r in results if not r.passed]
    if fmt == "json":
        click.echo(rows_to_json([{"kernel": r.kernel, "arch": r.arch, "check": r.check, "passed": r.passed,
                                  "detail": r.detail} for r in results]))
    elif failed:
        for r in failed:
            click.echo(r.line())
    else:
        kernels = ", ".join(f"{s.kernel} [{s.arch}]" for s in summaries)
        names = ", ".join(dict.fromkeys(r.check for r in results))
        click.echo(f"ok: {kernels}: {names}")
    if failed:
        ctx.exit(1)


def _show_diff(code_a: KernelCode, code_b: KernelCode, sass: bool, plain: bool, summary_only: bool, fmt: str,
               html_path: Path | None, console: Console) -> None:
    use_sass = sass or not (code_a.has_ptx and code_b.has_ptx)
    a_sum, b_sum = summarize(code_a, sass=use_sass), summarize(code_b, sass=use_sass)
    a_label, b_label = f"{code_a.label} ({code_a.name}, {code_a.arch})", f"{code_b.label} ({code_b.name}, {code_b.arch})"
    result = diff_kernels(code_a.listing(use_sass), code_b.listing(use_sass), a_sum, b_sum, a_label, b_label)
    if html_path is not None:
        _write(html_path, html.diff_page(result, a_label, b_label))
    if fmt == "json":
        click.echo(json_text({"a": a_sum.to_json(), "b": b_sum.to_json(), "deltas": result.deltas,
                               "diff": result.lines}, indent=2))
        return
    if fmt in ("csv", "md"):
        emit_rows(result.deltas, DELTA_COLUMNS, fmt, title=f"A: {a_label}; B: {b_label}")
        return
    if not summary_only:
        render.print_diff(console, result, plain)
        click.echo()
    emit_rows(result.deltas, DELTA_COLUMNS, "table", title=f"A: {a_label}\nB: {b_label}")
    for side, s in (("A", a_sum), ("B", b_sum)):
        click.echo(f"{side}: {s.verdict}")


def _inductor_kernels(directory: Path, cache: Cache, kernel: str | None, arch: Arch | None,
                      fmt: str) -> list[KernelCode]:
    with progress(f"reading the kernels under {directory}"):
        found = scan(directory, cache)
        codes = [code for build in found.builds for code in kernels_of(build, cache, every=True)]
    if arch is not None:
        codes = [c for c in codes if parse_arch(c.arch).capability == arch.capability]
    if kernel:
        codes = [c for c in codes if symbol_matches(c.symbol, kernel)]
        if not codes:
            names = ", ".join(sorted({c.name for b in found.builds for c in kernels_of(b, cache, every=True)}))
            raise ProfkitError(f"no compiled kernel {kernel!r} under {directory}", hint=f"compiled: {names or 'none'}")
    if found.source_only and fmt == "table":
        names = ", ".join(k.name for k in found.source_only)
        click.echo(f"{len(found.source_only)} kernel(s) only as source, not compiled yet: {names}", err=True)
    if not codes:
        raise ProfkitError(f"no compiled kernels under {directory}, only generated source",
                           hint="run the program once with TORCHINDUCTOR_CACHE_DIR set to this directory")
    return codes


def _show_many(ctx: click.Context, codes: list[KernelCode], sass: bool, fmt: str, checks: tuple[str, ...],
               max_registers: int | None, console: Console) -> None:
    summaries = [summarize(c, sass=sass) for c in codes]
    if checks or max_registers is not None:
        results = [r for s in summaries for r in run_checks(s, checks, max_registers)]
        _report_checks(ctx, results, summaries, fmt)
        return
    if fmt == "json":
        click.echo(json_text([s.to_json() for s in summaries], indent=2))
        return

    def widths(counts: dict[int, int]) -> str:
        return " ".join(f"{w}b x{n}" for w, n in counts.items()) or "-"

    rows = [{
        "kernel": s.kernel, "arch": s.arch, "registers": s.registers,
        "spills": "?" if s.spill_stores_bytes is None else f"{s.spill_stores_bytes}/{s.spill_loads_bytes}",
        "shared_bytes": s.shared_bytes, "global_loads": widths(s.mix.global_loads),
        "global_stores": widths(s.mix.global_stores), "vectorized": "yes" if s.vectorized else "no",
        "file": s.source,
    } for s in summaries]
    # An 80-column terminal has no room for the cache paths; CSV and Markdown keep them.
    columns = INDUCTOR_COLUMNS[:-1] if fmt == "table" else INDUCTOR_COLUMNS
    emit_rows(rows, columns, fmt, title=f"{len(rows)} compiled kernels ({summaries[0].listing})")

