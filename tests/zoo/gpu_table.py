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
        host = out.json.get("host")
        if "slow" in plants and host:
            yield from _slow_rows(name, program, level, plants["slow"], host)


def _slow_rows(name: str, program: str, level: str, plant: str, host: dict) -> Iterator[tuple[str, str, str, str, bool]]:
    """The planted slow line: the host table's row at it, with its self time per step (the planted
    sleep's, where the program prints it); where it calls make_batch (python_loader), a data-loading
    verdict named make_batch at the time per step the program measured."""
    if program != "python_loader":
        truth_ms = planted(program, level).truth.get("slow_ms_per_step")
        at = [(k, r) for k, r in enumerate(host["functions"]) if f"{Path(r['file']).name}:{r['line']}" == plant]
        found = f"row {at[0][0] + 1}: {at[0][1]['self_ns_per_step'] / 1e6:.2f} ms" if at else "no row at that line"
        same = bool(at) and (truth_ms is None or abs(at[0][1]["self_ns_per_step"] / 1e6 - truth_ms) <= 0.2 * truth_ms)
        yield (name, "planted slow line: its host-table row, self time per step", plant +
               (f" {truth_ms:.2f} ms" if truth_ms is not None else ""), found, same)
        return
    truth_ms = planted(program, level).truth["make_batch_ms_per_step"]
    verdict = host["verdict"]
    cause = verdict["causes"][0] if verdict["causes"] else {"label": "", "ns_per_step": 0.0}
    found_ms = cause["ns_per_step"] / 1e6
    yield (name, "what bounds the step, and its cause's time per step (make_batch, called at the planted "
                 "line, as the program timed it)", f"data loading: make_batch {truth_ms:.2f} ms",
           f"{verdict['words']}: {cause['label']} {found_ms:.2f} ms",
           verdict["kind"] == "data" and cause["label"].startswith("make_batch (")
           and abs(found_ms - truth_ms) <= 0.2 * truth_ms)


def table() -> str:
    lines = ["| capture | what | truth | profkit | same |", "| --- | --- | --- | --- | --- |"]
    lines += [f"| `{n}` | {what} | {truth} | {found} | {'yes' if same else '**no**'} |"
              for n, what, truth, found, same in rows()]
    return "\n".join(lines)


if __name__ == "__main__":
    print(table())
