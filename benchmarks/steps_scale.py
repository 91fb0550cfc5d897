"""Scale benchmark for `profkit steps` (``find_steps``) on a training-run-sized export.

Uses the big export of ``benchmarks/ingest.py`` (the real MLP training run
replicated to about 1M kernels and 2.5M CUDA API rows; built and cached on
first use), then times, in one process:

- the anchor: reading the columns the step finder needs (kernels, memcpy,
  memset, API calls, ranges) from the export;
- ``find_steps`` from the NVTX step ranges;
- ``find_steps(use_ranges=False)``: the same steps from the launch pattern.

and prints each as seconds and as a ratio to the anchor, and whether the two
ways give the same steady-state median.  Measured on the 2-core dev box
(1M kernels, other jobs running): anchor 19 s, ranges 3.8 s (0.20x),
launch pattern 4.1 s (0.22x), same median.

    python benchmarks/steps_scale.py
    python benchmarks/steps_scale.py --kernels 200000 --api 500000
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.ingest import DEFAULT_SOURCE, build_export  # noqa: E402
from tests.conftest import nsys_fixture  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kernels", type=int, default=1_000_000)
    parser.add_argument("--api", type=int, default=2_500_000)
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "profkit-bench")
    args = parser.parse_args()
    from profkit.analysis.steps import find_steps
    from profkit.readers import open_trace

    args.workdir.mkdir(parents=True, exist_ok=True)
    big = args.workdir / f"big_{DEFAULT_SOURCE}_{args.kernels}k_{args.api}a.sqlite"  # ingest.py's name
    if not big.exists():
        print(f"building {big} ...", flush=True)
        build_export(nsys_fixture(DEFAULT_SOURCE), big, args.kernels, args.api)
    with open_trace(big) as trace:
        t0 = time.perf_counter()
        for table, columns in (("kernels", ["start", "end", "pid", "correlation", "name"]),
                               ("memcpy", ["start", "end", "pid", "correlation", "copy_kind"]),
                               ("memset", ["start", "end", "pid", "correlation"]),
                               ("api", ["start", "end", "pid", "correlation"]),
                               ("ranges", ["start", "end", "pid", "tid", "name", "domain", "kind"])):
            trace.table(table, columns)
        anchor = time.perf_counter() - t0
        t0 = time.perf_counter()
        by_ranges = find_steps(trace)
        ranges_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        by_pattern = find_steps(trace, use_ranges=False)
        pattern_s = time.perf_counter() - t0
        kernels = trace.count("kernels")
    print(f"{kernels:,} kernels; reading the columns (anchor): {anchor:.2f} s")
    for label, seconds, result in (("from the NVTX ranges", ranges_s, by_ranges),
                                   ("from the launch pattern", pattern_s, by_pattern)):
        s = result.summary
        print(f"find_steps {label}: {seconds:.2f} s ({seconds / anchor:.2f}x the anchor); "
              f"{s['count']:,} steps, steady median {s['median_ns']:,.0f} ns")
    # (ingest.py's builder clones fewer NVTX rows than kernels: fewer step ranges than
    # loop iterations in the big file, so only the medians can agree)
    print("same steady-state median both ways:", by_ranges.summary["median_ns"] == by_pattern.summary["median_ns"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
