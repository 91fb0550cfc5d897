"""Reproduce the CS336 lecture 6 GELU / softmax comparison from profkit's own measurements.

    python scripts/samples_table.py reports/gelu reports/softmax -o reports/README.md

Each argument is a `profkit trace` run folder (trace.sqlite or trace.sqlite.xz,
run.json, optionally ncu.csv) or a bare export (.sqlite / .sqlite.xz).  The
sample is recognised from its NVTX ranges ("samples:gelu/<variant>").

Per variant, everything comes from the trace:
- calls: instances of the per-call range "<sample>/<variant>/call"
  (sample_kernels/bench.py); older traces without it fall back to the
  script's --trials (from run.json or the command nsys recorded);
- GPU time per call: the kernels launched inside "<sample>/<variant>"
  (profkit.analysis.kernels.summaries.nvtx_kernel_summary) / calls;
- wall time per call: the median "/call" range (synchronize included, like
  the lecture's benchmark);
- bandwidth: the bytes the operation must move (fp32 in + out: 8 bytes per
  element) / GPU time per call, against the GPU's peak from the export
  (TARGET_INFO_GPU.memoryBandwidth); with ncu data for every kernel of the
  variant, also the DRAM bytes actually moved (dram__bytes_read/write.sum).
"""

from __future__ import annotations

import argparse
import json
import lzma
import shlex
import shutil
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from profkit.analysis.timeline.capture import capture_info  # noqa: E402
from profkit.analysis.kernels.summaries import nvtx_kernel_summary, nvtx_summary  # noqa: E402
from profkit.errors import ProfkitError  # noqa: E402
from profkit.readers import open_trace  # noqa: E402

DOMAIN = "samples"
VARIANTS = ("manual", "pytorch", "cuda", "triton", "compiled")
TITLES = {"manual": "Manual PyTorch (unfused)", "pytorch": "PyTorch fused", "cuda": "CUDA C++",
          "triton": "Triton", "compiled": "torch.compile"}

# Lecture times in ms, with the note where the seed documents disagree.
LECTURE: dict[str, dict[str, tuple[float, float, str]]] = {
    "gelu": {  # 000 §5.2-8.2, 001 §5.2-8.2, 003
        "manual": (8.1, 8.1, ""),
        "pytorch": (1.1, 1.1, ""),
        "cuda": (1.8, 1.8, ""),
        "triton": (1.848, 1.848, ""),
        "compiled": (1.3, 1.47, "1.3 ms in 000/001, 1.47 ms in 003"),
    },
    "softmax": {  # 000/001 §10.1 table, 003 summary table
        "manual": (3.7, 8.1, "3.7 in 003; 8.1 in the §10.1 table, which repeats the GELU numbers"),
        "pytorch": (1.5, 1.5, ""),
        "cuda": (1.8, 1.8, ""),
        "triton": (1.9, 1.9, ""),
        "compiled": (1.3, 1.3, ""),
    },
}
LECTURE_SIZE = {"gelu": "16384 x 16384 fp32 on an H100", "softmax": "size not stated, H100"}
TIE = 0.05  # measured times within 5 % are a tie, not an ordering
DEFAULT_ARGS = {"gelu": {"n": 16384, "trials": 10}, "softmax": {"rows": 16384, "cols": 1024, "trials": 10}}


@dataclass
class Variant:
    variant: str
    calls: int
    kernels_per_call: float
    gpu_ns_per_call: float
    wall_ns_per_call: float | None
    bytes_per_call: int
    achieved_gbps: float
    pct_of_peak: float | None
    speedup_vs_manual: float | None = None
    wall_speedup_vs_manual: float | None = None
    ncu_dram_bytes_per_call: float | None = None
    ncu_dram_pct: float | None = None  # ncu's DRAM throughput, duration-weighted over the variant's kernels
    kernels: list[str] = field(default_factory=list)


@dataclass
class SampleTable:
    sample: str
    source: str
    gpu: str | None
    peak_gbps: float | None
    size: str
    nsys_version: str | None
    command: str
    variants: list[Variant]
    calls_from: str  # "call ranges" | "--trials"


