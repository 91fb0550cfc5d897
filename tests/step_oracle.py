"""Step times computed straight from an nsys export's tables (SQL), as the oracle for
``profkit.analysis.steps`` on NVTX-annotated captures.

The definition (see ``profkit.analysis.steps.result``): a step starts when the
first GPU operation (kernel, memcpy, memset) launched inside its NVTX range
starts -- launched by a CUDA runtime call of the same process, any thread,
that began inside the range -- unless the GPU had finished all the work launched
before the range while the range was already open: then the step starts when
its range began or that work ended, whichever is later (the host time it opens
with, waiting for a batch, is its own).  A step's first operation may run at once on
another stream while the step before still runs: the step starts no earlier than the
last operation of the steps before it on the main stream (the stream most of the
process's GPU time ran on) ended.  It ends where the next step starts; the last one
at its last operation's end or its range's end, whichever is later.
"""

from __future__ import annotations

import sqlite3
import statistics
from pathlib import Path


# every table of GPU work: a CUDA graph replay recorded as one row (nsys --cuda-graph-trace=graph) too
GPU_WORK = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
            "CUPTI_ACTIVITY_KIND_GRAPH_TRACE")


def gpu_step_spans(export: Path, text: str = "step") -> list[tuple[int, int]]:
    """(start, end) of each step whose push/pop range text is ``text``, in time order."""
    with sqlite3.connect(f"file:{export}?mode=ro", uri=True) as db:
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        ops = " UNION ALL ".join(f"SELECT start, end, correlationId, globalPid, streamId FROM {t}"
                                 for t in GPU_WORK if t in tables)
        rows = db.execute(f"""
            WITH steps AS (
                SELECT ne.start, ne.end, ne.globalTid & 0xFFFFFFFFFF000000 AS gpid FROM NVTX_EVENTS ne
                LEFT JOIN StringIds s ON s.id = ne.textId
                WHERE ne.eventType = 59 AND coalesce(s.value, ne.text) = ?),
            launched AS (
                SELECT o.start, o.end, r.start AS launch, o.globalPid AS gpid, o.streamId AS stream FROM ({ops}) o
                JOIN CUPTI_ACTIVITY_KIND_RUNTIME r
                  ON r.correlationId = o.correlationId AND (r.globalTid & 0xFFFFFFFFFF000000) = o.globalPid),
            main AS (
                SELECT gpid, stream FROM (SELECT gpid, stream, row_number() OVER
                    (PARTITION BY gpid ORDER BY sum(end - start) DESC) AS k FROM launched GROUP BY gpid, stream)
                WHERE k = 1)
            SELECT st.start, st.end, min(l.start), max(l.end),
                   (SELECT max(b.end) FROM launched b WHERE b.gpid = st.gpid AND b.launch < st.start),
                   max(CASE WHEN l.stream = (SELECT m.stream FROM main m WHERE m.gpid = st.gpid) THEN l.end END)
            FROM steps st
            JOIN launched l ON l.gpid = st.gpid AND l.launch BETWEEN st.start AND st.end
            GROUP BY st.start, st.end ORDER BY st.start""", (text,)).fetchall()
    return _spans([(r[0], r[1], r[2], r[3], r[5]) for r in rows], rows[0][4] if rows else None)


def _spans(rows: list[tuple[int, int, int, int, int | None]], prior_end: int | None) -> list[tuple[int, int]]:
    """(range start, range end, first op start, last op end, last main-stream op end) per step ->
    (start, end) per step; ``prior_end``: the end of the GPU work launched before the first range."""
    starts = []
    before = prior_end
    main_done = None
    for range_start, _, first_op, last_op, main_end in rows:
        first = first_op if main_done is None else max(first_op, main_done)
        starts.append(first if before is None else min(first, max(range_start, before)))
        before = last_op if before is None else max(before, last_op)
        if main_end is not None:
            main_done = main_end if main_done is None else max(main_done, main_end)
    ends = starts[1:] + [max(rows[-1][1], rows[-1][3])] if rows else []
    return list(zip(starts, ends))


def gpu_step_durations(export: Path, text: str = "step") -> list[int]:
    return [end - start for start, end in gpu_step_spans(export, text)]


def steady_median(durations: list[int], warmup: int) -> float:
    """The median over the steps after the first ``warmup`` ones."""
    return statistics.median(durations[warmup:])


def kineto_step_spans(trace: Path, text: str = "step") -> list[tuple[int, int]]:
    """``gpu_step_spans`` for a torch.profiler trace, from its raw JSON: the CPU-side
    ``record_function(text)`` ranges (cat ``user_annotation``), the CUDA runtime/driver
    calls that began inside each (same process), and the GPU work (kernel, memcpy,
    memset) of their correlation ids.  Times in ns as the trace model has them:
    ``round(ts * 1000)``, ends ``start + round(dur * 1000)``."""
    import gzip
    import json

    opener = gzip.open if trace.suffix == ".gz" else open
    with opener(trace, "rt") as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]

    def ns(us: float) -> int:
        return round(us * 1000)

    ranges = sorted((ns(e["ts"]), ns(e["ts"]) + ns(e["dur"]), e["pid"]) for e in events
                    if e.get("cat") == "user_annotation" and e.get("name") == text)
    launches = [(ns(e["ts"]), e["pid"], e["args"]["correlation"]) for e in events
                if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})]
    gpu: dict[int, list[tuple[int, int, int]]] = {}
    busy: dict[int, int] = {}  # GPU time per stream, of the operations whose launch was recorded
    for e in events:
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and "correlation" in e.get("args", {}):
            op = (ns(e["ts"]), ns(e["ts"]) + ns(e["dur"]), e["args"].get("stream", -1))
            gpu.setdefault(e["args"]["correlation"], []).append(op)
    launched = {corr for _, _, corr in launches}
    for corr, ops in gpu.items():
        for s, e, stream in ops if corr in launched else ():
            busy[stream] = busy.get(stream, 0) + e - s
    main = max(busy, key=busy.get) if busy else None
    rows = []
    prior = None
    for start, end, pid in ranges:
        ops = [op for t, p, corr in launches if p == pid and start <= t <= end for op in gpu.get(corr, ())]
        if ops:
            if not rows:
                earlier = [e for t, p, corr in launches if p == pid and t < start for _, e, _ in gpu.get(corr, ())]
                prior = max(earlier) if earlier else None
            rows.append((start, end, min(s for s, _, _ in ops), max(e for _, e, _ in ops),
                         max((e for _, e, stream in ops if stream == main), default=None)))
    return _spans(rows, prior)


def assert_same_steps(by_pattern, by_ranges) -> None:
    """The launch pattern found the range steps: one step per range, each pattern step starting at
    the range step's first GPU operation, which is where the range step starts or after it (a range
    that opens while the GPU idles starts there, with the host work before its first launch)."""
    pattern, ranges = by_pattern.steps, by_ranges.steps
    assert len(pattern) == len(ranges)
    assert (ranges["start_ns"] <= pattern["start_ns"]).all()
    assert (ranges["start_ns"] >= ranges["cpu_start_ns"]).all()
    later = ranges["start_ns"] < pattern["start_ns"]
    assert (pattern["start_ns"][later] - ranges["start_ns"][later] < ranges["duration_ns"][later]).all()
