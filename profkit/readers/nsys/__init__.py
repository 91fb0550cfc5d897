"""Reading Nsight Systems SQLite exports.

``open_export(path)`` gives a validated, read-only ``NsysExport``; the SQL
for each summary lives in ``profkit.readers.nsys.queries``.
"""

from profkit.model.cuda_labels import normalize_api_name
from profkit.readers.nsys.reader import (
    NsysExport,
    api_name_sql,
    decode_global_tid,
    open_export,
)

__all__ = ["NsysExport", "api_name_sql", "decode_global_tid", "normalize_api_name", "open_export"]
