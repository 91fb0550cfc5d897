"""Comparing two kernels: a normalized unified diff and a table of summary deltas.

Register names (``%r12``, ``%rd3``, ``R12``, ``UR4``, ``P0``), numbered labels
(``$L__BB0_3``, ``.L_x_12``), SASS addresses and ``.reuse`` flags are
normalized away, so renumbering alone makes no diff; what is left is a
change in the instructions themselves.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import Any

from profkit.ptx.parse import CATEGORIES, Listing
from profkit.ptx.summary import KernelSummary

_PTX_REGISTER = re.compile(r"%([a-z]+)\d+\b")
_PTX_REG_COUNT = re.compile(r"<\d+>")
_PTX_LABEL = re.compile(r"\$L__([A-Za-z_]+?)\d+(?:_\d+)?\b")
_SASS_ADDRESS = re.compile(r"^\s*/\*[0-9a-fA-F]+\*/\s*")
_SASS_ENCODING = re.compile(r"/\*\s*0x[0-9a-fA-F]+\s*\*/")
_SASS_REGISTER = re.compile(r"\b(U?R|U?P|B|SR_?)(\d+)\b")
_SASS_LABEL = re.compile(r"\.L_x_\d+")


def normalize(listing: Listing) -> list[str]:
    """The listing's lines with renumbering-only differences removed."""
    # The kernel's own name (in .entry, its _param_N names, SASS labels), but not
    # an opcode that happens to share it ("add" vs "add.f32").
    own_name = re.compile(rf"(?<![\w$]){re.escape(listing.function)}(?=_param_\d|[\s(,:)]|$)")
    out = []
    for line in listing.lines:
        if listing.language == "ptx":
            text = line.split("//", 1)[0]
            text = _PTX_REGISTER.sub(r"%\1#", text)
            text = _PTX_REG_COUNT.sub("<#>", text)
            text = _PTX_LABEL.sub(r"$L__\1#", text)
        else:
            text = _SASS_ENCODING.sub("", _SASS_ADDRESS.sub("", line))
            if text.strip().startswith("//"):
                continue
            text = _SASS_REGISTER.sub(lambda m: f"{m.group(1)}#", text)
            text = _SASS_LABEL.sub(".L_x_#", text).replace(".reuse", "")
        text = own_name.sub("<kernel>", text)
        text = " ".join(text.split())
        if text:
            out.append(text)
    return out


@dataclass(frozen=True)
class KernelDiff:
    a: KernelSummary
    b: KernelSummary
    language: str
    lines: list[str]  # unified diff of the normalized listings
    deltas: list[dict[str, Any]]

    @property
    def identical(self) -> bool:
        return not self.lines


def diff_kernels(a_listing: Listing, b_listing: Listing, a: KernelSummary, b: KernelSummary,
                 a_label: str, b_label: str, context: int = 3) -> KernelDiff:
    lines = list(difflib.unified_diff(normalize(a_listing), normalize(b_listing),
                                      fromfile=a_label, tofile=b_label, lineterm="", n=context))
    return KernelDiff(a, b, a_listing.language, lines, summary_deltas(a, b))


def summary_deltas(a: KernelSummary, b: KernelSummary) -> list[dict[str, Any]]:
    """Rows of (metric, a, b, change) for every metric that is set on either side.

    Width rows ("global loads 128-bit") and instruction-mix rows are listed
    when either kernel has any; the rest always.
    """
    rows: list[dict[str, Any]] = []

    def add(metric: str, va: Any, vb: Any) -> None:
        change: Any
        if isinstance(va, bool) or isinstance(vb, bool) or not isinstance(va, int) or not isinstance(vb, int):
            change = "" if va == vb else "changed"
        else:
            change = vb - va
        rows.append({"metric": metric, "a": va, "b": vb, "change": change})

    add("registers", a.registers, b.registers)
    add("spill stores (B)", a.spill_stores_bytes, b.spill_stores_bytes)
    add("spill loads (B)", a.spill_loads_bytes, b.spill_loads_bytes)
    add("local memory (B)", a.local_bytes, b.local_bytes)
    add("shared memory (B)", a.shared_bytes, b.shared_bytes)
    for noun, ma, mb in (("global loads", a.mix.global_loads, b.mix.global_loads),
                         ("global stores", a.mix.global_stores, b.mix.global_stores)):
        for width in sorted(set(ma) | set(mb), reverse=True):
            add(f"{noun} {width}-bit", ma.get(width, 0), mb.get(width, 0))
    if a.mix.readonly_global_loads or b.mix.readonly_global_loads:
        add("global loads, read-only path", a.mix.readonly_global_loads, b.mix.readonly_global_loads)
    for category in CATEGORIES:
        ca, cb = a.mix.counts[category], b.mix.counts[category]
        if ca or cb:
            add(f"{category.replace('_', ' ')} instructions", ca, cb)
    add("instructions", a.mix.total, b.mix.total)
    add("vectorized", a.vectorized, b.vectorized)
    return rows
