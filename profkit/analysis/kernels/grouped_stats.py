"""Grouped duration statistics that equal nsys's summary reports to the nanosecond.

Pure numpy (no SQL, no source format): the summaries of every trace source
use them.  nsys's reports compute, per group, ``sum, count, avg, median,
min, max, stdev`` in SQLite and round avg/median/stdev with SQLite's
``round(x, 1)``.  profkit computes the same figures, with the same
definitions:

- ``avg``: total / count as a double (SQLite's ``avg`` of integers);
- ``median``: the middle value, or the mean of the two middle values for an
  even count (nsys's ``median`` aggregate);
- ``stddev``: the *sample* standard deviation (n - 1), 0.0 for one value;
- rounding: SQLite's own ``round(x, 1)`` (half away from zero on the decimal
  form, unlike Python's ``round``), in the flavour of the nsys release that
  wrote the trace (``profkit.model.trace.ROUNDING_MODES``).

Speed: one in-place sort of packed (group code, value) int64 pairs orders
every group by value (see ``_pack_sorted``): 1M kernels in ~0.05 s.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from fractions import Fraction
from typing import Any

import numpy as np

from profkit.model.keys import encode_keys
from profkit.model.trace import DECIMAL_HALF_UP, SQLITE_LEGACY


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
