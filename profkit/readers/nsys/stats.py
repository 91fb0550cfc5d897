"""Grouped duration statistics that equal nsys's summary reports to the nanosecond.

nsys's reports compute, per group, ``sum, count, avg, median, min, max,
stdev`` in SQLite and round avg/median/stdev with SQLite's ``round(x, 1)``.
profkit computes the same figures, with the same definitions:

- ``avg``: total / count as a double (SQLite's ``avg`` of integers);
- ``median``: the middle value, or the mean of the two middle values for an
  even count (nsys's ``median`` aggregate);
- ``stddev``: the *sample* standard deviation (n - 1), 0.0 for one value;
- rounding: SQLite's own ``round(x, 1)`` (half away from zero on the decimal
  form, unlike Python's ``round``), so the values are rounded by the same
  code nsys uses.

Speed: SQLite has no hash aggregation, so ``GROUP BY`` on an unindexed
column sorts every row, and the export is read-only (no index can be added).
``GROUP BY`` with median/stdev as Python aggregates took 1.4 s for 1M
kernels.  Instead one table scan streams only the group key and the value
out of SQLite (as ``group_concat`` text parsed by numpy, see
``collect_columns``) into two int64 arrays, 16 bytes per row (40 MB for 2.5M
rows), and numpy groups them: 0.35 s for the same 1M kernels.  Memory is
proportional to the two columns, never to the table.
"""

from __future__ import annotations

import itertools
import math
import os
import sqlite3
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from fractions import Fraction
from typing import Any

import numpy as np

from profkit.readers.nsys.reader import NsysExport

_collector_ids = itertools.count()


# How nsys rounds avg/median/stddev/percent to one decimal depends on the
# SQLite inside the nsys that runs the report:
# - SQLITE_LEGACY: SQLite before 3.43 (nsys 2023.4 ships 3.42).  round() prints
#   with "%.1f", whose rounder adds 0.05 plus a fudge of x * 3e-16, so a value
#   just below a tie (13065.65 is 13065.6499999999996 as a double) rounds up.
# - DECIMAL_HALF_UP: newer SQLite (nsys 2025.3) rounds the exact binary value
#   half away from zero: 13065.6499999999996 -> 13065.6, 70180.25 -> 70180.3.
# Both are computed here exactly (fractions), so the result does not depend
# on the SQLite that Python happens to link.
SQLITE_LEGACY = "sqlite-legacy"
DECIMAL_HALF_UP = "decimal-half-up"
ROUNDING_MODES = (SQLITE_LEGACY, DECIMAL_HALF_UP)


@dataclass(frozen=True)
class GroupStats:
    """Statistics of one group, as nsys prints them (avg/med/stddev rounded to 0.1)."""

    key: tuple[Any, ...]
    count: int
    total: int
    avg: float
    med: float
    min: int
    max: int
    stddev: float


@dataclass(frozen=True)
class ColumnsQuery:
    """A scan that yields aligned columns: integer expressions and object (text) expressions.

    ``source`` is the FROM clause (a table, maybe with joins), ``table`` the
    driving table whose ``rowid`` (spelled ``rowid``) chunks the scan, and
    ``with_clause`` optional CTEs the source refers to.
    """

    table: str
    source: str
    int_columns: tuple[str, ...]
    text_columns: tuple[str, ...] = ()
    where: str = "1"
    rowid: str = "rowid"
    with_clause: str = ""


# Stands for NULL in integer columns (group_concat skips NULLs, which would
# misalign the columns).
NULL_INT = -(1 << 63)

# Rows per group_concat chunk: the text of a chunk is ~20 bytes per row and
# column, so chunks keep transient strings near 5 MB per column.
CHUNK_ROWS = 250_000


