"""Stopping cleanly on SIGINT, SIGTERM and SIGHUP.

Python turns only SIGINT into an exception; SIGTERM and SIGHUP end the
process at once, skipping every ``finally`` and leaving temporary files
behind (a half-scrubbed copy of an export, secrets still in it, beside the
file meant for sharing).  ``install`` makes all three unwind the stack like
an exception, so the cleanup of ``profkit.atomic`` and the scrubbers runs;
and it sets ``STOP``, which SQLite's progress handler reads
(``profkit.readers.nsys.reader``), so that a long query in any thread ends
within milliseconds instead of running on inside C.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType

STOP = threading.Event()
HANDLED = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))


class Stopped(SystemExit):
    """Raised in the main thread by SIGTERM or SIGHUP; exit status 128 + the signal's number."""


RECEIVED: list[int] = []  # the signals that set STOP, in order


def _handler(signum: int, frame: FrameType | None) -> None:
    STOP.set()
    RECEIVED.append(signum)
    raise_stop()


def raise_stop() -> None:
    """Raise what the last signal means: KeyboardInterrupt for SIGINT (or none seen:
    Python's own SIGINT handler), ``Stopped`` for SIGTERM and SIGHUP.  SQLite's
    progress handler swallows an exception raised inside it, so a query it ended
    calls this to raise it again."""
    if RECEIVED and RECEIVED[-1] != signal.SIGINT:
        raise Stopped(128 + RECEIVED[-1])
    raise KeyboardInterrupt


def install() -> None:
    """Make SIGINT, SIGTERM and SIGHUP unwind the main thread (the CLI calls this once)."""
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in HANDLED:
        try:
            if signal.getsignal(sig) in (signal.SIG_DFL, signal.default_int_handler):
                signal.signal(sig, _handler)
        except (OSError, ValueError):  # a platform without it, or an embedding that owns signals
            pass
