"""GPU activity in launch order: the sequence the step finder works on.

One row per kernel, memcpy and memset of one process, with the CPU time of
the API call that launched it (joined by correlation id), ordered by that
launch time.  Launch order rather than GPU start order because it is the
order the program issued the work in: it is the same every iteration even
when several streams run at once.  Names become small integers (``token``)
so that the period search is integer arithmetic on arrays.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from profkit.analysis.busy_bins import busy_until, merge_intervals
from profkit.model import Trace

ACTIVITY_TABLES = ("kernels", "memcpy", "memset")


@dataclass
class Activity:
    """GPU work of the busiest process, in launch order (all arrays the same length).

    ``token``: an integer per distinct name (kernel name, ``memcpy <kind>``,
    ``memset``); ``names[token]`` is the name.  ``launch``: start of the
    launching API call (ns), or the GPU start where none is recorded.
    ``all_start``/``all_end``: every GPU activity of the trace (all processes),
    for busy time.
    """

    pid: int
    token: np.ndarray
    names: list[str]
    start: np.ndarray
    end: np.ndarray
    launch: np.ndarray
    all_start: np.ndarray
    all_end: np.ndarray

    def __len__(self) -> int:
        return len(self.token)


def load_activity(trace: Trace) -> Activity:
    """The launch-ordered GPU activity of the process that ran the most of it."""
    starts, ends, pids, corrs, tokens, names = [], [], [], [], [], []
    for table in ACTIVITY_TABLES:
        label_column = {"kernels": "name", "memcpy": "copy_kind", "memset": None}[table]
        frame = trace.table(table, ["start", "end", "pid", "correlation"] + ([label_column] if label_column else []))
        if frame.empty:
            continue
        # names stay integer codes (a million kernels of a few hundred names): no string per row
        if label_column:
            labels = pd.Categorical(frame[label_column])
            codes = labels.codes.astype(np.int64)
            prefix = "memcpy " if table == "memcpy" else ""
            category_names = [prefix + str(c) for c in labels.categories]
        else:
            codes = np.zeros(len(frame), dtype=np.int64)
            category_names = ["memset"]
        tokens.append(codes + len(names))
        names += category_names
        starts.append(frame["start"].to_numpy(np.int64))
        ends.append(frame["end"].to_numpy(np.int64))
        pids.append(frame["pid"].to_numpy(np.int64))
        corrs.append(frame["correlation"].to_numpy(np.int64))
    if not starts:
        empty = np.empty(0, dtype=np.int64)
        return Activity(-1, empty, [], empty, empty, empty, empty, empty)
    start, end, pid_of, corr, token = (np.concatenate(x) for x in (starts, ends, pids, corrs, tokens))
    busiest = pd.Series(end - start).groupby(pid_of).sum()
    pid = int(busiest.idxmax())
    mine = pid_of == pid
    launch = _launch_times(trace, start[mine], corr[mine], pid)
    # dense tokens over the names this process used, in first-use order (stable across runs)
    used, dense = np.unique(token[mine], return_inverse=True)
    order = np.lexsort((start[mine], launch))
    return Activity(
        pid=pid, token=dense[order].astype(np.int64), names=[names[u] for u in used],
        start=start[mine][order], end=end[mine][order], launch=launch[order], all_start=start, all_end=end)


def _launch_times(trace: Trace, gpu_start: np.ndarray, corr: np.ndarray, pid: int) -> np.ndarray:
    """CPU start of each activity's launching call; its GPU start where no call matches.

    Correlation ids are per process in nsys and per trace in Kineto; matching
    on (pid, correlation) first and on the correlation alone as a fallback
    covers both.  A sorted-key join (searchsorted), not a hash join: a
    million launches against millions of API rows in well under a second."""
    launch = gpu_start.copy()
    wanted = corr >= 0
    if not wanted.any():
        return launch
    api = trace.table("api", ["start", "pid", "correlation"])
    if api.empty:
        return launch
    a_corr = api["correlation"].to_numpy(np.int64)
    a_pid = api["pid"].to_numpy(np.int64)
    a_start = api["start"].to_numpy(np.int64)
    has = a_corr >= 0
    for same_process in (True, False):
        keep = has & (a_pid == pid) if same_process else has
        keys, starts = a_corr[keep], a_start[keep]
        order = np.argsort(keys, kind="stable")  # the first call of a duplicated id wins
        keys, starts = keys[order], starts[order]
        j = np.searchsorted(keys, corr)
        found = wanted & (j < len(keys))
        found[found] = keys[j[found]] == corr[found]
        if found.sum() >= 0.5 * wanted.sum():
            launch[found] = starts[j[found]]
            return launch
    return launch


def merged_intervals(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of [start, end) intervals as sorted, disjoint intervals (``busy_bins.merge_intervals``)."""
    return merge_intervals(np.asarray(starts, dtype=np.int64), np.asarray(ends, dtype=np.int64))


def busy_in_windows(starts: np.ndarray, ends: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Time covered by at least one interval inside each window [lo, hi) (ns, int64)."""
    ms, me = merged_intervals(starts, ends)
    return (busy_until(ms, me, hi) - busy_until(ms, me, lo)).astype(np.int64)
