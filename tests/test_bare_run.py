"""`profkit trace --bare-run`: the launch shim's step clock, and the comparison of two runs' steps.

Oracle: a real torch program whose steps sleep a known time, run through the launch shim with
the step clock on; a run with a planted extra sleep per step stands for a capture that slows
the steps, a second plain run for one that does not.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from profkit.capture.bare_run import compare, step_durations
from profkit.capture.launch import STEP_TIMES_ENV

ROOT = Path(__file__).resolve().parent.parent
PROGRAM = """\
import os, time, torch
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
extra = float(os.environ.get("EXTRA_SLEEP", "0"))
for _ in range(12):
    model(torch.ones(2, 4)).sum().backward()
    time.sleep(0.05 + extra)
    opt.step()
"""


def _run(tmp_path: Path, name: str, extra: float) -> Path:
    script = tmp_path / "prog.py"
    script.write_text(PROGRAM)
    times = tmp_path / f"{name}.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT), STEP_TIMES_ENV: str(times), "EXTRA_SLEEP": str(extra),
           "PROFKIT_SYNC_SITES": "0"}
    subprocess.run([sys.executable, "-m", "profkit.capture.launch", str(script)], env=env, check=True, timeout=300)
    return times


@pytest.mark.slow  # three torch programs (~30 s on 2 busy cores)
def test_a_planted_slowdown_is_measured_and_called_inflated(tmp_path: Path) -> None:
    bare = _run(tmp_path, "bare", 0.0)
    durations, kind = step_durations(bare)
    assert kind == "optimizer" and len(durations) == 12 - 1 - 3
    assert np.median(durations) >= 50e6  # each step sleeps 50 ms
    slowed = compare(bare, _run(tmp_path, "slowed", 0.05))
    assert slowed["inflated"] and 1.6 < slowed["slowdown"] < 2.6, slowed
    assert "inflated beyond noise" in slowed["sentence"]
    # a second plain run: near 1 (a shared machine's load moves it some, not by the planted 50 ms)
    again = compare(bare, _run(tmp_path, "again", 0.0))
    assert again["slowdown"] < slowed["slowdown"] - 0.4, (again, slowed)


def test_a_run_without_steps_is_not_compared(tmp_path: Path) -> None:
    missing = compare(tmp_path / "none.json", tmp_path / "none.json")
    assert "skipped" in missing
