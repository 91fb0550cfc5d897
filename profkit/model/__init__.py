"""The trace model: one backend-neutral, columnar picture of a trace.

readers (nsys SQLite, Kineto JSON) -> ``Trace`` -> analyses -> renderers.
``schema`` lists every table's columns; ``trace`` holds ``Trace`` and
``TraceMeta``.  See ``profkit.readers.open_trace`` to get a ``Trace``.
"""

from profkit.model.schema import TABLES, column_names
from profkit.model.trace import KINETO, NSYS, Coded, Trace, TraceMeta, TraceSource, empty_table, from_columns

__all__ = ["KINETO", "NSYS", "TABLES", "Coded", "Trace", "TraceMeta", "TraceSource", "column_names", "empty_table",
           "from_columns"]
