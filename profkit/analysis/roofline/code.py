"""The roofline verdict joined with the kernel's machine code, where that code is known.

A memory-bound kernel below the DRAM roof moves its bytes badly or moves too
many.  When its compiled code is at hand (a Triton/inductor cache, or sources
compiled now with ``--kernels``: ``profkit.analysis.kernels.code`` and
``kernels.targets``), scalar global loads in it are a lead: 32-bit loads need
four times the instructions of 128-bit ones for the same bytes, and the
kernel runs out of load slots before it runs out of bandwidth.  The row then
carries the code's facts (``vector_grade``, ``code_verdict``, ``code_source``)
and its verdict says so.

Rows join their code on ``kernels.names.code_key`` (the function name, ``()``
for a C++ kernel), as the kernel table does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from profkit.analysis.kernels.code import pick_variant, variants_for
from profkit.analysis.kernels.names import code_key
from profkit.analysis.roofline.analysis import RooflineResult
from profkit.analysis.roofline.roofs import NEAR_ROOF_PCT, RooflineRow, verdict

SCALAR_BITS = 32  # a load of 32 bits or fewer per thread is scalar (ptx.summary.memory_verdict's word)


def launch_shapes(launches: Sequence[Any]) -> dict[str, tuple[int, int | None]]:
    """code_key -> (threads per block, shared memory per block) of each kernel's most
    profiled configuration (``profkit.readers.ncu.NcuLaunch``), for ``pick_variant``."""
    counts: dict[str, dict[tuple[int, int | None], int]] = {}
    for x in launches:
        if not x.block_size:
            continue
        parts = [b for b in (x.static_smem_bytes, x.dynamic_smem_bytes) if b is not None]
        shape = (int(x.block_size), int(sum(parts)) if parts else None)
        per = counts.setdefault(code_key(str(x.kernel_name)), {})
        per[shape] = per.get(shape, 0) + 1
    return {key: max(per, key=lambda s: per[s]) for key, per in counts.items()}


def chosen_code(code: Mapping[str, list[dict[str, Any]]], launches: Sequence[Any]) -> dict[str, dict[str, Any]]:
    """code_key -> the facts of the variant that ran (``kernels.code.pick_variant``), for the
    profiled kernels whose code is among ``code`` (``kernels.targets.code_for_trace``'s form)."""
    shapes = launch_shapes(launches)
    out = {}
    for key in {code_key(str(x.kernel_name)) for x in launches}:
        variants = variants_for(key, dict(code))
        if variants:
            out[key] = pick_variant(variants, shapes.get(key))
    return out


def code_for_launches(launches: Sequence[Any], directories: Sequence[Path] = (),
                      targets: Any = None) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """The code of the profiled kernels: from the Triton/inductor caches under ``directories``
    (what ran) and compiled now from ``targets`` (a ``kernels.targets.KernelTargets``, for the
    GPU and block sizes the capture recorded); (``chosen_code``'s mapping, the notes that
    say where it came from, as under the kernel table)."""
    from profkit.analysis.kernels.code import code_by_kernel
    from profkit.analysis.kernels.targets import code_notes, compile_for_launches

    names = list(dict.fromkeys(str(x.kernel_name) for x in launches))
    code = code_by_kernel(directories, names=names) if directories else {}
    compiled = None
    if targets:
        compiled = compile_for_launches(targets, launches, names)
        for key, variants in compiled.code.items():
            code.setdefault(key, []).extend(variants)
    chosen = chosen_code(code, launches)
    rows = [dict(chosen.get(code_key(n), {}), name=n, code_variants=len(variants_for(code_key(n), code)) or None)
            for n in names]
    return chosen, code_notes(rows, list(directories), compiled)


def scalar_load_lead(facts: Mapping[str, Any]) -> str | None:
    """"its code has scalar global loads (2 of 2: 32-bit x2): a lead, ..." or None."""
    loads = {int(w): int(n) for w, n in (facts.get("global_loads") or {}).items() if n}
    scalar = {w: n for w, n in loads.items() if w <= SCALAR_BITS}
    if not scalar:
        return None
    widths = ", ".join(f"{w}-bit x{n}" for w, n in sorted(scalar.items(), reverse=True))
    where = " (compiled now from --kernels)" if facts.get("code_source") == "compiled" else ""
    return (f"its code{where} has scalar global loads ({sum(scalar.values())} of {sum(loads.values())}: {widths}): "
            "a lead, 128-bit loads move the same bytes in a quarter of the instructions")


def with_code(row: RooflineRow, facts: Mapping[str, Any] | None) -> RooflineRow:
    """The row with its code's facts, and the verdict joined with them where the kernel is
    memory-bound below its roof."""
    if not facts:
        return row
    new = replace(row, vector_grade=facts.get("vector_grade"), code_verdict=facts.get("code_verdict"),
                  code_source=facts.get("code_source"))
    below = row.bound == "memory" and row.pct_of_roof is not None and row.pct_of_roof < NEAR_ROOF_PCT
    new.verdict = verdict(new, scalar_load_lead(facts) if below else None)
    return new


def join_code(result: RooflineResult, code: Mapping[str, Mapping[str, Any]]) -> RooflineResult:
    """``result`` with every row joined to ``code`` (code_key -> the facts of the code that
    ran, as ``chosen_code`` or the kernel table's rows give them)."""
    if not code:
        return result
    return replace(result, launches=[with_code(r, code.get(code_key(r.kernel))) for r in result.launches],
                   kernels=[with_code(r, code.get(code_key(r.kernel))) for r in result.kernels])
