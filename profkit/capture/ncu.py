"""Profile the kernels that took the most GPU time with Nsight Compute.

One ``ncu`` run per kernel: ``-k NAME -c 1`` profiles that kernel's first
launch and nothing else, so the cost is one replayed launch per kernel no
matter how often the program launches it.  (A single run with a regex over
all N names and ``-c N`` would spend its count on whichever kernel launches
first and repeatedly.)  Kernels are matched by their mangled name when the
export has it (``--kernel-name-base mangled``): exact, and free of the
template and parameter text that makes demangled names hard to match.

The reports (ncu-<rank>.ncu-rep) are imported to CSV with
``ncu --import R --csv --page details`` and concatenated into ncu.csv,
with the ID column renumbered so every profiled launch keeps its own ID.
"""

from __future__ import annotations

import csv
import io
import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from profkit.errors import ProfkitError

BASE_SECTIONS = ("SpeedOfLight", "Occupancy", "LaunchStats")
# The roofline (profkit roofline, the report's roofline figure): ncu's FP roofline and the
# hierarchical tensor chart, whose per-instruction tensor counters and dense peaks reach the
# raw page (imported next to ncu.csv as ncu-<rank>-raw.csv).
# What they cost (tests/data/roofline/*.stdout and capture_log.txt, H100, ncu 2025.3): ncu replays
# each profiled kernel 17 times with them against 10 times with BASE_SECTIONS alone, i.e. 7 more
# replays of that one launch (1.7x its replay time).  In wall time the difference does not show
# at the logs' 1 s resolution: one ncu run costs 9-10 s per kernel with them (program start-up
# included: gemm_fp32, gemm_bf16, gemm_fp8, 1 kernel each) and 10 s for two kernels (memory),
# against 11 s for two kernels with BASE_SECTIONS (old_way); start-up, not replay, dominates.
ROOFLINE_SECTIONS = ("SpeedOfLight_RooflineChart", "SpeedOfLight_HierarchicalTensorRooflineChart")
SECTIONS = BASE_SECTIONS + ROOFLINE_SECTIONS
# dram bytes / duration = achieved DRAM bandwidth, independent of the section set.
BASE_METRICS = ("dram__bytes_read.sum", "dram__bytes_write.sum", "gpu__time_duration.sum")
FLOP_OPS = ("ffma", "fadd", "fmul", "dfma", "dadd", "dmul", "hfma", "hadd", "hmul")
# What ncu's own roofline sections read, on every chip since Volta (scripts/roofline_metrics.py's
# "safe" list): FP instruction counts and their peaks, bytes per memory level, the clocks.
# Chip-specific tensor counters are not named here: a name the chip lacks fails the whole
# capture; the hierarchical tensor chart brings the ones the chip has.
ROOFLINE_METRICS = (
    "dram__bytes.sum", "dram__bytes.sum.per_second", "dram__bytes.sum.peak_sustained",
    "sm__cycles_elapsed.avg.per_second", "lts__t_bytes.sum", "l1tex__t_bytes.sum",
    *(f"smsp__sass_thread_inst_executed_op_{op}_pred_on.sum" for op in FLOP_OPS),
    *(f"sm__sass_thread_inst_executed_op_{op}_pred_on.sum.peak_sustained" for op in ("ffma", "dfma", "hfma")),
)
METRICS = BASE_METRICS + ROOFLINE_METRICS

PERMISSION_HINT = ("GPU performance counters are restricted to admin users: run as root, or load the driver with "
                   "NVreg_RestrictProfilingToAdminUsers=0 (see `profkit doctor`)")


@dataclass(frozen=True)
class KernelTarget:
    """A kernel to profile: how to show it and how ncu should match it."""

    rank: int  # 1 = most GPU time
    name: str  # as shown in the report (demangled)
    match: str  # the name ncu matches exactly
    name_base: str  # ncu --kernel-name-base: mangled | demangled | function
    total_ns: int
    instances: int


def pick_targets(rows: Sequence[Mapping], n: int) -> list[KernelTarget]:
    """The n kernels with the most total GPU time, from kernel-summary rows.

    A row needs ``name`` and ``total_ns``; ``mangled`` (or ``mangled_name``)
    is used for matching when present, else the demangled name.
    """
    ordered = sorted(rows, key=lambda r: (-int(r.get("total_ns") or 0), str(r.get("name"))))
    targets = []
    for rank, row in enumerate(ordered[:n], start=1):
        mangled = row.get("mangled") or row.get("mangled_name")
        name = str(row.get("name"))
        targets.append(KernelTarget(
            rank=rank,
            name=name,
            match=str(mangled) if mangled else name,
            name_base="mangled" if mangled else "demangled",
            total_ns=int(row.get("total_ns") or 0),
            instances=int(row.get("instances") or 0),
        ))
    return targets


