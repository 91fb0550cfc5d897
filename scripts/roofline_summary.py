"""A first look at the roofline fixtures, for the person who ran the capture
(scripts/make_roofline_fixtures.sh writes it to summary.txt): per profiled
launch its case (from <report>_nvtx.csv), duration, DRAM bytes and rate, the
FLOPs the counters give, and for the GEMMs the ratio of counted FLOPs to
2*M*N*K (issue #23 wants achieved FLOP/s within 5% of 2*M*N*K/duration).

Usage: python3 scripts/roofline_summary.py REPORT...   (in the capture folder;
REPORT is a base name: REPORT_raw.csv, REPORT.cases.json, REPORT_nvtx.csv)
Informational only: never fails the capture.
"""

from __future__ import annotations

import csv
import json
import re
import sys
from pathlib import Path

PREFIX = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
TIME = {"nsecond": 1e-9, "ns": 1e-9, "usecond": 1e-6, "us": 1e-6, "msecond": 1e-3, "ms": 1e-3,
        "second": 1.0, "s": 1.0}


def scale(unit: str) -> float:
    """Multiplier to base units (bytes, seconds, ops, per second) of an ncu unit such as Mbyte or Gbyte/second."""
    unit = unit.strip()
    num, _, den = unit.partition("/")
    factor = TIME.get(num)
    if factor is None:
        m = re.match(r"^([KMGTP]?)(.*)$", num)
        factor = PREFIX[m.group(1)] if m and m.group(2) and m.group(2)[0].islower() else 1.0
    if den:
        factor /= TIME.get(den, 1.0)
    return factor


def table(path: Path) -> tuple[list[str], list[str], list[list[str]]]:
    lines = path.read_text(errors="replace").splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        return [], [], []
    rows = list(csv.reader(lines[start:]))
    header = rows[0]
    units = rows[1] if len(rows) > 1 and not rows[1][0].strip().isdigit() else [""] * len(header)
    data = [r for r in rows[1:] if r and r[0].strip().isdigit()]
    return header, units, data


def value(header: list[str], units: list[str], row: list[str], name: str) -> float | None:
    if name not in header:
        return None
    i = header.index(name)
    try:
        return float(row[i].replace(",", "")) * scale(units[i] if i < len(units) else "")
    except (ValueError, IndexError):
        return None


def summarize(base: str) -> None:
    raw = Path(f"{base}_raw.csv")
    if not raw.is_file():
        print(f"== {base}: no {raw}")
        return
    header, units, data = table(raw)
    names = {}
    if Path(f"{base}_nvtx.csv").is_file():
        h, _, rows = table(Path(f"{base}_nvtx.csv"))
        if "Kernel Name" in h:
            names = {r[0]: r[h.index("Kernel Name")] for r in rows}
    cases = []
    if Path(f"{base}.cases.json").is_file():
        cases = json.loads(Path(f"{base}.cases.json").read_text()).get("cases", [])
    windows = [c for c in cases if "window" in c]
    tensor_cols = [h for h in header if h.startswith("sm__ops_path_tensor_src_") and h.endswith(".sum")]
    print(f"== {base}: {len(data)} launches profiled, {len(windows)} windows; "
          f"{len(header)} columns, {len(tensor_cols)} tensor-op counters")
    for c in cases:
        if not str(c.get("status", "ok")).startswith("ok"):
            print(f"   {c.get('case')}: {c.get('status')}")
    for row in data:
        kid = row[0]
        kname = row[header.index("Kernel Name")] if "Kernel Name" in header else "?"
        dur = value(header, units, row, "gpu__time_duration.sum")
        dram = value(header, units, row, "dram__bytes.sum")
        rate = value(header, units, row, "dram__bytes.sum.per_second")
        ops = {op: value(header, units, row, f"smsp__sass_thread_inst_executed_op_{op}_pred_on.sum") or 0.0
               for op in ("ffma", "fadd", "fmul", "hfma", "hadd", "hmul", "dfma", "dadd", "dmul")}
        fp32 = 2 * ops["ffma"] + ops["fadd"] + ops["fmul"]
        fp16 = 2 * ops["hfma"] + ops["hadd"] + ops["hmul"]
        fp64 = 2 * ops["dfma"] + ops["dadd"] + ops["dmul"]
        # counters may nest (a path and its sub-paths): show each nonzero one, compare with the largest
        tensor_by = {c: value(header, units, row, c) or 0.0 for c in tensor_cols}
        tensor_by = {c: v for c, v in tensor_by.items() if v}
        tensor = max(tensor_by.values(), default=0.0)
        line = (f"   ID {kid:>3} [{names.get(kid, '?')}] {kname[:70]!r}\n"
                f"          dur {fmt(dur, 's')}  dram {fmt(dram, 'B')}  dram rate {fmt(rate, 'B/s')}  "
                f"fp32 {fmt(fp32, 'FLOP')}  fp16 {fmt(fp16, 'FLOP')}  fp64 {fmt(fp64, 'FLOP')}  tensor {fmt(tensor, 'op')}")
        for c, v in tensor_by.items():
            line += f"\n          {c} = {fmt(v, 'op')}"
        case = next((c for c in windows if c.get("case") == names.get(kid)), None)
        if case is None and len(windows) == 1 and len(data) == 1:
            case = windows[0]
        if case and case.get("kind") == "gemm" and dur:
            counted = max(fp32, tensor)
            line += (f"\n          GEMM {case['dtype']} {case['M']}x{case['N']}x{case['K']}: 2MNK/dur "
                     f"{fmt(case['flops'] / dur, 'FLOP/s')}, counted/2MNK {counted / case['flops']:.4f}")
        print(line)


def fmt(x: float | None, unit: str) -> str:
    if x is None:
        return "n/a"
    for p, f in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(x) >= f:
            return f"{x / f:.3f} {p}{unit}"
    if unit == "s" and x:
        return f"{x * 1e6:.2f} u{unit}"
    return f"{x:.3g} {unit}"


def main() -> None:
    for base in sys.argv[1:]:
        try:
            summarize(base)
        except Exception as exc:  # informational: never fail the capture
            print(f"== {base}: summary failed ({type(exc).__name__}: {exc})")


if __name__ == "__main__":
    main()
