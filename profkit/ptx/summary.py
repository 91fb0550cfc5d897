"""The summary of one kernel: resources, instruction mix, and the vectorization verdict."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from profkit.ptx.kernel import KernelCode
from profkit.ptx.parse import InstructionMix, instruction_mix

VECTOR_BITS = 128
# Widths always present in the JSON maps, so "32": 0 reads as "none", not "unknown".
STANDARD_WIDTHS = (128, 64, 32)


@dataclass(frozen=True)
class KernelSummary:
    kernel: str
    arch: str
    listing: str  # which listing the instruction counts come from: "ptx" | "sass"
    registers: int
    spill_stores_bytes: int | None  # None: unknown (a cubin with a stack frame and no ptxas log)
    spill_loads_bytes: int | None
    stack_bytes: int
    local_bytes: int
    static_shared_bytes: int
    dynamic_shared_bytes: int
    mix: InstructionMix
    verdict: str
    vectorized: bool  # strict: every global access is 128-bit or wider
    vector_share: float | None  # share of global load/store bytes moved by >=128-bit accesses (None: no accesses)
    vectorization: str  # graded: full | mostly | partly | none | no global memory
    source: str
    compiler: str
    resources_from: str

    @property
    def shared_bytes(self) -> int:
        return self.static_shared_bytes + self.dynamic_shared_bytes

    @property
    def spills(self) -> bool | None:
        if self.spill_stores_bytes is None or self.spill_loads_bytes is None:
            return None
        return self.spill_stores_bytes > 0 or self.spill_loads_bytes > 0

    def global_loads(self) -> dict[str, int]:
        return width_map(self.mix.global_loads)

    def global_stores(self) -> dict[str, int]:
        return width_map(self.mix.global_stores)

    def instruction_mix(self) -> dict[str, int]:
        return {**self.mix.counts, "total": self.mix.total,
                "global_loads_readonly": self.mix.readonly_global_loads,
                "global_loads_async": self.mix.async_global_loads}

    def to_json(self) -> dict[str, Any]:
        """The ``--format json`` object; the first keys are the documented ones."""
        return {
            "kernel": self.kernel,
            "arch": self.arch,
            "registers": self.registers,
            "spill_stores_bytes": self.spill_stores_bytes,
            "spill_loads_bytes": self.spill_loads_bytes,
            "shared_bytes": self.shared_bytes,
            "global_loads": self.global_loads(),
            "global_stores": self.global_stores(),
            "instruction_mix": self.instruction_mix(),
            "vectorized": self.vectorized,
            "vector_share": self.vector_share,
            "vectorization": self.vectorization,
            "verdict": self.verdict,
            "listing": self.listing,
            "local_bytes": self.local_bytes,
            "stack_bytes": self.stack_bytes,
            "static_shared_bytes": self.static_shared_bytes,
            "dynamic_shared_bytes": self.dynamic_shared_bytes,
            "source": self.source,
            "compiler": self.compiler,
            "resources_from": self.resources_from,
        }


def width_map(counts: dict[int, int]) -> dict[str, int]:
    widths = sorted(set(STANDARD_WIDTHS) | set(counts), reverse=True)
    return {str(w): counts.get(w, 0) for w in widths}


def memory_verdict(counts: dict[int, int], noun: str) -> str:
    """"all 2 global loads are 128-bit vectorized" / "2 of 2 global loads are scalar (32-bit: 2)"."""
    total = sum(counts.values())
    if total == 0:
        return f"no {noun}s"
    narrow = {w: n for w, n in counts.items() if w < VECTOR_BITS}
    if not narrow:
        wider = any(w > VECTOR_BITS for w in counts)
        return f"all {total} {noun}s are {VECTOR_BITS}-bit{' or wider' if wider else ''} vectorized"
    breakdown = ", ".join(f"{w}-bit: {n}" for w, n in sorted(narrow.items(), reverse=True))
    kind = "scalar" if max(narrow) <= 32 else f"narrower than {VECTOR_BITS} bits"
    return f"{sum(narrow.values())} of {total} {noun}s are {kind} ({breakdown})"


# Grades of the share of global bytes moved by 128-bit (or wider) accesses.
# "mostly": a kernel whose bulk traffic is vectorized but which has a scalar
# tail (a layer norm's twenty 128-bit loads and one 32-bit store of the mean)
# is not the same problem as a kernel that is scalar throughout.
MOSTLY_VECTORIZED = 0.8


def vector_byte_share(loads: dict[int, int], stores: dict[int, int]) -> float | None:
    """Share of the bytes of all global loads and stores moved by >=128-bit accesses
    (each instruction counted once, weighted by its width)."""
    total = sum(w * n for counts in (loads, stores) for w, n in counts.items())
    if total == 0:
        return None
    wide = sum(w * n for counts in (loads, stores) for w, n in counts.items() if w >= VECTOR_BITS)
    return wide / total


def vectorization_grade(share: float | None) -> str:
    if share is None:
        return "no global memory"
    if share >= 1.0:
        return "full"
    if share >= MOSTLY_VECTORIZED:
        return "mostly"
    return "partly" if share > 0 else "none"


def summarize(code: KernelCode, sass: bool = False) -> KernelSummary:
    listing = code.listing(sass)
    mix = instruction_mix(listing)
    resources = code.resources
    if code.ptxas is not None:
        stores, loads = code.ptxas.spill_stores_bytes, code.ptxas.spill_loads_bytes
        resources_from = "cubin (cuobjdump --dump-resource-usage) + ptxas -v"
    elif resources.stack_bytes == 0 and resources.local_bytes == 0:
        # Spills live in the stack frame: with no frame there can be none.
        stores = loads = 0
        resources_from = "cubin (cuobjdump --dump-resource-usage)"
    else:
        stores = loads = None
        resources_from = "cubin (cuobjdump --dump-resource-usage); no ptxas log, spills unknown"
    loads_verdict = memory_verdict(mix.global_loads, "global load")
    stores_verdict = memory_verdict(mix.global_stores, "global store")
    share = vector_byte_share(mix.global_loads, mix.global_stores)
    grade = vectorization_grade(share)
    verdict = f"{loads_verdict}; {stores_verdict}"
    if grade in ("mostly", "partly"):  # "full" and "none" already read plainly from the counts
        verdict = f"{grade} vectorized ({100 * share:.0f}% of global bytes in {VECTOR_BITS}-bit accesses): {verdict}"
    if mix.counts["tma"]:
        verdict += f"; {mix.counts['tma']} TMA bulk copies"
    widths = list(mix.global_loads) + list(mix.global_stores)
    return KernelSummary(
        kernel=code.name, arch=code.arch, listing=listing.language,
        registers=resources.registers, spill_stores_bytes=stores, spill_loads_bytes=loads,
        stack_bytes=resources.stack_bytes, local_bytes=resources.stack_bytes + resources.local_bytes,
        static_shared_bytes=resources.shared_bytes, dynamic_shared_bytes=code.dynamic_shared_bytes,
        mix=mix, verdict=verdict, vectorized=bool(widths) and min(widths) >= VECTOR_BITS,
        vector_share=share, vectorization=grade,
        source=code.label, compiler=code.build.compiler, resources_from=resources_from,
    )


def summary_rows(summary: KernelSummary) -> list[dict[str, Any]]:
    """The summary as (metric, value) rows for tables, Markdown and CSV."""
    def spill(value: int | None) -> str:
        return "unknown" if value is None else f"{value} B"

    def widths(counts: dict[int, int]) -> str:
        return ", ".join(f"{w}-bit x{n}" for w, n in counts.items()) or "none"

    mix = summary.mix
    rows = [
        ("kernel", summary.kernel), ("arch", summary.arch), ("source", summary.source),
        ("compiler", summary.compiler),
        ("registers / thread", summary.registers),
        ("spill stores / loads", f"{spill(summary.spill_stores_bytes)} / {spill(summary.spill_loads_bytes)}"),
        ("local memory / thread", f"{summary.local_bytes} B (stack frame {summary.stack_bytes} B)"),
        ("shared memory / block", (f"{summary.shared_bytes} B (static {summary.static_shared_bytes} B, "
                                   f"dynamic {summary.dynamic_shared_bytes} B)")),
        (f"global loads ({summary.listing})", widths(mix.global_loads)
         + (f"; read-only path: {mix.readonly_global_loads}" if mix.readonly_global_loads else "")
         + (f"; async: {mix.async_global_loads}" if mix.async_global_loads else "")),
        (f"global stores ({summary.listing})", widths(mix.global_stores)),
        ("shared loads / stores", f"{mix.counts['shared_load']} / {mix.counts['shared_store']}"),
        ("FMA / other FP", f"{mix.counts['fma']} / {mix.counts['fp']}"),
        ("special functions (SFU)", mix.counts["sfu"]),
        ("tensor core (MMA)", mix.counts["mma"]),
        ("branches", mix.counts["branch"]),
        ("instructions", mix.total),
        ("verdict", summary.verdict),
        ("resources from", summary.resources_from),
    ]
    return [{"metric": k, "value": v} for k, v in rows]
