"""Bounds on what one trace may cost: bytes, events, string length, SQL time, files walked.

Traces arrive from strangers (attached to issues, CI artifacts), so every
reader stops a file that asks for far more than any real trace needs, with
one line that names the limit and the variable that raises it.  The defaults
are set from real traces with room to spare:

- ``PROFKIT_MAX_TRACE_BYTES`` (16 GiB): decompressed bytes of a Kineto trace;
- ``PROFKIT_MAX_GZIP_RATIO`` (100): decompressed / compressed bytes.  Real
  Kineto traces gzip 14-18:1 (tests/data/kineto); a run of whitespace or of
  one repeated event compresses 1000:1, so a 1 MB file cannot become 1 GiB;
- ``PROFKIT_MAX_EVENTS``: events of a Kineto trace.  By default one per
  ``MIN_EVENT_BYTES`` (24) decompressed bytes: a real event takes 150-400
  bytes of JSON, ``{"ph":"X","ts":1,"dur":1}`` already 25; millions of
  ``{}`` do not fit.  A number sets a fixed cap instead;
- ``PROFKIT_MAX_STRING`` (262,144 characters): one name or text (a kernel
  name, an NVTX text).  The longest C++ template kernel names of real
  traces are a few kB;
- ``PROFKIT_SQL_SECONDS`` (600): one SQLite query of an nsys export;
- ``PROFKIT_MAX_CACHE_FILES`` (200,000): files walked in a run folder's
  kernel caches;
- ``PROFKIT_MAX_CSV_COLUMNS`` (20,000), ``PROFKIT_MAX_CSV_ROWS`` (2,000,000)
  and ``PROFKIT_MAX_CSV_CELLS`` (1,000,000 rows x columns) of an ncu CSV; a
  cell is a name or text (``PROFKIT_MAX_STRING``).  The widest real raw page
  (tests/data/roofline, every roofline section) has 1,700 columns; a details
  page has one row per launch and metric;
- ``PROFKIT_MAX_SAMPLES`` (1,000,000): samples in one list of a history
  database (a run's step times; real runs have hundreds).
- ``PROFKIT_MAX_RANKS`` (512): ranks in one trace (a whole-job export split
  by process and device), and the rank count of one NCCL communicator a
  trace may record.  One node holds 8-16 GPUs; every rank is analysed as a
  trace of its own, so thousands of them in one file are refused.

Nesting depth has no variable: a JSON document nested deeper than the
interpreter's recursion limit (about 1,000) is refused by the reader, and
everything the reader accepts can be written back (``profkit scrub``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from profkit.errors import ProfkitError

GIB = 1 << 30
MIN_EVENT_BYTES = 24
# Events always allowed, whatever the size (a hand-written test trace of a few events).
EVENTS_FLOOR = 100_000
# Compressed files smaller than this may expand to it whatever their ratio.
RATIO_FLOOR_BYTES = 64 << 20


@dataclass(frozen=True)
class Limits:
    max_trace_bytes: int = 16 * GIB
    max_gzip_ratio: float = 100.0
    max_events: int | None = None  # None: one per MIN_EVENT_BYTES decompressed bytes
    max_string: int = 256 << 10
    sql_seconds: float = 600.0
    max_cache_files: int = 200_000
    max_csv_columns: int = 20_000
    max_csv_rows: int = 2_000_000
    max_csv_cells: int = 1_000_000
    max_samples: int = 1_000_000
    max_ranks: int = 512

    def max_events_for(self, decompressed_bytes: int) -> int:
        if self.max_events is not None:
            return self.max_events
        return max(EVENTS_FLOOR, decompressed_bytes // MIN_EVENT_BYTES)

    def max_decompressed(self, compressed_bytes: int) -> int:
        return min(self.max_trace_bytes, max(RATIO_FLOOR_BYTES, int(compressed_bytes * self.max_gzip_ratio)))


VARIABLES = {
    "max_trace_bytes": "PROFKIT_MAX_TRACE_BYTES",
    "max_gzip_ratio": "PROFKIT_MAX_GZIP_RATIO",
    "max_events": "PROFKIT_MAX_EVENTS",
    "max_string": "PROFKIT_MAX_STRING",
    "sql_seconds": "PROFKIT_SQL_SECONDS",
    "max_cache_files": "PROFKIT_MAX_CACHE_FILES",
    "max_csv_columns": "PROFKIT_MAX_CSV_COLUMNS",
    "max_csv_rows": "PROFKIT_MAX_CSV_ROWS",
    "max_csv_cells": "PROFKIT_MAX_CSV_CELLS",
    "max_samples": "PROFKIT_MAX_SAMPLES",
    "max_ranks": "PROFKIT_MAX_RANKS",
}


def current() -> Limits:
    """The limits, with the environment's overrides (read each time: tests set them)."""
    values: dict[str, float | int] = {}
    for field, variable in VARIABLES.items():
        text = os.environ.get(variable)
        if not text:
            continue
        try:
            number = float(text) if field in ("max_gzip_ratio", "sql_seconds") else int(text.replace("_", ""))
        except ValueError:
            raise ProfkitError(f"{variable}={text!r} is not a number") from None
        if number <= 0:
            raise ProfkitError(f"{variable}={text!r} must be positive")
        values[field] = number
    return Limits(**values)  # type: ignore[arg-type]


class LimitExceeded(ProfkitError):
    """A trace beyond one of the limits; ``variable`` raises it."""

    def __init__(self, what: str, variable: str) -> None:
        super().__init__(what, hint=f"if the file is genuine, raise the limit: {variable}=N")
        self.variable = variable


def check_string(value: str, limits: Limits) -> None:
    if len(value) > limits.max_string:
        raise LimitExceeded(f"holds a string of {len(value):,} characters (a name or text), more than "
                            f"the {limits.max_string:,} allowed", VARIABLES["max_string"])
