"""Split the slices of one track into lanes in which they nest properly.

Chrome's trace-event format draws complete ('X') events of one thread as a
stack: each must lie wholly inside the one it starts in, or after it.
Perfetto and Chrome mis-draw (or drop) slices that overlap without nesting,
which happens with NVTX start/end ranges, ranges closed on another thread,
and now and then with API calls whose timestamps cross by a nanosecond.
``nesting_lanes`` gives each slice a lane so that within a lane they nest;
the exporter puts lane k on its own track.
"""

from __future__ import annotations

import numpy as np

MAX_LANES = 64  # beyond this, slices share the last lane (and may mis-draw): never seen in practice


def nesting_lanes(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Lane (0, 1, ...) per slice; slices in one lane nest or are disjoint.

    Fast path: slices that are already disjoint in start order (a thread's
    runtime API calls) all get lane 0 without a Python loop.  Otherwise a
    greedy pass in (start, longest first) order keeps a stack of open ends
    per lane and puts each slice in the first lane where it fits.
    """
    n = len(starts)
    lanes = np.zeros(n, dtype=np.int64)
    if n < 2:
        return lanes
    order = np.lexsort((-(ends - starts), starts))
    s, e = starts[order], ends[order]
    if bool(np.all(s[1:] >= e[:-1])):
        return lanes
    stacks: list[list[int]] = []
    assigned = np.empty(n, dtype=np.int64)
    for k, (start, end) in enumerate(zip(s.tolist(), e.tolist())):
        for lane, stack in enumerate(stacks):
            while stack and stack[-1] <= start:
                stack.pop()
            if not stack or end <= stack[-1]:
                stack.append(end)
                assigned[k] = lane
                break
        else:
            if len(stacks) < MAX_LANES:
                stacks.append([end])
            else:
                stacks[-1].append(end)
            assigned[k] = len(stacks) - 1
    lanes[order] = assigned
    return lanes
