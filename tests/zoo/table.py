"""The table in tests/zoo/README.md: each public trace, each truth (tests/zoo/truth.py, from the
JSON) and profkit's figure (its commands' JSON).  ``python -m tests.zoo.table`` prints it;
tests/test_zoo.py checks that the README holds what it prints today.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from click.testing import CliRunner

from profkit.cli import cli
from tests.conftest import DATA
from tests.invariants import OUTPUTS
from tests.zoo.truth import load, truth_of

ZOO = DATA / "hta_zoo"
BLOCKING_SYNCS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize")
HEADER = ["| trace | what | truth (from the JSON) | profkit | same |", "| --- | --- | --- | --- | --- |"]


def ms(ns: float | None) -> str:
    return "–" if ns is None else f"{ns / 1e6:,.1f} ms"


def describe(collectives: dict[str, tuple[int, int]]) -> str:
    return "; ".join(f"{name} {count}, {size:,} B" for name, (count, size) in sorted(collectives.items()))


def rows(path: Path) -> Iterator[tuple[str, str, str, bool]]:
    """(what, truth, profkit's figure, whether they agree) for one trace."""
    truth, out = truth_of(path), OUTPUTS[path]
    summary = (out.steps or {}).get("summary") or {}
    steps = truth.steps or truth.forward_annotations
    source = "ProfilerStep#N" if truth.steps else "forward annotations"
    yield f"steps ({source})", str(steps), str(summary.get("count")), summary.get("count") == steps
    if truth.steps:
        median = summary.get("median_ns")
        yield ("step median", ms(truth.step_median_ns), ms(median),
               median is not None and abs(median / truth.step_median_ns - 1) <= 0.03)
        longest = max(s["duration_ns"] for s in out.steps["steps"] if s["phase"] == "steady")
        yield ("longest steady step", ms(max(truth.step_ns)), ms(longest), longest <= 1.03 * max(truth.step_ns))
    kernels = sum(row["instances"] for row in out.json["kernels"])
    yield "kernels (names)", f"{truth.kernels:,} ({len(truth.kernel_names)})", \
        f"{kernels:,} ({len(out.json['kernels'])})", kernels == truth.kernels
    graphs = out.json.get("graphs") or {}
    replays = (graphs.get("replays", 0), graphs.get("kernels_in_replays", 0))
    yield ("CUDA graph launches (their kernels)", f"{truth.graph_launches} ({truth.graph_kernels})",
           f"{replays[0]} ({replays[1]})", replays == (truth.graph_launches, truth.graph_kernels))
    events = load(path)["traceEvents"]
    blocking = sum(e.get("ph") == "X" and e.get("name") in BLOCKING_SYNCS for e in events)
    found = sum(row["count"] for row in (out.json.get("stalls") or {}).get("rows") or []
                if any(api in str(row["api"]) for api in BLOCKING_SYNCS))
    yield "blocking sync calls", str(blocking), str(found), blocking == found
    waits = [row for row in (out.json.get("stalls") or {}).get("rows") or [] if row["cpu_blocked_ns"] == 0]
    charged = sum(row["per_step"]["gpu_idle_ns"] for row in waits)
    yield "GPU idle per step charged to calls that never block the CPU", "0 ms", ms(charged), charged == 0
    if truth.collectives:
        ranks = json.loads(CliRunner().invoke(cli, ["ranks", str(path), "--format", "json"]).stdout)[0]
        found = {c["calls"][0]: (c["count"], c["bytes_total"]) for c in ranks["collectives"] if c["sized"]}
        yield ("collectives: count, bytes (`ranks`)", describe(truth.collectives), describe(found),
               found == truth.collectives)
    yield "host table", "no Python stacks: refuses" if not truth.python_frames else "stacks", \
        "refuses" if "host" in out.refusals else "a table", ("host" in out.refusals) == (not truth.python_frames)


def table() -> str:
    lines = list(HEADER)
    for path in sorted(ZOO.glob("*.json.gz")):
        for what, truth, figure, same in rows(path):
            lines.append(f"| `{path.name}` | {what} | {truth} | {figure} | {'yes' if same else '**no**'} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table())
