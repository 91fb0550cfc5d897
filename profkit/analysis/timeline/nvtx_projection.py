"""Which annotated ranges each kernel ran under: nsys's nvtx_kern_sum projection.

A kernel belongs to every range that encloses the CUDA API call that
launched it, on the same thread (nvtx_kern_sum.py): the range starts at or
before the call's start and ends at or after its end.  Nested push/pop
ranges all contain the kernel.  A range that never ended lasts until the
last range timestamp; start/end ranges ended on another thread
(``end_tid`` set) are left out, as nsys does.

nsys joins through an R-tree in SQLite.  Here the needed columns of the
model (kernels, API calls, ranges) are joined on sorted arrays: each
kernel's launch by (correlation, process), and the containment per thread
with ``searchsorted``, so work and memory grow with the number of (kernel,
range) pairs, not with kernels x ranges.
"""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Callable
from typing import Any

import numpy as np

from profkit.analysis.timeline.launch_calls import launch_calls
from profkit.model import Trace

# pid and tid are below 2**24 (nsys packs them so); one int64 names a thread.
_TID_BITS = 24


@dataclass
class KernelRangePairs:
    """Row-aligned arrays, one row per (kernel, enclosing range) pair.

    Kernels inside no range (or without a traced launch) appear once with
    ``range_row = -1``; ``pid``/``tid`` are -1 when the launch is unknown.
    ``kernel_name`` codes index ``kernel_names``; ``range_label`` codes
    index ``range_labels`` ((label, style) of a range row), -1 for none.
    """

    kernel_row: np.ndarray
    kernel_name: np.ndarray
    kernel_names: list[str]
    duration: np.ndarray
    pid: np.ndarray
    tid: np.ndarray
    range_row: np.ndarray
    range_label: np.ndarray
    range_labels: list[tuple[str | None, str]]


def kernel_range_pairs(trace: Trace) -> KernelRangePairs:
    from profkit.analysis.timeline.ranges import cpu_ranges  # imports pandas: only here

    trace.require("kernels", "CUDA kernel data")
    trace.require("api", "CUDA API trace data")
    trace.require("ranges", "NVTX data")
    names = trace.codes("kernels", "name")

    # Kernel -> launching API call: LEFT JOIN on correlation and process, so a
    # kernel with two matching calls appears twice, as in nsys.  One row per
    # launch; int32 row numbers, the calls' times read per thread below.
    launch_k, launch_call = launch_calls(trace, "kernels").pairs()
    has_call = launch_call >= 0
    api_pid, api_tid = trace.array("api", "pid"), trace.array("api", "tid")
    if not len(api_pid):
        has_call[:] = False
    call = np.where(has_call, launch_call, 0)
    del launch_call
    if has_call.any():
        launch_thread = api_pid[call].astype(np.int64) << _TID_BITS
        launch_thread |= api_tid[call]
    else:
        launch_thread = np.full(len(call), -1, dtype=np.int64)

    # nvtx_kern_sum: an open range ends at the last range timestamp; ranges
    # ended on another thread are left out.
    ranges = cpu_ranges(trace, ["pid", "tid", "end_tid", "style"], open_end="ranges")
    keep = ranges["end_tid"].to_numpy() == -1
    n_row = ranges["row"].to_numpy()[keep]
    n_start = ranges["start"].to_numpy()[keep]
    n_end = ranges["end"].to_numpy()[keep]
    n_thread = (ranges["pid"].to_numpy()[keep].astype(np.int64) << _TID_BITS) | ranges["tid"].to_numpy()[keep]
    label_codes, labels = _label_and_style(ranges)
    n_label = label_codes[keep]

    pair_launch, pair_range = containment_pairs(
        launch_thread, has_call, lambda rows: (trace.array("api", "start")[call[rows]],
                                               trace.array("api", "end")[call[rows]]),
        n_thread, n_start, n_end)
    del launch_thread
    # Launches inside no range keep one row with no range.
    in_any = np.zeros(len(launch_k), dtype=bool)
    in_any[pair_launch] = True
    alone = np.flatnonzero(~in_any).astype(np.int32)
    del in_any
    all_launch = np.concatenate([pair_launch, alone])
    all_range = np.concatenate([pair_range, np.full(len(alone), -1, dtype=np.int32)])
    del pair_launch, pair_range, alone
    kernel_index = launch_k[all_launch]
    pair_call, pair_has_call = call[all_launch], has_call[all_launch]
    del all_launch
    in_range = all_range >= 0
    safe_range = np.where(in_range, all_range, 0)
    del all_range
    return KernelRangePairs(
        kernel_row=kernel_index,  # the kernel's row identifies the instance
        kernel_name=names.codes[kernel_index],
        kernel_names=list(names.categories),
        duration=trace.array("kernels", "duration")[kernel_index],
        pid=_at(api_pid, pair_call, pair_has_call, -1),
        tid=_at(api_tid, pair_call, pair_has_call, -1),
        range_row=np.where(in_range, n_row[safe_range], -1).astype(np.int32) if len(n_row) else
        np.full(len(kernel_index), -1, dtype=np.int32),
        range_label=np.where(in_range, n_label[safe_range], -1).astype(np.int32) if len(n_row) else
        np.full(len(kernel_index), -1, dtype=np.int32),
        range_labels=labels,
    )


