"""The ncu section's roofline: the per-kernel table and the log-log figure.

Rows and roofs come from ``profkit.analysis.roofline``; this module only renders."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from profkit.output import Column
from profkit.report.model import Figure, Section, Table

ROOFLINE_COLUMNS = [
    Column("kernel", "Kernel", "kernel"), Column("launches", "Launches", "int"),
    Column("duration_ns", "Duration (ns)", "ns"), Column("flops", "FLOP", "si", "—"),
    Column("dram_bytes", "DRAM bytes", "si", "—"), Column("arithmetic_intensity", "FLOP/DRAM B", "float", "—"),
    Column("achieved_flops_per_s", "FLOP/s", "si", "—"),
    Column("achieved_dram_bytes_per_s", "DRAM B/s", "si", "—"), Column("roof", "Roof", "text", "—"),
    Column("bound", "Bound", "text", "—"), Column("pct_of_roof", "% of roof", "pct", "—"),
    Column("verdict", "Verdict"),
]


def roofline_inputs(csv_path: Path) -> Path:
    """Where to read the roofline: a `profkit trace` folder's raw pages when they lie next to
    its ncu.csv (they hold the dense tensor peaks the details page lacks), else the CSV."""
    from profkit.readers.run_folder import NCU_CSV, NCU_RAW_GLOB

    folder = csv_path.parent
    if csv_path.name == NCU_CSV and any(folder.glob(NCU_RAW_GLOB)):
        return folder
    return csv_path


def kernel_table_code(kernel_rows: Sequence[dict[str, Any]] | None) -> dict[str, dict[str, Any]]:
    """code_key -> machine-code facts of the kernel table's rows that have their code (the
    report's kernel section joins it first: caches, --inductor, --kernels)."""
    from profkit.analysis.kernels.names import code_key

    return {code_key(str(r["name"])): r for r in kernel_rows or () if r.get("code_variants")}


def fill_roofline(section: Section, csv_path: Path, top: int, found: dict[str, Any]) -> None:
    from profkit.analysis.roofline import chart_data, roofline
    from profkit.analysis.roofline.code import join_code
    from profkit.analysis.roofline.roofs import SPARSE_PEAK_HINT
    from profkit.readers.ncu import read_launches

    result = join_code(roofline(read_launches(roofline_inputs(csv_path))), kernel_table_code(found.get("kernels")))
    found["roofline"] = result
    if not result.launches:
        return
    rows = [dict(r.as_dict(), name=r.kernel) for r in result.kernels]
    section.tables.append(Table("roofline", "Roofline per kernel", ROOFLINE_COLUMNS, rows, top))
    sparse = sorted({roof for r in result.kernels for roof in r.sparse_peak_roofs})
    if sparse:
        section.notes.append(f"The {', '.join(sparse)} peak of {csv_path.name} is ncu's per-source peak, which "
                             f"counts 2:4 sparsity on Ampere and later: a dense kernel reaches half of it, and the "
                             f"figure draws that roof twice too high; {SPARSE_PEAK_HINT}.")
    if not result.has_metrics:
        section.notes.append(f"No roofline figure: {result.hint}.")
        return
    data = chart_data(result.kernels)
    section.figures.append(Figure(
        "roofline", "Roofline",
        "Every profiled kernel at its arithmetic intensity (FLOP per DRAM byte) and achieved FLOP/s, under this "
        "GPU's DRAM roof and the compute roofs of the pipes the kernels used (peaks from the capture: "
        "peak_sustained x the measured clock, median over launches).", roofline_png(data), data=data))


def roofline_png(data: dict[str, Any], title: str = "") -> bytes:
    """A log-log roofline: the DRAM (and L2) slope, one flat roof per compute pipe, one point per row.
    Kernel names are drawn as plain text (a "$" in a name is a character)."""
    from profkit.report.figures import plain_text

    with plain_text():
        return _draw_roofline(data, title)


def _draw_roofline(data: dict[str, Any], title: str) -> bytes:
    import numpy as np
    from matplotlib.figure import Figure as MplFigure

    from profkit.report.figures import png_bytes

    points: Sequence[dict[str, Any]] = data["points"]
    fig = MplFigure(figsize=(9.0, 5.6))
    ax = fig.add_subplot(1, 1, 1)
    intensities = [p["intensity"] for p in points] or [1.0]
    lo, hi = min(min(intensities) / 4, 0.01), max(max(intensities) * 4, 1e4)
    x = np.logspace(np.log10(lo), np.log10(hi), 200)
    compute = data["compute_roofs"]
    top_roof = max(compute.values()) if compute else None
    styles = ("-", "--")
    for (name, bw), style in zip(sorted(data["memory_roofs"].items()), styles):
        y = bw * x if top_roof is None else np.minimum(bw * x, top_roof)
        ax.plot(x, y, style, color="#444444", lw=1.5, label=f"{name} {bw / 1e12:.2f} TB/s")
    palette = ("#1f6fb4", "#d1495b", "#2a9d8f", "#8e6bbf", "#e9a03b", "#6c757d", "#b5651d")
    dram = data["memory_roofs"].get("DRAM")
    for (name, peak), color in zip(sorted(compute.items(), key=lambda kv: -kv[1]), palette):
        start = peak / dram if dram else lo
        ax.hlines(peak, start, hi, colors=color, lw=1.2, label=f"{name} {peak / 1e12:.1f} TFLOP/s")
    for p in points:
        ax.plot(p["intensity"], p["flops_per_s"], "o", color="#111111", ms=5)
        ax.annotate(p["label"][:40], (p["intensity"], p["flops_per_s"]), textcoords="offset points",
                    xytext=(5, 3), fontsize=7)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP per DRAM byte)")
    ax.set_ylabel("achieved FLOP/s")
    if title:
        ax.set_title(title)
    ax.grid(True, which="both", lw=0.3, alpha=0.5)
    ax.legend(loc="lower right", fontsize=7)
    fig.subplots_adjust(left=0.09, right=0.98, top=0.93 if title else 0.97, bottom=0.1)
    return png_bytes(fig)
