"""Kineto load benchmark: profkit vs Holistic Trace Analysis on a ~45 MB rank trace.

Scale input: builds a big Kineto trace from a real torch.profiler fixture by
replicating its events (each copy shifted in time past the previous one; the
last copy holds the first part of the original's time span, to reach the size asked;
with fresh correlation and External ids, so nothing overlaps), written in
Kineto's own layout (one event per ``{ ... }`` block at indent 2).  Then, in
one run, each in a fresh process, best wall time and CPU time of
``--repeat`` runs and peak RSS (max RSS of the process, from wait4) of:

    profkit kernels BIG --format json       read the trace + the kernel summary
    TraceAnalysis(trace_dir=DIR)            HTA's load of the same file

and prints profkit's speed-up and memory ratio, and what each counted
(HTA's figure holds every GPU event it kept, copies and sets included).

    python benchmarks/kineto_load.py                       # build (cached) + measure
    python benchmarks/kineto_load.py --mb 100 --repeat 5
    python benchmarks/kineto_load.py --source some.pt.trace.json.gz

Target (issue 10): >= 5x faster than HTA's load, with lower peak RSS.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from ingest import measure  # noqa: E402  (same timer: fresh interpreter, wait4 max RSS)

# CPU seconds (user + system) of one run, from the same wait4: on a busy
# shared machine wall time swings with the load, CPU time much less.
_CPU_TIMER = r"""
import os, subprocess, sys
proc = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
_, status, usage = os.wait4(proc.pid, 0)
print(usage.ru_utime + usage.ru_stime)
"""


def cpu_seconds(argv: list[str], repeat: int) -> float:
    import subprocess

    return min(float(subprocess.run([sys.executable, "-c", _CPU_TIMER, *argv], capture_output=True,
                                    text=True).stdout) for _ in range(repeat))

DEFAULT_SOURCES = ("gpt_eager", "gpt_compiled", "gpt_noschedule")
HTA_LOAD = ("import sys; from hta.trace_analysis import TraceAnalysis; "
            "t = TraceAnalysis(trace_dir=sys.argv[1]); "
            "print(sum(len(df[df['stream'] >= 0]) for df in t.t.traces.values()))")


def default_source() -> Path:
    for name in DEFAULT_SOURCES:
        for candidate in sorted((ROOT / "tests/data/kineto").glob(f"{name}*.json*")):
            return candidate
    found = sorted((ROOT / "tests/data/kineto").glob("*.json*"))
    if not found:
        raise SystemExit("no Kineto fixture under tests/data/kineto: pass --source")
    return found[0]


def load(path: Path) -> dict[str, Any]:
    opener = gzip.open if path.read_bytes()[:2] == b"\x1f\x8b" else open
    with opener(path, "rt") as f:
        return json.load(f)


def kineto_layout(head: dict[str, Any], events: list[dict[str, Any]]) -> bytes:
    lines = ["{"] + [f"  {json.dumps(k)}: {json.dumps(v)}," for k, v in head.items()] + ['  "traceEvents": [']
    body = ",\n".join("  {\n    " + json.dumps(e, separators=(", ", ": "))[1:-1] + "\n  }" for e in events)
    return ("\n".join(lines) + "\n" + body + '\n  ],\n  "traceName": "kineto_load_benchmark"\n}\n').encode()


def build_trace(source: Path, out: Path, megabytes: float) -> dict[str, float]:
    """Replicate ``source``'s events until the file is about ``megabytes`` MB."""
    doc = load(source)
    events = doc.pop("traceEvents")
    meta = [e for e in events if e.get("ph") == "M"]
    body = [e for e in events if e.get("ph") != "M"]
    timed = [e for e in body if isinstance(e.get("ts"), (int, float))]
    t0 = min(e["ts"] for e in timed)
    period = max(e["ts"] + e.get("dur", 0) for e in timed) - t0 + 1000.0  # µs, one copy after the other
    ids = [e["args"][k] for e in body for k in ("correlation", "External id") if isinstance(e.get("args"), dict)
           and isinstance(e["args"].get(k), int)]
    id_step = max(ids, default=0) + 1
    one_copy = len(kineto_layout(doc, body))
    scale = megabytes * 1e6 / one_copy
    copies, fraction = int(scale), scale - int(scale)  # a last, partial copy: its first fraction of time
    replicated = list(meta)
    for k in range(copies + (fraction > 0)):
        end = t0 + (fraction if k == copies else 1.0) * period
        for e in body:
            ts = e.get("ts")
            if k == copies and (not isinstance(ts, (int, float)) or ts >= end):
                continue
            e2 = dict(e)
            if isinstance(ts, (int, float)):
                e2["ts"] = round(ts + k * period, 3)
            args = e2.get("args")
            if isinstance(args, dict) and k:
                e2["args"] = {**args, **{key: args[key] + k * id_step for key in ("correlation", "External id")
                                         if isinstance(args.get(key), int) and args[key] > 0}}
            if e2.get("cat") in ("ac2g", "fwdbwd") and isinstance(e2.get("id"), int):
                e2["id"] = e2["id"] + k * id_step
            replicated.append(e2)
    tmp = out.with_suffix(".building")
    tmp.write_bytes(kineto_layout(doc, replicated))
    tmp.replace(out)
    return {"copies": scale, "events": len(replicated),
            "kernels": sum(e.get("cat") == "kernel" for e in replicated)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", type=Path, help="a real Kineto trace to replicate (default: a committed fixture)")
    parser.add_argument("--mb", type=float, default=45.0, help="size of the big trace, MB of JSON")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "profkit-kineto-bench")
    args = parser.parse_args()

    source = args.source or default_source()
    folder = args.cache / f"{source.name.split('.')[0]}-{args.mb:g}MB"
    big = folder / "rank0.pt.trace.json"
    if not big.exists():
        folder.mkdir(parents=True, exist_ok=True)
        facts = build_trace(source, big, args.mb)
        print(f"built {big} from {source.name}: {facts['copies']:.2f} copies, {facts['events']:,} events, "
              f"{facts['kernels']:,} kernels")
    print(f"trace: {big} ({big.stat().st_size / 1e6:.1f} MB)")

    # outputs beside the trace's folder: HTA reads every .json in it
    out_profkit = folder.with_name(folder.name + "-profkit_kernels.json")
    out_hta = folder.with_name(folder.name + "-hta_gpu_events.txt")
    ours = measure([sys.executable, "-m", "profkit", "kernels", str(big), "--format", "json"], out_profkit,
                   args.repeat)
    hta = measure([sys.executable, "-c", HTA_LOAD, str(folder)], out_hta, args.repeat)
    if ours[2] or hta[2]:
        return 1
    ours_cpu = cpu_seconds([sys.executable, "-m", "profkit", "kernels", str(big), "--format", "json"], args.repeat)
    hta_cpu = cpu_seconds([sys.executable, "-c", HTA_LOAD, str(folder)], args.repeat)
    ours_kernels = sum(r["instances"] for r in json.loads(out_profkit.read_text()))
    hta_events = int(out_hta.read_text().split()[-1])
    print(f"{'':34s} {'wall':>8s} {'CPU':>8s} {'peak RSS':>10s}")
    print(f"{'HTA TraceAnalysis(trace_dir=...)':34s} {hta[0]:7.2f}s {hta_cpu:7.2f}s {hta[1]:8.0f} MB")
    print(f"{'profkit kernels --format json':34s} {ours[0]:7.2f}s {ours_cpu:7.2f}s {ours[1]:8.0f} MB")
    print(f"profkit: {hta[0] / ours[0]:.1f}x faster (wall), {hta_cpu / ours_cpu:.1f}x less CPU, "
          f"{hta[1] / ours[1]:.1f}x less memory (target: >= 5x faster, less memory)")
    print(f"kernels summarised by profkit: {ours_kernels:,}; GPU events HTA kept (kernels, copies, sets, "
          f"GPU annotations, after its last-step filter): {hta_events:,}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
