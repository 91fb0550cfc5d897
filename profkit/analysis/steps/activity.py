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
    parts = []
    for table in ACTIVITY_TABLES:
        cols = ["start", "end", "pid", "correlation"]
        extra = {"kernels": ["name"], "memcpy": ["copy_kind"], "memset": []}[table]
        frame = trace.table(table, cols + extra)
        if frame.empty:
            continue
        if table == "kernels":
            label = frame["name"].astype(str)
        elif table == "memcpy":
            label = "memcpy " + frame["copy_kind"].astype(str)
        else:
            label = pd.Series("memset", index=frame.index)
        parts.append(pd.DataFrame({"start": frame["start"].to_numpy(), "end": frame["end"].to_numpy(),
                                   "pid": frame["pid"].to_numpy(), "correlation": frame["correlation"].to_numpy(),
                                   "label": label.to_numpy()}))
    if not parts:
        empty = np.empty(0, dtype=np.int64)
        return Activity(-1, empty, [], empty, empty, empty, empty, empty)
    act = pd.concat(parts, ignore_index=True)
    all_start, all_end = act["start"].to_numpy(np.int64), act["end"].to_numpy(np.int64)
    busy = (act["end"] - act["start"]).groupby(act["pid"]).sum()
    pid = int(busy.idxmax())
    act = act[act["pid"].to_numpy() == pid]
    launch = _launch_times(trace, act, pid)
    codes, uniques = pd.factorize(act["label"], sort=False)
    order = np.lexsort((act["start"].to_numpy(), launch))
    return Activity(
        pid=pid, token=codes[order].astype(np.int64), names=[str(u) for u in uniques],
        start=act["start"].to_numpy(np.int64)[order], end=act["end"].to_numpy(np.int64)[order],
        launch=launch[order], all_start=all_start, all_end=all_end)


def _launch_times(trace: Trace, act: pd.DataFrame, pid: int) -> np.ndarray:
    """CPU start of each activity's launching call; its GPU start where no call matches.

    Correlation ids are per process in nsys and per trace in Kineto; matching
    on (pid, correlation) first and on the correlation alone as a fallback
    covers both."""
    launch = act["start"].to_numpy(np.int64).copy()
    corr = act["correlation"].to_numpy(np.int64)
    api = trace.table("api", ["start", "pid", "correlation"])
    if api.empty or not (corr >= 0).any():
        return launch
    api = api[api["correlation"].to_numpy() >= 0]
    same = api[api["pid"].to_numpy() == pid]
    for candidates in (same, api):
        table = candidates.drop_duplicates("correlation", keep="first")
        where = pd.Index(table["correlation"].to_numpy()).get_indexer(corr)
        found = (where >= 0) & (corr >= 0)
        if found.sum() >= 0.5 * (corr >= 0).sum():
            launch[found] = table["start"].to_numpy(np.int64)[where[found]]
            return launch
    return launch


def merged_intervals(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of [start, end) intervals as sorted, disjoint intervals."""
    if len(starts) == 0:
        return starts.astype(np.int64), ends.astype(np.int64)
    order = np.argsort(starts, kind="stable")
    s, e = starts[order].astype(np.int64), ends[order].astype(np.int64)
    reach = np.maximum.accumulate(e)
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] > reach[:-1]
    group = np.cumsum(new) - 1
    out_s = s[new]
    out_e = np.zeros(len(out_s), dtype=np.int64)
    np.maximum.at(out_e, group, reach)
    return out_s, out_e


def busy_in_windows(starts: np.ndarray, ends: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Time covered by at least one interval inside each window [lo, hi) (ns, int64)."""
    ms, me = merged_intervals(starts, ends)
    if len(ms) == 0:
        return np.zeros(len(lo), dtype=np.int64)
    before = np.concatenate(([0], np.cumsum(me - ms)))  # busy time before each merged interval

    def covered_until(x: np.ndarray) -> np.ndarray:
        j = np.searchsorted(ms, x, side="right") - 1
        inside = np.clip(x - ms[np.maximum(j, 0)], 0, (me - ms)[np.maximum(j, 0)])
        return np.where(j >= 0, before[np.maximum(j, 0)] + inside, 0)

    return (covered_until(np.asarray(hi, dtype=np.int64)) - covered_until(np.asarray(lo, dtype=np.int64))).astype(
        np.int64)
