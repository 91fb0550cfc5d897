"""Growing columns, a batch of events at a time, without keeping the events.

Numbers become numpy arrays per batch; text becomes integer codes into one
dictionary per column (a kernel name seen 100,000 times is stored once, like
HTA's symbol table), so nothing of a batch's dicts outlives the batch.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from profkit.limits import Limits, check_string, current
from profkit.model import schema
from profkit.model.trace import Coded, empty_arrays

NAN = float("nan")


def floats(values: Sequence[Any]) -> np.ndarray:
    """float64 array; anything that is not a number becomes NaN.

    np.fromiter with a count is ~2.5x faster than np.array on a list of
    Python floats (no shape inference); a None or a string fails it, and
    only then are values checked one by one."""
    try:
        return np.fromiter(values, dtype=np.float64, count=len(values))
    except (TypeError, ValueError):
        return np.array([v if isinstance(v, (int, float)) else NAN for v in values], dtype=np.float64)


def ints(values: Sequence[Any]) -> np.ndarray:
    """int64 array; missing or non-numeric values become the model's -1."""
    arr = floats(values)
    bad = ~np.isfinite(arr)
    if bad.any():
        arr[bad] = schema.MISSING_INT
    return arr.astype(np.int64)


def nanoseconds(microseconds: np.ndarray) -> np.ndarray:
    """Kineto's float microseconds as integer ns: ``round(us * 1000)``.

    np.rint rounds half to even like Python's round(), and the product is the
    same IEEE double either way, so this equals ``round(ts * 1000)`` per event."""
    return np.rint(microseconds * 1000.0).astype(np.int64)


def triples(values: Sequence[Any]) -> np.ndarray:
    """(n, 3) int64 from [x, y, z] lists (grid, block); -1 where absent."""
    try:
        arr = np.array(values, dtype=np.float64)
        if arr.ndim == 2 and arr.shape[1] == 3:
            return np.where(np.isfinite(arr), arr, schema.MISSING_INT).astype(np.int64)
    except (TypeError, ValueError):
        pass
    return np.array([[_int_or_missing(x) for x in v] if isinstance(v, list) and len(v) == 3
                     else [schema.MISSING_INT] * 3 for v in values], dtype=np.int64).reshape(-1, 3)


def _int_or_missing(x: Any) -> int:
    return int(x) if isinstance(x, (int, float)) and math.isfinite(x) else schema.MISSING_INT


# The longest name or text a trace may hold (profkit.limits), set by each TraceBuilder.
MAX_STRING = [Limits().max_string]


class Codes:
    """Text column as integer codes; ``None`` (absent) is its own code."""

    def __init__(self) -> None:
        self.index: dict[Any, int] = {}
        self._found: dict[Any, tuple[int, list[int]]] = {}  # test -> (keys checked, codes found)

    def codes_where(self, test: Callable[[Any], Any]) -> list[int]:
        """Codes of the values for which ``test`` is true; each value is tested
        once (per ``test`` object), however many batches ask."""
        checked, found = self._found.get(test, (0, []))
        if checked < len(self.index):
            found = found + [code for value, code in itertools.islice(self.index.items(), checked, None)
                             if test(value)]
            self._found[test] = (len(self.index), found)
        return found

    def encode(self, values: Sequence[Any]) -> np.ndarray:
        # Most batches hold no new value: a C-level map of dict lookups is the
        # fast path; new values are added once each (dict.fromkeys keeps first-seen order).
        index = self.index
        try:
            return np.fromiter(map(index.__getitem__, values), dtype=np.int64, count=len(values))
        except KeyError:
            pass
        except TypeError:  # an unhashable value (a list as a name): treat it as absent
            values = [v if isinstance(v, str) else None for v in values]
        for value in dict.fromkeys(values):
            if value not in index:
                if type(value) is str and len(value) > MAX_STRING[0]:  # once per distinct name
                    check_string(value, current())
                index[value] = len(index)
        return np.fromiter(map(index.__getitem__, values), dtype=np.int64, count=len(values))

    def code_of(self, value: Any) -> int:
        return self.index.get(value, -1)

    def coded(self, codes: np.ndarray, transform: Callable[[Any], str] | None = None) -> Coded:
        """The column as (codes, distinct strings); absent -> "", ``transform`` maps
        each distinct value (a derived column: the base name of a kernel name)."""
        values = list(self.index)
        used = np.bincount(codes, minlength=len(values)) > 0 if len(codes) else np.zeros(len(values), dtype=bool)
        # values never used by a kept row (dropped events, ProfilerStep#N among cpu_op names) are no category
        labels = [(("" if v is None else str(v)) if transform is None else transform(v)) if u else None
                  for v, u in zip(values, used.tolist())]
        unique = list(dict.fromkeys(label for label in labels if label is not None))
        position = {label: i for i, label in enumerate(unique)}
        remap = np.array([position.get(label, -1) for label in labels], dtype=np.int64)
        return Coded(remap[codes] if len(codes) else codes, unique)


class Table:
    """One model table being built: int columns as per-batch arrays, text as codes."""

    def __init__(self, name: str, kinds: dict[str, str] | None = None) -> None:
        """A model table by name, or (``kinds``: column -> kind) a reader-internal one."""
        self.name = name
        self.kinds = kinds if kinds is not None else {c.name: c.kind for c in schema.TABLES[name]}
        self.parts: dict[str, list[np.ndarray]] = {c: [] for c in self.kinds}
        self.codes: dict[str, Codes] = {c: Codes() for c, kind in self.kinds.items() if kind == schema.CATEGORY}
        self.rows = 0

    def append(self, n: int, columns: dict[str, Any], keep: np.ndarray | None = None) -> None:
        """Add a batch of ``n`` rows.  ``columns`` maps a column to an int
        array, a list of text values, or one value for every row; a column
        left out gets the model's missing value.  ``keep`` drops rows."""
        for name, parts in self.parts.items():
            value = columns.get(name)
            if name in self.codes and not isinstance(value, np.ndarray):  # an array: codes already
                if value is None or isinstance(value, str):
                    part = np.full(n, self.codes[name].encode([value])[0], dtype=np.int64)
                else:
                    part = self.codes[name].encode(value)
            elif isinstance(value, np.ndarray):
                part = value
            else:
                part = np.full(n, schema.MISSING_INT if value is None else value, dtype=np.int64)
            parts.append(part if keep is None else part[keep])
        self.rows += n if keep is None else int(np.count_nonzero(keep))

    def column(self, name: str) -> np.ndarray:
        parts = self.parts[name]
        return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)

    def arrays(self, columns: Sequence[str], derived: dict[str, Any] | None = None) -> dict[str, Any]:
        """The asked columns (text as ``Coded``); ``derived`` supplies ready-made ones."""
        if self.rows == 0 and self.name in schema.TABLES:
            return empty_arrays(self.name, columns)
        data: dict[str, Any] = {}
        for c in columns:
            if derived and c in derived:
                data[c] = derived[c]
            elif c in self.codes:
                data[c] = self.codes[c].coded(self.column(c))
            else:
                data[c] = self.column(c)
        return data
