"""The columns the report reads from the two big tables, and the start of their loading.

Light on purpose (no pandas, no matplotlib): ``write_report`` starts the loads
before it imports the rest of the report, so a big export's scans run while
those imports do (SQLite scans release the GIL).
"""

from __future__ import annotations

from profkit.model import Trace
from profkit.model.schema import LAUNCH_CONFIG_COLUMNS
from profkit.model.trace import DURATION

# Every column the report will want from the two big tables, read in one scan of each:
# a scan of a million rows costs about as much as three more columns in it.
KERNEL_COLUMNS = ("start", "end", DURATION, "device", "stream", "pid", "correlation", "name", "short_name",
                  *LAUNCH_CONFIG_COLUMNS)
API_COLUMNS = ("start", "end", DURATION, "pid", "tid", "correlation", "name")
BIG_TABLES = {"kernels": KERNEL_COLUMNS, "api": API_COLUMNS}


def start_loading(trace: Trace) -> bool:
    """Load the kernels' then the API calls' columns on a background thread, where the
    trace's source can (nsys exports: a second read-only connection): the kernel
    sections start as soon as the kernels are in, while the API calls load.  A no-op
    for a load already under way or done.  Returns whether a load was started."""
    return trace.prefetch_in_order(list(BIG_TABLES.items()))
