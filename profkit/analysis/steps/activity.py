"""GPU activity in launch order: the sequence the step finder works on.

One row per kernel, memcpy, memset and CUDA graph replay (where its kernels were
not traced) of one process, with the CPU time of
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

from profkit.analysis.timeline.launch_calls import KeyIndex, launch_calls
from profkit.model import Trace, schema

ACTIVITY_TABLES = schema.GPU_WORK_TABLES
# what names a row in the launch sequence (None: the table name)
_LABELS = {"kernels": "name", "memcpy": "copy_kind", "memset": None, "graphs": "name"}


@dataclass
class Activity:
    """GPU work of the busiest process, in launch order (all arrays the same length).

    ``token``: an integer per distinct name (kernel name, ``memcpy <kind>``,
    ``memset``); ``names[token]`` is the name.  ``launch``: start of the
    launching API call (ns), or the GPU start where none is recorded.
    ``all_start``/``all_end``: every GPU activity of the trace (all processes),
    for busy time.  ``launched``: whether the launching call was recorded (False:
    ``launch`` is the GPU start; an operation launched before the recording
    began, which the GPU ran inside it).  ``stream``: the stream each ran on
    (-1 unknown).
    """

    pid: int
    token: np.ndarray
    names: list[str]
    start: np.ndarray
    end: np.ndarray
    launch: np.ndarray
    all_start: np.ndarray
    all_end: np.ndarray
    launched: np.ndarray
    stream: np.ndarray

    def __len__(self) -> int:
        return len(self.token)


def load_activity(trace: Trace) -> Activity:
    """The launch-ordered GPU activity of the process that ran the most of it."""
    starts, ends, pids, corrs, tokens, calls, names, streams = [], [], [], [], [], [], [], []
    for table in ACTIVITY_TABLES:
        start = trace.array(table, "start")
        if not len(start):
            continue
        # names stay integer codes (a million kernels of a few hundred names): no string per row
        label_column = _LABELS[table]
        if label_column:
            labels = trace.codes(table, label_column)
            prefix = "memcpy " if table == "memcpy" else ""
            tokens.append(labels.codes.astype(np.int32) + np.int32(len(names)))
            names += [prefix + str(c) for c in labels.categories]
        else:
            tokens.append(np.full(len(start), len(names), dtype=np.int32))
            names.append("memset")
        starts.append(start)
        ends.append(trace.array(table, "end"))
        pids.append(trace.array(table, "pid"))
        streams.append(trace.array(table, "stream"))
        corrs.append(trace.array(table, "correlation"))
        calls.append(launch_calls(trace, table).call)
    if not starts:
        empty = np.empty(0, dtype=np.int64)
        return Activity(-1, empty, [], empty, empty, empty, empty, empty, np.empty(0, dtype=bool), empty)
    start, end = (np.concatenate(x).astype(np.int64, copy=False) for x in (starts, ends))
    pid_of = np.concatenate(pids)
    if pid_of.min() == pid_of.max():  # one process (the usual trace): every row is its
        pid, mine = int(pid_of[0]), slice(None)
    else:
        busiest = pd.Series(end - start).groupby(pid_of).sum()
        pid = int(busiest.idxmax())
        mine = pid_of == pid
    del pid_of, pids
    call, corr, stream = (np.concatenate(x)[mine] for x in (calls, corrs, streams))
    del calls, corrs, streams
    my_start, my_end = start[mine], end[mine]
    launch, launched = _launch_times(trace, my_start, corr, call)
    del corr, call
    # launch order, GPU start order among equal launches (a (start, launch) lexsort done as two
    # stable sorts of nearly sorted keys, each a few merges of presorted runs)
    by_start = np.argsort(my_start, kind="stable")
    order = by_start[np.argsort(launch[by_start], kind="stable")]
    del by_start
    # each column put in order and its unordered copy dropped before the next: a million
    # rows' temporaries one at a time
    launch = launch[order]
    # dense tokens over the names this process used, in first-use order (stable across runs)
    used, dense = _dense(np.concatenate(tokens)[mine])
    del tokens
    dense = dense[order]
    return Activity(
        pid=pid, token=dense, names=[names[u] for u in used.tolist()],
        start=my_start[order], end=my_end[order], launch=launch, all_start=start, all_end=end,
        launched=launched[order], stream=stream[order].astype(np.int64, copy=False))


def _dense(token: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(token, return_inverse=True)`` for small non-negative codes, without a sort."""
    if not len(token) or token.min() < 0:
        used, dense = np.unique(token, return_inverse=True)
        return used, dense.astype(np.int64)
    present = np.bincount(token) > 0
    lookup = np.cumsum(present, dtype=np.int64) - 1
    return np.flatnonzero(present), lookup[token]


def _launch_times(trace: Trace, gpu_start: np.ndarray, corr: np.ndarray, call: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray]:
    """CPU start of each activity's launching call; its GPU start where no call matches (and
    whether one did).

    Correlation ids are per process in nsys and per trace in Kineto; matching
    on (pid, correlation) first (``call``, from ``launch_calls``) and on the
    correlation alone as a fallback, when that matches fewer than half,
    covers both."""
    launch = gpu_start.copy()
    none = np.zeros(len(launch), dtype=bool)
    wanted = corr >= 0
    n_wanted = int(wanted.sum())
    if not n_wanted:
        return launch, none
    api_start = trace.array("api", "start")
    if not len(api_start):
        return launch, none
    found = wanted & (call >= 0)
    if found.sum() < 0.5 * n_wanted:
        # the first call of a duplicated id wins, as in the same-process join
        call = KeyIndex(None, trace.array("api", "correlation")).match(None, corr).call
        found = wanted & (call >= 0)
        if found.sum() < 0.5 * n_wanted:
            return launch, none
    launch[found] = api_start[call[found]]
    return launch, found

