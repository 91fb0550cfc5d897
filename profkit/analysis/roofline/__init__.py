"""Which roof is each profiled kernel under, and how far below it does it run?

From an Nsight Compute capture (CSV, raw or details page): per kernel launch
and per kernel name, FLOPs (CUDA-core FP counters, FMA = 2; tensor-core
``sm__ops_path_tensor_*`` counters per source type), DRAM / L2 / L1 bytes,
arithmetic intensity, achieved FLOP/s and bytes/s, the binding roof (the one
with the highest % of its peak), memory- or compute-bound, and a verdict in
plain words.  Peaks come from the same capture (``peak_sustained`` x the
measured clock), as ncu computes them.  Where the kernels' machine code is
known, ``code.join_code`` adds it: a memory-bound kernel below its roof whose
code has scalar global loads says so in its verdict.

    from profkit.analysis.roofline import roofline
    result = roofline(read_ncu_csv("ncu.csv"))
    result.launches, result.kernels, result.hint
"""

from __future__ import annotations

from profkit.analysis.roofline.analysis import (
           CAPTURE_HINT,
           RooflineResult,
           chart_data,
           roofline,
)
from profkit.analysis.roofline.roofs import NEAR_ROOF_PCT, RooflineRow, aggregate, launch_row, verdict

__all__ = ["CAPTURE_HINT", "NEAR_ROOF_PCT", "RooflineResult", "RooflineRow", "aggregate", "chart_data",
           "launch_row", "roofline", "verdict"]