def _label_and_style(ranges: Any) -> tuple[np.ndarray, list[tuple[str | None, str]]]:
    """A code per range and the (name, style) of each code."""
    labels, styles = ranges["label"].array, ranges["style"].array
    n_styles = max(len(styles.categories), 1)
    combined = (labels.codes.astype(np.int64) + 1) * n_styles + np.maximum(styles.codes, 0)
    distinct, codes = np.unique(combined, return_inverse=True)
    pairs = [(None if value // n_styles == 0 else str(labels.categories[value // n_styles - 1]),
              str(styles.categories[value % n_styles])) for value in distinct.tolist()]
    return codes.astype(np.int64, copy=False), pairs


def _at(values: np.ndarray, rows: np.ndarray, valid: np.ndarray, missing: int) -> np.ndarray:
    """``values[rows]`` (in the column's own width), ``missing`` where not ``valid``."""
    if not len(values):
        return np.full(len(rows), missing, dtype=np.int64)
    out = values[rows]
    out[~valid] = missing
    return out


def containment_pairs(l_thread: np.ndarray, l_valid: np.ndarray,
                      l_times: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]],
                      r_thread: np.ndarray, r_start: np.ndarray, r_end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """All (launch, range) index pairs (int32) with the same thread and
    ``range.start <= launch.start and launch.end <= range.end``.

    ``l_times(launches)``: the start and end of those launches (read one thread at a
    time: no start and end arrays over every launch)."""
    out_l, out_r = [], []
    # pandas' hash unique: thread keys are wide int64 (pid << 24 | tid), where np.unique is slow
    import pandas as pd

    for thread in np.intersect1d(pd.unique(l_thread[l_valid]), pd.unique(r_thread)).tolist():
        launches = np.flatnonzero(l_valid & (l_thread == thread))
        ranges = np.flatnonzero(r_thread == thread)
        starts, ends = l_times(launches)
        # the launches in start order through ``order``: only the starts are reordered (a
        # million launches' columns are not all copied at once)
        order = np.argsort(starts, kind="stable")
        starts = starts[order]
        lo = np.searchsorted(starts, r_start[ranges], side="left")
        hi = np.searchsorted(starts, r_end[ranges], side="right")
        del starts
        counts = np.maximum(hi - lo, 0)
        total = int(counts.sum())
        if total == 0:
            continue
        pair_range = np.repeat(ranges, counts)
        at = order[np.repeat(lo - np.cumsum(counts) + counts, counts) + np.arange(total)]
        del order
        inside = ends[at] <= r_end[pair_range]
        out_l.append(launches[at[inside]].astype(np.int32))
        out_r.append(pair_range[inside].astype(np.int32))
    if not out_l:
        return np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.int32)
    return np.concatenate(out_l), np.concatenate(out_r)
