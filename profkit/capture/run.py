"""Writing the run folder that `profkit trace` fills (its layout: ``profkit.readers.run_folder``).

run.json is written at the start (status "running") and rewritten at the
end, so a crash or Ctrl-C still leaves a record of what was attempted.
"""

from __future__ import annotations

import json
import platform
import re
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from profkit._version import __version__
from profkit.report import MEASURED_COST
from profkit.analysis.kernels.code import kernel_caches
from profkit.atomic import write_text
from profkit.readers.run_folder import RUN_JSON

DEFAULT_RUNS_DIR = Path("profkit-runs")



def run_name(target: str, when: datetime | None = None) -> str:
    """``gelu-20261122-143005`` from ``sample_kernels/gelu.py`` (or a module name)."""
    when = when or datetime.now()
    stem = Path(target).stem if target.endswith(".py") or "/" in target else target.rsplit(".", 1)[-1]
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", stem).strip("._") or "run"
    return f"{stem}-{when:%Y%m%d-%H%M%S}"


def create_run_dir(target: str, output: Path | None = None, runs_dir: Path = DEFAULT_RUNS_DIR,
                   when: datetime | None = None) -> Path:
    """Make the run folder: ``output`` if given (may exist if empty), else a fresh one under runs_dir."""
    if output is not None:
        output.mkdir(parents=True, exist_ok=True)
        return output.resolve()
    runs_dir.mkdir(parents=True, exist_ok=True)
    base = runs_dir / run_name(target, when)
    candidate, n = base, 1
    while True:
        try:
            candidate.mkdir()
            return candidate.resolve()
        except FileExistsError:  # two runs in the same second
            n += 1
            candidate = base.with_name(f"{base.name}-{n}")


@dataclass
class RunRecord:
    """What run.json holds."""

    command: list[str]  # what the user asked to profile (script + args)
    cwd: str
    run_dir: str
    backend: str = "nsys"  # nsys | torch: which profiler made the trace
    nsys_command: list[str] = field(default_factory=list)
    ncu_commands: list[list[str]] = field(default_factory=list)
    status: str = "running"  # running | ok | partial | failed
    exit_code: int | None = None  # the profiled program's
    partial: bool = False
    partial_reason: str | None = None
    tools: dict[str, dict[str, str | None]] = field(default_factory=dict)  # name -> {path, version}
    started: str = field(default_factory=lambda: datetime.now().astimezone().isoformat(timespec="seconds"))
    finished: str | None = None
    seconds: dict[str, float] = field(default_factory=dict)  # stage -> wall seconds
    files: dict[str, str] = field(default_factory=dict)  # role -> file name in the run folder
    ncu: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    kernel_caches: dict[str, str] = field(default_factory=kernel_caches)
    # what `profkit scrub` removed from the kept trace ({"scrubbed": False} with --keep-env)
    scrub: dict[str, Any] = field(default_factory=dict)
    # torch backend: what was recorded (window, stacks) and the sampler's figures
    recorded: dict[str, Any] = field(default_factory=dict)
    profkit_version: str = __version__
    host: str = field(default_factory=platform.node)
    python: str = field(default_factory=platform.python_version)

    def write(self, run_dir: Path) -> Path:
        return write_text(run_dir / RUN_JSON, json.dumps(asdict(self), indent=2) + "\n")

    def finish(self, status: str) -> None:
        self.status = status
        self.finished = datetime.now().astimezone().isoformat(timespec="seconds")

    def report_info(self) -> dict[str, Any]:
        """The subset handed to write_report(run_info=...)."""
        return {
            "command": self.command,
            "backend": self.backend,
            "exit_code": self.exit_code,
            "partial": self.partial,
            "partial_reason": self.partial_reason,
            "tools": self.tools,
            "started": self.started,
            "host": self.host,
            "nsys_command": self.nsys_command,
            # what the capture cost, measured in the run (--bare-run, a windowed nsys capture)
            **{key: measured["sentence"] for key in MEASURED_COST
               if isinstance(measured := self.recorded.get(key), dict) and "sentence" in measured},
        }


class Stopwatch:
    """Wall time per stage, for run.json."""

    def __init__(self, record: RunRecord) -> None:
        self.record = record

    def __call__(self, stage: str) -> _Lap:
        return _Lap(self.record, stage)


class _Lap:
    def __init__(self, record: RunRecord, stage: str) -> None:
        self.record, self.stage = record, stage

    def __enter__(self) -> None:
        self.start = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        elapsed = time.perf_counter() - self.start
        self.record.seconds[self.stage] = round(self.record.seconds.get(self.stage, 0.0) + elapsed, 3)
