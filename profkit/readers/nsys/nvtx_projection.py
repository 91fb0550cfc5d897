"""Which NVTX ranges each kernel ran under: nsys's nvtx_kern_sum projection.

A kernel belongs to every NVTX range that encloses the CUDA API call that
launched it, on the same thread (nvtx_kern_sum.py): the range starts at or
before the call's start and ends at or after its end.  Nested push/pop
ranges all contain the kernel.  A range that never ended lasts until the
last NVTX range timestamp; start/end ranges ended on another thread
(``endGlobalTid`` set) are left out, as nsys does.

nsys joins through an R-tree in SQLite.  Here three scans stream only the
needed integer columns (kernels, API calls, ranges), a sorted-array join finds
each kernel's launch by (correlationId, process), and the containment join runs per
thread on sorted arrays with ``searchsorted``: work and memory grow with the
number of (kernel, range) pairs, not with kernels x ranges.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from profkit.readers.nsys import queries
from profkit.readers.nsys.reader import GLOBAL_PID_MASK, NsysExport
from profkit.readers.nsys.stats import NULL_INT, ColumnsQuery, collect_columns


@dataclass
class KernelRangePairs:
    """Row-aligned arrays, one row per (kernel, enclosing range) pair.

    Kernels inside no range (or without a traced launch) appear once with
    ``range_row = -1``; ``global_tid`` is NULL_INT when the launch is unknown.
    ``range_labels[i]`` is the (text, style) of range row ``i``.
    """

    kernel_row: np.ndarray
    kernel_name_id: np.ndarray
    duration: np.ndarray
    global_tid: np.ndarray
    range_row: np.ndarray
    range_label: np.ndarray  # code into range_labels, -1 for none
    range_labels: list[tuple[str | None, str]]


def kernel_range_pairs(export: NsysExport) -> KernelRangePairs:
    for req in (queries.KERNELS, queries.RUNTIME, queries.NVTX, queries.STRINGS):
        export.require(req.table, req.what, req.trace_flag)
    (k_corr, k_gpid, k_name, k_dur), _ = collect_columns(export, ColumnsQuery(
        queries.KERNELS.table, queries.KERNELS.table,
        ("correlationId", "globalPid", "demangledName", '"end" - start')))
    # Only API calls that launched a kernel are kept (often fewer than half).
    launch_ids = np.unique(k_corr)

    def launched_a_kernel(columns: list[np.ndarray]) -> np.ndarray:
        corr = columns[0]
        at = np.minimum(np.searchsorted(launch_ids, corr), max(len(launch_ids) - 1, 0))
        return launch_ids[at] == corr if len(launch_ids) else np.zeros(len(corr), dtype=bool)

    (r_corr, r_gtid, r_start, r_end), _ = collect_columns(export, ColumnsQuery(
        queries.RUNTIME.table, queries.RUNTIME.table, ("correlationId", "globalTid", "start", '"end"')),
        keep=launched_a_kernel)
    del launch_ids
    (n_row, n_gtid, n_start, n_end), (n_tag, n_style) = collect_columns(export, queries.nvtx_ranges(export))

    # Kernel -> launching API call: LEFT JOIN on correlationId and process,
    # so a kernel with two matching calls appears twice, as in nsys.
    launch_k, launch_call = _left_join_calls(k_corr, k_gpid, r_corr, r_gtid & np.int64(_signed(GLOBAL_PID_MASK)))
    del k_corr, k_gpid, r_corr
    has_call = launch_call >= 0
    safe_call = np.maximum(launch_call, 0)
    launch_gtid = np.where(has_call, r_gtid[safe_call] if len(r_gtid) else 0, NULL_INT)
    launch_start = np.where(has_call, r_start[safe_call] if len(r_start) else 0, 0)
    launch_end = np.where(has_call, r_end[safe_call] if len(r_end) else 0, 0)
    del r_gtid, r_start, r_end, safe_call

    labels: dict[tuple[str | None, str], int] = {}
    range_label_of_row = np.array([labels.setdefault((t, s), len(labels)) for t, s in zip(n_tag, n_style)],
                                  dtype=np.int64)

    pair_launch, pair_range = _containment_pairs(launch_gtid, launch_start, launch_end, has_call,
                                                 n_gtid, n_start, n_end)
    # Launches inside no range keep one row with no range.
    in_any = np.zeros(len(launch_k), dtype=bool)
    in_any[pair_launch] = True
    alone = np.flatnonzero(~in_any)
    all_launch = np.concatenate([pair_launch, alone])
    all_range = np.concatenate([pair_range, np.full(len(alone), -1, dtype=np.int64)])
    kernel_index = launch_k[all_launch]
    return KernelRangePairs(
        kernel_row=kernel_index,  # the kernel's row in the scan identifies the instance
        kernel_name_id=k_name[kernel_index],
        duration=k_dur[kernel_index],
        global_tid=launch_gtid[all_launch],
        range_row=np.where(all_range >= 0, n_row[np.maximum(all_range, 0)] if len(n_row) else -1, -1),
        range_label=np.where(all_range >= 0, range_label_of_row[np.maximum(all_range, 0)]
                             if len(n_row) else -1, -1),
        range_labels=list(labels),
    )


def _left_join_calls(k_corr: np.ndarray, k_gpid: np.ndarray, r_corr: np.ndarray, r_gpid: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray]:
    """Kernel indices and the matching API call index (-1 for none), one row per match.

    ``kernel LEFT JOIN call ON correlationId AND globalPid`` with sorted
    arrays: calls are sorted by correlationId, each kernel finds its run of
    equal ids with searchsorted, and the pairs whose process differs drop out.
    """
    order = np.argsort(r_corr, kind="stable")
    sorted_corr = r_corr[order]
    lo = np.searchsorted(sorted_corr, k_corr, side="left")
    hi = np.searchsorted(sorted_corr, k_corr, side="right")
    counts = hi - lo
    total = int(counts.sum())
    pair_kernel = np.repeat(np.arange(len(k_corr), dtype=np.int64), counts)
    pair_call = order[np.repeat(lo - np.cumsum(counts) + counts, counts) + np.arange(total)]
    same_process = r_gpid[pair_call] == k_gpid[pair_kernel]
    pair_kernel, pair_call = pair_kernel[same_process], pair_call[same_process]
    matched = np.zeros(len(k_corr), dtype=bool)
    matched[pair_kernel] = True
    alone = np.flatnonzero(~matched)
    kernels = np.concatenate([pair_kernel, alone])
    calls = np.concatenate([pair_call, np.full(len(alone), -1, dtype=np.int64)])
    order = np.argsort(kernels, kind="stable")
    return kernels[order], calls[order]


def _signed(mask: int) -> int:
    """An unsigned 64-bit mask as the int64 with the same bits."""
    return mask - (1 << 64) if mask >= 1 << 63 else mask


def _containment_pairs(l_tid: np.ndarray, l_start: np.ndarray, l_end: np.ndarray, l_valid: np.ndarray,
                       r_tid: np.ndarray, r_start: np.ndarray, r_end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """All (launch, range) index pairs with the same thread and
    ``range.start <= launch.start and launch.end <= range.end``."""
    out_l, out_r = [], []
    for tid in np.intersect1d(np.unique(l_tid[l_valid]), np.unique(r_tid)).tolist():
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
