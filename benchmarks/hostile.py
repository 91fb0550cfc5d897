"""Issue 25's findings rerun at the sizes of the adversarial review: wall time and peak RSS.

Each hostile input is built from a real fixture (tests/hostile.py); each command runs
in a fresh process, timed by ingest.run_once (wall time, peak RSS of the process tree,
exit status).  The bar: every one ends within 30 s and 1.5 GB, with a result or one
line and exit 2.

    python benchmarks/hostile.py [--workdir DIR] [--big PATH_TO_1M_KERNEL_EXPORT]
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from ingest import PROFKIT, build_export, show_profkit as show  # noqa: E402

from tests import hostile  # noqa: E402
from tests.planted import plant_secret  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "profkit-hostile")
    args = parser.parse_args()
    work = args.workdir
    os.environ["PYTHONPATH"] = str(ROOT)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    out = work / "out"

    for n in (8 << 10, 32 << 10, 64 << 10, 1 << 20):
        trace, _ = hostile.long_name_trace(work, n)
        env_note = "" if n < 256 << 10 else " (PROFKIT_MAX_STRING raised)"
        if n >= 256 << 10:
            os.environ["PROFKIT_MAX_STRING"] = str(2 << 20)
        for command in (["report", str(trace), "-o", str(out / f"r{n}")], ["diff", str(hostile.KINETO_BASE), str(trace)],
                        ["ranks", str(trace)]):
            show(f"name of {n:,} chars: {command[0]}{env_note}", command)
        os.environ.pop("PROFKIT_MAX_STRING", None)
    trace, _ = hostile.long_name_trace(work, 8 << 20)
    show("name of 8 MiB: report", ["report", str(trace), "-o", str(out / "r8m")])

    bomb1 = hostile.whitespace_bomb(work, 1 << 30)
    bomb2 = hostile.whitespace_bomb(work, 2 << 30)
    for bomb in (bomb1, bomb2):
        show(f"gzip bomb {bomb.stat().st_size >> 10} kB: kernels", ["kernels", str(bomb)])
    events = hostile.many_events_trace(work, 5_000_000)
    show(f"5M events in {events.stat().st_size >> 10} kB: kernels", ["kernels", str(events)])
    show("5M events: scrub", ["scrub", str(events), "-o", str(work / "events.scrubbed.json.gz")])

    view = hostile.endless_view_export(work)
    for command in ("info", "report"):
        show(f"endless view: {command}", [command, str(view), *(["-o", str(out / "view")] if command == "report" else [])])

    deep = hostile.deep_args_trace(work, 990)
    for command in ("report", "kernels"):
        show(f"args nested 990 deep: {command}", [command, str(deep), *(["-o", str(out / "deep")] if command == "report" else [])])
    deep300 = hostile.deep_args_trace(work, 300)
    show("args nested 300 deep: scrub", ["scrub", str(deep300), "-o", str(work / "deep.scrubbed.json.gz")])

    (work / "runs").mkdir()
    run = hostile.root_cache_run(work / "runs")
    show('run.json naming "/" as a cache: report', ["report", str(run), "-o", str(out / "rootrun")])

    big = work / "planted_big.sqlite"
    build_export(plant_secret("nsys2025_train_noprint", work), big, 1_000_000, 2_500_000)
    print(f"SIGTERM into scrub of a {big.stat().st_size >> 20} MB export:")
    for delay in (0.5, 1.0, 2.0):
        dest, tmp = work / f"shared_{delay}", work / f"tmp_{delay}"
        dest.mkdir()
        tmp.mkdir()
        proc = subprocess.Popen([*PROFKIT, "scrub", str(big), "-o", str(dest / "big.scrubbed.sqlite")],
                                env={**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(tmp)},
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(delay)
        proc.send_signal(signal.SIGTERM)
        start = time.perf_counter()
        proc.wait()
        print(f"  at {delay} s: exit {proc.returncode} after {time.perf_counter() - start:.2f} s; output folder "
              f"{sorted(p.name for p in dest.iterdir())}, TMPDIR {sorted(p.name for p in tmp.iterdir())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