def _export_path(path: Path, scratch: Path) -> Path:
    """The SQLite export in a run folder (decompressing trace.sqlite.xz into scratch)."""
    if path.is_dir():
        for name in ("trace.sqlite", "trace.sqlite.xz"):
            if (path / name).exists():
                return _export_path(path / name, scratch)
        raise ProfkitError(f"{path} has no trace.sqlite or trace.sqlite.xz")
    if path.suffix == ".xz":
        plain = scratch / path.with_suffix("").name
        with lzma.open(path) as src, open(plain, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        return plain
    return path


def _command(path: Path, info: dict[str, Any]) -> list[str]:
    run_json = path / "run.json" if path.is_dir() else None
    if run_json is not None and run_json.exists():
        return list(json.loads(run_json.read_text())["command"])
    for process in info.get("processes", []):
        if process.get("command_line"):
            return shlex.split(process["command_line"])
    return []


def _flag(argv: list[str], name: str, default: int) -> int:
    for i, arg in enumerate(argv):
        if arg == f"--{name}" and i + 1 < len(argv):
            return int(argv[i + 1])
        if arg.startswith(f"--{name}="):
            return int(arg.split("=", 1)[1])
    return default


def _sample_of(ranges: set[str]) -> str:
    for sample in LECTURE:
        if any(r.startswith(f"{DOMAIN}:{sample}/") for r in ranges):
            return sample
    raise ProfkitError(f"no {DOMAIN}:gelu/... or {DOMAIN}:softmax/... NVTX ranges in the trace")


def _ncu_by_kernel(path: Path) -> dict[str, Any]:
    """nsys kernel name -> its ncu launch, from a run folder's run.json and ncu.csv.

    Each ncu report holds one launch (-c 1), merged in rank order, so the
    i-th launch of ncu.csv is the i-th kernel of run.json's ncu.kernels.
    """
    if not path.is_dir() or not (path / "ncu.csv").exists() or not (path / "run.json").exists():
        return {}
    from profkit.readers.ncu.launches import read_ncu_csv

    launches = sorted(read_ncu_csv(path / "ncu.csv"), key=lambda launch: launch.id)
    kernels = json.loads((path / "run.json").read_text()).get("ncu", {}).get("kernels", [])
    if len(launches) != len(kernels):
        raise ProfkitError(f"{path}/ncu.csv has {len(launches)} launches for {len(kernels)} profiled kernels")
    return {k["kernel"]: launch for k, launch in zip(kernels, launches)}


def measure(path: Path) -> SampleTable:
    """The per-variant table of one run folder or export."""
    with tempfile.TemporaryDirectory() as scratch:
        export_path = _export_path(path, Path(scratch))
        with open_trace(export_path) as trace:
            info = capture_info(trace)
            ranges = {r["name"]: r for r in nvtx_summary(trace)}
            per_kernel = nvtx_kernel_summary(trace)
    sample = _sample_of(set(ranges))
    argv = _command(path, info)
    defaults = DEFAULT_ARGS[sample]
    if sample == "gelu":
        n = _flag(argv, "n", defaults["n"])
        elements, size = n * n, f"{n} x {n} fp32"
    else:
        rows, cols = _flag(argv, "rows", defaults["rows"]), _flag(argv, "cols", defaults["cols"])
        elements, size = rows * cols, f"{rows} x {cols} fp32"
    trials = _flag(argv, "trials", defaults["trials"])
    bytes_per_call = elements * 4 * 2  # read the input once, write the output once
    peak = info.get("memory_bandwidth_gbps")
    ncu = _ncu_by_kernel(path)

    variants: list[Variant] = []
    calls_from = "call ranges"
    for variant in VARIANTS:
        label = f"{DOMAIN}:{sample}/{variant}"
        kernels = [r for r in per_kernel if r["range"] == label]
        if label not in ranges or not kernels:
            continue
        call_range = ranges.get(f"{label}/call")
        if call_range is not None:
            calls, wall = int(call_range["instances"]), float(call_range["med_ns"])
        else:
            calls, wall, calls_from = trials, None, "--trials"
        gpu_ns = sum(r["total_ns"] for r in kernels) / calls
        launches = sum(r["instances"] for r in kernels)
        gbps = bytes_per_call / gpu_ns  # bytes per ns = GB/s
        row = Variant(variant=variant, calls=calls, kernels_per_call=launches / calls, gpu_ns_per_call=gpu_ns,
                      wall_ns_per_call=wall, bytes_per_call=bytes_per_call, achieved_gbps=gbps,
                      pct_of_peak=100.0 * gbps / peak if peak else None,
                      kernels=sorted({r["name"] for r in kernels}))
        if ncu and all(name in ncu for name in row.kernels):
            by_name: dict[str, int] = {}
            for r in kernels:
                by_name[r["name"]] = by_name.get(r["name"], 0) + r["instances"]
            dram, weighted, weight = 0.0, 0.0, 0.0
            for name, count in by_name.items():
                launch = ncu[name]
                if launch.dram_bytes_read is None or launch.dram_bytes_write is None:
                    break
                dram += (launch.dram_bytes_read + launch.dram_bytes_write) * count / calls
                if launch.dram_throughput_pct is not None and launch.duration_ns:
                    weighted += launch.dram_throughput_pct * launch.duration_ns * count
                    weight += launch.duration_ns * count
            else:
                row.ncu_dram_bytes_per_call = dram
                row.ncu_dram_pct = weighted / weight if weight else None
        variants.append(row)
    manual = next((v for v in variants if v.variant == "manual"), None)
    for v in variants:
        if manual is not None:
            v.speedup_vs_manual = manual.gpu_ns_per_call / v.gpu_ns_per_call
            if manual.wall_ns_per_call and v.wall_ns_per_call:
                v.wall_speedup_vs_manual = manual.wall_ns_per_call / v.wall_ns_per_call
    return SampleTable(sample=sample, source=str(path), gpu=info.get("gpu_name"), peak_gbps=peak, size=size,
                       nsys_version=info.get("nsys_version"), command=" ".join(argv), variants=variants,
                       calls_from=calls_from)


def _ms(ns: float | None) -> str:
    """Milliseconds to 4 significant digits (0.03290, 1.848, 295.3)."""
    return "" if ns is None else f"{ns / 1e6:#.4g}".rstrip(".")


def _lecture_ms(sample: str, variant: str) -> str:
    low, high, _ = LECTURE[sample][variant]
    return f"{low:g}" if low == high else f"{low:g}-{high:g}"


def findings(table: SampleTable) -> list[str]:
    """Plain sentences: where the measured ranking and fusion speedup agree or disagree with the lecture."""
    lecture = LECTURE[table.sample]
    measured = {v.variant: v.gpu_ns_per_call for v in table.variants}
    names = [v for v in VARIANTS if v in measured]
    out = []
    lec_order = sorted(names, key=lambda v: lecture[v][0])
    our_order = sorted(names, key=lambda v: measured[v])
    steps = [our_order[0]]
    for prev, cur in zip(our_order, our_order[1:]):
        steps.append(("= " if measured[cur] <= (1 + TIE) * measured[prev] else "< ") + cur)
    out.append(f"Ranking, fastest first. Lecture: {' < '.join(lec_order)}. "
               f"Measured (GPU time per call, = within {TIE:.0%}): {' '.join(steps)}.")
    flips = []
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            la, lb = lecture[a][0], lecture[b][0]
            if max(la, lb) < 1.10 * min(la, lb):
                continue  # a tie in the lecture (within 10 %): no claim to check
            lecture_faster = a if la < lb else b
            slower = b if lecture_faster == a else a
            if measured[lecture_faster] > (1 + TIE) * measured[slower]:
                flips.append(f"the lecture has {lecture_faster} ({_lecture_ms(table.sample, lecture_faster)} ms) "
                             f"faster than {slower} ({_lecture_ms(table.sample, slower)} ms), here {slower} "
                             f"({_ms(measured[slower])} ms) beats {lecture_faster} "
                             f"({_ms(measured[lecture_faster])} ms)")
    if flips:
        out.append("Disagreements: " + "; ".join(flips) + ".")
    else:
        out.append("Every ordering the lecture states (ties within 10 % aside) holds here.")
    if "manual" in measured and "pytorch" in measured:
        lecture_speedup = lecture["manual"][0] / lecture["pytorch"][0]
        ours = measured["manual"] / measured["pytorch"]
        verdict = ("agrees within a factor of 2" if 0.5 <= ours / lecture_speedup <= 2
                   else "differs from the lecture by more than a factor of 2")
        out.append(f"Fusion speedup (manual / PyTorch fused): lecture {lecture_speedup:.1f}x, measured {ours:.1f}x "
                   f"(GPU time): {verdict}.")
    above = [v.variant for v in table.variants if v.pct_of_peak is not None and v.pct_of_peak > 100]
    if above:
        out.append(f"{', '.join(above)} exceed the DRAM peak: input and output fit in the L2 cache at this size, "
                   "so those rows measure cache bandwidth, not DRAM; use a larger size for DRAM claims.")
    manual = next((v for v in table.variants if v.variant == "manual"), None)
    if manual is not None:
        out.append(f"The unfused version launches {manual.kernels_per_call:.0f} kernels per call; each reads and "
                   "writes the whole tensor, which is why fusion wins on a memory-bound operation.")
    return out


def render_markdown(tables: list[SampleTable]) -> str:
    lines = ["# Sample kernels: the CS336 lecture 6 comparison, measured by profkit", ""]
    lines += ["Generated by `scripts/samples_table.py` from the traces in this folder "
              "(`scripts/profile_samples.sh` made them). The report.html/md/json in each folder are re-rendered "
              "from the committed exports with the current profkit by `python scripts/render_reports.py` (no GPU "
              "needed). Absolute times differ from the lecture's H100 and sizes; "
              "the claims to check are the ranking and the fusion speedup.", ""]
    lines += ["Columns: GPU time per call = kernels launched inside the variant's NVTX range / calls; "
              "wall time per call = median of the per-call NVTX ranges (launch and synchronize included, like the "
              "lecture's benchmark); bandwidth = the bytes the operation must move (fp32 in + out) / GPU time, and "
              "% of the GPU's peak memory bandwidth as nsys reports it; ncu DRAM = bytes the kernels actually moved "
              "(ncu `dram__bytes_read.sum + dram__bytes_write.sum`), when ncu profiled every kernel of the variant.",
              ""]
    for t in tables:
        lines.append(f"## {t.sample.upper() if t.sample == 'gelu' else t.sample.capitalize()}")
        lines.append("")
        peak = f"{t.peak_gbps:,.0f} GB/s peak" if t.peak_gbps else "peak unknown"
        lines.append(f"{t.gpu or 'unknown GPU'} ({peak}), {t.size}, nsys {t.nsys_version or '?'} "
                     f"(lecture: {LECTURE_SIZE[t.sample]}). Calls counted from {t.calls_from}.")
        lines.append(f"Command: `{t.command}`")
        lines.append("")
        lines.append("| Variant | Lecture (ms) | GPU time / call (ms) | Wall time / call (ms) | Kernels / call "
                     "| Speedup vs manual | Bandwidth (GB/s) | % of peak | ncu DRAM / call (MB) | ncu DRAM % |")
        lines.append("| :-- | --: | --: | --: | --: | --: | --: | --: | --: | --: |")
        for v in t.variants:
            speed = f"{v.speedup_vs_manual:.2f}x" if v.speedup_vs_manual else ""
            lines.append(
                f"| {TITLES[v.variant]} | {_lecture_ms(t.sample, v.variant)} | {_ms(v.gpu_ns_per_call)} "
                f"| {_ms(v.wall_ns_per_call)} | {v.kernels_per_call:g} | {speed} | {v.achieved_gbps:,.0f} "
                f"| {'' if v.pct_of_peak is None else f'{v.pct_of_peak:.1f}'} "
                f"| {'' if v.ncu_dram_bytes_per_call is None else f'{v.ncu_dram_bytes_per_call / 1e6:,.1f}'} "
                f"| {'' if v.ncu_dram_pct is None else f'{v.ncu_dram_pct:.1f}'} |")
        notes = [note for _, _, note in LECTURE[t.sample].values() if note]
        lines.append("")
        for sentence in findings(t):
            lines.append(f"- {sentence}")
        for note in notes:
            lines.append(f"- Lecture sources differ: {note}.")
        lines.append("")
    return "\n".join(lines)


# reports/README.md goes on, after this line, with text written by hand (the other runs'
# sections); a new table replaces only what comes before it.
HAND_WRITTEN = "<!-- Written by hand from here on: scripts/samples_table.py keeps it. -->"


def _hand_written_tail(path: Path) -> str:
    """What ``path`` holds from the HAND_WRITTEN line on ("" when it has none)."""
    old = path.read_text() if path.exists() else ""
    start = old.find(HAND_WRITTEN)
    return "" if start < 0 else "\n" + old[start:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", type=Path, help="run folders or exports (gelu, softmax)")
    parser.add_argument("-o", "--output", type=Path, help="write Markdown here (default: stdout)")
    parser.add_argument("--json", action="store_true", help="print the measurements as JSON instead")
    args = parser.parse_args(argv)
    try:
        tables = [measure(path) for path in args.runs]
    except ProfkitError as exc:
        print(f"samples_table: error: {exc.one_line()}", file=sys.stderr)
        return 2
    text = json.dumps([asdict(t) for t in tables], indent=2) if args.json else render_markdown(tables)
    if args.output:
        args.output.write_text(text + "\n" + _hand_written_tail(args.output))
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
