"""What a worker computes from one rank's trace: a small, plain summary.

Only this dict travels back to the client, so its size does not grow with
the trace: per-step figures for the steps found, per-collective totals, and
the ``KERNEL_LIMIT`` kernels with the most time.  Everything is computed by
the single-trace analyses (steps, breakdown, kernel classes) so a rank's row
equals what ``profkit steps``/``profkit breakdown`` print for that file.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from profkit.analysis.ranks.collectives import bandwidth, collective_type, rank_calls, size_stats
from profkit.analysis.steps.windows import step_of, sum_per_step
from profkit.errors import ProfkitError
from profkit.model import Trace
from profkit.ranks.inputs import RankInput

KERNEL_LIMIT = 200

__all__ = ["collective_type", "summarize_rank", "summarize_trace"]


def summarize_rank(inp: RankInput) -> dict[str, Any]:
    """The rank's summary, or ``{"error": one line}`` for a file that cannot be read.

    A file that holds a whole job (``profkit.model.rank_view``) and no ``job_rank``
    gives ``{"job_ranks": [0, 1, ...], "rank_source": ...}``: the engine then asks
    for each rank, and the worker of ``(path, rank)`` summarizes that rank's view."""
    from profkit.model.rank_view import job_layout, rank_view
    from profkit.readers import open_trace

    rank = inp.job_rank if inp.job_rank is not None else inp.rank_hint
    base = {"file": str(inp.path), "rank": rank}
    try:
        with open_trace(inp.path) as whole:
            if inp.job_rank is not None:
                trace = rank_view(whole, inp.job_rank)
            else:
                layout = job_layout(whole)
                if layout.is_job:
                    return {**base, "job_ranks": [p.rank for p in layout.ranks], "rank_source": layout.source}
                trace = whole
            return {**base, **summarize_trace(trace, inp.rank_hint, inp.hint_source),
                    "worker_peak_rss_bytes": _peak_rss_bytes()}
    except ProfkitError as exc:
        return {**base, "error": exc.one_line()}
    except MemoryError:
        return {**base, "error": "ran out of memory reading this rank (give the worker more memory)"}


def _peak_rss_bytes() -> int | None:
    """Peak resident memory of this worker process so far (for the scale benchmark)."""
    try:
        import resource
    except ImportError:  # not on POSIX
        return None
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # kilobytes on Linux


def summarize_trace(trace: Trace, rank_hint: int | None = None, hint_source: str = "file name") -> dict[str, Any]:
    from profkit.analysis.breakdown import rank_breakdown
    from profkit.analysis.kernels.names import canonical_column
    from profkit.analysis.kernels.origin import kernel_types
    from profkit.analysis.ranks.culprit import rank_costs
    from profkit.analysis.steps import find_steps

    kernels = trace.table("kernels", ["name", "start", "end"])
    if len(kernels) == 0:
        raise ProfkitError(f"{trace.name} has no GPU kernels")
    durations = (kernels["end"] - kernels["start"]).to_numpy()
    names = kernels["name"].array
    types = np.asarray(kernel_types(names))
    memory_ns = _duration_sum(trace, "memcpy") + _duration_sum(trace, "memset")

    steps = find_steps(trace)
    breakdown = rank_breakdown(trace)
    per_step, kernel_step = _per_step(kernels["start"].to_numpy(), durations, types, steps.steps)
    keys, display = canonical_column(names)
    steady = per_step[per_step["phase"] == "steady"] if len(per_step) else per_step
    return {
        "rank": trace.meta.rank if trace.meta.rank is not None else rank_hint,
        # what the rank came from: the trace's own record ("trace": Kineto's distributedInfo), for one
        # rank of a whole-job export how it was told ("NCCL payload", "device index", "process order")
        "rank_source": trace.meta.extra.get("rank_source") or (
            "trace" if trace.meta.rank is not None else (hint_source if rank_hint is not None else None)),
        "world_size": trace.meta.world_size,
        "source": trace.meta.source,
        "steps": int(steps.summary.get("count", 0)) if steps.summary else 0,
        "steady_steps": int(steps.summary.get("steady_count", 0)) if steps.summary else 0,
        "step_source": steps.source,
        "step_median_ns": steps.summary.get("median_ns") if steps.summary else None,
        "kernel_ns": int(durations.sum()),
        "compute_kernel_ns": int(durations[types == "computation"].sum()),
        "comm_kernel_ns": int(durations[types == "communication"].sum()),
        "memory_ns": memory_ns,
        "idle_ns": breakdown.get("idle_ns"),
        "comm_comp_overlap_pct": breakdown.get("comm_comp_overlap_pct"),
        "breakdown": breakdown,
        "compute_per_step_ns": _median(steady["compute_ns"]) if len(steady) else None,
        "comm_per_step_ns": _median(steady["comm_ns"]) if len(steady) else None,
        "step_table": per_step.to_dict("records"),
        "collectives": _collectives(trace, types == "communication"),
        "kernels": _top_kernels(keys, display, durations),
        # what the straggler is late for, if it is this rank: its costs per steady step
        "costs": rank_costs(trace, keys, display, durations, types == "computation", kernel_step,
                            np.flatnonzero(per_step["phase"].to_numpy() == "steady") if len(per_step) else
                            np.empty(0, np.int64)),
    }


