"""What each capture mode of `profkit trace` costs the program it profiles: step time traced / bare.

Each program prints its own steady-state step time (the oracle: measured by the
program, the same way bare and traced); each is run bare and under each capture
mode, alternately, ``--repeat`` times, and the median of its step times is kept.

    python benchmarks/capture_overhead.py            # GPU host: every program and mode
    python benchmarks/capture_overhead.py --cpu      # the CPU part (CI runs it: tests/test_capture_overhead.py)
    python benchmarks/capture_overhead.py --only decode --modes "bare,nsys (default)" --repeat 1

Beside each median step it gives the median wall time of the whole command: for a capture mode,
`profkit trace` end to end (the program under the profiler, the export, the report).

Programs (GPU host): a GPU-bound training loop (sample_kernels/hf_llama.py train), a
host-bound decode loop (hf_llama.py generate with HF generate(), dynamic cache and
static cache: a CUDA graph per token), and a Python data loop (batches built in pure
Python); on the CPU: a torch MLP training loop and that Python loop.

Goals (issue 32): traced step <= 1.10x bare on the decode loop, <= 1.03x on GPU-bound
training (nsys default); the torch backend's default on the Python loop <= 1.5x.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CPU_TRAIN = ROOT / "benchmarks" / "programs" / "cpu_train.py"
LLAMA = ROOT / "sample_kernels" / "hf_llama.py"
MEAN_STEP_S = re.compile(r"mean_step_s (\S+)")
STEADY_MS = re.compile(r"steady_mean_step_ms=(\S+)")


@dataclass(frozen=True)
class Program:
    name: str
    argv: list[str]  # script and its arguments
    gpu: bool
    step_pattern: re.Pattern[str]
    to_ms: float  # the printed figure times this is ms


PROGRAMS = [
    Program("cpu MLP training (torch-bound)", [str(CPU_TRAIN), "--steps", "12"], False, MEAN_STEP_S, 1e3),
    Program("Python data loop", [str(CPU_TRAIN), "--steps", "20", "--python-batches", "--rows", "128"], False,
            MEAN_STEP_S, 1e3),
    Program("GPU-bound training (Llama, bf16)", [str(LLAMA), "--mode", "train", "--steps", "20"], True,
            STEADY_MS, 1.0),
    Program("decode, HF generate, dynamic cache", [str(LLAMA), "--mode", "generate", "--steps", "64",
                                                   "--hf-generate"], True, STEADY_MS, 1.0),
    Program("decode, HF generate, static cache", [str(LLAMA), "--mode", "generate", "--steps", "64",
                                                  "--hf-generate", "--cache-implementation", "static"], True,
            STEADY_MS, 1.0),
]


@dataclass(frozen=True)
class RawNsys:
    """nsys alone, without profkit: ``nsys profile --sample=none --cpuctxsw=none ARGS program``."""

    args: tuple[str, ...]


@dataclass(frozen=True)
class RawTorch:
    """torch.profiler alone, without profkit: the whole program inside ``profile(activities=...)``
    (no stacks, no shapes): what Kineto's own CUPTI tracing costs, beside nsys's."""

    activities: tuple[str, ...]  # names of torch.profiler.ProfilerActivity members


# the program run inside torch.profiler: argv[1] the activities ("CPU,CUDA"), argv[2:] the script and its args
RAW_TORCH = ("import runpy, sys\n"
             "from torch.profiler import ProfilerActivity, profile\n"
             "acts = [getattr(ProfilerActivity, a) for a in sys.argv[1].split(',')]\n"
             "sys.argv = sys.argv[2:]\n"
             "sys.path.insert(0, __import__('os').path.dirname(sys.argv[0]))  # as python SCRIPT would\n"
             "with profile(activities=acts):\n"
             "    runpy.run_path(sys.argv[0], run_name='__main__')\n")

# mode -> profkit trace flags (None: the bare program; RawNsys: nsys alone, without profkit; RawTorch:
# torch.profiler alone)
GPU_MODES = {"bare": None, "nsys (default)": ["--backend", "nsys"], "nsys --full": ["--backend", "nsys", "--full"],
             "nsys --no-python-sync-sites": ["--backend", "nsys", "--no-python-sync-sites"],
             "nsys no Python sampling": ["--backend", "nsys", "--nsys-args", "--python-sampling=false"],
             # the floor: nsys's own CUDA API and kernel tracing, no launcher, hook or sampling
             "nsys alone (-t cuda nvtx)": RawNsys(("-t", "cuda,nvtx")),
             # what each part of nsys's tracing costs: its injection alone, NVTX alone, CUDA alone, and
             # the lighter CUDA collections of nsys 2024+ (an option the nsys lacks fails that row only)
             "nsys alone (-t none)": RawNsys(("-t", "none")),
             "nsys alone (-t nvtx)": RawNsys(("-t", "nvtx")),
             "nsys alone (-t cuda)": RawNsys(("-t", "cuda")),
             "nsys alone (-t cuda, no event trace)": RawNsys(("-t", "cuda", "--cuda-event-trace=false")),
             "nsys alone (-t cuda-hw)": RawNsys(("-t", "cuda-hw")),
             # graph-level tracing of host-launched graphs only (nsys traces device launches too by default)
             "nsys alone (-t cuda, graphs host-only)": RawNsys(("-t", "cuda", "--cuda-graph-trace=graph:host-only")),
             "nsys (graphs host-only)": ["--backend", "nsys", "--nsys-args", "--cuda-graph-trace=graph:host-only"],
             # CUDA event records and waits left untraced (nsys 2025.3 traces them by default)
             "nsys (no CUDA event trace)": ["--backend", "nsys", "--nsys-args", "--cuda-event-trace=false"],
             # a window: nsys traces optimizer steps 6-10 (or 3 s of forward calls after 5 s), the rest untraced
             "nsys window (--steps 5 --skip 5)": ["--backend", "nsys", "--steps", "5", "--skip", "5"],
             "torch (default)": ["--backend", "torch"],
             # Kineto's tracing alone: CUDA activity only (CUPTI's kernels and runtime calls), and with CPU ops
             "torch.profiler alone (CUDA only)": RawTorch(("CUDA",)),
             "torch.profiler alone (CPU+CUDA)": RawTorch(("CPU", "CUDA"))}
CPU_MODES = {"bare": None, "torch (default)": ["--backend", "torch"],
             "torch --with-stack": ["--backend", "torch", "--with-stack"]}


def step_ms(program: Program, flags: list[str] | RawNsys | RawTorch | None, work: Path) -> tuple[float | None, float, str]:
    """The program's own steady step time, bare or under ``profkit trace FLAGS``, the command's
    wall time in seconds, and for a windowed capture its own comparison of traced and untraced steps."""
    if flags is None:
        argv = [sys.executable, *program.argv]
    elif isinstance(flags, RawTorch):
        argv = [sys.executable, "-c", RAW_TORCH, ",".join(flags.activities), *program.argv]
    elif isinstance(flags, RawNsys):
        report = Path(tempfile.mkdtemp(dir=work)) / "raw"
        argv = [shutil.which("nsys") or "nsys", "profile", "--sample=none", "--cpuctxsw=none", *flags.args,
                "-o", str(report), sys.executable, *program.argv]
    else:
        run_dir = Path(tempfile.mkdtemp(dir=work))
        argv = [sys.executable, "-m", "profkit", "trace", *flags, "-o", str(run_dir), program.argv[0], "--",
                *program.argv[1:]]
    started = time.perf_counter()
    paths = [str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=1800,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(paths)})
    wall_s = time.perf_counter() - started
    found = program.step_pattern.findall(done.stdout + done.stderr)
    window = ""
    if isinstance(flags, list) and (run_dir / "run.json").is_file():
        import json

        measured = json.loads((run_dir / "run.json").read_text()).get("recorded", {}).get("capture_window") or {}
        window = measured.get("sentence") or measured.get("skipped") or ""
    if not found:
        tail = (done.stdout + done.stderr).strip().splitlines()[-3:]
        print(f"{program.name} / {flags}: no step time (exit {done.returncode}): {' | '.join(tail)}", file=sys.stderr)
    return (float(found[-1]) * program.to_ms if found else None), wall_s, window


def measure(programs: list[Program], modes: dict[str, list[str] | RawNsys | RawTorch | None], repeat: int) -> list[dict]:
    """One row per program and mode: the median step time of ``repeat`` runs, and its ratio to bare."""
    rows = []
    work = Path(tempfile.mkdtemp(prefix="profkit-capture-overhead-"))
    try:
        for program in programs:
            times: dict[str, list[float]] = {mode: [] for mode in modes}
            walls: dict[str, list[float]] = {mode: [] for mode in modes}
            windows: dict[str, str] = {}
            for _ in range(repeat):  # alternate the modes: a change of load hits each alike
                for mode, flags in modes.items():
                    value, wall_s, windows[mode] = step_ms(program, flags, work)
                    print(f"  {program.name} | {mode} | step {value} ms | {wall_s:.1f} s", file=sys.stderr, flush=True)
                    walls[mode].append(wall_s)
                    if value is not None:
                        times[mode].append(value)
            bare = statistics.median(times["bare"]) if times["bare"] else None
            for mode, values in times.items():
                median = statistics.median(values) if values else None
                rows.append({"program": program.name, "mode": mode, "step_ms": median, "runs": len(values),
                             "vs_bare": median / bare if median is not None and bare else None,
                             "wall_s": statistics.median(walls[mode]), "window": windows.get(mode, "")})
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return rows


def table(rows: list[dict]) -> str:
    lines = ["| program | capture | step (ms) | vs bare | whole command (s) |", "|---|---|--:|--:|--:|"]
    for r in rows:
        step = f"{r['step_ms']:.2f}" if r["step_ms"] is not None else "failed"
        ratio = f"{r['vs_bare']:.2f}x" if r["vs_bare"] is not None and r["mode"] != "bare" else "—"
        lines.append(f"| {r['program']} | {r['mode']} | {step} | {ratio} | {r['wall_s']:.1f} |")
    windows = [f"- {r['program']}, {r['mode']}: {r['window']}" for r in rows if r.get("window")]
    return "\n".join(lines + ([""] + windows if windows else []))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cpu", action="store_true", help="the CPU programs and modes only")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only", action="append", default=[], metavar="TEXT",
                        help="only the programs whose name holds TEXT (repeatable)")
    parser.add_argument("--modes", help="comma-separated modes to run (bare is always run)")
    args = parser.parse_args()
    programs = [p for p in PROGRAMS if not p.gpu] if args.cpu else PROGRAMS
    if args.only:
        programs = [p for p in programs if any(text in p.name for text in args.only)]
    modes = CPU_MODES if args.cpu else GPU_MODES
    if args.modes:
        # commas inside a mode's parentheses are its own ("nsys alone (-t cuda, graphs host-only)")
        wanted = {"bare", *(m.strip() for m in re.split(r",(?![^()]*\))", args.modes))}
        unknown = wanted - set(modes)
        if unknown:
            parser.error(f"unknown modes {sorted(unknown)}; known: {list(modes)}")
        modes = {m: f for m, f in modes.items() if m in wanted}
    import platform

    print(f"{platform.node()} | {time.strftime('%Y-%m-%d %H:%M')} | repeat {args.repeat}", file=sys.stderr)
    rows = measure(programs, modes, args.repeat)
    print(table(rows))
    return 0 if all(r["step_ms"] is not None for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
