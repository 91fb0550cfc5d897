"""Cold vs warm `profkit ptx` timings.

Cold: a fresh, empty compile cache (Triton is always compiled into a
throwaway cache of its own, so it cannot help).  Warm: the same command
again with the cache filled.  Each timing is a whole `profkit ptx TARGET
--format json` process, Python start-up included, as a user or CI sees it.

    python benchmarks/ptx_compile.py [--repeat 5] [--targets gelu,softmax,...]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_TARGETS = "gelu,softmax,register_heavy,gelu_cuda"


def run_once(target: str, cache_dir: Path, extra: list[str]) -> tuple[float, dict]:
    env = {**os.environ, "PROFKIT_CACHE_DIR": str(cache_dir), "CUDA_VISIBLE_DEVICES": ""}
    started = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "profkit", "ptx", target, "--format", "json", *extra],
                            cwd=REPO, env=env, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - started
    if result.returncode != 0:
        raise SystemExit(f"profkit ptx {target} failed: {result.stderr.strip()}")
    return elapsed, json.loads(result.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--targets", default=DEFAULT_TARGETS)
    parser.add_argument("--sass", action="store_true", help="time --sass (adds nvdisasm to the cold run)")
    args = parser.parse_args()
    extra = ["--sass"] if args.sass else []
    sys.path.insert(0, str(REPO))
    from profkit.ptx.tools import find_tool

    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, repeat {args.repeat}")
    print(f"{'target':<16} {'cold median':>12} {'cold min':>9} {'warm median':>12} {'warm min':>9}  registers")
    for target in args.targets.split(","):
        if target.endswith("_cuda") and find_tool("nvcc", required=False) is None:
            print(f"{target:<16} skipped: no nvcc")
            continue
        cold, warm = [], []
        for _ in range(args.repeat):
            cache_dir = Path(tempfile.mkdtemp(prefix="profkit-bench-"))
            try:
                seconds, data = run_once(target, cache_dir, extra)
                cold.append(seconds)
                for _ in range(3):
                    seconds, _ = run_once(target, cache_dir, extra)
                    warm.append(seconds)
            finally:
                shutil.rmtree(cache_dir, ignore_errors=True)
        print(f"{target:<16} {statistics.median(cold):>11.3f}s {min(cold):>8.3f}s "
              f"{statistics.median(warm):>11.3f}s {min(warm):>8.3f}s  {data['registers']}")


if __name__ == "__main__":
    main()
