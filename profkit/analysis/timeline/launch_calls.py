"""Each GPU operation's launching CUDA call: one join per trace, shared by the analyses.

Kernels, memcpy, memset, CUDA graph replays and CUPTI sync records carry the correlation id of
the runtime/driver call that launched them.  Correlation ids are per
process in nsys and per trace in Kineto (whose reader gives every GPU event
the trace's pid), so ``(pid, correlation)`` names the call in both.
``launch_calls(trace, table)`` joins one GPU table to the API calls on that
key, literally (a correlation of -1 matches a call with -1 of the same
process, as SQL's equality join does): for each row the first matching call
in API row order, and the further matches where a key repeats (no real
trace has any, but the analyses' rules for them differ: the earliest call,
every call).  The steps, the breakdown's events, the kernels per NVTX range
and the idle-stretch descriptions all read it, so the 2.5M API rows of a
big export are sorted once per trace, not once per analysis.

The join is a ``KeyIndex`` of the API calls: one sort of their keys (usually a
no-op: nsys and Kineto write calls in correlation order, which the sort detects)
and one ``searchsorted`` per GPU table; the result is an int32 API row per GPU
row (-1 none), cached per trace like ``steps.find_steps``.  ``KeyIndex`` is
profkit's one (pid, correlation) index: the stall analysis's inputs and the
Perfetto export join on it too.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import numpy as np

from profkit.model import Trace, schema

GPU_TABLES = (*schema.GPU_WORK_TABLES, "syncs")
_CORRELATION_BITS = 40


@dataclass(frozen=True)
class LaunchCalls:
    """The API calls matching each row of a GPU table on (pid, correlation).

    ``call``: per row, the API row of the first matching call (row order), -1
    none.  ``more_row``/``more_call``: the rows matching several calls, once
    per further call, with that call's API row (rows ascending, then calls
    ascending); empty in every real trace.
    """

    call: np.ndarray
    more_row: np.ndarray
    more_call: np.ndarray

    def __len__(self) -> int:
        return len(self.call)

    def pairs(self) -> tuple[np.ndarray, np.ndarray]:
        """``rows LEFT JOIN calls``: (row, call) per match, a row without one once with call -1;
        ordered by row, then call."""
        rows = np.arange(len(self.call), dtype=self.call.dtype)
        if not len(self.more_row):
            return rows, self.call
        rows = np.concatenate([rows, self.more_row])
        calls = np.concatenate([self.call, self.more_call])
        order = np.lexsort((calls, rows))
        return rows[order], calls[order]

    def earliest(self, call_start: np.ndarray) -> np.ndarray:
        """Per row, the matching call that started first (ties: the first in row order), -1 none."""
        if not len(self.more_row):
            return self.call
        rows = np.concatenate([self.more_row, np.unique(self.more_row)])
        calls = np.concatenate([self.more_call, self.call[np.unique(self.more_row)]])
        order = np.lexsort((calls, call_start[calls], rows))
        rows, calls = rows[order], calls[order]
        first = np.ones(len(rows), dtype=bool)
        first[1:] = rows[1:] != rows[:-1]
        out = self.call.copy()
        out[rows[first]] = calls[first]
        return out

    def calls_of(self, row: int) -> np.ndarray:
        """Every matching call of one row (API rows, ascending)."""
        first = int(self.call[row])
        if first < 0:
            return np.zeros(0, dtype=np.int64)
        lo, hi = np.searchsorted(self.more_row, [row, row + 1])
        return np.concatenate([[first], self.more_call[lo:hi]]).astype(np.int64)


_cache: weakref.WeakKeyDictionary[Trace, dict[str, LaunchCalls]] = weakref.WeakKeyDictionary()


def launch_calls(trace: Trace, table: str) -> LaunchCalls:
    """The launching calls of one GPU table's rows (``GPU_TABLES``).  Cached per trace: the
    first call joins every GPU table at once, so the API keys are sorted once."""
    if table not in GPU_TABLES:
        raise KeyError(f"{table!r} is not a GPU table ({', '.join(GPU_TABLES)})")
    per_trace = _cache.setdefault(trace, {})
    if table not in per_trace:
        index = KeyIndex(trace.array("api", "pid"), trace.array("api", "correlation"))
        for name in GPU_TABLES:
            if name not in per_trace:
                per_trace[name] = index.match(trace.array(name, "pid"), trace.array(name, "correlation"))
    return per_trace[table]


class KeyIndex:
    """The rows of one table sorted by (pid, correlation id), or by the correlation id alone
    (``pid`` None): where the rows of another table find theirs.  profkit's one
    launch<->activity join: the API calls indexed for the GPU tables (``launch_calls``), the
    memcpy/memset/sync rows for the calls that may block (``sync.inputs``), the launches
    for the Perfetto export's flow arrows (``export.tracks``).

    A query's key matches literally: a correlation of -1 matches a row with -1 of the same
    process, as SQL's equality join does; a pid the index does not hold matches nothing."""

    def __init__(self, pid: np.ndarray | None, corr: np.ndarray) -> None:
        self.size = len(corr)
        self.by_process = pid is not None
        self.pids = np.zeros(0, dtype=np.int64)
        if pid is None or not self.size or pid.min() == pid.max():
            # one process (the usual trace): the correlation is the key, no packing
            self.pids = np.asarray(pid[:1] if pid is not None else [], dtype=np.int64)
            key = corr.astype(np.int64, copy=False)
            self.offset = 0
        else:
            self.pids = np.unique(pid).astype(np.int64)
            self.offset = int(corr.min())
            if len(self.pids) >= 1 << (62 - _CORRELATION_BITS) or int(corr.max()) - self.offset >= 1 << _CORRELATION_BITS:
                raise ValueError("correlation ids too far apart to pack with the pid")  # never seen in a trace
            key = self._pack(np.searchsorted(self.pids, pid), corr)
        # rows come in correlation order: a sorted key needs no sort and no order array
        if self.size < 2 or bool(np.all(key[1:] > key[:-1])):
            self.order: np.ndarray | None = None
            self.key = key
            self.unique = True
        else:
            order = np.argsort(key, kind="stable")  # equal keys stay in row order
            self.key = key[order]
            self.order = order.astype(_row_dtype(self.size), copy=False)
            self.unique = not bool(np.any(self.key[1:] == self.key[:-1]))

    def _pack(self, pid_code: np.ndarray, corr: np.ndarray) -> np.ndarray:
        key = pid_code.astype(np.int64) << _CORRELATION_BITS
        key |= corr.astype(np.int64) - self.offset
        return key

    def _keys(self, pid: np.ndarray | None, corr: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """Query keys, and which queries can match at all (None: every one)."""
        if not self.by_process:
            return corr.astype(np.int64, copy=False), None
        if len(self.pids) <= 1:
            single = int(self.pids[0]) if len(self.pids) else 0
            return corr.astype(np.int64, copy=False), pid == single
        code = np.minimum(np.searchsorted(self.pids, pid), len(self.pids) - 1)
        known = self.pids[code] == pid
        shifted = corr.astype(np.int64) - self.offset
        known &= (shifted >= 0) & (shifted < 1 << _CORRELATION_BITS)
        return self._pack(code, np.where(known, corr, self.offset)), known

    def rows(self, positions: np.ndarray) -> np.ndarray:
        """The table rows at positions of the sorted keys."""
        return positions if self.order is None else self.order[positions]

    def in_key_order(self, values: np.ndarray) -> np.ndarray:
        """A column of the table in the order of the sorted keys."""
        return values if self.order is None else values[self.order]

    def spans(self, pid: np.ndarray | None, corr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per query, its rows as positions [lo, hi) of the sorted keys (lo == hi: none)."""
        if not self.size:
            none = np.zeros(len(corr), dtype=np.int64)
            return none, none
        key, known = self._keys(pid, corr)
        lo = np.searchsorted(self.key, key, side="left")
        hi = np.searchsorted(self.key, key, side="right")
        return lo, (hi if known is None else np.where(known, hi, lo))

    def matched(self, pid: np.ndarray | None, corr: np.ndarray) -> np.ndarray:
        """Per row of the table, whether some query has its key (one search per query: the
        queries may be the 2.5M API calls of a big trace, the index its few syncs)."""
        if not self.size or not len(corr):
            return np.zeros(self.size, dtype=bool)
        key, known = self._keys(pid, corr)
        at = np.minimum(np.searchsorted(self.key, key, side="left"), self.size - 1)
        found = self.key[at] == key
        if known is not None:
            found &= known
        hit = np.zeros(self.size, dtype=bool)
        hit[at[found]] = True  # the first position of each matched key
        hit = hit[np.searchsorted(self.key, self.key, side="left")]  # and every position of it
        out = np.empty(self.size, dtype=bool)
        out[self.rows(np.arange(self.size))] = hit
        return out

    def match(self, pid: np.ndarray | None, corr: np.ndarray) -> LaunchCalls:
        """Join queries (``pid`` None: by correlation alone) to the rows: the first matching
        row of each, and the further ones where a key repeats."""
        rows = _row_dtype(self.size)
        none = np.zeros(0, dtype=rows)
        if not self.size or not len(corr):
            return LaunchCalls(np.full(len(corr), -1, dtype=rows), none, none)
        key, known = self._keys(pid, corr)
        lo = np.searchsorted(self.key, key, side="left")
        at = np.minimum(lo, self.size - 1)
        found = self.key[at] == key
        if known is not None:
            found &= known
        del key
        first = at if self.order is None else self.order[at]
        call = np.where(found, first, -1).astype(rows, copy=False)
        if self.unique:
            return LaunchCalls(call, none, none)
        # a repeated key: every further row of the queries whose key repeats
        ends = np.searchsorted(self.key, self.key[at], side="right")
        extra = np.where(found, ends - lo - 1, 0)
        more = np.flatnonzero(extra > 0)
        counts = extra[more]
        more_row = np.repeat(more, counts)
        position = np.repeat(lo[more] + 1 - np.cumsum(counts) + counts, counts) + np.arange(int(counts.sum()))
        more_call = position if self.order is None else self.order[position]
        return LaunchCalls(call, more_row.astype(rows), more_call.astype(rows))


def _row_dtype(n: int) -> type:
    return np.int32 if n < np.iinfo(np.int32).max else np.int64
