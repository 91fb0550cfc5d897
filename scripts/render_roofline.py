"""Render the roofline of the committed H100 captures (tests/data/roofline/) into reports/roofline/.

    PYTHONPATH=. python scripts/render_roofline.py [OUT_DIR]

One point per probe case (the NVTX range each launch ran in: gemm_bf16,
gelu_manual, softmax_triton, ...), its launches summed; roofline.png (all
cases), roofline.md and roofline.json (every case and launch).  No GPU needed.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from profkit.analysis.roofline import aggregate, chart_data, roofline
from profkit.output import rows_to_markdown
from profkit.readers.ncu import launches_from_csv, nvtx_ranges, read_csv_file
from profkit.report.roofline_section import ROOFLINE_COLUMNS, roofline_png

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "roofline"
REPORTS = ("gemm_fp32", "gemm_bf16", "gemm_fp8", "memory", "gelu", "softmax")


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "reports" / "roofline"
    out.mkdir(parents=True, exist_ok=True)
    launches, case_of = [], {}
    for report in REPORTS:
        table = read_csv_file(DATA / f"{report}_raw.csv.xz")
        for row, raw in zip(roofline(launches_from_csv(table)).launches, table.launches):
            case_of[id(row)] = (nvtx_ranges(raw) or [report])[-1]
            launches.append(row)
    cases = aggregate(launches, key=lambda r: case_of[id(r)])
    cases.sort(key=lambda r: list(case_of.values()).index(r.kernel))  # capture order
    data = chart_data(cases, label=lambda r: r.kernel)
    (out / "roofline.png").write_bytes(roofline_png(data, "H100 80GB HBM3: one point per probe case"))
    fusion = [r for r in cases if r.kernel.startswith(("gelu_", "softmax_"))]
    (out / "fusion.png").write_bytes(roofline_png(chart_data(fusion, label=lambda r: r.kernel),
                                                  "GELU and softmax variants: manual vs fused"))
    rows = [dict(r.as_dict(), kernel=r.kernel) for r in cases]
    md = ["# Roofline of the committed H100 captures", "",
          "Made by `scripts/render_roofline.py` from `tests/data/roofline/` (ncu raw pages). One row per probe "
          "case; a case's kernels are summed (the manual GELU is 8 kernels). Peaks: peak_sustained x the "
          "measured clock of each launch.", "", "![roofline](roofline.png)", "", "![fusion](fusion.png)", "",
          rows_to_markdown(rows, ROOFLINE_COLUMNS)]
    (out / "roofline.md").write_text("\n".join(md))
    (out / "roofline.json").write_text(json.dumps(
        {"cases": rows, "launches": [dict(r.as_dict(), case=case_of[id(r)]) for r in launches],
         "chart": data}, indent=1, default=str))
    print(out)


if __name__ == "__main__":
    main()
