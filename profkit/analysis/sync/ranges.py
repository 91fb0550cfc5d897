"""CPU ranges as columns, and the ranges around each sync event, found in numpy.

``RangeColumns`` holds the annotated CPU ranges (``NvtxRange``'s facts) in the
order ``events.attach_nvtx`` reads them: by thread, then start, longest
first.  A big trace has a range per step (tens of thousands); only the ranges
that hold a sync event become ``NvtxRange`` records.

``enclosing`` finds, for each event, every range on its thread that began at
or before its waiting call and ended at or after it: the ranges it lies in,
outermost first.  Ranges may overlap in any way (start/end ranges need not
nest).  Per round, each event finds the innermost such range not found yet
by binary lifting over a sparse table of range ends: of the ranges that
began at or before the call, skip from the latest back over blocks of 2^k
whose latest end is before the call's end.  Rounds run until no event finds
another (the deepest nesting, a handful).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from profkit.analysis.sync.calls import NvtxRange


@dataclass
class RangeColumns:
    """CPU ranges, one row per range, ordered by thread, start, longest first.

    ``text``/``domain`` index ``texts``/``domains`` (None: no text, no domain)."""

    global_tid: np.ndarray
    start: np.ndarray
    end: np.ndarray
    text: np.ndarray
    texts: list[str | None]
    domain: np.ndarray
    domains: list[str | None]
    push_pop: np.ndarray  # bool

    def __len__(self) -> int:
        return len(self.start)

    @classmethod
    def from_records(cls, ranges: Iterable[NvtxRange]) -> RangeColumns:
        """Columns of ranges already in that order (hand-built inputs)."""
        ranges = list(ranges)
        texts: dict[str | None, int] = {}
        domains: dict[str | None, int] = {}

        def ints(values: Iterable[int]) -> np.ndarray:
            return np.fromiter(values, dtype=np.int64, count=len(ranges))

        return cls(global_tid=ints(r.global_tid for r in ranges), start=ints(r.start for r in ranges),
                   end=ints(r.end for r in ranges), text=ints(texts.setdefault(r.text, len(texts)) for r in ranges),
                   texts=list(texts), domain=ints(domains.setdefault(r.domain, len(domains)) for r in ranges),
                   domains=list(domains), push_pop=np.array([r.push_pop for r in ranges], dtype=bool))

    def records(self, rows: np.ndarray) -> dict[int, NvtxRange]:
        """The given rows as records, by row."""
        texts = [self.texts[t] for t in self.text[rows].tolist()]
        domains = [self.domains[d] for d in self.domain[rows].tolist()]
        return {i: NvtxRange(tid, start, end, text, domain, push_pop) for i, tid, start, end, text, domain, push_pop in zip(
            rows.tolist(), self.global_tid[rows].tolist(), self.start[rows].tolist(), self.end[rows].tolist(),
            texts, domains, self.push_pop[rows].tolist())}

    def top_level(self, excluded: np.ndarray) -> np.ndarray:
        """Rows of push/pop ranges that no earlier push/pop range of their thread is still open
        at (a stack of push/pop ranges, popped when ended by the next one's start, is empty);
        ``excluded`` rows (the sync-hook ranges) count as open ranges but are never returned."""
        rows = np.flatnonzero(self.push_pop)
        if not len(rows):
            return rows
        thread, start, end = self.global_tid[rows], self.start[rows], self.end[rows]
        top = np.zeros(len(rows), dtype=bool)
        bounds = np.flatnonzero(np.diff(thread)) + 1
        for a, b in zip(np.concatenate([[0], bounds]).tolist(), np.concatenate([bounds, [len(rows)]]).tolist()):
            latest = np.maximum.accumulate(end[a:b])  # the latest end among the thread's ranges so far
            top[a] = True
            top[a + 1:b] = latest[:-1] <= start[a + 1:b]
        return rows[top & ~excluded[rows]]


def enclosing(ranges: RangeColumns, thread: np.ndarray, start: np.ndarray, end: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray]:
    """(event, range row) pairs, ordered by event, then range row: each range on the event's
    thread with range start <= ``start`` and range end >= ``end`` (see the module docstring)."""
    events_out, rows_out = [], []
    for tid in np.unique(thread).tolist():
        rows = np.flatnonzero(ranges.global_tid == tid)
        if not len(rows):
            continue
        mine = np.flatnonzero(thread == tid)
        r_start, r_end = ranges.start[rows], ranges.end[rows]
        # only ranges in which some event's call starts can hold one: the table stays small
        starts = np.sort(start[mine])
        first = np.searchsorted(starts, r_start, side="left")
        holds = first < len(starts)
        holds[holds] = starts[first[holds]] <= r_end[holds]
        rows, r_start, r_end = rows[holds], r_start[holds], r_end[holds]
        if not len(rows):
            continue
        table = [r_end]  # table[k][i]: the latest end among rows max(0, i - 2^k + 1) .. i
        while (1 << len(table)) <= len(rows):
            prev, step = table[-1], 1 << (len(table) - 1)
            table.append(np.concatenate([prev[:step], np.maximum(prev[step:], prev[:-step])]))
        e_start, e_end = start[mine], end[mine]
        at = np.searchsorted(r_start, e_start, side="right") - 1  # the latest range that began by the call
        live = np.flatnonzero(at >= 0)
        while len(live):
            pos, need = at[live], e_end[live]
            for k in range(len(table) - 1, -1, -1):
                skip = (pos - (1 << k) + 1 >= 0) & (table[k][pos] < need)
                pos = np.where(skip, pos - (1 << k), pos)
            found = (pos >= 0) & (r_end[np.maximum(pos, 0)] >= need)  # -1: skipped them all
            live, pos = live[found], pos[found]
            events_out.append(mine[live])
            rows_out.append(rows[pos])
            at[live] = pos - 1
            live = live[at[live] >= 0]
    if not events_out:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty
    event, row = np.concatenate(events_out), np.concatenate(rows_out)
    order = np.lexsort((row, event))
    return event[order], row[order]