def collect_columns(export: NsysExport, query: ColumnsQuery,
                    keep: Callable[[list[np.ndarray]], np.ndarray] | None = None,
                    ) -> tuple[list[np.ndarray], list[list[Any]]]:
    """Run a ``ColumnsQuery`` and return its integer columns as int64 arrays
    and its text columns as lists, row-aligned.

    Integer columns leave SQLite as one ``group_concat`` string per chunk of
    rows and are parsed by numpy in C: about 8x faster than fetching rows as
    Python tuples.  All aggregates of one SELECT see the same rows in the same
    order, so the columns line up.  Text columns are appended by aggregate
    functions whose ``step`` is ``list.append`` (no Python frame per row).

    The scan is chunked by rowid (CHUNK_ROWS rows per query), so no string
    grows past ~20 bytes x CHUNK_ROWS per column.  Integer-only scans of big tables run their chunks
    on several read-only connections at once: sqlite3 releases the GIL while
    SQLite steps, so the chunks really run in parallel.
    """
    bounds = export.rows(f'SELECT min(rowid), max(rowid) FROM "{query.table}"')
    lo, hi = bounds[0] if bounds else (None, None)
    texts: list[list[Any]] = [[] for _ in query.text_columns]
    if lo is None:
        return [np.zeros(0, dtype=np.int64) for _ in query.int_columns], texts
    workers = _workers(hi - lo + 1) if not query.text_columns else 1
    # Equal chunks, a multiple of the worker count, none above CHUNK_ROWS.
    n_chunks = workers * -(-(hi - lo + 1) // (workers * CHUNK_ROWS))
    size = -(-(hi - lo + 1) // n_chunks)
    chunks = [(start, start + size) for start in range(lo, hi + 1, size)]
    selects = [f"group_concat(coalesce(({expr}), {NULL_INT}))" for expr in query.int_columns]
    tag = next(_collector_ids)
    sink_names = [f"_profkit_text{tag}_{i}" for i in range(len(query.text_columns))]
    selects += [f"{name}(({expr}))" for name, expr in zip(sink_names, query.text_columns)]
    sql = (f"{query.with_clause} SELECT {', '.join(selects)} FROM {query.source} "
           f"WHERE ({query.where}) AND {query.rowid} >= ? AND {query.rowid} < ?")
    n_ints = len(query.int_columns)

    if keep is not None and query.text_columns:
        raise ValueError("keep= filters integer-only queries")

    def parse(row: tuple) -> list[np.ndarray]:
        columns = [np.fromstring(text, dtype=np.int64, sep=",") if text else _EMPTY for text in row[:n_ints]]
        if keep is not None and len(columns[0]):
            mask = keep(columns)
            columns = [c[mask] for c in columns]
        return columns

    if workers > 1:
        parts = _parallel_chunks(export, sql, chunks, workers, parse)
    else:
        for name, target in zip(sink_names, texts):
            export.conn.create_aggregate(name, 1, _list_sink(target))
        try:
            parts = [parse(export.rows(sql, chunk)[0]) for chunk in chunks]
        finally:
            for name in sink_names:
                export.conn.create_aggregate(name, 1, None)
    # Join column by column, dropping each column's chunks as soon as it is
    # joined, so the peak is the chunks plus one column, not twice the data.
    columns = []
    for i in range(n_ints):
        columns.append(np.concatenate([p[i] for p in parts]) if parts else _EMPTY)
        for p in parts:
            p[i] = _EMPTY
    del parts
    if len({len(c) for c in columns} | {len(t) for t in texts}) > 1:
        raise RuntimeError(f"misaligned columns reading {query.table}")  # a bug, not a user error
    return columns, texts


_EMPTY = np.zeros(0, dtype=np.int64)
PARALLEL_MIN_ROWS = 400_000


def _workers(rows: int) -> int:
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(cpus, 8, rows // (PARALLEL_MIN_ROWS // 2))) if rows >= PARALLEL_MIN_ROWS else 1


def _parallel_chunks(export: NsysExport, sql: str, chunks: list[tuple[int, int]], workers: int,
                     parse: Any) -> list[list[np.ndarray]]:
    """Run ``sql`` once per rowid chunk on ``workers`` connections; results in chunk order."""
    local = threading.local()
    opened: list[Any] = []
    lock = threading.Lock()

    def run(chunk: tuple[int, int]) -> list[np.ndarray]:
        conn = getattr(local, "conn", None)
        if conn is None:
            conn = local.conn = export.new_connection()
            if export.scan_mmap_bytes:
                conn.execute(f"PRAGMA mmap_size = {int(export.scan_mmap_bytes)}")
            with lock:
                opened.append(conn)
        try:
            row = conn.execute(sql, chunk).fetchone()
        except sqlite3.DatabaseError as exc:
            raise export._damage(exc) from None
        return parse(row)

    try:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            return list(pool.map(run, chunks))
    finally:
        for conn in opened:
            conn.close()


def _list_sink(target: list[Any]) -> type:
    class Sink:
        def __init__(self) -> None:
            self.step = target.append

        def finalize(self) -> None:
            return None

    return Sink


def grouped_stats(export: NsysExport, query: ColumnsQuery, rounded: bool = True) -> list[GroupStats]:
    """nsys-equal statistics of a query's last integer column, grouped by all
    its other columns (text columns first, then the other integer columns)."""
    ints, texts = collect_columns(export, query)
    keys: list[Sequence[Any]] = [*texts, *ints[:-1]]
    return stats_from_columns(keys, ints[-1], export.rounding_mode if rounded else None)


def stats_from_columns(keys: Sequence[Sequence[Any]], values: np.ndarray,
                       rounding: str | None = DECIMAL_HALF_UP) -> list[GroupStats]:
    if len(values) == 0:
        return []
    codes, unique_keys = encode_keys(keys)
    n_groups = len(unique_keys)
    packed = _pack_sorted(codes, values, n_groups)
    if packed is not None:
        # Codes are dense (every code 0..n_groups-1 occurs), so each group
        # starts where its code does in the packed, sorted array.
        starts = np.searchsorted(packed, np.arange(n_groups, dtype=np.int64) << _VALUE_BITS)
        grouped = packed & ((1 << _VALUE_BITS) - 1)
        del packed
        counts = np.diff(np.r_[starts, len(grouped)])
        group_codes = np.arange(n_groups)
        mins = grouped[starts]
        maxs = grouped[starts + counts - 1]
        lo = grouped[starts + (counts - 1) // 2]
        hi = grouped[starts + counts // 2]
    elif n_groups <= PARTITION_MAX_GROUPS:
        grouped, starts, counts = _group_by_code(codes, values, n_groups)
        group_codes = np.arange(n_groups)
        mins = np.minimum.reduceat(grouped, starts)
        maxs = np.maximum.reduceat(grouped, starts)
        lo, hi = _middle_values(grouped, starts, counts)
    else:
        sorted_codes, grouped = _sort_by_group_then_value(codes, values)
        starts = np.flatnonzero(np.r_[True, sorted_codes[1:] != sorted_codes[:-1]])
        counts = np.diff(np.r_[starts, len(grouped)])
        group_codes = sorted_codes[starts]
        mins = grouped[starts]
        maxs = grouped[starts + counts - 1]
        lo = grouped[starts + (counts - 1) // 2]
        hi = grouped[starts + counts // 2]
    del codes
    totals = np.add.reduceat(grouped, starts)
    means = totals / counts
    # In place, so the peak is two row-sized arrays, not four.
    deviations = grouped.astype(np.float64)
    del grouped
    deviations -= np.repeat(means, counts)
    deviations *= deviations
    squares = np.add.reduceat(deviations, starts)
    del deviations
    stddevs = np.where(counts > 1, np.sqrt(squares / np.maximum(counts - 1, 1)), 0.0)

    results = []
    medians = [
        int(a) if c % 2 else (int(a) + int(b)) / 2 for a, b, c in zip(lo.tolist(), hi.tolist(), counts.tolist())
    ]
    avgs = [int(t) / int(c) for t, c in zip(totals.tolist(), counts.tolist())]
    figures = [*avgs, *medians, *stddevs.tolist()]
    # rounding=None keeps the raw doubles (nsys does not round byte sizes).
    rounded = round_like_nsys(figures, 1, rounding) if rounding else figures
    n = len(starts)
    for i in range(n):
        results.append(GroupStats(
            key=unique_keys[int(group_codes[i])],
            count=int(counts[i]),
            total=int(totals[i]),
            avg=rounded[i],
            med=rounded[n + i],
            min=int(mins[i]),
            max=int(maxs[i]),
            stddev=rounded[2 * n + i],
        ))
    return results


# When (group code, value) pairs fit one int64 (values of 0 to 2**40 - 1 ns,
# i.e. up to 18 minutes, which is every real duration), one in-place sort of
# the packed pairs orders every group by value: numpy sorts int64 with SIMD,
# 2.5M pairs in ~10 ms, after which min, max, median are plain lookups.
# Otherwise: up to this many groups, values are grouped with an O(n) radix
# argsort and each median found with np.partition; beyond it, one lexsort of
# (group, value) pairs is cheaper than a Python loop over the groups.
PARTITION_MAX_GROUPS = 2000


def _pack_sorted(codes: np.ndarray, values: np.ndarray, n_groups: int) -> np.ndarray | None:
    """``code << 40 | value`` sorted, or None when the pairs do not fit."""
    if n_groups >= (1 << (62 - _VALUE_BITS)) or values.min() < 0 or values.max() >= (1 << _VALUE_BITS):
        return None
    packed = codes << _VALUE_BITS
    packed |= values
    packed.sort()
    return packed


def _group_by_code(codes: np.ndarray, values: np.ndarray, n_groups: int
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Values ordered by group (not by value within a group), group starts and sizes."""
    # numpy's stable argsort is a radix sort for 16-bit integers.
    small = codes.astype(np.uint16) if n_groups <= 0xFFFF else codes
    order = np.argsort(small, kind="stable")
    counts = np.bincount(codes, minlength=n_groups)
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    return values[order], starts, counts


def _middle_values(grouped: np.ndarray, starts: np.ndarray, counts: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray]:
    """The lower and upper middle value of each group (equal for odd sizes)."""
    lo = np.empty(len(starts), dtype=np.int64)
    hi = np.empty(len(starts), dtype=np.int64)
    for i, (start, count) in enumerate(zip(starts.tolist(), counts.tolist())):
        segment = grouped[start : start + count]
        upper = count // 2
        if count % 2:
            lo[i] = hi[i] = np.partition(segment, upper)[upper]
        else:
            part = np.partition(segment, (upper - 1, upper))
            lo[i], hi[i] = part[upper - 1], part[upper]
    return lo, hi


def encode_keys(keys: Sequence[Sequence[Any]]) -> tuple[np.ndarray, list[tuple[Any, ...]]]:
    """Dense integer codes for the key tuples, and the key tuple of each code."""
    if len(keys) == 1 and isinstance(keys[0], np.ndarray):
        key = keys[0]
        if len(key) == 0:
            return np.zeros(0, dtype=np.int64), []
        low, high = int(key.min()), int(key.max())
        if low >= 0 and high < max(1 << 22, 4 * len(key)):
            # Small non-negative ids (StringIds keys): a lookup table is O(n),
            # where np.unique sorts.
            present = np.zeros(high + 1, dtype=bool)
            present[key] = True
            uniq = np.flatnonzero(present)
            lookup = np.cumsum(present, dtype=np.int64) - 1
            return lookup[key], [(int(u),) for u in uniq.tolist()]
        uniq, codes = np.unique(key, return_inverse=True)
        return codes.astype(np.int64, copy=False), [(_none_if_null(u),) for u in uniq.tolist()]
    index: dict[tuple[Any, ...], int] = {}
    columns = [k.tolist() if isinstance(k, np.ndarray) else k for k in keys]
    codes_list = [index.setdefault(k, len(index)) for k in zip(*columns)]
    return np.asarray(codes_list, dtype=np.int64), [tuple(_none_if_null(v) for v in k) for k in index]


def _none_if_null(value: Any) -> Any:
    return None if value == NULL_INT else value


_VALUE_BITS = 40


def _sort_by_group_then_value(codes: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Codes and values, both ordered by (group code, value)."""
    n_codes = int(codes.max()) + 1
    if values.min() >= 0 and values.max() < (1 << _VALUE_BITS) and n_codes < (1 << (62 - _VALUE_BITS)):
        # Pack (code, value) into one int64 and sort that: several times
        # faster than a two-key lexsort plus two gathers.
        packed = (codes << _VALUE_BITS) | values
        packed.sort()
        return packed >> _VALUE_BITS, packed & ((1 << _VALUE_BITS) - 1)
    order = np.lexsort((values, codes))
    return codes[order], values[order]


def round_like_nsys(values: Sequence[float | int], digits: int = 1,
                    mode: str = DECIMAL_HALF_UP) -> list[float]:
    """Round each value to ``digits`` decimals the way nsys's reports do (see ROUNDING_MODES)."""
    if mode == SQLITE_LEGACY:
        return [_round_sqlite_legacy(float(v), digits) for v in values]
    if mode == DECIMAL_HALF_UP:
        quantum = Decimal(1).scaleb(-digits)
        return [float(Decimal(float(v)).quantize(quantum, rounding=ROUND_HALF_UP))
                if math.isfinite(v) else float(v) for v in values]
    raise ValueError(f"unknown rounding mode {mode!r}")


def _round_sqlite_legacy(x: float, digits: int) -> float:
    """SQLite 3.42's round(x, digits) for digits >= 1 (func.c roundFunc + printf.c etFLOAT).

    printf adds ``rounder = 0.5 * 10**-digits`` and, when
    ``digits + exponent2/3 < 15``, also ``x * 3e-16``; then it truncates to
    ``digits`` decimals.  Values beyond 2**52 have no fraction to round.
    """
    if not math.isfinite(x) or x == 0 or abs(x) > 4503599627370496.0:
        return x
    # Not modelled: printf's 16-significant-digit cap, which changes results
    # only from 1e15 up (11 days in ns; percentages never get there).
    magnitude = abs(x)
    exponent2 = math.frexp(magnitude)[1] - 1  # IEEE unbiased exponent
    # C's int division truncates toward zero.
    fudge = digits + int(exponent2 / 3) < 15
    value = Fraction(magnitude) + Fraction(5, 10 ** (digits + 1))
    if fudge:
        value += Fraction(magnitude) * Fraction(3e-16)
    scaled = math.floor(value * 10**digits)
    result = float(Fraction(scaled, 10**digits))
    return -result if x < 0 else result
