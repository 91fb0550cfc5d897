"""Issue 34 part B's recipes at full size: wall time and peak RSS of each command.

Each hostile input is built from a committed real capture by the builders of
tests/test_hostile_inputs2.py (a history made by ``profkit history add``, the
ncu CSVs of tests/data) and run in a fresh process by ingest.run_once.  The
bar: every one ends within 30 s and 1.5 GB, with a result or one line and exit 2.

    python benchmarks/hostile_inputs2.py [--workdir DIR]

The long fuzzing run: ``PROFKIT_FUZZ=slow python -m pytest tests/test_hostile_inputs2.py -k fuzz``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from ingest import PROFKIT, run_once, show_profkit as show  # noqa: E402

from tests import test_hostile_inputs2 as recipes  # noqa: E402



def tiny_steps_trace(dest: Path, steps: int) -> Path:
    """The real trace hist_run1's metadata with ``steps`` steps of one kernel each (its first
    ProfilerStep, cudaLaunchKernel and kernel, copied with shifted times and fresh ids)."""
    doc: dict[str, Any] = json.loads(gzip.decompress(recipes.HIST_RUNS[0].read_bytes()))
    events = doc["traceEvents"]
    step = next(e for e in events if str(e.get("name", "")).startswith("ProfilerStep#"))
    kernel = next(e for e in events if e.get("cat") == "kernel")
    launch = next(e for e in events if e.get("cat") == "cuda_runtime"
                  and e["args"].get("correlation") == kernel["args"]["correlation"])
    t0 = step["ts"]
    out = [e for e in events if e.get("ph") == "M"]
    for i in range(steps):
        ts = t0 + 10.0 * i
        out.append({**step, "name": f"ProfilerStep#{i}", "ts": ts, "dur": 9.0,
                    "args": {**step["args"], "External id": i}})
        out.append({**launch, "ts": ts + 1, "dur": 2.0, "args": {**launch["args"], "correlation": 10 + i}})
        out.append({**kernel, "ts": ts + 4, "dur": 1.0 + (i % 7) * 0.01,
                    "args": {**kernel["args"], "correlation": 10 + i}})
    doc["traceEvents"] = out
    dest.write_bytes(gzip.compress(json.dumps(doc).encode(), 1))
    return dest


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="profkit-hostile2-"))
    work.mkdir(parents=True, exist_ok=True)

    real = work / "real.db"
    if not real.exists():
        for trace in recipes.HIST_RUNS:
            wall, _, rss, code, err = run_once([*PROFKIT, "history", "add", str(trace), "--db", str(real)])
            assert code == 0, err
    plot = str(work / "p.png")

    def history(name: str, *statements: str, params: tuple = ()) -> Path:
        folder = work / name
        folder.mkdir(exist_ok=True)
        return recipes.crafted_history(real, folder, *statements, params=params)

    db = history("view", "ALTER TABLE kernels RENAME TO kernels_real",
                 "CREATE VIEW kernels AS SELECT n AS run_id, 'k' AS name, NULL AS key, 1.0 AS ns_per_step, "
                 f"NULL AS samples FROM ({recipes.ENDLESS})")
    show("history show: endless kernels view", ["history", "show", "--db", str(db), "--metric", "kernel:k",
                                                 "--plot", plot])
    db = history("trigger", f"CREATE TRIGGER endless BEFORE INSERT ON runs BEGIN SELECT count(*) FROM "
                            f"({recipes.ENDLESS}); END")
    show("history add: trigger on runs", ["history", "add", str(recipes.HIST_RUNS[0]), "--db", str(db)])
    for case, text in recipes.SAMPLES.items():
        db = history("samples_" + case.replace(" ", "_"), "UPDATE runs SET gpu_samples = ? WHERE id = 2",
                     params=(text,))
        show(f"history show: gpu_samples {case}", ["history", "show", "--db", str(db), "--plot", plot])

    show("ncu: 100k columns x 200 rows (raw)", ["occupancy", "--ncu", str(recipes.wide_raw_csv(work, 100_000, 200))])
    (work / "cells").mkdir(exist_ok=True)
    show("ncu: 15k columns x 200 rows (raw)", ["occupancy", "--ncu", str(recipes.wide_raw_csv(work / "cells",
                                                                                              15_000, 200))])
    show("ncu: details, 15k-column header", ["occupancy", "--ncu", str(recipes.wide_details_csv(work, 15_000))])
    for cell in ("1e400", "1e" + "5" * 5000, "1e308"):
        folder = work / f"cell_{len(cell)}_{cell[:5]}"
        folder.mkdir(exist_ok=True)
        path = recipes.roofline_csv(folder, cell)
        show(f"roofline --format json: {cell[:10]} Gbyte", ["roofline", str(path), "--format", "json"])
    folder = work / "dollar"
    folder.mkdir(exist_ok=True)
    from tests.conftest import nsys_fixture

    path = recipes.roofline_csv(folder, "12.5", kernel=recipes.MATH + "_gemm")
    show("report --ncu: $\\frac{a}$ kernel", ["report", str(nsys_fixture("nsys2025_sync_apis")), "--ncu", str(path),
                                             "-o", str(folder / "r")])
    trace = tiny_steps_trace(work / "tiny_steps.json.gz", 50_000)
    show("diff: 50,000 tiny steps", ["diff", str(trace), str(trace), "--format", "json"])
    shutil.rmtree(work / "cells", ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
