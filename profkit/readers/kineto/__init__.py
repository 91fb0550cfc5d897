"""Reader of PyTorch profiler (Kineto) traces into the trace model.

``prof.export_chrome_trace(...)`` and ``tensorboard_trace_handler`` output,
``.json`` or ``.json.gz`` (told by content), a file or a folder (see
``folder`` for which file of a folder is read).  ``parse`` reads the JSON in
chunks with orjson, ``events`` turns each chunk into columns of the model's
tables, ``stacks`` finds the user's Python frame of each CUDA API call, and
``source`` serves the columns to ``profkit.model.Trace``.
"""

from __future__ import annotations

from pathlib import Path

from profkit.model import Trace
from profkit.readers.kineto.folder import choose_trace
from profkit.readers.kineto.source import open_kineto_file


def open_kineto_trace(path: Path) -> Trace:
    """Open a Kineto trace file, or the one trace of a folder, read-only."""
    path = Path(path)
    note = None
    if path.is_dir():
        path, note = choose_trace(path)
    trace = open_kineto_file(path)
    if note:
        trace.meta.extra["folder_note"] = note
    return trace


__all__ = ["open_kineto_trace"]
