"""Integer keys shared by the readers and the analyses: the NULL marker and dense key codes.

A reader's column scans and an analysis's group-bys meet on these: the nsys reader
writes ``NULL_INT`` where SQLite has NULL and encodes its key columns with
``encode_rows``, and the summaries, the timeline's lanes and the occupancy's launch
configurations group by the same codes.

``encode_rows`` is profkit's one encoder of rows of small integers (a row: one value per
column, such as (device, stream, pid, kind)): each column's offset from its minimum is a
digit of one mixed-radix int64 key, so a row costs one lookup or hash of its key, not one
per column, and no Python object.  A column too wide for a digit (hashes, NULL markers)
first gets its own dense codes; so does, in sorted order, any but a narrow one, because
the key is then numbered through a table of its values, which must stay small.  Linear
time where the key's values span such a table, unlike ``np.unique(axis=0)``, which sorts
rows (~50x slower on a million of them).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

# Stands for NULL in integer key columns (the nsys reader's scans write it).
NULL_INT = -(1 << 63)

SORTED, FIRST = "sorted", "first"
# A lookup table of this many entries (or 4 per row) is cheap next to a sort or a hash.
_TABLE_ENTRIES = 1 << 22
# A packed key stays below this, so key * span + digit never overflows int64.
_KEY_LIMIT = 1 << 62
# In sorted order, a column spanning more values than this becomes dense codes first.
_NARROW_SPAN = 256


def encode_rows(columns: Sequence[np.ndarray], order: str = SORTED) -> tuple[np.ndarray, list[tuple[int, ...]]]:
    """A dense int64 code per row of integer ``columns`` (equal rows, equal codes), and each
    code's row as a tuple of Python ints.

    ``order``: ``"sorted"`` numbers the distinct rows in the order of their tuples (column
    by column); ``"first"`` in the order of their first row."""
    codes, values, digits = _encode(columns, order)
    if values is None:
        return codes, []
    return codes, list(zip(*(column.tolist() for column in _decode(values, digits))))


def encode_row_codes(columns: Sequence[np.ndarray], order: str = SORTED) -> np.ndarray:
    """``encode_rows``'s codes alone."""
    return _encode(columns, order)[0]


# How a key's digits turn back into column values, most significant first: (span, low)
# for an offset from ``low``, (span, values) for dense codes into ``values``, (span,
# (values, digits)) for a key so far that was itself encoded (its values have ``digits``).
_Digits = list[tuple[int, Any]]


def _encode(columns: Sequence[np.ndarray], order: str) -> tuple[np.ndarray, np.ndarray | None, _Digits]:
    """(codes, each code's key value, the key's digits)."""
    if order not in (SORTED, FIRST):
        raise ValueError(f"order must be {SORTED!r} or {FIRST!r}, not {order!r}")
    n = len(columns[0])
    if n == 0:
        return np.zeros(0, dtype=np.int64), None, []
    table = max(_TABLE_ENTRIES, 4 * n)
    key: np.ndarray | None = None
    digits: _Digits = []
    radix = 1
    for column in columns:
        column = np.asarray(column)
        low, high = int(column.min()), int(column.max())
        span = high - low + 1
        decode: Any = low
        if span > table or (order == SORTED and span > _NARROW_SPAN):  # its dense codes are the digit
            digit, decode = _dense(column, order, table, low, high)
            span = len(decode)
        else:
            digit = column.astype(np.int64)
            if low:
                digit -= low
        if key is None:
            key = digit
        else:
            if radix * span >= _KEY_LIMIT:  # the key so far becomes its dense codes (below n)
                key, values = _dense(key, order, table)
                digits = [(len(values), (values, digits))]
                radix = len(values)
            key *= span
            key += digit
        digits.append((span, decode))
        radix *= span
        del digit
    assert key is not None
    codes, values = _dense(key, order, table)
    return codes, values, digits


def _decode(values: np.ndarray, digits: _Digits) -> list[np.ndarray]:
    """The column values of key ``values`` (one array per column)."""
    parts: list[list[np.ndarray]] = []
    for span, decode in reversed(digits):
        values, digit = np.divmod(values, span)
        if isinstance(decode, tuple):
            parts.append(_decode(decode[0][digit], decode[1]))
        elif isinstance(decode, np.ndarray):
            parts.append([decode[digit]])
        else:
            parts.append([digit + decode])
    return [column for part in reversed(parts) for column in part]


def _dense(values: np.ndarray, order: str, table: int, low: int | None = None,
           high: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(int64 codes, the value of each code) of an integer array, numbered as ``order`` says."""
    if order == FIRST:
        codes, uniques = pd.factorize(values, sort=False)
        return codes.astype(np.int64, copy=False), np.asarray(uniques)
    if low is None or high is None:
        low, high = int(values.min()), int(values.max())
    if high - low < table:  # a table of the values that occur numbers them in sorted order
        offset = values.astype(np.int64, copy=False)
        if low:
            offset = offset - low
        present = np.zeros(high - low + 1, dtype=bool)
        present[offset] = True
        lookup = np.cumsum(present, dtype=np.int64)
        lookup -= 1
        return lookup[offset], np.flatnonzero(present) + low
    uniques, codes = np.unique(values, return_inverse=True)
    return codes.astype(np.int64, copy=False).reshape(-1), uniques


def rows_by_thread(pid: np.ndarray, tid: np.ndarray) -> dict[tuple[int, int], np.ndarray]:
    """Row indices of each (pid, tid), in row order: one sort for all threads (a mask per thread
    made 40,000 threads of one frame each a 3-billion-step scan)."""
    order = np.lexsort((tid, pid))  # stable: each thread's rows keep their order
    p, t = pid[order], tid[order]
    cut = (np.flatnonzero((p[1:] != p[:-1]) | (t[1:] != t[:-1])) + 1).tolist()
    bounds = [0, *cut, len(order)] if len(order) else []
    return {(int(p[a]), int(t[a])): order[a:b] for a, b in zip(bounds[:-1], bounds[1:])}


def first_rows(codes: np.ndarray) -> np.ndarray:
    """Index of each code's first row, for codes numbered in order of first appearance."""
    return np.flatnonzero(np.diff(np.maximum.accumulate(codes), prepend=-1) > 0)


def encode_keys(keys: Sequence[Sequence[Any]]) -> tuple[np.ndarray, list[tuple[Any, ...]]]:
    """Dense integer codes for the key tuples, and the key tuple of each code (NULL_INT as None).

    Integer arrays go through ``encode_rows`` (one column: codes in sorted order; several: in
    order of first appearance); other sequences (text) through a dict."""
    if all(isinstance(k, np.ndarray) and k.dtype.kind in "iub" for k in keys):
        codes, rows = encode_rows(keys, SORTED if len(keys) == 1 else FIRST)
        return codes, [tuple(_none_if_null(v) for v in row) for row in rows]
    index: dict[tuple[Any, ...], int] = {}
    columns = [k.tolist() if isinstance(k, np.ndarray) else k for k in keys]
    codes_list = [index.setdefault(k, len(index)) for k in zip(*columns)]
    return np.asarray(codes_list, dtype=np.int64), [tuple(_none_if_null(v) for v in k) for k in index]


def _none_if_null(value: Any) -> Any:
    return None if value == NULL_INT else value
