"""glibc malloc settings for a process that makes many big, short-lived numpy arrays.

A report on a 1M-kernel export allocates about 4 GB over its life in arrays of 1-20 MB
(a column, a mask, a sorted copy), while at most ~400 MB are live.  glibc serves such
arrays with mmap above its mmap threshold and unmaps them on free, so every new array
is fresh memory: the kernel zeroes and maps it page by page on first touch.  On the
2-core VM of issue 10 that was ~380,000 page faults, 1.5-2 s of system time, a quarter
of the report's CPU.  Below the threshold, freed arrays stay in malloc's heap and the
next one reuses them (a heap only shrinks by itself from its top, so holes left between
live arrays stay resident until handed back).

So the CLI (``configure``) keeps arrays up to 32 MB (a 4M-row int64 column) on the
heap, and long computations hand the free parts of the heap back at points where most
temporaries are gone (``give_back``: ``malloc_trim``, which unmaps free pages anywhere
in the heap): the report after each section.  Threads share two arenas, not one per
reader thread (each arena keeps its own free memory).

Only the CLI calls ``configure``: a library must not change its host process's
allocator.  Elsewhere (not Linux, not glibc) both are no-ops.
"""

from __future__ import annotations

import sys
from typing import Any

# <malloc.h>
_M_MMAP_THRESHOLD, _M_ARENA_MAX = -3, -8
HEAP_ARRAYS_UP_TO = 32 * 1024 * 1024  # glibc's largest allowed mmap threshold on 64-bit
ARENAS = 2

_libc: Any = None


def configure() -> bool:
    """Set the process's malloc as the module docstring says; whether it could."""
    global _libc
    if sys.platform != "linux":
        return False
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        if not (libc.mallopt(_M_MMAP_THRESHOLD, HEAP_ARRAYS_UP_TO) and libc.mallopt(_M_ARENA_MAX, ARENAS)):
            return False
        libc.malloc_trim.argtypes = [ctypes.c_size_t]
        _libc = libc
    except (OSError, AttributeError):
        return False  # not glibc (musl, ...): nothing to tune
    return True


def give_back() -> None:
    """Return malloc's free memory to the system (after ``configure``; else nothing to do)."""
    if _libc is not None:
        _libc.malloc_trim(0)
