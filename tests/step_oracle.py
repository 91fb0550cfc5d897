"""Step times computed straight from an nsys export's tables (SQL), as the oracle for
``profkit.analysis.steps`` on NVTX-annotated captures.

The definition (see ``profkit.analysis.steps.result``): a step starts when the
first GPU operation (kernel, memcpy, memset) launched inside its NVTX range
starts -- launched by a CUDA runtime call of the same process, any thread,
that began inside the range -- and ends where the next step starts; the last
one at its last operation's end or its range's end, whichever is later.
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
        ops = " UNION ALL ".join(f"SELECT start, end, correlationId, globalPid FROM {t}" for t in GPU_WORK if t in tables)
        rows = db.execute(f"""
            WITH steps AS (
                SELECT ne.start, ne.end, ne.globalTid & 0xFFFFFFFFFF000000 AS gpid FROM NVTX_EVENTS ne
                LEFT JOIN StringIds s ON s.id = ne.textId
                WHERE ne.eventType = 59 AND coalesce(s.value, ne.text) = ?),
            launched AS (
                SELECT o.start, o.end, r.start AS launch, o.globalPid AS gpid FROM ({ops}) o
                JOIN CUPTI_ACTIVITY_KIND_RUNTIME r
                  ON r.correlationId = o.correlationId AND (r.globalTid & 0xFFFFFFFFFF000000) = o.globalPid)
            SELECT st.start, st.end, min(l.start), max(l.end) FROM steps st
            JOIN launched l ON l.gpid = st.gpid AND l.launch BETWEEN st.start AND st.end
            GROUP BY st.start, st.end ORDER BY st.start""", (text,)).fetchall()
    starts = [r[2] for r in rows]
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
    gpu: dict[int, list[tuple[int, int]]] = {}
    for e in events:
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and "correlation" in e.get("args", {}):
            gpu.setdefault(e["args"]["correlation"], []).append((ns(e["ts"]), ns(e["ts"]) + ns(e["dur"])))
    rows = []
    for start, end, pid in ranges:
        ops = [op for t, p, corr in launches if p == pid and start <= t <= end for op in gpu.get(corr, ())]
        if ops:
            rows.append((start, end, min(s for s, _ in ops), max(e for _, e in ops)))
    starts = [r[2] for r in rows]
    ends = starts[1:] + [max(rows[-1][1], rows[-1][3])] if rows else []
    return list(zip(starts, ends))
