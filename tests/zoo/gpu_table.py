"""The GPU zoo's table in tests/zoo/README.md: each capture, each truth (tests/zoo/capture_truth.py:
SQL on the export, the Kineto JSON, the program's own lines) and profkit's figure.

    python -m tests.zoo.gpu_table    # prints it; paste between the gpu-zoo-table markers
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from tests.captures import readable
from tests.invariants import OUTPUTS
from tests.zoo.capture_truth import captures, export_truth, planted, steady_period_ms
from tests.zoo.truth import truth_of


def rows() -> Iterator[tuple[str, str, str, str, bool]]:
    for program, level, path in captures():
        out = OUTPUTS[readable(path)]
        steps = out.steps
        name = f"{program}.{level}"
        count = len(export_truth(path).step_ranges) if level != "kineto" else truth_of(path).steps
        yield name, "steps", f"{count:,}", f"{steps['summary']['count']:,}", count == steps["summary"]["count"]
        steady = [i for i, s in enumerate(steps["steps"]) if s.get("phase") == "steady"]
        expected = steady_period_ms(program, level, path, len(steps["steps"]), steady)
        found = steps["summary"]["median_ns"] / 1e6
        yield (name, "steady step median (the median of its CUDA events' spans or of its host intervals, "
                     "the longer)",
               f"{expected:.3f} ms", f"{found:.3f} ms", abs(found - expected) <= 0.03 * expected)
        if level != "kineto":
            truth = export_truth(path)
            graphs = out.json.get("graphs") or {}
            if truth.graph_launches:
                yield name, "graph replays (cudaGraphLaunch calls)", f"{truth.graph_launches:,}", \
                    f"{graphs.get('replays') or 0:,}", truth.graph_launches == graphs.get("replays")
        plants = planted(program, level).plants
        if "sync" in plants:
            stalls = [r for r in out.json["stalls"]["rows"] if r["in_steps"]]
            top = max(stalls, key=lambda r: r["per_step"]["gpu_idle_ns"] + r["per_step"]["cpu_blocked_ns"])
            found = Path(top["source"]).name if top["source"] else "source unknown"
            yield name, "planted sync line (top stall in the steps)", plants["sync"], found, found == plants["sync"]


def table() -> str:
    lines = ["| capture | what | truth | profkit | same |", "| --- | --- | --- | --- | --- |"]
    lines += [f"| `{n}` | {what} | {truth} | {found} | {'yes' if same else '**no**'} |"
              for n, what, truth, found, same in rows()]
    return "\n".join(lines)


if __name__ == "__main__":
    print(table())