def _duration_sum(trace: Trace, table: str) -> int:
    frame = trace.table(table, ["start", "end"])
    return int((frame["end"] - frame["start"]).sum()) if len(frame) else 0


def _median(values: Any) -> float | None:
    arr = np.asarray(values, dtype=np.float64)
    return float(np.median(arr)) if arr.size else None


def _per_step(starts: np.ndarray, durations: np.ndarray, types: np.ndarray, steps: Any):
    """Compute and communication kernel time inside each step (by kernel start), and each
    kernel's position in that table (-1: in no step)."""
    import pandas as pd

    columns = ["index", "start_ns", "end_ns", "duration_ns", "phase", "compute_ns", "comm_ns"]
    if steps is None or len(steps) == 0:
        return pd.DataFrame(columns=columns), np.full(len(starts), -1, dtype=np.int64)
    table = steps[["index", "start_ns", "end_ns", "duration_ns", "phase"]].reset_index(drop=True)
    step = step_of(starts, table["start_ns"].to_numpy(), table["end_ns"].to_numpy())
    for column, kind in (("compute_ns", "computation"), ("comm_ns", "communication")):
        table[column] = sum_per_step(step, np.where(types == kind, durations, 0), len(table))
    return table, step


def _collectives(trace: Trace, comm: np.ndarray) -> list[dict[str, Any]]:
    """NCCL kernels by collective type: time, message sizes, and each call's
    duration and bytes in start order (``calls_ns``/``calls_bytes``, -1 unknown),
    so that the cross-rank reduction can pair each call across ranks."""
    if not comm.any():
        return []
    calls = rank_calls(trace, comm)
    rows = []
    for collective in sorted(set(calls["type"].tolist())):
        mine = calls["type"] == collective
        ns, sizes = calls["ns"][mine], calls["bytes"][mine]
        names = sorted({c for c in calls["call"][mine].tolist() if c})
        groups = calls["group_size"][mine]
        groups = groups[groups > 0]
        stats = size_stats(sizes)
        sized = sizes >= 0
        # the most common count, smallest on a tie; np.unique, not bincount: a count is read from the trace,
        # and 2**31 - 1 ranks would make a 16 GiB bincount
        values, counts = np.unique(groups, return_counts=True)
        group_size = int(values[counts.argmax()]) if groups.size else None
        op = names[0] if len(names) == 1 else collective
        rows.append({"collective": collective, "calls": names, "count": int(ns.size), "total_ns": int(ns.sum()),
                     "median_ns": float(np.median(ns)), "min_ns": int(ns.min()), "max_ns": int(ns.max()),
                     "group_size": group_size, **stats,
                     # this rank's kernel time, waiting for the other ranks included
                     **bandwidth(stats["bytes_total"], int(ns[sized].sum()), op, group_size),
                     "calls_ns": ns.tolist(), "calls_bytes": sizes.tolist()})
    return rows


def _top_kernels(keys: np.ndarray, display: dict[str, str], durations: np.ndarray) -> list[dict[str, Any]]:
    """The kernels with the most time, by canonical name (so nsys and Kineto ranks compare)."""
    import pandas as pd

    frame = pd.DataFrame({"key": keys, "ns": durations})
    grouped = frame.groupby("key")["ns"].agg(["sum", "count"])
    grouped = grouped.sort_values("sum", ascending=False).head(KERNEL_LIMIT)
    return [{"name": display[k], "key": k, "total_ns": int(s), "count": int(c)} for k, (s, c) in grouped.iterrows()]
