"""The trace model: one backend-neutral, columnar picture of a trace.

readers (nsys SQLite, Kineto JSON) -> ``Trace`` -> analyses -> renderers.
``schema`` lists every table's columns; ``trace`` holds ``Trace`` and
``TraceMeta``; ``keys``, ``sync_sites`` and the rounding modes in ``trace`` are
what readers and analyses share.  See ``profkit.readers.open_trace`` to get a
``Trace``.

The names below are loaded on first use: ``profkit.capture.sync_hook`` imports
``profkit.model.sync_sites`` inside the profiled process, and importing this
package must not load numpy there.
"""

from __future__ import annotations

from typing import Any

__all__ = ["CUDA", "HIP", "KINETO", "NSYS", "TABLES", "Coded", "Trace", "TraceMeta", "TraceSource", "column_names",
           "empty_table", "from_columns"]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module 'profkit.model' has no attribute {name!r}")
    from profkit.model import schema, trace

    value = getattr(schema if name in ("TABLES", "column_names") else trace, name)
    globals()[name] = value  # once: later reads are plain module attributes
    return value
