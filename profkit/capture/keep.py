"""What `profkit trace` keeps of a profiler's output, for either backend.

The profiler writes its trace (nsys: the SQLite export; torch.profiler: the
Kineto JSON) into a temporary folder; only a copy that went through
``profkit.scrub`` reaches the run folder, unless ``--keep-env``.  Either way
the file appears under its final name whole or not at all (a rename within
the run folder), and run.json's ``scrub`` says what was removed.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path

from profkit.atomic import atomic_path
from profkit.capture.options import ProgramFailed
from profkit.capture.run import RunRecord, Stopwatch
from profkit.errors import ProfkitError
from profkit.scrub import scrub


def keep_trace(raw: Path, final: Path, *, keep_env: bool, environment: Mapping[str, str], record: RunRecord,
               clock: Stopwatch, returncode: int) -> None:
    """Put ``raw`` into the run folder as ``final``: scrubbed, or as written with ``keep_env``.

    ``environment`` is what the program ran with: the values of its secret
    variables go wherever they occur in the trace (command lines, paths,
    NVTX / record_function names).  A trace that cannot be scrubbed is not
    kept: ProgramFailed, with run.json marked failed.
    """
    if keep_env:
        # shutil.move copies across file systems (the temp folder may be elsewhere): into a
        # temporary name beside ``final``, then one rename, so ``final`` is never half a file.
        with atomic_path(final) as tmp:
            shutil.move(str(raw), tmp)
        record.scrub = {"scrubbed": False, "why": "--keep-env"}
        return
    try:
        with clock("scrub"):
            removed = scrub(raw, final, environment=environment)
    except ProfkitError as exc:
        run_dir = final.parent
        record.finish("failed")
        record.write(run_dir)
        raise ProgramFailed(f"the {'export' if final.suffix == '.sqlite' else 'trace'} could not be scrubbed "
                            f"of the environment, so it was not kept: {exc.message}", returncode,
                            "re-run with --keep-env to keep it as the profiler wrote it") from None
    record.scrub = {"scrubbed": True, "removed": removed}
