"""Many ranks on Dask: 64 synthetic ranks made from one real rank export.

    python benchmarks/ranks_scale.py [--ranks 64] [--source tests/data/ddp/nsys/rank0.sqlite.xz]

The ranks are a scale input, made here and named as such: copies of a real
nsys rank export whose kernel durations get a small random jitter (each rank
its own seed), and one rank ("slowed") whose compute kernels take 30 % longer,
as a straggler would; the others' NCCL kernels grow by that extra compute,
since they wait for it in their collectives.  (The kernels are stretched in
place, so they may overlap their neighbours: a scale input, not a timeline.)  The benchmark runs `profkit ranks` over them with 1, 2
and 4 local worker processes and with the threaded scheduler, and prints wall
time, the peak RSS of the busiest worker, and whether the slowed rank was
named the straggler.  Times are the best of ``--repeat`` runs.
"""

from __future__ import annotations

import argparse
import lzma
import os
import random
import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DEFAULT_SOURCE = ROOT / "tests" / "data" / "ddp" / "nsys" / "rank0.sqlite.xz"
FALLBACK_SOURCE = ROOT / "tests" / "data" / "nsys" / "nsys2025_train_print.sqlite.xz"
SLOWDOWN = 1.30
JITTER = 0.02


def make_ranks(source: Path, folder: Path, n: int, slowed: int) -> list[Path]:
    """n synthetic rank files (scale input): the source with jittered kernel times, one rank slowed."""
    plain = folder / "source.sqlite"
    if source.suffix == ".xz":
        with lzma.open(source) as src, open(plain, "wb") as dst:
            shutil.copyfileobj(src, dst)
    else:
        shutil.copyfile(source, plain)
    with sqlite3.connect(plain) as db:
        nccl = "demangledName IN (SELECT id FROM StringIds WHERE value LIKE 'nccl%')"
        compute_ns, = db.execute(f'SELECT sum("end" - start) FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE NOT {nccl}').fetchone()
        nccl_kernels, = db.execute(f"SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE {nccl}").fetchone()
    # The others wait for the slowed rank inside their collectives: each of their NCCL
    # kernels grows by an equal share of the straggler's extra compute.
    wait_per_collective = int((SLOWDOWN - 1) * (compute_ns or 0) / max(nccl_kernels, 1))
    paths = []
    for rank in range(n):
        path = folder / f"synthetic_rank{rank}.sqlite"
        shutil.copyfile(plain, path)
        rng = random.Random(rank)
        with sqlite3.connect(path) as db:
            db.create_function("jitter", 0, lambda: 1.0 + rng.uniform(-JITTER, JITTER))
            db.execute('UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET "end" = start + CAST(("end" - start) * jitter() AS INT)')
            if rank == slowed:
                db.execute(f'UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET "end" = start + CAST(("end" - start) * {SLOWDOWN} AS INT) '
                           f"WHERE NOT {nccl}")
            else:
                db.execute(f'UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET "end" = "end" + {wait_per_collective} WHERE {nccl}')
        paths.append(path)
    plain.unlink()
    return paths


def run_once(paths: list[Path], scheduler: str | None, workers: int | None) -> tuple[float, dict]:
    from profkit.analysis.ranks.cross_rank import cross_rank
    from profkit.ranks.engine import map_ranks
    from profkit.ranks.inputs import rank_inputs
    from profkit.ranks.per_rank import summarize_rank

    started = time.perf_counter()
    summaries = map_ranks(summarize_rank, rank_inputs(paths), scheduler=scheduler, workers=workers)
    job = cross_rank(summaries)
    elapsed = time.perf_counter() - started
    job["peak_worker_rss_mb"] = max(s.get("worker_peak_rss_bytes") or 0 for s in summaries) / 2**20
    return elapsed, job


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, default=64)
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE if DEFAULT_SOURCE.exists() else FALLBACK_SOURCE)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    slowed = args.ranks // 3
    with tempfile.TemporaryDirectory(prefix="profkit-ranks-") as tmp:
        paths = make_ranks(args.source, Path(tmp), args.ranks, slowed)
        size = sum(p.stat().st_size for p in paths) / 2**20
        print(f"{args.ranks} synthetic ranks from {args.source.name} ({size:.0f} MB in all), rank {slowed} slowed "
              f"{SLOWDOWN:.0%}; {os.cpu_count()} cores")
        print(f"{'scheduler':<22} {'wall s':>8} {'ranks/s':>8} {'peak worker RSS MB':>19}  straggler")
        for label, scheduler, workers in [("processes, 1 worker", "processes", 1),
                                          ("processes, 2 workers", "processes", 2),
                                          ("processes, 4 workers", "processes", 4),
                                          ("threads, 4", "threads", 4)]:
            best, job = min((run_once(paths, scheduler, workers) for _ in range(args.repeat)), key=lambda r: r[0])
            found = job["straggler"]["rank"] if job["straggler"] else None
            print(f"{label:<22} {best:8.2f} {args.ranks / best:8.1f} {job['peak_worker_rss_mb']:19.0f}  "
                  f"rank {found} ({'right' if found == slowed else 'WRONG'})")


if __name__ == "__main__":
    main()
