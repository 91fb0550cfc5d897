"""The report's kernel table: time per kernel (= nsys stats), with each kernel's machine code
and achieved DRAM bandwidth next to its GPU time where they are known.

The machine code (registers, spills, load/store widths, the graded
vectorization) comes from the compiled Triton/inductor kernels in the folders
given (``profkit.analysis.kernels.code``): a run folder's recorded caches, or
``--inductor DIR``; or from the sources ``--kernels`` names, compiled now for the
trace's GPU (``profkit.analysis.kernels.targets``, labelled code_source "compiled").  The bandwidth comes from an ncu CSV
(``profkit.analysis.kernels.bandwidth``).  Every row carries the keys, None
where unknown, so report.json has one shape; HTML and Markdown show the
columns when there is something to show, and "—" for a kernel without.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from profkit.analysis.kernels import summaries
from profkit.analysis.kernels.bandwidth import attach_bandwidth, bandwidth_note, peak_bandwidth
from profkit.analysis.kernels.code import attach_code, launch_shapes
from profkit.analysis.kernels.graphs import unrecorded_kernels_note
from profkit.analysis.kernels.targets import KernelTargets, code_for_trace, code_notes
from profkit.errors import ProfkitError
from profkit.model import Trace
from profkit.output import KERNEL_BANDWIDTH_COLUMNS, KERNEL_CODE_COLUMNS, kernel_columns_with
from profkit.readers.ncu import read_ncu_csv
from profkit.report import sections as fill
from profkit.report.model import Section


def fill_kernels(section: Section, trace: Trace, top: int, found: dict[str, Any], intro: str,
                 code_dirs: Sequence[Path] = (), ncu_csv: Path | None = None,
                 kernel_targets: KernelTargets | None = None) -> None:
    rows = summaries.kernel_summary(trace)
    notes: list[str] = []
    code: dict[str, list[dict[str, Any]]] = {}
    compiled = None
    if code_dirs or kernel_targets:
        try:
            code, compiled = code_for_trace(trace, [r["name"] for r in rows], code_dirs, kernel_targets)
        except ProfkitError as exc:  # the table stands without the code
            notes.append(f"Machine code not read: {exc.one_line()}")
    rows = attach_code(rows, code, launch_shapes(trace) if code else None)
    if code_dirs or kernel_targets:
        notes += code_notes(rows, code_dirs, compiled)
    elif any(str(r["name"]).startswith("triton_") for r in rows):
        notes.append("Registers, spills and vectorization of the Triton kernels need their compiled code: "
                     "profkit report --inductor DIR (the program's TORCHINDUCTOR_CACHE_DIR or Triton cache), "
                     "a profkit trace run folder, which records them, or --kernels FILE.py to compile them now.")
    launches = None
    if ncu_csv is not None:
        try:
            launches = read_ncu_csv(Path(ncu_csv))
        except ProfkitError as exc:
            notes.append(f"Achieved bandwidth not read: {exc.one_line()}")
    peaks = peak_bandwidth(trace)
    rows = attach_bandwidth(rows, launches or [], peaks)
    notes.append(bandwidth_note(rows, launches, peaks))
    graph_note = unrecorded_kernels_note(trace)
    if graph_note:
        notes.insert(0, graph_note)  # first: the table leaves out GPU time
    extra = []
    if any(r.get("code_variants") and r.get("registers") is not None for r in rows):
        extra.append(KERNEL_CODE_COLUMNS)
    if launches:
        extra.append(KERNEL_BANDWIDTH_COLUMNS)
    fill.fill_summary(section, rows, kernel_columns_with(*extra), top, "kernels", found, intro)
    section.notes += notes
