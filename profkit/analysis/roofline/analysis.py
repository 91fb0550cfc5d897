"""The roofline of a capture: rows per launch and per kernel name, the GPU's roofs, a hint."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from profkit.analysis.kernels.names import function_name
from profkit.analysis.roofline.roofs import MEMORY_ROOFS, RooflineRow, aggregate, roofline_rows

CAPTURE_HINT = ("this ncu CSV has no roofline metrics (FLOP counters and peaks): capture them with "
                "`profkit trace --ncu-top N` (collected by default), or add --section SpeedOfLight_RooflineChart "
                "--section SpeedOfLight_HierarchicalTensorRooflineChart to ncu")


@dataclass
class RooflineResult:
    launches: list[RooflineRow]
    kernels: list[RooflineRow]  # one per kernel name
    has_metrics: bool  # whether any launch has FLOP counters and peaks
    hint: str | None  # one line on how to get what is missing, or None
    sources: list[str] = field(default_factory=list)


def roofline(launches: Sequence[Any]) -> RooflineResult:
    """Rows per launch (in capture order) and per kernel name (most time first)."""
    rows = roofline_rows(launches)
    has = any(r.flops is not None and r.peaks for r in rows)
    return RooflineResult(launches=rows, kernels=aggregate(rows), has_metrics=has,
                          hint=None if has or not rows else CAPTURE_HINT)


def base_name(kernel: str) -> str:
    """The label on the chart: the bare function name."""
    return function_name(kernel) or kernel


def chart_data(rows: Sequence[RooflineRow], label: Any = None) -> dict[str, Any]:
    """What the roofline figure plots: one point per row (intensity in FLOP per DRAM byte,
    achieved FLOP/s) and the GPU's roofs.  A roof's peak is the median over the rows that
    measured it: clocks move from launch to launch (a GEMM under power capping runs slower)."""
    points = []
    for r in rows:
        if r.arithmetic_intensity and r.achieved_flops_per_s:
            points.append({"label": label(r) if label else base_name(r.kernel), "kernel": r.kernel,
                           "intensity": r.arithmetic_intensity, "flops_per_s": r.achieved_flops_per_s,
                           "roof": r.roof, "bound": r.bound, "pct_of_roof": r.pct_of_roof})
    roofs: dict[str, float] = {}
    for roof in {k for r in rows for k in r.peaks if k != "L1"}:
        values = [r.peaks[roof] for r in rows if roof in r.peaks]
        roofs[roof] = statistics.median(values)
    memory = {k: v for k, v in roofs.items() if k in MEMORY_ROOFS}
    compute = {k: v for k, v in roofs.items() if k not in MEMORY_ROOFS}
    # a compute roof is drawn only where some kernel used that pipe, or it is fp32 (the baseline)
    used = {k for r in rows for k, v in r.flops_by_roof.items() if v} | {"fp32"}
    compute = {k: v for k, v in compute.items() if k in used}
    return {"points": points, "memory_roofs": memory, "compute_roofs": compute}
