"""`profkit report` on the 1M-kernel export, against `nsys stats` on the same file, in the same run.

Issue 10's target: `profkit report` on the export of ``benchmarks/ingest.py``
(1,000,728 kernels, 2,500,599 CUDA API calls) in at most 5 s wall and under
400 MB peak RSS on a 2-core machine.  A wall time alone says little on a
shared machine, so each round runs, back to back and each in a fresh
process: the anchor ``nsys stats --report cuda_gpu_kern_sum``, ``profkit
kernels``, ``nsys stats --report cuda_api_sum``, ``profkit api`` and
``profkit report``; it prints the best wall time, the CPU time (user +
system, all threads) and the peak RSS of each, the same-run ratios (kernels
and api against their nsys report, the report's wall time as a multiple of
cuda_gpu_kern_sum's), and the load average before and after (other jobs on
the machine inflate wall times, not CPU times).

    python benchmarks/report.py                  # the cached big export (built by ingest.py if missing)
    python benchmarks/report.py --repeat 5
    python benchmarks/report.py --export other.sqlite
"""

from __future__ import annotations

import argparse
import compileall
import math
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.ingest import DEFAULT_SOURCE, build_export, find_nsys  # noqa: E402
from benchmarks.ingest import run_once as ingest_run_once  # noqa: E402
from tests.conftest import nsys_fixture  # noqa: E402

TARGET_WALL_S, TARGET_PEAK_MB = 5.0, 400.0

def run_once(argv: list[str]) -> tuple[float, float, float]:
    """(wall s, CPU s, peak RSS MB) of one run; raises on a non-zero exit."""
    wall, cpu, peak, status, err = ingest_run_once(argv)
    if status != 0:
        raise SystemExit(f"{' '.join(argv[:4])} ... exited {status}: {err}")
    return wall, cpu, peak


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--export", type=Path, default=None, help="an nsys export (default: ingest.py's big one)")
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "profkit-bench")
    parser.add_argument("--repeat", type=int, default=3, help="rounds; the best wall and CPU time count")
    args = parser.parse_args()

    big = args.export or args.workdir / f"big_{DEFAULT_SOURCE}_1000000k_2500000a.sqlite"
    if not big.exists():
        if args.export is not None:
            raise SystemExit(f"no such export: {big}")
        args.workdir.mkdir(parents=True, exist_ok=True)
        print(f"building {big} (benchmarks/ingest.py's export) ...")
        build_export(nsys_fixture(DEFAULT_SOURCE), big, 1_000_000, 2_500_000)
    # profkit's modules as an install leaves them, compiled once: pip (and any first import)
    # writes __pycache__, but where PYTHONDONTWRITEBYTECODE is set (this CI-like machine) a
    # checkout's modules would be compiled again by every run, ~0.1-0.2 s of each
    compileall.compile_dir(ROOT / "profkit", quiet=1)
    out = Path(tempfile.mkdtemp(prefix="profkit-report-bench-"))
    commands: dict[str, list[str]] = {}
    nsys = find_nsys()
    profkit = [sys.executable, "-m", "profkit"]
    for report, command in (("cuda_gpu_kern_sum", "kernels"), ("cuda_api_sum", "api")):
        if nsys:
            commands[f"nsys stats {report}"] = [
                nsys, "stats", "-q", "--report", report, "--format", "csv", "--timeunit", "nsec",
                "--force-export", "false", "--force-overwrite", "true", "-o", str(out / "nsys"), str(big)]
        commands[f"profkit {command}"] = [*profkit, command, str(big), "--format", "json"]
    if not nsys:
        print("nsys not found (.tools/nsys or $PROFKIT_NSYS): no anchor")
    commands["profkit report"] = [*profkit, "report", str(big), "-o", str(out / "report")]

    print("profkit's modules compiled to __pycache__ first (as installed)")
    print(f"{big} ({big.stat().st_size / 1e6:.0f} MB); {os.cpu_count()} CPUs; "
          f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    best: dict[str, list[float]] = {name: [math.inf, math.inf, 0.0] for name in commands}
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    for _ in range(args.repeat):  # interleaved: the anchor and profkit see the same machine load
        for name, argv in commands.items():
            wall, cpu, peak = run_once(argv)
            b = best[name]
            b[0], b[1], b[2] = min(b[0], wall), min(b[1], cpu), max(b[2], peak)
    load = os.getloadavg()
    print(f"load average after: {' '.join(f'{x:.2f}' for x in load)} ({started}, best of {args.repeat})\n")
    # profkit kernels / api against their nsys stats report (speed-up); the report against
    # cuda_gpu_kern_sum (how many of nsys's kernel summaries one report costs).
    anchors = {"profkit kernels": "nsys stats cuda_gpu_kern_sum", "profkit api": "nsys stats cuda_api_sum",
               "profkit report": "nsys stats cuda_gpu_kern_sum"}
    print(f"{'command':<32}{'wall s':>8}{'CPU s':>8}{'peak MB':>9}   same-run ratio")
    for name, (wall, cpu, peak) in best.items():
        anchor = best.get(anchors.get(name, ""), [math.nan])[0]
        ratio = ""
        if math.isfinite(anchor):
            ratio = (f"{wall / anchor:.2f}x the wall of {anchors[name]}" if name == "profkit report" else
                     f"{anchor / wall:.1f}x faster than {anchors[name]}")
        print(f"{name:<32}{wall:>8.2f}{cpu:>8.2f}{peak:>9.0f}   {ratio}")
    wall, cpu, peak = best["profkit report"]
    print(f"\nprofkit report: {wall:.2f} s wall (target {TARGET_WALL_S:g} s: "
          f"{'met' if wall <= TARGET_WALL_S else 'missed'}), {peak:.0f} MB peak (target {TARGET_PEAK_MB:g} MB: "
          f"{'met' if peak < TARGET_PEAK_MB else 'missed'}); {cpu:.2f} s CPU on {os.cpu_count()} cores")
    return 0


if __name__ == "__main__":
    sys.exit(main())
