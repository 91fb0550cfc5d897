"""The run folder that ``profkit trace`` fills: the names of its files and its run.json.

    profkit-runs/<script>-<YYYYmmdd-HHMMSS>/
      trace.nsys-rep     the Nsight Systems report (open it in the GUI), with --keep-rep
      trace.sqlite       its SQLite export (what profkit reads), scrubbed of the
                         environment unless --keep-env (run.json "scrub" says what went)
      trace.json.gz      instead of the two above with --backend torch: the torch.profiler (Kineto)
                         trace, scrubbed the same way unless --keep-env
      trace.log          everything nsys and the program printed
      ncu.ncu-rep        Nsight Compute report(s), with --ncu-top (ncu-<i>.ncu-rep for several)
      ncu.csv            their details page as CSV; ncu-<rank>-raw.csv their raw pages
      report.html/.md/.json
      run.json           command, exit code, partial flag, tool versions, timings

The format is read as well as written: the readers open a run folder's trace, the report
and the kernel commands read its run.json and ncu CSVs.  So it lives here, below them;
``profkit.capture.run`` writes it (``RunRecord``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from profkit.errors import ProfkitError

TRACE_BASENAME = "trace"
NSYS_REP = "trace.nsys-rep"
SQLITE = "trace.sqlite"
KINETO_JSON = "trace.json.gz"
LOG = "trace.log"
NCU_CSV = "ncu.csv"
# the per-capture raw pages `profkit trace --ncu-top` writes next to ncu.csv (capture.ncu.raw_csv_name)
NCU_RAW_GLOB = "ncu-*-raw.csv"
RUN_JSON = "run.json"
# the trace of a run folder, whichever backend made it
TRACE_NAMES = (SQLITE, KINETO_JSON, "trace.json")


def run_folder_trace(folder: Path) -> Path | None:
    """The trace of a ``profkit trace`` run folder (a run.json and a trace.* file), or None.

    A folder without such a trace goes to the Kineto reader, whose folder policy
    names what it found (a tensorboard_trace_handler folder, or no trace at all)."""
    if not (folder / RUN_JSON).is_file():
        return None
    return next((folder / name for name in TRACE_NAMES if (folder / name).is_file()), None)


def read_run_record(run_dir: Path) -> Any:
    """A run folder's run.json as parsed (run.json is input like any other: the
    caller checks what it holds); ProfkitError when it cannot be read or parsed."""
    path = Path(run_dir) / RUN_JSON
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ProfkitError(f"{path}: unreadable ({exc})") from None
