"""Integer keys shared by the readers and the analyses: the NULL marker and dense key codes.

A reader's column scans and an analysis's group-bys meet on these: the nsys reader
writes ``NULL_INT`` where SQLite has NULL and encodes its key columns with
``encode_keys``, and the summaries group by the same codes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

# Stands for NULL in integer key columns (the nsys reader's scans write it).
NULL_INT = -(1 << 63)


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
