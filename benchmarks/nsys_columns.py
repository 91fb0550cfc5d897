"""Loading the report's nsys columns: connectorx (readers/nsys/fast_scan.py) against the sqlite3 path, same run.

``profkit report`` first reads the kernel columns it prefetches
(profkit/report/build.py PREFETCH: 17 SQL columns of CUPTI_ACTIVITY_KIND_KERNEL)
and the API columns (5 of CUPTI_ACTIVITY_KIND_RUNTIME) through
``NsysSource.load_arrays``.  This times both loads on the big export of
``benchmarks/ingest.py``, each in a fresh process, alternating the sqlite3
path (the anchor, ``PROFKIT_NO_CONNECTORX=1``) and connectorx, and prints the
best CPU and wall time of each and the ratios.  CPU time is the figure to
trust on a shared machine.

    python benchmarks/nsys_columns.py                 # the cached big export (built by ingest.py if missing)
    python benchmarks/nsys_columns.py --repeat 5 --export other.sqlite
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.ingest import DEFAULT_SOURCE, build_export  # noqa: E402
from tests.conftest import nsys_fixture  # noqa: E402

_LOAD = r"""
import json, sys, time
from profkit.readers import open_trace
from profkit.report.build import PREFETCH
table = sys.argv[2]
with open_trace(sys.argv[1]) as trace:
    wall, cpu = time.perf_counter(), time.process_time()
    trace._from_source(table, list(PREFETCH[table][table]))
    print(json.dumps([time.process_time() - cpu, time.perf_counter() - wall]))
"""


def load_once(export: Path, table: str, connectorx: bool) -> tuple[float, float]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    if not connectorx:
        env["PROFKIT_NO_CONNECTORX"] = "1"
    out = subprocess.run([sys.executable, "-c", _LOAD, str(export), table], env=env, capture_output=True,
                         text=True, check=True)
    cpu, wall = json.loads(out.stdout.strip().splitlines()[-1])
    return cpu, wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--export", type=Path, help="an nsys export (default: build or reuse the 1M-kernel one)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/profkit-bench"))
    args = parser.parse_args()
    export = args.export
    if export is None:
        args.workdir.mkdir(parents=True, exist_ok=True)
        export = args.workdir / f"big_{DEFAULT_SOURCE}_1000000k_2500000a.sqlite"
        if not export.exists():
            build_export(nsys_fixture(DEFAULT_SOURCE), export, 1_000_000, 2_500_000)
    print(f"{export.name}, best of {args.repeat}, load average {os.getloadavg()[0]:.1f}")
    for table in ("kernels", "api"):
        best = {False: (1e9, 1e9), True: (1e9, 1e9)}
        for _ in range(args.repeat):
            for connectorx in (False, True):
                cpu, wall = load_once(export, table, connectorx)
                best[connectorx] = (min(best[connectorx][0], cpu), min(best[connectorx][1], wall))
        (a_cpu, a_wall), (c_cpu, c_wall) = best[False], best[True]
        print(f"  {table:8s} sqlite3 {a_cpu:5.2f} s CPU {a_wall:5.2f} s wall | connectorx {c_cpu:5.2f} s CPU "
              f"{c_wall:5.2f} s wall | CPU {a_cpu / c_cpu:.2f}x less, wall {a_wall / c_wall:.2f}x less")
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
