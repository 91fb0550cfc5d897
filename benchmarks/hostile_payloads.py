"""Issue 34's payload, NCCL, rank-splitting and Kineto-stack recipes at full size: wall time, peak RSS.

Each input is a real capture with a few rows or bytes changed (tests/hostile_payloads.py); each
command runs in a fresh process, timed by ingest.run_once (wall time, peak RSS of the process
tree, exit status).  The bar: every one ends within 30 s and 1.5 GB, with a result or one line
and exit 2.  ``--fuzz-examples N`` then runs the payload fuzz tests of tests/test_hostile_payloads.py
with N examples each (the CI run uses 150): the long run.

    python benchmarks/hostile_payloads.py [--workdir DIR] [--fuzz-examples N]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from ingest import show_profkit as show  # noqa: E402

from tests import hostile_payloads as hp  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "profkit-hostile-payloads")
    parser.add_argument("--fuzz-examples", type=int, default=0, help="then fuzz with N examples per test")
    args = parser.parse_args()
    work = args.workdir
    os.environ["PYTHONPATH"] = str(ROOT)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    out = work / "out"

    samples = [("samples: 2**62 items of size -1", hp.samples_count_past_blob(work, every=True)),
               ("samples: one count past its blob", hp.samples_count_past_blob(work, every=False)),
               ("samples: schema nested in itself", hp.samples_self_reference(work)),
               ("samples: text/NULL blob, NULL globalTid", hp.samples_bad_rows(work)),
               ("samples: string handle 2**64-1", hp.samples_huge_string_handle(work)),
               *((f"samples: {tag}", hp.samples_schema_edit(work, tag)) for tag in hp.SCHEMA_EDITS)]
    for label, path in samples:
        show(f"{label}: host", ["host", str(path)])
    show("samples: 2**62 items of size -1: report", ["report", str(samples[0][1]), "-o", str(out / "s")])
    nccl = [("nccl: array of 2**62 items of size -1", hp.nccl_count_past_blob(work)),
            ("nccl: nranks 2**31-1", hp.nccl_nranks(work)),
            ("nccl: message of 2**64-1 bytes", hp.nccl_message_size(work))]
    for label, path in nccl:
        show(f"{label}: ranks", ["ranks", str(path)])
        show(f"{label}: report", ["report", str(path), "-o", str(out / path.stem)])
    for kernels, commands in ((3_000, ("ranks", "report", "steps")), (300_000, ("steps", "ranks"))):
        path = hp.kernels_own_process(work, kernels)
        for command in commands:
            show(f"{kernels:,} kernels, own process+device: {command}",
                 [command, str(path), *(["-o", str(out / f"own{kernels}")] if command == "report" else [])])
    show("kineto: frame line of 5,000 digits: host", ["host", str(hp.kineto_long_line(work))])
    show("kineto: 40,000 threads of one frame: host", ["host", str(hp.kineto_many_threads(work))])

    if args.fuzz_examples:
        print(f"fuzzing payload schemas and blobs, {args.fuzz_examples:,} examples per test:", flush=True)
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                               str(ROOT / "tests" / "test_hostile_payloads.py"), "-k", "fuzz"],
                              env={**os.environ, "PROFKIT_FUZZ_EXAMPLES": str(args.fuzz_examples)}, cwd=ROOT)
        return done.returncode
    return 0


if __name__ == "__main__":
    sys.exit(main())
