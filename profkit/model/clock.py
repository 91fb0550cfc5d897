"""One clock: every time profkit prints or takes is counted from the trace's session start.

The zero (``session_zero``) is, on the trace's own clock (the ns of the model's tables):
- nsys: 0.  An export's timestamps count from the session's start (the UTC time
  ``profkit info`` shows as session_start_utc), as `nsys stats` and the nsys GUI show
  them.  The capture (ANALYSIS_DETAILS) may start later: 0.38 s on the Llama export,
  where OS runtime calls precede it.
- Kineto: the start of the profiler's own span (the "PyTorch Profiler" event, the
  model's ``capture_start_ns``), else the first recorded event.  Kineto's clock
  counts from an epoch, so its timestamps are not usable as printed.

So ``report`` (idle stretches, timelines, findings), ``steps``, ``breakdown``'s idle
stretches and ``export --window`` all say "s from session start", and a time copied from
one is a time for the others.  JSON keeps the trace clock's ns (``start_ns``...), which
are the same figures for nsys; for Kineto subtract ``session_zero``.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation

from profkit.model.trace import KINETO, Trace

SESSION_START = "s from session start"
"""How every header names the clock of the seconds under it."""

_EVENT_TABLES = ("kernels", "memcpy", "memset", "graphs", "api", "ranges", "cpu_ops")


def session_zero(trace: Trace) -> int:
    """The trace-clock ns that reads as 0 s (see the module docstring)."""
    if trace.meta.source != KINETO:
        return 0
    if trace.meta.capture_start_ns is not None:
        return int(trace.meta.capture_start_ns)
    starts = [int(frame["start"].min()) for frame in (trace.table(name, ["start"]) for name in _EVENT_TABLES
                                                      if trace.has(name)) if len(frame)]
    return min(starts, default=0)


def seconds_text(ns: int) -> str:
    """``ns`` (from the zero) as seconds with all nine decimals, exactly: 23.199000512.
    Pasted into ``--window`` it gives back the same nanosecond."""
    ns = int(ns)
    sign = "-" if ns < 0 else ""
    whole, frac = divmod(abs(ns), 1_000_000_000)
    return f"{sign}{whole}.{frac:09d}"


def parse_seconds(text: str) -> int:
    """'23.199000512' -> 23199000512 ns, exactly (decimal, not a float); ValueError otherwise."""
    try:
        value = Decimal(text.strip())
    except InvalidOperation:
        raise ValueError(text) from None
    if not value.is_finite():
        raise ValueError(text)
    return int((value * 1_000_000_000).to_integral_value())
