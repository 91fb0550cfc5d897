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
from typing import Any

import numpy as np

from profkit.analysis.launch_calls import launch_calls
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
    from profkit.analysis.ranges import cpu_ranges  # imports pandas: only here

    trace.require("kernels", "CUDA kernel data")
    trace.require("api", "CUDA API trace data")
    trace.require("ranges", "NVTX data")
    names = trace.codes("kernels", "name")

    # Kernel -> launching API call: LEFT JOIN on correlation and process, so a
    # kernel with two matching calls appears twice, as in nsys.
    launch_k, launch_call = launch_calls(trace, "kernels").pairs()
    has_call = launch_call >= 0
    call = np.maximum(launch_call, 0)
    del launch_call
    api_rows = len(trace.array("api", "pid"))
    launch_pid = _at(trace.array("api", "pid"), call, has_call, -1, api_rows)
    launch_tid = _at(trace.array("api", "tid"), call, has_call, -1, api_rows)
    launch_start = _at(trace.array("api", "start"), call, has_call, 0, api_rows)
    launch_end = _at(trace.array("api", "end"), call, has_call, 0, api_rows)
    del call
    launch_thread = (launch_pid << _TID_BITS) | launch_tid

    # nvtx_kern_sum: an open range ends at the last range timestamp; ranges
    # ended on another thread are left out.
    ranges = cpu_ranges(trace, ["pid", "tid", "end_tid", "style"], open_end="ranges")
    keep = ranges["end_tid"].to_numpy() == -1
    n_row = ranges["row"].to_numpy()[keep]
    n_start = ranges["start"].to_numpy()[keep]
    n_end = ranges["end"].to_numpy()[keep]
    n_thread = (ranges["pid"].to_numpy()[keep] << _TID_BITS) | ranges["tid"].to_numpy()[keep]
    label_codes, labels = _label_and_style(ranges)
    n_label = label_codes[keep]

    pair_launch, pair_range = containment_pairs(launch_thread, launch_start, launch_end, has_call,
                                                n_thread, n_start, n_end)
    # Launches inside no range keep one row with no range.
    in_any = np.zeros(len(launch_k), dtype=bool)
    in_any[pair_launch] = True
    alone = np.flatnonzero(~in_any)
    all_launch = np.concatenate([pair_launch, alone])
    all_range = np.concatenate([pair_range, np.full(len(alone), -1, dtype=np.int64)])
    kernel_index = launch_k[all_launch]
    safe_range = np.maximum(all_range, 0)
    return KernelRangePairs(
        kernel_row=kernel_index,  # the kernel's row identifies the instance
        kernel_name=np.asarray(names.codes, dtype=np.int64)[kernel_index],
        kernel_names=list(names.categories),
        duration=trace.array("kernels", "duration")[kernel_index],
        pid=launch_pid[all_launch],
        tid=launch_tid[all_launch],
        range_row=np.where(all_range >= 0, n_row[safe_range] if len(n_row) else -1, -1),
        range_label=np.where(all_range >= 0, n_label[safe_range] if len(n_row) else -1, -1),
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


def _at(values: np.ndarray, rows: np.ndarray, valid: np.ndarray, missing: int, n: int) -> np.ndarray:
    """``values[rows]`` as int64, ``missing`` where not ``valid`` (and everywhere when ``n`` is 0)."""
    if not n:
        return np.full(len(rows), missing, dtype=np.int64)
    out = values[rows].astype(np.int64, copy=False)
    out[~valid] = missing
    return out


def containment_pairs(l_tid: np.ndarray, l_start: np.ndarray, l_end: np.ndarray, l_valid: np.ndarray,
                      r_tid: np.ndarray, r_start: np.ndarray, r_end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """All (launch, range) index pairs with the same thread and
    ``range.start <= launch.start and launch.end <= range.end``."""
    out_l, out_r = [], []
    # pandas' hash unique: thread keys are wide int64 (pid << 24 | tid), where np.unique is slow
    import pandas as pd

    for tid in np.intersect1d(pd.unique(l_tid[l_valid]), pd.unique(r_tid)).tolist():
        launches = np.flatnonzero(l_valid & (l_tid == tid))
        ranges = np.flatnonzero(r_tid == tid)
        order = np.argsort(l_start[launches], kind="stable")
        launches = launches[order]
        starts = l_start[launches]
        lo = np.searchsorted(starts, r_start[ranges], side="left")
        hi = np.searchsorted(starts, r_end[ranges], side="right")
        counts = np.maximum(hi - lo, 0)
        total = int(counts.sum())
        if total == 0:
            continue
        pair_range = np.repeat(ranges, counts)
        first = np.repeat(lo - np.cumsum(counts) + counts, counts)
        pair_launch = launches[first + np.arange(total)]
        inside = l_end[pair_launch] <= r_end[pair_range]
        out_l.append(pair_launch[inside])
        out_r.append(pair_range[inside])
    if not out_l:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    return np.concatenate(out_l), np.concatenate(out_r)
