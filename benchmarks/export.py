"""Export benchmark: `profkit export --to perfetto` against reading the same trace.

Uses the 1M-kernel export that benchmarks/ingest.py builds (about 1M kernels
and 2.5M CUDA API calls, replicated from a real capture; built here if it
is not cached) and times, each in a fresh process, in the same run (wall
time and peak RSS of the process tree, best of ``--repeat``):

- read: open the trace and load every column the export writes (the anchor);
- `profkit kernels` (the cheapest full read, for scale);
- `profkit export BIG --to perfetto -o out.json.gz` and `-o out.json`;
- where the Kineto reader is present: `profkit kernels out.json.gz`, reading
  the export back (the round trip).

and prints each against the read.  Ratios, not absolute times, are the
result: the machine's load moves both sides alike.

    python benchmarks/export.py                    # 1M kernels (cached build)
    python benchmarks/export.py --kernels 200000   # smaller
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.ingest import DEFAULT_SOURCE, build_export, measure  # noqa: E402
from tests.conftest import nsys_fixture  # noqa: E402

READ = """
import sys
from profkit.readers import open_trace
from profkit.export.tracks import COLUMNS
with open_trace(sys.argv[1]) as trace:
    rows = sum(len(trace.table(name, columns)) for name, columns in COLUMNS.items())
print(rows)
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", default=DEFAULT_SOURCE, help="fixture name in tests/data/nsys")
    parser.add_argument("--kernels", type=int, default=1_000_000)
    parser.add_argument("--api", type=int, default=2_500_000)
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "profkit-bench")
    parser.add_argument("--repeat", type=int, default=2, help="runs per command; the best wall time counts")
    args = parser.parse_args()

    args.workdir.mkdir(parents=True, exist_ok=True)
    big = args.workdir / f"big_{args.source}_{args.kernels}k_{args.api}a.sqlite"
    if not big.exists():
        t0 = time.perf_counter()
        build_export(nsys_fixture(args.source), big, args.kernels, args.api)
        print(f"built {big} in {time.perf_counter() - t0:.1f} s")
    print(f"{big} ({big.stat().st_size / 1e6:.0f} MB)")
    out = args.workdir / "export"
    out.mkdir(exist_ok=True)
    py = [sys.executable]
    profkit = [*py, "-m", "profkit"]
    runs = {
        "read (every exported column)": [*py, "-c", READ, str(big)],
        "profkit kernels": [*profkit, "kernels", str(big), "--format", "json"],
        "profkit export -o out.json.gz": [*profkit, "export", str(big), "-o", str(out / "out.json.gz")],
        "profkit export -o out.json": [*profkit, "export", str(big), "-o", str(out / "out.json")],
    }
    results = {name: measure(argv, repeat=args.repeat) for name, argv in runs.items()}
    if importlib.util.find_spec("profkit.readers.kineto") is not None:
        results["profkit kernels out.json.gz (read back)"] = measure(
            [*profkit, "kernels", str(out / "out.json.gz"), "--format", "json"], repeat=args.repeat)
    else:
        print("  no Kineto reader on this branch: the read-back is not timed")

    anchor = results["read (every exported column)"][0]
    print(f"\n{'command':<42}{'wall s':>9}{'peak MB':>10}{'vs read':>9}   (best of {args.repeat})")
    for name, (wall, peak, status) in results.items():
        flag = "" if status == 0 else f"  (exit {status})"
        print(f"{name:<42}{wall:>9.2f}{peak:>10.0f}{wall / anchor:>8.1f}x{flag}")
    for name in ("out.json.gz", "out.json"):
        if (out / name).exists():
            print(f"{name}: {(out / name).stat().st_size / 1e6:.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
