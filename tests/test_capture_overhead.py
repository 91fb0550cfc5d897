"""The CPU part of benchmarks/capture_overhead.py: every CPU program bare and under each torch mode.

The figures are the programs' own step times; the check here is that every mode ran and
was measured, and that the default (sampled stacks) costs the Python loop less than
recording every call (--with-stack), the finding the default rests on.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import capture_overhead  # noqa: E402


@pytest.mark.slow  # six program runs (~2 min on 2 busy cores)
def test_cpu_part_measures_every_mode() -> None:
    programs = [p for p in capture_overhead.PROGRAMS if not p.gpu]
    rows = capture_overhead.measure(programs, capture_overhead.CPU_MODES, repeat=1)
    assert len(rows) == len(programs) * len(capture_overhead.CPU_MODES)
    assert all(r["step_ms"] and r["step_ms"] > 0 for r in rows), rows
    python_loop = {r["mode"]: r["vs_bare"] for r in rows if r["program"] == "Python data loop"}
    assert python_loop["torch (default)"] < python_loop["torch --with-stack"], python_loop
    assert "| Python data loop | torch (default) |" in capture_overhead.table(rows)
