"""The steps say what the capture cost them: nsys's PROFILER_OVERHEAD rows inside the steady steps.

Oracle: the committed nsys exports' PROFILER_OVERHEAD table read with sqlite3 and
intersected with the steady steps in plain Python (an interval walk, no numpy).
"""

from __future__ import annotations

import sqlite3

import pytest
from click.testing import CliRunner

from profkit.analysis.steps import STEADY, find_steps, headline
from profkit.cli import cli
from profkit.readers import open_trace
from tests.conftest import DATA, nsys_fixture

EXPORTS = [DATA / "host" / "nsys" / "llama_generate_nsys.sqlite.xz", "nsys2025_train_print"]


def _path(export: object):
    if isinstance(export, str):
        return nsys_fixture(export)
    from tests.conftest import _decompressed  # the .xz fixtures, decompressed once

    return _decompressed(export)


def _overhead_inside(path, windows: list[tuple[int, int]]) -> float:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        rows = sorted(conn.execute('SELECT start, "end" FROM PROFILER_OVERHEAD'))
    merged: list[list[int]] = []
    for s, e in rows:
        if merged and s <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], e)
        else:
            merged.append([s, e])
    return sum(max(0, min(e, hi) - max(s, lo)) for lo, hi in windows for s, e in merged)


@pytest.mark.parametrize("export", EXPORTS, ids=lambda e: str(e).split("/")[-1])
def test_the_profilers_own_work_per_step(export: object) -> None:
    path = _path(export)
    with open_trace(path) as trace:
        result = find_steps(trace)
    steady = result.steps[result.steps["phase"] == STEADY]
    windows = list(zip(steady["start_ns"].tolist(), steady["end_ns"].tolist()))
    expected = _overhead_inside(path, windows) / len(windows)
    assert result.summary["profiler_overhead_ns_per_step"] == pytest.approx(expected, abs=0.1)
    assert "the profiler's own work: " in headline(result)


def test_the_decode_loop_states_its_cost() -> None:
    path = _path(EXPORTS[0])
    out = CliRunner().invoke(cli, ["steps", str(path)])
    assert out.exit_code == 0, out.output
    text = " ".join(out.output.split())
    assert "the profiler's own work: 1.88 ms per step (2.5% of the median, the least the capture cost)" in text


def test_a_kineto_trace_has_no_such_rows() -> None:
    with open_trace(DATA / "kineto" / "mlp_plain.json.gz") as trace:
        assert "profiler_overhead_ns_per_step" not in find_steps(trace).summary
