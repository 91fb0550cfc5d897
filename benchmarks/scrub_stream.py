"""`profkit scrub` of a large Kineto trace with Python stacks, against a plain streaming pass.

Scale input: synthesised by repeating the events of a real committed trace made
with stacks (tests/data/kineto/mlp_print.json.gz: torch.profiler with_stack=True,
half of its events ``python_function``), each copy shifted in time past the
previous one with fresh ids, written in Kineto's layout (one event per line
block) and gzipped at level 6, without holding the trace in memory.  Then, in
one run, each in a fresh process, best wall time of ``--repeat`` runs and peak
RSS (wait4's max RSS) of:

    stream pass    gunzip -> msgspec decode -> msgspec encode -> gzip level 6, chunk by chunk
    profkit scrub  the same file
    HTA's load     TraceAnalysis(trace_dir=...) of the same file (--no-hta to leave it out)

Targets (issue 32): scrub <= 1.5x the streaming pass, peak RSS <= 1.5 GB.

    python benchmarks/scrub_stream.py --events 3500000      # the issue's size (1 GB of JSON)
    python benchmarks/scrub_stream.py --events 1000000 --repeat 1
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

from ingest import measure  # noqa: E402  (fresh interpreter, wait4 max RSS)

SOURCE = ROOT / "tests/data/kineto/mlp_print.json.gz"
ID_KEYS = ("correlation", "External id", "Python id", "Python parent id", "Ev Idx")
HTA_LOAD = ("import sys; from hta.trace_analysis import TraceAnalysis; "
            "t = TraceAnalysis(trace_dir=sys.argv[1]); print(sum(len(df) for df in t.t.traces.values()))")
# The anchor: the least any rewrite of the file costs, cut where the reader cuts.
STREAM_PASS = r"""
import gzip, sys, msgspec
from pathlib import Path
from profkit.readers.kineto.parse import BLOCK, open_binary, _separator
dec, enc = msgspec.json.Decoder(), msgspec.json.Encoder()
with open_binary(Path(sys.argv[1])) as f, gzip.open(sys.argv[2], "wb", compresslevel=6) as out:
    data = bytearray(f.read(BLOCK))
    start = data.find(b"[", data.find(b'"traceEvents"')) + 1
    out.write(bytes(data[:start]))
    sep = _separator(bytes(data[start:start + 4096]))
    data = data[start - 1:]
    events = 0
    while True:
        cut = data.rfind(sep, 1)
        if cut >= 0:
            data[cut + 1] = ord("]")
            batch = dec.decode(data[:cut + 2])
            events += len(batch)
            out.write(b",\n".join(map(enc.encode, batch)) + b",\n")
            del data[:cut + 1]
            data[0] = ord("[")
        more = f.read(BLOCK)
        if not more:
            break
        data += more
    out.write(bytes(data[1:]))
print(events)
"""


def load(path: Path) -> dict[str, Any]:
    with gzip.open(path, "rt") as f:
        return json.load(f)


def build_trace(source: Path, out: Path, events: int) -> int:
    """Write ``events`` events (the source's, repeated) to ``out``; return how many."""
    doc = load(source)
    body = [e for e in doc.pop("traceEvents") if e.get("ph") != "M"]
    timed = [e["ts"] for e in body if isinstance(e.get("ts"), (int, float))]
    period = max(e["ts"] + e.get("dur", 0) for e in body if isinstance(e.get("ts"), (int, float))) - min(timed) + 1e3
    id_step = 1 + max((v for e in body if isinstance(e.get("args"), dict) for k, v in e["args"].items()
                       if k in ID_KEYS and isinstance(v, int)), default=0)
    head = ["{"] + [f"  {json.dumps(k)}: {json.dumps(v)}," for k, v in doc.items()] + ['  "traceEvents": [']
    written = 0
    tmp = out.with_suffix(".building")
    with gzip.open(tmp, "wb", compresslevel=6) as f:
        f.write(("\n".join(head) + "\n").encode())
        copy = 0
        while written < events:
            lines = []
            for e in body[:events - written]:
                e2 = dict(e)
                if isinstance(e2.get("ts"), (int, float)):
                    e2["ts"] = round(e2["ts"] + copy * period, 3)
                if isinstance(e2.get("args"), dict) and copy:
                    e2["args"] = {k: v + copy * id_step if k in ID_KEYS and isinstance(v, int) and v > 0 else v
                                  for k, v in e2["args"].items()}
                if isinstance(e2.get("id"), int):
                    e2["id"] += copy * id_step
                lines.append("  {\n    " + json.dumps(e2, separators=(", ", ": "))[1:-1] + "\n  }")
            f.write(((",\n" if written else "") + ",\n".join(lines)).encode())
            written += len(lines)
            copy += 1
        f.write(b'\n  ],\n  "traceName": "scrub_stream_benchmark"\n}\n')
    tmp.replace(out)
    return written


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=3_500_000)
    parser.add_argument("--source", type=Path, default=SOURCE, help="a real Kineto trace with stacks to repeat")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--no-hta", action="store_true", help="leave HTA's load out (it needs ~5x the trace's JSON)")
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "profkit-scrub-bench")
    args = parser.parse_args()

    folder = args.cache / f"{args.source.name.split('.')[0]}-{args.events}"
    big = folder / "rank0.pt.trace.json.gz"
    if not big.exists():
        folder.mkdir(parents=True, exist_ok=True)
        print(f"built {big}: {build_trace(args.source, big, args.events):,} events from {args.source.name}")
    print(f"trace: {big} ({big.stat().st_size / 1e6:.1f} MB gzip)")
    outputs = args.cache / f"out-{args.events}"
    outputs.mkdir(exist_ok=True)
    rows = [("stream pass (gunzip, msgspec decode+encode, gzip -6)",
             measure([sys.executable, "-c", STREAM_PASS, str(big), str(outputs / "stream.json.gz")],
                     outputs / "stream.txt", args.repeat)),
            ("profkit scrub", measure([sys.executable, "-m", "profkit", "scrub", str(big), "-o",
                                       str(outputs / "scrubbed.json.gz")], outputs / "scrub.txt", args.repeat))]
    if not args.no_hta:
        rows.append(("HTA TraceAnalysis(trace_dir=...)",
                     measure([sys.executable, "-c", HTA_LOAD, str(folder)], outputs / "hta.txt", 1)))
    if any(status for _, (_, _, status) in rows):
        return 1
    print(f"{'':54s} {'wall':>8s} {'peak RSS':>10s}")
    for name, (wall, rss, _) in rows:
        print(f"{name:54s} {wall:7.2f}s {rss:8.0f} MB")
    stream, scrub = rows[0][1], rows[1][1]
    ratio = scrub[0] / stream[0]
    print(f"scrub / stream pass: {ratio:.2f}x (target <= 1.5x); scrub peak RSS {scrub[1]:.0f} MB (target <= 1500)")
    return 0 if ratio <= 1.5 and scrub[1] <= 1500 else 3


if __name__ == "__main__":
    sys.exit(main())
