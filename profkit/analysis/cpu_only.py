"""A CPU-only trace: torch.profiler on a machine without a GPU (a CPU training loop, CI).

It records CPU operators, ranges and Python stacks, and no GPU work and no
CUDA API call.  The analyses still apply: the step ranges are steps
(``ProfilerStep#N``), and since nothing runs on a GPU, the whole step is
host time.  Commands say so instead of refusing.
"""

from __future__ import annotations

from profkit.model import Trace
from profkit.model.schema import GPU_WORK_TABLES
from profkit.model.trace import KINETO

CPU_ONLY = "no GPU work in this trace (a CPU-only capture): the whole step is host time"
CPU_TABLES = ("cpu_ops", "ranges", "python_frames")


def unread_device_categories(trace: Trace) -> list[str]:
    """The categories of device work that a Kineto trace records and profkit does not read: another
    accelerator's (MTIA, XPU), or kernels under CUPTI's range profiler (``UNTIMED_DEVICE_WORK``).
    Such a trace is no CPU-only one, and its GPU figures are empty."""
    return sorted(trace.meta.extra.get("unread_device_events") or {})


def is_cpu_only(trace: Trace) -> bool:
    """A Kineto trace with no GPU work and no CUDA API call, but CPU operators, ranges or Python
    stacks.  An nsys export without CUDA data is a capture that left out ``-t cuda``: the
    commands keep saying so."""
    if trace.meta.source != KINETO or any(trace.has(table) for table in (*GPU_WORK_TABLES, "api")):
        return False
    if unread_device_categories(trace):
        return False
    return any(trace.has(table) for table in CPU_TABLES)


def cpu_only_note(trace: Trace) -> str | None:
    """The kernel tables' note for a CPU-only trace (empty, and why); else None."""
    if not is_cpu_only(trace):
        return None
    return f"No GPU kernels: {CPU_ONLY}; profkit host says where it goes."