def build_ncu_command(ncu: Path | str, target: KernelTarget, report_base: Path, program: Sequence[str],
                      extra_args: Sequence[str] = (), roofline: bool = True) -> list[str]:
    """``ncu --section ... -k NAME -c 1 -o REPORT program...``; ``roofline=False``: the
    sections and metrics of before the roofline (the fallback where ncu refuses them)."""
    cmd = [str(ncu)]
    for section in SECTIONS if roofline else BASE_SECTIONS:
        cmd += ["--section", section]
    cmd += ["--metrics", ",".join(METRICS if roofline else BASE_METRICS)]
    # Clocks as the program sees them (ncu locks them to base by default),
    # so durations compare with the nsys trace.
    cmd += ["--clock-control", "none"]
    cmd += ["--kernel-name-base", target.name_base, "--kernel-name", target.match, "--launch-count", "1"]
    cmd += ["--force-overwrite", "--export", str(report_base), *extra_args, *program]
    return cmd


def build_import_command(ncu: Path | str, report: Path, page: str = "details") -> list[str]:
    return [str(ncu), "--import", str(report), "--csv", "--page", page]


def import_csv(ncu: Path | str, report: Path, env: Mapping[str, str] | None = None, page: str = "details") -> str:
    """A page (details or raw) of an .ncu-rep as CSV text."""
    try:
        proc = subprocess.run(build_import_command(ncu, report, page), capture_output=True, text=True,
                              env=dict(env) if env is not None else None, check=False, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ProfkitError(f"ncu --import {report.name} failed ({exc})") from None
    if proc.returncode != 0:
        raise ProfkitError(f"ncu --import {report.name} failed: {first_error(proc.stdout + proc.stderr)}")
    return proc.stdout


def merge_details_csv(texts: Sequence[str]) -> str:
    """Concatenate details-page CSVs, renumbering "ID" so launches stay distinct.

    Each report numbers its launches from 0; after merging, report k's IDs
    follow report k-1's.  Lines before the header (==PROF== noise) are dropped.
    """
    out = io.StringIO()
    writer = csv.writer(out, quoting=csv.QUOTE_ALL, lineterminator="\n")
    header: list[str] | None = None
    offset = 0
    for text in texts:
        rows = list(csv.reader(_from_header(text)))
        if not rows:
            continue
        this_header, body = rows[0], rows[1:]
        if header is None:
            header = this_header
            writer.writerow(header)
        elif this_header != header:
            raise ProfkitError("ncu CSV pages have different columns and cannot be merged")
        id_col = header.index("ID") if "ID" in header else None
        seen = -1
        for row in body:
            if not row:
                continue
            if id_col is not None and row[id_col].strip().isdigit():
                local = int(row[id_col])
                seen = max(seen, local)
                row[id_col] = str(local + offset)
            writer.writerow(row)
        offset += seen + 1
    return out.getvalue()


def _from_header(text: str) -> list[str]:
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith('"ID"') or line.startswith("ID,"):
            return lines[i:]
    return []


def first_error(output: str) -> str:
    """The most useful line of a failed ncu run."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    for line in lines:
        if "ERR_NVGPUCTRPERM" in line:
            return f"no permission to read GPU performance counters ({PERMISSION_HINT})"
    for line in lines:
        if line.startswith("==ERROR=="):
            return line[len("==ERROR=="):].strip()
    for line in lines:
        if "No kernels were profiled" in line:
            return line.replace("==WARNING==", "").strip()
    return lines[-1] if lines else "no output"


def ncu_environment(base: Mapping[str, str]) -> dict[str, str]:
    env = dict(base)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def refused_roofline(output: str) -> bool:
    """Whether ncu failed on a section or metric name (an older ncu or chip): retry without the roofline."""
    return any(line.startswith("==ERROR==") and ("section" in line.lower() or "metric" in line.lower())
               for line in output.splitlines())


def raw_csv_name(target: KernelTarget) -> str:
    # one file per report: raw pages of different reports print different units (ms vs us)
    return f"ncu-{target.rank}-raw.csv"


def report_path(run_dir: Path, target: KernelTarget) -> Path:
    return run_dir / f"ncu-{target.rank}.ncu-rep"


def report_base(run_dir: Path, target: KernelTarget) -> Path:
    # ncu appends .ncu-rep to --export
    return run_dir / f"ncu-{target.rank}"


def remove_stale(run_dir: Path) -> None:
    for old in run_dir.glob("ncu-*.ncu-rep"):
        os.remove(old)
