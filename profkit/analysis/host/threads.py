"""The rows of the threads other than the main one, all threads at once.

``attribution._thread_rows`` answers one thread with a few pandas group-bys:
milliseconds each, so a trace of 40,000 threads holding one frame each took
minutes.  Here every other thread's innermost segments are found with the same
sweep (``innermost_segments``, linear in its frames), and what follows is one
pass over all segments, keyed by (thread, function, file): the same rows, in
the same order, as calling ``_thread_rows`` on each thread and keeping the
functions with self time (where two lines of a function have the same self
time, either may be named: pandas' unstable sort picked one there).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from profkit.analysis.timeline.intervals import covered_within


def other_thread_rows(frames: pd.DataFrame, threads: list[tuple[int, int]], lo: np.ndarray, hi: np.ndarray,
                      idle_s: np.ndarray, idle_e: np.ndarray, n: int,
                      innermost_segments: Callable[..., tuple[np.ndarray, ...]]) -> list[dict[str, Any]]:
    """Rows of ``tid`` + ``FUNCTION_COLUMNS`` for the functions with self time in the windows
    [lo, hi) on ``threads`` (pid, tid), most GPU idle first.  ``innermost_segments``: attribution's
    sweep of one thread's frames (given, so that the two modules do not import each other)."""
    if not threads or frames.empty:
        return []
    pid, tid = frames["pid"].to_numpy(np.int64), frames["tid"].to_numpy(np.int64)
    start, end = frames["start"].to_numpy(np.int64), frames["end"].to_numpy(np.int64)
    depth, line = frames["depth"].to_numpy(np.int64), frames["line"].to_numpy(np.int64)
    codes, keys = pd.factorize(pd.MultiIndex.from_arrays([frames["function"].astype(str),
                                                          frames["file"].astype(str)]))
    wanted = {t: k for k, t in enumerate(threads)}
    order = np.lexsort((tid, pid))  # stable: each thread's frames keep their order
    p, t = pid[order], tid[order]
    cut = (np.flatnonzero((p[1:] != p[:-1]) | (t[1:] != t[:-1])) + 1).tolist()
    seg_parts: list[tuple[np.ndarray, np.ndarray, np.ndarray, int]] = []
    for a, b in zip([0, *cut], [*cut, len(order)]):
        thread = wanted.get((int(p[a]), int(t[a])))
        if thread is None:
            continue
        rows = order[a:b]
        seg_s, seg_e, seg_f = innermost_segments(start[rows], end[rows], depth[rows])
        seg_parts.append((seg_s, seg_e, rows[seg_f], thread))
    if not seg_parts:
        return []
    seg_s = np.concatenate([s for s, _, _, _ in seg_parts])
    seg_e = np.concatenate([e for _, e, _, _ in seg_parts])
    seg_row = np.concatenate([r for _, _, r, _ in seg_parts])
    seg_thread = np.concatenate([np.full(len(r), k, dtype=np.int64) for _, _, r, k in seg_parts])
    self_t = covered_within(lo, hi, seg_s, seg_e)
    idle_t = covered_within(idle_s, idle_e, seg_s, seg_e)
    m = max(len(keys), 1)
    group, inverse = np.unique(seg_thread * m + codes[seg_row], return_inverse=True)
    self_g = np.bincount(inverse, weights=self_t, minlength=len(group))
    idle_g = np.bincount(inverse, weights=idle_t, minlength=len(group))
    # the line where each (thread, function) spent the most self time: the biggest (group, line) sum
    pairs, pair_of = np.unique(np.stack([inverse, line[seg_row]]), axis=1, return_inverse=True)
    pair_t = np.bincount(pair_of.reshape(-1), weights=self_t, minlength=pairs.shape[1])
    best = np.lexsort((-pair_t, pairs[0]))
    first = np.ones(len(best), dtype=bool)
    first[1:] = pairs[0][best][1:] != pairs[0][best][:-1]
    best_line = dict(zip(pairs[0][best][first].tolist(), pairs[1][best][first].tolist()))
    # inclusive time: the union of each (thread, function)'s frames inside the windows, all groups at
    # once (a running end per group, a block where a frame starts past it)
    frame_thread = np.array([wanted.get(pt, -1) for pt in zip(pid.tolist(), tid.tolist())], dtype=np.int64)
    at = np.searchsorted(group, frame_thread * m + codes)
    at = np.minimum(at, len(group) - 1)
    mine = (frame_thread >= 0) & (group[at] == frame_thread * m + codes)
    rows = np.flatnonzero(mine)
    frame_g = at[rows]
    first_row = np.full(len(group), len(frames), dtype=np.int64)
    np.minimum.at(first_row, frame_g, rows)  # the thread's order of first sight, _thread_rows's tie order
    by = np.lexsort((start[rows], frame_g))
    g_sorted, s_sorted, e_sorted = frame_g[by], start[rows][by], end[rows][by]
    reach = pd.Series(e_sorted).groupby(g_sorted).cummax().to_numpy(np.int64)
    new = np.ones(len(by), dtype=bool)
    new[1:] = (g_sorted[1:] != g_sorted[:-1]) | (s_sorted[1:] > reach[:-1])
    heads = np.flatnonzero(new)
    block_end = np.maximum.reduceat(e_sorted, heads) if len(heads) else np.zeros(0, dtype=np.int64)
    incl_g = np.bincount(g_sorted[heads], weights=covered_within(lo, hi, s_sorted[heads], block_end),
                         minlength=len(group))
    functions, files = keys.get_level_values(0).tolist(), keys.get_level_values(1).tolist()
    out: list[dict[str, Any]] = []
    for g in np.flatnonzero(self_g > 0).tolist():
        thread, code = divmod(int(group[g]), m)
        out.append({"tid": threads[thread][1], "function": functions[code], "file": files[code],
                    "line": int(best_line[g]), "self_ns_per_step": float(self_g[g]) / n,
                    "inclusive_ns_per_step": float(int(incl_g[g])) / n, "gpu_idle_ns_per_step": float(idle_g[g]) / n,
                    "_thread": thread, "_first": int(first_row[g])})
    # as one _thread_rows per thread in ``threads`` order, each sorted (a tie: the function seen first on
    # the thread first), then all sorted by idle and self
    out.sort(key=lambda r: (r["_thread"], -r["gpu_idle_ns_per_step"], -r["self_ns_per_step"],
                            -r["inclusive_ns_per_step"], r["_first"]))
    for row in out:
        del row["_thread"], row["_first"]
    out.sort(key=lambda r: (-r["gpu_idle_ns_per_step"], -r["self_ns_per_step"]))
    return out
