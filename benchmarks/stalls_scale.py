"""Scale benchmark for `profkit stalls`: time and peak memory on a big export.

Grows the real nsys2025_sync fixture (hand-built rows cloned from its own
rows, for timing only) to N kernels and M `.item()`-style syncs: one pinned
DtoH copy + cudaStreamSynchronize at the end of each of M "step" ranges, each
inside a profkit.sync range.  Then runs analyze_stalls in a fresh process and
prints wall time and peak RSS.

    python benchmarks/stalls_scale.py                         # 2M kernels, 100k syncs
    python benchmarks/stalls_scale.py --kernels 200000 --syncs 10000

Measured on the dev box (CPU only, peak RSS of the measuring process):
2M kernels + 1k syncs: 1.9 s, 114 MiB; 2M kernels + 100k syncs (and 200k
NVTX ranges): 6.2 s, 248 MiB.  Memory grows with the syncs (about 1.3 KiB
each: the events are kept), not with the kernels (streamed in batches).
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def build(dst: Path, kernels: int, syncs: int) -> None:
    from tests.conftest import nsys_fixture

    shutil.copyfile(nsys_fixture("nsys2025_sync"), dst)
    db = sqlite3.connect(dst)

    def cloner(table: str, where: str = ""):
        cols = [r[1] for r in db.execute(f"PRAGMA table_info({table})")]
        template = list(db.execute(f"SELECT * FROM {table} {where} LIMIT 1").fetchone())
        marks = ",".join("?" * len(cols))

        def insert(overrides) -> None:
            rows = []
            for over in overrides:
                row = template[:]
                for key, value in over.items():
                    row[cols.index(key)] = value
                rows.append(row)
            db.executemany(f"INSERT INTO {table} VALUES ({marks})", rows)

        return insert

    tid = db.execute("SELECT globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME LIMIT 1").fetchone()[0]
    sync_id = db.execute("SELECT id FROM StringIds WHERE value = 'cudaStreamSynchronize_v3020'").fetchone()[0]
    copy_id = db.execute("SELECT id FROM StringIds WHERE value = 'cudaMemcpyAsync_v3020'").fetchone()[0]
    base, slot, per = 10**12, 1000, max(kernels // syncs, 1)
    kernel = cloner("CUPTI_ACTIVITY_KIND_KERNEL")
    for first in range(0, kernels, 200_000):
        kernel({"start": base + i * slot, "end": base + i * slot + 700, "correlationId": 10**8 + i}
               for i in range(first, min(kernels, first + 200_000)))
    runtime = cloner("CUPTI_ACTIVITY_KIND_RUNTIME")
    memcpy = cloner("CUPTI_ACTIVITY_KIND_MEMCPY", "WHERE dstKind = 1")
    nvtx = cloner("NVTX_EVENTS", "WHERE eventType = 59")
    calls, copies, ranges = [], [], []
    for j in range(syncs):
        t = base + (j * per + per - 1) * slot + 750
        corr = 3 * 10**8 + 2 * j
        calls += [{"start": t, "end": t + 100, "correlationId": corr, "nameId": copy_id, "globalTid": tid},
                  {"start": t + 110, "end": t + 200, "correlationId": corr + 1, "nameId": sync_id, "globalTid": tid}]
        copies.append({"start": t + 120, "end": t + 150, "correlationId": corr})
        ranges += [{"start": base + j * per * slot, "end": base + (j + 1) * per * slot - 10, "text": "step",
                    "textId": None, "globalTid": tid, "domainId": 0},
                   {"start": t - 5, "end": t + 205, "text": f"profkit.sync|item|train.py:{j % 50}|x.item()",
                    "textId": None, "globalTid": tid, "domainId": 0}]
    runtime(calls)
    memcpy(copies)
    nvtx(ranges)
    db.commit()
    db.close()


MEASURE = """
import resource, sys, time
from profkit.analysis.sync.stalls import analyze_stalls
from profkit.readers import open_trace
t = time.perf_counter()
with open_trace(sys.argv[1]) as trace:
    report = analyze_stalls(trace)
print(f"{time.perf_counter() - t:.2f} s, {len(report.events):,} sync events, {len(report.steps):,} steps, "
      f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kernels", type=int, default=2_000_000)
    parser.add_argument("--syncs", type=int, default=100_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "big.sqlite"
        started = time.perf_counter()
        build(path, args.kernels, args.syncs)
        print(f"built {args.kernels:,} kernels, {args.syncs:,} syncs in {time.perf_counter() - started:.1f} s "
              f"({path.stat().st_size / 2**20:.0f} MiB)")
        subprocess.run([sys.executable, "-c", MEASURE, str(path)], check=True, cwd=ROOT)


if __name__ == "__main__":
    main()
