"""The report's zoomed timeline shows a few steady-state steps, and says which.

Oracle: each step's span computed in SQL on the nsys export
(``step_oracle.gpu_step_spans``: the first GPU operation launched inside each
NVTX step range, to the next), and the steady-state median of those spans.
The phases (which steps are warm-up) are the ones the same report's step
table gives; the test checks the window against the spans.
"""

from __future__ import annotations

import statistics

import pytest

from profkit.readers import open_trace
from profkit.report import sections
from profkit.report.build import build_report
from profkit.report.json_report import report_dict
from tests.conftest import nsys_fixture
from tests.step_oracle import gpu_step_spans


@pytest.mark.parametrize("name", ["nsys2025_train_print", "nsys2025_mlp_gpu_nvtx"])
def test_the_zoom_lies_within_steady_steps_around_the_median(name: str) -> None:
    export = nsys_fixture(name)
    spans = gpu_step_spans(export)
    with open_trace(export) as trace:
        report = report_dict(build_report(trace))
    phases = {row["index"]: row["phase"] for row in report["sections"]["steps"]["tables"]["steps"]["rows"]}
    zoom = report["sections"]["timeline"]["figures"]["timeline_zoom"]
    shown = zoom["data"]["steps"]
    indices = [s["index"] for s in shown]
    assert indices == list(range(indices[0], indices[0] + sections.ZOOM_STEPS))
    assert all(phases[i] == "steady" for i in indices)
    assert [(s["start_ns"], s["end_ns"]) for s in shown] == [spans[i] for i in indices]
    assert f"steps {indices[0]}-{indices[-1]} of {len(spans)}" in zoom["title"]
    # the steady step closest to the steady median is shown: in the middle, unless the steady
    # state ends (or begins) right there
    steady = [i for i, phase in sorted(phases.items()) if phase == "steady"]
    durations = {i: spans[i][1] - spans[i][0] for i in steady}
    median = statistics.median(durations.values())
    closest = min(steady, key=lambda i: (abs(durations[i] - median), i))
    assert closest == indices[1] or (closest == indices[0] == steady[0]) or (closest == indices[-1] == steady[-1])
    # the window: the shown steps, a margin, and nothing of the steps beyond their neighbours
    bins = zoom["data"]["bins"]
    lo, hi = bins["start_ns"], bins["start_ns"] + bins["width_ns"] * bins["count"]
    assert lo <= spans[indices[0]][0] and hi >= spans[indices[-1]][1]
    assert lo >= spans[indices[0] - 1][0] and (indices[-1] + 1 == len(spans) or hi <= spans[indices[-1] + 1][1])
    # the utilization figure's zoomed view is the same window
    views = report["sections"]["utilization"]["figures"]["utilization"]["data"]["views"]
    assert views[1]["bins"] == bins and views[1]["title"] == zoom["title"]


def test_without_steps_the_zoom_is_the_busiest_stretch() -> None:
    """No steps found (here: none given): the fallback is the shortest stretch holding 90% of the GPU's work."""
    with open_trace(nsys_fixture("nsys2025_train_print")) as trace:
        section = sections.Section("timeline", "Timeline")
        found: dict = {}
        sections.fill_timeline(section, trace, 200, found)
    zoom = next(f for f in section.figures if f.key == "timeline_zoom")
    assert zoom.title.startswith("Zoom: the busiest") and "steps" not in zoom.data
    assert "Dashed lines" not in zoom.caption
