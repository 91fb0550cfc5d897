"""What the capture backends share with ``profkit.capture.trace``, which drives them.

``trace`` chooses a backend and calls it; the backends (``torch_backend``) and the
trace keeper (``keep``) need the options, the failure that carries the program's exit
status, and the child's environment.  They live here, under all of them, so that no
backend imports the module that imports it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from profkit.capture.run import DEFAULT_RUNS_DIR
from profkit.errors import ProfkitError


@dataclass
class TraceOptions:
    target: str  # script.py, a module name (module=True), or an executable
    args: Sequence[str] = ()
    module: bool = False
    output: Path | None = None  # the run folder; default profkit-runs/<script>-<time>/
    runs_dir: Path = DEFAULT_RUNS_DIR
    ncu_top: int = 0
    nvtx_range: str | None = None
    sync_sites: bool = True
    nsys_args: Sequence[str] = ()
    python: str = sys.executable
    temp_root: Path | None = None  # where the .qdstrm goes; default: the system temp folder
    check_gpu: bool = True
    top: int = 10  # kernels kept for the terminal summary
    backend: str = "auto"  # auto | nsys | torch
    # The export kept in the run folder is scrubbed (profkit.scrub) unless
    # keep_env; the .nsys-rep (which holds the environment too) is deleted
    # unless keep_rep.
    keep_env: bool = False
    keep_rep: bool = False
    # torch backend: record only optimizer steps skip_steps+1 .. skip_steps+steps; 0 (or whole): the
    # whole program; None: bounded by default (DEFAULT_SKIP, DEFAULT_STEPS, or DEFAULT_FORWARD)
    steps: int | None = None
    skip_steps: int = 0
    whole: bool = False
    # run the program once without a profiler first, and compare its steps with the traced ones
    bare_run: bool = False
    # nsys: trace OS runtime calls and every CUDA graph node, sample Python at nsys's full rate
    full: bool = False
    # torch backend: record every Python call (with_stack=True) instead of sampling stacks (py-spy)
    with_stack: bool = False
    sample: bool = True
    # torch backend: record only this window of seconds since the program started ("START:END")
    window: str | None = None
    # record the CUDA allocator's history; snapshots at exit and at the first out-of-memory error
    memory: bool = False


# The torch backend's default window: after 3 optimizer steps of warm-up, 4 steps; a program
# with no optimizer step after 5 s of module forward calls gets 3 s of them instead.
DEFAULT_SKIP = 3
DEFAULT_STEPS = 4
DEFAULT_FORWARD = "5:3"


class ProgramFailed(ProfkitError):
    """nsys captured nothing; exits with the program's status when it failed."""

    def __init__(self, message: str, exit_code: int, hint: str | None = None) -> None:
        super().__init__(message, hint)
        self.exit_code = exit_code if exit_code else ProfkitError.exit_code


def launcher_env(env: Mapping[str, str]) -> dict[str, str]:
    """Make ``python -m profkit.capture.launch`` importable in the child.

    A source checkout (the GPU host runs ``PYTHONPATH=$PWD python3 -m
    profkit``) needs its root on PYTHONPATH; an installed profkit is already
    importable, and putting site-packages on PYTHONPATH would leak this
    environment's packages into the program's.
    """
    out = dict(env)
    root = Path(__file__).resolve().parents[2]  # the folder holding profkit/ (this is profkit/capture/options.py)
    if root.name in ("site-packages", "dist-packages"):
        return out
    paths = [p for p in out.get("PYTHONPATH", "").split(os.pathsep) if p]
    if str(root) not in paths:
        out["PYTHONPATH"] = os.pathsep.join([str(root), *paths])
    return out
